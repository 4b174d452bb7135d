"""The ROCm x0.85 on the memory fraction is applied exactly where SGLang 0.5.23's own resolution applies it
(tests/estimate/oracle_rocm_0.5.23.json, recorded with ../shared/tools/sglang-reference run as a HIP platform):
only when the resolved attention backend is aiter and the context exceeds 8192. DeepSeek-V4 resolves dsv4, so
an explicit fraction is kept; MLA models resolve aiter only when a rank holds 16 or 128 KV heads."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvcheck.engines.sglang.sizing import estimate_role

from .helpers import role

ORACLE = json.loads((Path(__file__).parent / "oracle_rocm_0.5.23.json").read_text())["cases"]


@pytest.mark.parametrize("case", ORACLE, ids=lambda c: f"{c['model']}-{c['gpu']}-{c['args']}")
def test_rocm_defaults_match_sglangs_own_resolution(case):
    got = estimate_role(role(case["model"], gpu=case["gpu"], **case["args"]), offline=True).details
    assert got["mem_fraction_static"] == pytest.approx(case["mem_fraction_static"], abs=5e-5)
    assert (got["attention_backend"], got["chunked_prefill_size"], got["cuda_graph_max_bs_decode"]) == (
        case["attention_backend"], case["chunked_prefill_size"], case["cuda_graph_max_bs_decode"])
    if "page_size_note" not in case:  # DSA's ROCm page follows the runtime's aiter preshuffle path
        assert got["page_size"] == case["page_size"]


@pytest.mark.parametrize(("model", "tp", "backend", "fraction"), [
    ("deepseek-ai--DeepSeek-V4-Flash", 4, "dsv4", 0.9),  # the V4 override sets dsv4 before the aiter rule
    ("deepseek-ai--DeepSeek-V4-Pro", 8, "dsv4", 0.9),
    ("deepseek-ai--DeepSeek-V3", 4, "triton", 0.9),  # 128 KV heads / TP4 = 32 a rank: not aiter (was x0.85)
    ("deepseek-ai--DeepSeek-V3", 8, "aiter", 0.765),  # 16 a rank: aiter, x0.85
    ("moonshotai--Kimi-K2.5", 4, "aiter", 0.765),  # 64 / 4 = 16
    ("moonshotai--Kimi-K2.5", 8, "triton", 0.9),  # 64 / 8 = 8
    ("meta-llama--Meta-Llama-3.1-8B", 4, "aiter", 0.765),
])
def test_an_explicit_fraction_takes_x0_85_only_under_aiter(model, tp, backend, fraction):
    cases = [c for c in ORACLE if c["model"] == model and c["gpu"] == "MI300X"
             and c["args"] == {"tp_size": tp, "mem_fraction_static": 0.9}]
    assert [(c["attention_backend"], c["mem_fraction_static"]) for c in cases] == [(backend, pytest.approx(fraction))]
    got = estimate_role(role(model, gpu="MI300X", tp_size=tp, mem_fraction_static=0.9), offline=True).details
    assert (got["attention_backend"], got["mem_fraction_static"]) == (backend, pytest.approx(fraction))
