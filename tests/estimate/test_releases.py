"""The defaults that size the pool follow the declared SGLang release (docs/sglang-releases.md).

Figures are SGLang's own formulas at each release, worked by hand from the source quoted in the
table, for Llama-3.1-8B (non-MLA, 8 KV heads) on the profiles' nvidia-smi sizes: H100 81,559 MiB,
H200 143,771 MiB, B200 183,359 MiB.
"""

from __future__ import annotations

import dataclasses

import pytest

from kvcheck.engines.sglang.sizing import releases as rel
from kvcheck.engines.sglang.sizing.defaults import fraction_before_0_5_3, release_capacity_defaults
from kvcheck.engines.sglang.sizing.model import estimate_role
from tests.estimate.helpers import role

LLAMA = "meta-llama--Meta-Llama-3.1-8B"


def fraction(version: str, gpu: str = "H100", **args) -> tuple[float, list[str]]:
    target = dataclasses.replace(role(LLAMA, gpu=gpu, **args), engine_version=version)
    est = estimate_role(target, offline=True)
    return est.details["mem_fraction_static"], [a for a in est.assumptions if "mem_fraction_static" in a]


@pytest.mark.parametrize(
    ("version", "gpu", "tp", "expected"),
    [
        ("0.4.0", "H100", 1, 0.88),  # the A40 issue-3451 log (0.4.2.post3) has the same 0.88
        ("0.4.0", "H100", 8, 0.81),
        ("0.4.5.post2", "H200", 1, 0.88),  # the TP table for every GPU
        ("0.4.5.post3", "H200", 1, (143771 - 13 * 1024) / 143771),
        ("0.4.6.post2", "H200", 1, (143771 - 18 * 1024) / 143771),  # min(0.921, 0.872)
        ("0.4.6.post2", "B200", 1, (183359 - 18 * 1024) / 183359),
        ("0.4.7", "B200", 1, 0.79),
        ("0.4.7.post1", "H100", 1, 0.874),  # reserve (9.5 + 1/2) GiB; logged in issue 7495
        ("0.4.7.post1", "H100", 8, 0.831),  # reserve (9.5 + 8/2) GiB
        ("0.4.7.post1", "B200", 1, 0.821),  # reserve 32 GiB
        ("0.5.2", "H100", 1, 0.874),
        ("0.5.3", "H100", 1, 0.835),  # 512 + 1.5 x 8192 + 2 x 256 + 128 = 13,440 MiB
        ("0.5.10", "H100", 1, 0.830),  # + 8 MiB x 58 piecewise sizes
        ("0.5.23", "H100", 1, 0.830),
    ],
)
def test_default_fraction_by_release(version, gpu, tp, expected):
    got, notes = fraction(version, gpu=gpu, tp_size=tp)
    assert got == pytest.approx(expected, abs=5e-5)  # details carry 4 decimals
    if rel.rules_for(version).has(rel.CAPACITY_SMALL_48):
        assert notes == []  # the 0.5.20+ line: no note, the outputs of 0.5.23 unchanged
    else:
        assert len(notes) == 1 and notes[0].startswith(f"default mem_fraction_static {got:.3f}: SGLang {version} rule")


def test_a_0_4_release_reproduces_the_logged_h100_pool():
    """The 2025-01 docs log (0.4.x, TP1, default fraction 0.88) holds 444,500 tokens."""
    target = dataclasses.replace(role(LLAMA, gpu="H100"), engine_version="0.4.1")
    assert estimate_role(target, offline=True).pool_tokens == 444_283


def test_the_disaggregation_aware_reserve_came_in_0_5_15():
    """A decode role's reserve: 0.5.14 counts the chunked prefill, 0.5.15 the decode batch."""
    assert fraction("0.5.14", gpu="H200", disaggregation_mode="decode")[0] == 0.907  # 13,440 MiB
    assert fraction("0.5.15", gpu="H200", disaggregation_mode="decode")[0] == 0.929  # floor 10,240 MiB
    # A prefill role skips the decode graph from 0.5.15 and keeps the prefill graph:
    # 512 + 1.5 x 8192 + 128 + 8 x 58 sizes = 13,392 MiB instead of 13,440.
    assert fraction("0.5.14", disaggregation_mode="prefill")[0] == 0.835
    assert fraction("0.5.15", disaggregation_mode="prefill")[0] == 0.836


