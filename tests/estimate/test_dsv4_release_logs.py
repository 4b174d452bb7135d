"""DeepSeek-V4-Pro pools that named releases printed, held out (nothing in the estimate was fit to them).

- 4 x 8 H800 (80 GB), SGLang 0.5.12.post1, `--moe-runner-backend marlin`, `SGLANG_SHARED_EXPERT_TP1=1`, fraction 0.90,
  context 1M, CUDA graphs off, at TP8 PP4 and TP16 PP2: a team's stated results tables
  (tests/data/logs/sglang-dsv4-pro-4x8xH800-*-0512post1.log). 0.5.12 sizes every compress_ratios entry on every
  pipeline stage, so both print the same bytes_per_full_token. SM90 holds wo_a in bf16 (0.5.12's server_args.py
  turns SGLANG_OPT_FP8_WO_A_GEMM off below SM100), which brings the priced stage-0 weights nearer the stated ones
  (31.79 -> 31.91 GiB against 32.02 at TP8 PP4) and the pools 0.36 % lower.
- 8 MI355X, the v0.5.13 ROCm image, the decode (0.90) and prefill (0.85) legs of a TP8 DP8 DP-attention pair
  (tests/data/logs/sglang-dsv4-pro-8xMI355X-tp8-dp8-dpattn-pd-rocm0513-mfs085-090.log): 0.5.13's layout, and the
  same available bytes as the 0.5.15.post1 run of the same pair (test_dsv4_ep_experts.py); its load log printed
  "Execute dequant fp8 wo_a", so the launch ran with SGLANG_OPT_FP8_WO_A_GEMM off (test_dsv4_wo_a.py).
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from kvcheck.engines.sglang.sizing import estimate_role

from .helpers import role

PRO = "deepseek-ai--DeepSeek-V4-Pro"


def _h800(tp: int, pp: int):
    target = role(PRO, gpu="H800", window=1_048_576, env={"SGLANG_SHARED_EXPERT_TP1": "1"}, tp_size=tp, pp_size=pp,
                  nnodes=4, moe_runner_backend="marlin", context_length=1_048_576, mem_fraction_static=0.90,
                  disable_cuda_graph=True, disable_overlap_schedule=True)
    return replace(target, engine_version="0.5.12.post1")


def _mi355x(fraction: float, mode: str):
    target = role(PRO, gpu="MI355X", window=9472, env={"SGLANG_OPT_FP8_WO_A_GEMM": "0"}, tp_size=8, dp_size=8, enable_dp_attention=True, ep_size=8,
                  kv_cache_dtype="fp8_e4m3", context_length=9472, max_running_requests=512,
                  swa_full_tokens_ratio=0.15, mem_fraction_static=fraction, disaggregation_mode=mode)
    return replace(target, engine_version="0.5.13")


@pytest.mark.parametrize(("tp", "pp", "logged", "predicted"), [
    (8, 4, 1_607_936, 1_586_432),  # -1.34 % (-0.99 % with wo_a priced in FP8)
    (16, 2, 1_573_888, 1_554_688),  # -1.22 % (-0.86 %)
])
def test_h800_pipeline_pools_within_one_and_a_half_percent(tp, pp, logged, predicted):
    est = estimate_role(_h800(tp, pp), offline=True)
    assert round(est.kv_bytes_per_token, 2) == 23749.84  # the stated bytes_per_full_token
    assert est.pool_tokens == predicted
    assert abs(est.pool_tokens - logged) / logged < 0.015
    low, high = est.pool_range
    assert low <= logged <= high
    assert any("every compress_ratios entry on every rank" in a for a in est.details["assumptions"])


@pytest.mark.parametrize(("fraction", "mode", "logged"), [(0.90, "decode", 3_895_296), (0.85, "prefill", 3_441_920)])
def test_mi355x_0_5_13_pools(fraction, mode, logged):
    est = estimate_role(_mi355x(fraction, mode), offline=True)
    assert round(est.kv_bytes_per_token, 2) == 32781.44  # the stated bytes_per_full_token
    low, high = est.pool_range
    assert low <= logged <= high
    # +0.54 % and +0.61 % (+3.75 % and +4.23 % with wo_a in FP8, 3.81 GiB a GPU lighter)
    assert 0 < (est.pool_tokens - logged) / logged < 0.007
