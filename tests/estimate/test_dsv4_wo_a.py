"""DeepSeek-V4's wo_a in bf16 where the release turns SGLANG_OPT_FP8_WO_A_GEMM off.

With the variable off, MQALayer builds wo_a with params_dtype bfloat16 and no quant config, and load_weights
dequantizes the checkpoint's FP8 wo_a into it ("Execute dequant fp8 wo_a", models/deepseek_v4.py): 2 B a weight
instead of 1 (plus a float32 scale per 128 x 128). Each release turns it off by platform (server_args.py, from 0.5.19
arg_groups/model_hook.py and serving_hook.py; read in the 0.5.12-0.5.23 wheels). V4-Pro's wo_a is 4096 x 16384
a layer per attention-TP rank; at attention TP 1 (TP8 DP8 with DP attention) 61 layers hold 3.81 GiB more in bf16.

The 8 MI355X TP8 DP8 EP8 decode role (tests/data/logs/sglang-dsv4-pro-8xMI355X-tp8-dp8-dpattn-pd-decode-mfs090-
0515post1.log, the 0.5.15.post1 image) was priced +3.78 % with FP8 wo_a: its sweep's slope leaves 130.30 GiB of
weights against kvcheck's 125.83, and 0.5.15 turns the variable off on HIP. The v0.5.13 image's run of the same pair
printed "Execute dequant fp8 wo_a" while loading (the team's report, quoted in the log file): its launch set the
variable off, which 0.5.13 does not do on HIP itself.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from kvcheck.engines.sglang.sizing import dsv4, estimate_role

from .helpers import role

PRO = "deepseek-ai--DeepSeek-V4-Pro"
# one layer's wo_a at attention TP 1: 4096 x 16384 weights, FP8 with a float32 scale per 128 x 128 block, or bf16
WO_A_WEIGHTS = 4096 * 16384
WO_A_BF16_EXTRA = 2 * WO_A_WEIGHTS - (WO_A_WEIGHTS + 4 * WO_A_WEIGHTS // (128 * 128))


@pytest.mark.parametrize(("version", "vendor", "sm", "arch", "env", "bf16"), [
    # CUDA 0.5.12-0.5.15: off below SM100, whatever the variable says
    ("0.5.12", "nvidia", 90, "9.0", {}, True),
    ("0.5.14", "nvidia", 90, "9.0", {"SGLANG_OPT_FP8_WO_A_GEMM": "1"}, True),
    ("0.5.15", "nvidia", 89, "8.9", {}, True),
    ("0.5.14", "nvidia", 100, "10.0", {}, False),
    ("0.5.12", "nvidia", 120, "12.0", {}, False),  # 0.5.12 has no SM120 branch: 120 >= 100
    ("0.5.13", "nvidia", 120, "12.0", {}, True),
    # 0.5.16 on: DeepGEMM's UE8M0 path (SM100/103), or an explicit opt-in on SM90
    ("0.5.16", "nvidia", 90, "9.0", {}, True),
    ("0.5.19", "nvidia", 90, "9.0", {"SGLANG_OPT_FP8_WO_A_GEMM": "1"}, False),
    ("0.5.19", "nvidia", 90, "9.0", {"SGLANG_OPT_FP8_WO_A_GEMM": "1", "SGLANG_ENABLE_JIT_DEEPGEMM": "0"}, True),
    ("0.5.23", "nvidia", 103, "10.3", {}, False),
    ("0.5.22", "nvidia", 120, "12.0", {"SGLANG_OPT_FP8_WO_A_GEMM": "1"}, True),
    ("0.5.23", "nvidia", 120, "12.0", {"SGLANG_OPT_FP8_WO_A_GEMM": "1"}, False),  # SM120 keeps an explicit setting
    # HIP: 0.5.12-0.5.13 leave it on; 0.5.14-0.5.19 turn it off; 0.5.20 keeps it on gfx950 only
    ("0.5.13", "amd", None, "gfx950", {}, False),
    ("0.5.13", "amd", None, "gfx950", {"SGLANG_OPT_FP8_WO_A_GEMM": "0"}, True),
    ("0.5.14", "amd", None, "gfx950", {}, True),
    ("0.5.15.post1", "amd", None, "gfx950", {"SGLANG_OPT_FP8_WO_A_GEMM": "true"}, True),
    ("0.5.20", "amd", None, "gfx950", {}, False),
    ("0.5.20", "amd", None, "gfx942", {}, True),
    ("0.5.23", "amd", None, "gfx950", {"SGLANG_OPT_FP8_WO_A_GEMM": "false"}, True),
    # the legacy SGL_ name is copied over the SGLANG_ one (environ.py, 0.5.3 on)
    ("0.5.14", "nvidia", 100, "10.0", {"SGL_OPT_FP8_WO_A_GEMM": "0"}, True),
])
def test_wo_a_in_bf16_by_release_and_platform(version, vendor, sm, arch, env, bf16) -> None:
    assert dsv4.wo_a_in_bf16(version, vendor=vendor, sm=sm, gpu_arch=arch, env=env)[0] is bf16


def _decode(version: str, fraction: float = 0.90, mode: str = "decode", env: dict[str, str] | None = None):
    target = role(PRO, gpu="MI355X", window=9472, env=env or {}, tp_size=8, dp_size=8, enable_dp_attention=True,
                  ep_size=8, kv_cache_dtype="fp8_e4m3", context_length=9472, max_running_requests=512,
                  swa_full_tokens_ratio=0.15, mem_fraction_static=fraction, disaggregation_mode=mode)
    return replace(target, engine_version=version)


def test_bf16_wo_a_adds_one_byte_a_weight_on_every_layer() -> None:
    fp8 = estimate_role(_decode("0.5.13"), offline=True)
    bf16 = estimate_role(_decode("0.5.13", env={"SGLANG_OPT_FP8_WO_A_GEMM": "0"}), offline=True)
    # 64 and 128 MiB tensors: whole 2 MiB blocks, so the allocator's rounding is the same either way
    added = (bf16.details["weights_gib_per_gpu"] - fp8.details["weights_gib_per_gpu"]) * 2**30
    assert added == pytest.approx(61 * WO_A_BF16_EXTRA, abs=0.001 * 2**30)  # 3.81 GiB
    assert any("wo_a dequantized to bf16 (SGLANG_OPT_FP8_WO_A_GEMM=0)" in a for a in bf16.details["assumptions"])
    assert not any("wo_a" in a for a in fp8.details["assumptions"])


@pytest.mark.parametrize(("version", "fraction", "mode", "env", "logged", "predicted"), [
    # 0.5.15 turns the variable off on HIP (server_args.py:3996): +3.78 % before
    ("0.5.15.post1", 0.90, "decode", {}, 9_217_792, 9_267_968),
    # the v0.5.13 image's launch turned it off (its log: "Execute dequant fp8 wo_a"): +3.75 % and +4.23 % before
    ("0.5.13", 0.90, "decode", {"SGLANG_OPT_FP8_WO_A_GEMM": "0"}, 3_895_296, 3_916_288),
    ("0.5.13", 0.85, "prefill", {"SGLANG_OPT_FP8_WO_A_GEMM": "0"}, 3_441_920, 3_462_912),
])
def test_mi355x_ep8_pools_with_bf16_wo_a(version, fraction, mode, env, logged, predicted) -> None:
    est = estimate_role(_decode(version, fraction, mode, env), offline=True)
    assert est.pool_tokens == predicted
    assert 0 < (est.pool_tokens - logged) / logged < 0.007
    low, high = est.pool_range
    assert low <= logged <= high
