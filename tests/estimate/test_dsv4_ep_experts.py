"""DeepSeek-V4's routed experts under expert parallelism: the padding a kernel needs applies to the width one rank
holds, inter / (tp / ep), not inter / tp.

FusedMoE (layers/moe/fused_moe_triton/layer.py) gives each rank num_experts / moe_ep_size whole experts split over
moe_tp_size = tp / ep; ROCm's aiter MXFP4 path (layers/quantization/fp8.py, process_weights_after_loading_block_quant,
0.5.13-0.5.16) pads that per-rank intermediate to a multiple of 256. V4-Pro's experts are 3072 wide: at TP8 without EP
each rank holds 384 of every expert, padded to 512 (+33 %); at EP8 it holds 48 whole experts, which need no pad.
kvcheck padded 3072 / 8 at EP8 too, 31.9 GiB a GPU heavy.

The real figures checked here (tests/data/logs/sglang-dsv4-pro-8xMI355X-tp8-dp8-dpattn-pd-decode-mfs090-0515post1.log)
are a DeepSeek-V4-Pro decode role on 8 MI355X at TP8 DP8 with DP attention and EP8, a private image on 0.5.15.post1,
swept over five memory fractions. Nothing in the estimate was fit to them.
"""

from __future__ import annotations

import json
import textwrap
from dataclasses import replace

import pytest

from kvcheck.engines.sglang.sizing import dsv4, estimate_role

from .helpers import model_config, role

PRO = "deepseek-ai--DeepSeek-V4-Pro"
# (mem_fraction_static, the logged DSV4 available_bytes in GiB, the logged full_token), from the report's sweep
SWEEP = (
    (0.80, 91.24, 7_053_056),
    (0.85, 105.08, 8_135_424),
    (0.88, 113.39, 8_784_896),
    (0.90, 118.93, 9_217_792),
    (0.92, 124.47, 9_650_944),
)
LOGGED_BYTES_PER_FULL_TOKEN = 13735.04
LOGGED_C128_FIXED_GIB = 1.01
LOGGED_SWA_AT_090 = 1_382_656
# V4-Pro: 61 layers of 384 experts of 3 x 7168 x 3072 weights; aiter MXFP4 holds 0.5 + 1/32 B a weight
EXPERT_BYTES_EP8 = (0.5 + 1 / 32) * (384 / 8) * 3 * 7168 * 3072 * 61


def _decode(fraction: float, *, ep: int = 8, version: str = "0.5.15.post1"):
    # the report's decode leg: TP8 DP8 with DP attention and EP8, --max-running-requests 512 (64 a DP rank),
    # --swa-full-tokens-ratio 0.15, context 9472, fp8_e4m3 KV, the fraction given
    target = role(PRO, gpu="MI355X", window=9472, tp_size=8, dp_size=8, enable_dp_attention=True, ep_size=ep,
                  kv_cache_dtype="fp8_e4m3", context_length=9472, max_running_requests=512,
                  swa_full_tokens_ratio=0.15, mem_fraction_static=fraction, disaggregation_mode="decode")
    return replace(target, engine_version=version)


def _plan(bytes_per_full_token: float, fixed_bytes: float) -> dsv4.Dsv4Plan:
    return dsv4.Dsv4Plan(bytes_per_full_token=bytes_per_full_token, bytes_per_swa_token=0.0, swa_ratio=0.15,
                         swa_cap_tokens=None, fixed_bytes=fixed_bytes, layers=61, layers_by_ratio={}, parts={})


def _experts_gib(est) -> float:
    return float(est.details["weights_gib_per_gpu"])


def test_the_logged_cell_and_c128_state_are_the_0_5_15_layout():
    est = estimate_role(_decode(0.90), offline=True)
    parts = est.details["kv_cell_parts"]
    assert round(est.kv_bytes_per_token, 2) == LOGGED_BYTES_PER_FULL_TOKEN
    # (65 request slots x 128 + 129 = 8,449 rows, padded to 8,576) x 2 x 512 x 4 B x 31 layers of ratio 128
    assert parts["c128_state_fixed_bytes"] == 8576 * 2 * 512 * 4 * 31
    assert round(parts["c128_state_fixed_bytes"] / 2**30, 2) == LOGGED_C128_FIXED_GIB
    assert parts["swa_full_tokens_ratio"] == 0.15