def test_the_max_running_requests_cap_on_the_graph_batch_came_in_0_5_22():
    assert fraction("0.5.21", gpu="B200", max_running_requests=16)[0] == 0.854  # max_bs 512
    assert fraction("0.5.22", gpu="B200", max_running_requests=16)[0] == 0.859  # max_bs 16


def test_speculative_reserves_by_release():
    eagle = {"speculative_algorithm": "EAGLE"}
    assert fraction_before_0_5_3(
        rel.rules_for("0.4.7.post1"), 81559, tp=1, pp=1, speculative="EAGLE", dp_attention=False, is_rocm=False
    )[:2] == (0.849, 12 * 1024)
    assert fraction_before_0_5_3(
        rel.rules_for("0.4.7"), 81559, tp=1, pp=1, speculative="EAGLE", dp_attention=False, is_rocm=False
    )[0] == pytest.approx(0.88 * 0.95)
    assert fraction_before_0_5_3(
        rel.rules_for("0.5.2"), 81559, tp=1, pp=1, speculative="STANDALONE", dp_attention=False, is_rocm=False
    )[1] == 16 * 1024
    # DeepSeek-V3 (MTP draft) at TP8 on H200: 512 + 1.5 x 8192 + 2 x 512 + 1024 = 14,848 MiB, then
    # 0.5.3: + 2 GiB; 0.5.10: + 4 GiB (the piecewise graph is off with speculative decoding);
    # 0.5.14: no speculative reserve, the MLA piecewise graph's 1.5 GiB instead.
    def dsv3(version):
        target = dataclasses.replace(
            role("deepseek-ai--DeepSeek-V3", gpu="H200", tp_size=8, **eagle), engine_version=version
        )
        return estimate_role(target, offline=True).details["mem_fraction_static"]

    assert dsv3("0.5.3") == round((143771 - 14848 - 2048) / 143771, 3)
    assert dsv3("0.5.10") == round((143771 - 14848 - 4096) / 143771, 3)
    assert dsv3("0.5.14") == round((143771 - 14848 - 1536) / 143771, 3)