@pytest.mark.parametrize(("fraction", "available_gib", "full"), SWEEP)
def test_each_logged_pool_follows_from_its_logged_budget(fraction, available_gib, full):
    est = estimate_role(_decode(fraction), offline=True)
    cell = est.details["kv_cell_parts"]
    plan = _plan(est.kv_bytes_per_token, cell["fixed_bytes"])
    # available_bytes is printed to 0.01 GiB: the logged full_token lies within what that rounding allows
    low = dsv4.full_tokens(plan, (available_gib - 0.005) * 2**30, 256)
    high = dsv4.full_tokens(plan, (available_gib + 0.005) * 2**30, 256)
    assert low <= full <= high


def test_the_logged_swa_pool_is_the_given_ratio():
    plan = _plan(LOGGED_BYTES_PER_FULL_TOKEN, 0)
    assert dsv4.swa_tokens(plan, 9_217_792, 256) == LOGGED_SWA_AT_090


def test_ep_experts_are_whole_so_the_rocm_pad_does_not_apply():
    ep8 = estimate_role(_decode(0.90), offline=True)
    ep1 = estimate_role(_decode(0.90, ep=1), offline=True)
    # the same weights but the experts: at EP1 each rank's 384-wide slice is padded to 512 (the allocator's
    # rounding aside, which differs with the tensors' shapes)
    ep1_bytes = _experts_gib(ep1) - ep1.details["weights_allocator_slack_gib"]
    ep8_bytes = _experts_gib(ep8) - ep8.details["weights_allocator_slack_gib"]
    assert ep1_bytes - ep8_bytes == pytest.approx(EXPERT_BYTES_EP8 / 3 / 2**30, abs=0.002)
    assert any("padded to 256" in a for a in ep8.details["assumptions"])


def test_0_5_17_pads_to_128_and_ep_still_needs_none():
    # 0.5.17's aiter path pads to 128: 3072 / 8 = 384 is already a multiple, so EP1 and EP8 weigh the same
    ep8 = estimate_role(_decode(0.90, version="0.5.17"), offline=True)
    ep1 = estimate_role(_decode(0.90, ep=1, version="0.5.17"), offline=True)
    # (the same bytes; the allocator's rounding differs with the tensors' shapes)
    assert _experts_gib(ep1) - ep1.details["weights_allocator_slack_gib"] == pytest.approx(
        _experts_gib(ep8) - ep8.details["weights_allocator_slack_gib"], abs=1e-6)


@pytest.mark.parametrize(("fraction", "available_gib", "full"), SWEEP)
def test_the_logged_pools_lie_inside_the_estimates_range(fraction, available_gib, full):
    est = estimate_role(_decode(fraction), offline=True)
    low, high = est.pool_range
    assert low <= full <= high, (fraction, est.pool_range)
    # the point is above the log (9.0 % at 0.90): the private image held 11.08 GiB before its baseline, where the
    # MI355X TP8 profile holds 4.40, within the band its ROCm terms open (docs/estimate.md)
    assert est.pool_tokens > full


def test_cli_ep8_decode_role(tmp_path, kvcheck):
    (tmp_path / "config.json").write_text(model_config(PRO).read_text())
    path = tmp_path / "manifest.yaml"
    path.write_text(textwrap.dedent("""\
        name: dsv4-pro decode on MI355X, EP8
        context_length: 9472
        model: {path: deepseek-ai/DeepSeek-V4-Pro, config: config.json}
        engine: {version: "0.5.15.post1"}
        gpu: MI355X
        args: {tp-size: 8, dp-size: 8, enable-dp-attention: true, ep-size: 8, kv-cache-dtype: fp8_e4m3,
               context-length: 9472, max-running-requests: 512, swa-full-tokens-ratio: 0.15,
               mem-fraction-static: 0.9, disaggregation-mode: decode}
        roles:
          decode: {}
        """))
    result = kvcheck("verify", str(path), "--mode", "estimate", "--format", "json")
    # the pool holds the window; the one error is the release: a 0.5.15 decode role lacks 0.5.22's admission fixes
    assert result.exit_code == 1, result.stderr
    report = json.loads(result.stdout)
    assert [f["rule"] for f in report["findings"] if f["severity"] == "error"] == ["KV201"]
    role_ = report["roles"][0]
    assert role_["pool_tokens"] == estimate_role(_decode(0.90), offline=True).pool_tokens
    low, high = role_["details"]["pool_range"]
    assert low <= 9_217_792 <= high