def test_the_opt_in_piecewise_graph_of_0_5_5_to_0_5_9():
    on = {"enable_piecewise_cuda_graph": True}
    assert fraction("0.5.5", **on)[0] == 0.835  # the flag did nothing before 0.5.5.post1
    assert fraction("0.5.5.post1", **on)[0] == round((81559 - 13440 - 4096 // 4) / 81559, 3)
    assert fraction("0.5.7", **on)[0] == round((81559 - 13440 - 8192 // 8) / 81559, 3)
    assert fraction("0.5.8", **on)[0] == round((81559 - 13440 - 8 * 58) / 81559, 3)
    assert fraction("0.5.8")[0] == 0.835  # off by default


def test_capacity_defaults_by_release():
    def cap(version, gpu_mib, tp=1, role=None):
        return release_capacity_defaults(rel.rules_for(version), gpu_mib, tp, role=role)

    assert cap("0.4.0", 23034) == (2048, 8)  # L4
    assert cap("0.4.0.post1", 23034, tp=4) == (2048, 80)
    assert cap("0.4.6.post2", 81559, role="prefill") == (16384, 160)
    assert cap("0.4.7", 183359) == (16384, 160)
    assert cap("0.4.7.post1", 46068) == (8192, 160)  # L40S
    assert cap("0.5.3", 24564) == (2048, 16)  # RTX 4090
    assert cap("0.5.4.post1", 24564) == (2048, 24)
    assert cap("0.5.20", 24564) == (4096, 48)
    assert cap("0.5.3", 46068) == (4096, 32)


def test_pages_came_in_0_4_4():
    target = dataclasses.replace(role(LLAMA, gpu="H100", page_size=64), engine_version="0.4.4")
    assert estimate_role(target, offline=True).details["page_size"] == 64
    old = dataclasses.replace(role(LLAMA, gpu="H100"), engine_version="0.4.3.post4")
    assert estimate_role(old, offline=True).details["page_size"] == 1


@pytest.mark.parametrize(
    ("version", "tp8", "table"),
    [
        ("0.3.0", 0.83, "its own"),  # the issue-1386 log: Qwen2-72B at TP8 on H100, default 0.83
        ("0.3.6", 0.82, "its own"),
        ("0.1.17", 0.83, "0.2.15's"),
    ],
)
def test_a_release_before_0_4_is_sized_with_0_4_0_rules_and_its_own_table(version, tp8, table):
    target = dataclasses.replace(role(LLAMA, gpu="H100", tp_size=8), engine_version=version)
    est = estimate_role(target, offline=True)
    assert est.details["mem_fraction_static"] == tp8
    assert (
        f"SGLang {version} predates 0.4.0, the oldest release whose sizing kvcheck has read in full; "
        f"sized with 0.4.0's rules and {table} default-fraction table"
    ) in est.assumptions


@pytest.mark.parametrize(
    ("version", "expected"),
    [("0.5.23.post1", "0.5.23.post1"), ("0.3.6", "0.3.6"), ("0.1.17", "0.2.15"), (None, "9999"), ("dev", "9999")],
)
def test_rules_for(version, expected):
    assert str(rel.rules_for(version).release) == expected


QWEN35 = "Qwen--Qwen3.5-27B"


@pytest.mark.parametrize(
    ("version", "args", "expected"),
    [
        ("0.5.8", {}, ("trtllm_mha", 64)),  # before SGLang knew Qwen3.5: the platform default
        ("0.5.9", {"disaggregation_mode": "decode"}, ("triton", 1)),  # triton unconditionally
        ("0.5.10", {"disaggregation_mode": "decode"}, ("trtllm_mha", 64)),  # radix cache off keeps trtllm_mha
        ("0.5.10", {}, ("triton", 1)),
        ("0.5.23", {}, ("triton", 1)),
        ("0.5.23", {"page_size": 64}, ("triton", 1)),  # the override's page size wins
        ("0.5.23", {"disable_radix_cache": True}, ("trtllm_mha", 64)),
        ("0.5.23", {"mamba_radix_cache_strategy": "extra_buffer"}, ("trtllm_mha", 64)),
        ("0.5.23", {"attention_backend": "fa4"}, ("fa4", 128)),  # a given backend is left alone
    ],
)
def test_qwen3_5_sm100_attention_backend_by_release(version, args, expected):
    target = dataclasses.replace(role(QWEN35, gpu="B200", tp_size=8, **args), engine_version=version)
    d = estimate_role(target, offline=True).details
    assert (d["attention_backend"], d["page_size"]) == expected


@pytest.mark.parametrize(("version", "kept"), [("0.5.15", False), ("0.5.16", True), ("0.5.23", True)])
def test_qwen3_5_keeps_the_prefill_graph_from_0_5_16(version, kept):
    """configs/model_config.py's multimodal allow-list appears in 0.5.16, naming the Qwen3.5 wrappers."""
    target = dataclasses.replace(role(QWEN35, gpu="B200", tp_size=8), engine_version=version)
    est = estimate_role(target, offline=True)
    off = [a for a in est.assumptions if "prefill CUDA graph off (multimodal model)" in a]
    assert (not off) == kept


@pytest.mark.parametrize(("version", "newer"), [("0.6.0", True), ("0.5.24", True), ("0.5.23.post1", False),
                                                 ("0.5.23", False)])
def test_a_release_newer_than_every_one_read_says_whose_rules_size_it(version, newer):
    # 0.6.0 was priced with 0.5.23's rules and the report named only the flag catalogue that stood in
    target = dataclasses.replace(role(LLAMA, gpu="H100"), engine_version=version)
    est = estimate_role(target, offline=True)
    note = (f"SGLang {version} is newer than 0.5.23, the newest release whose sizing kvcheck has read; "
            "sized with 0.5.23's rules")
    assert (note in est.assumptions) is newer
