"""A DeepSeek-V4 build before 0.5.12 (issue 25118's ROCm image) and the memory its start logged: its pool
arithmetic reproduced, the KV108 range of an undeclared build holding it, and the baseline it shows kept
as a check against the MI300X profile (not fit)."""

from __future__ import annotations

import json
import re

import pytest

from kvcheck.engines.sglang.sizing import dsv4, estimate_role
from kvcheck.model import EstimateInputs, RoleTarget
from tests.datapaths import DATAPOINTS, MODELS

LOG = DATAPOINTS.parent / "sglang-dsv4-flash-fp8-4xMI300X-tp4-dp4-dpattn-issue25118.log"
FLASH_FP8 = MODELS / "sgl-project--DeepSeek-V4-Flash-FP8.json"
# the launch as its printed server_args give it (DP attention halves chunked prefill to 2048 itself)
ARGS = {"tp_size": 4, "dp_size": 4, "enable_dp_attention": True, "mem_fraction_static": 0.88,
        "max_running_requests": 256, "page_size": 256, "kv_cache_dtype": "fp8_e4m3", "disable_radix_cache": True,
        "chunked_prefill_size": 8192, "disable_cuda_graph": True, "swa_full_tokens_ratio": 0.8}
MI300X_MIB = 196_592


def _logged(pattern: str) -> str:
    match = re.search(pattern, LOG.read_text())
    assert match, pattern
    return match.group(1)


def _estimate(version: str | None, **estimate: float):
    return estimate_role(RoleTarget(
        name="server", context_length=1, min_headroom=1.0, engine_version=version, args=ARGS, argv_args=(),
        gpu="MI300X", model_config=FLASH_FP8, estimate=EstimateInputs(**estimate)), offline=True)


def test_the_prerelease_layout_reproduces_the_logged_bytes_per_full_token() -> None:
    text = json.loads(FLASH_FP8.read_text())
    ratios = tuple(text["compress_ratios"])
    plan = dsv4.plan(
        compress_ratios=ratios, stage=range(int(text["num_hidden_layers"])), head_dim=512, index_head_dim=128,
        sliding_window=128, page_size=256, max_running_requests=256, attn_dp=4, role=None,
        chunked_prefill_size=2048, swa_ratio_arg=None, cap_mode_default=False, draft_tokens=0, speculative=False,
        radix_cache=False, decode_extra_slots=0, layout=dsv4.LAYOUT_PRE_0_5_12)
    # 0.8 x (44 x 584 + 16/128 x 10240 x 21 + 256/128 x 4096 x 20) + (584 + 132) / 4 x 21 + 584 / 128 x 20
    assert round(plan.bytes_per_full_token, 2) == float(_logged(r"bytes_per_full_token=([\d.]+)")) == 176983.05
    assert plan.layers == 44  # every compress_ratios entry, the MTP layer's too
    # 0.5.12's own arithmetic (ratio 0.1, rings 8/128) is 11 times smaller
    release = dsv4.plan(
        compress_ratios=ratios, stage=range(44), head_dim=512, index_head_dim=128, sliding_window=128,
        page_size=256, max_running_requests=256, attn_dp=4, role=None, chunked_prefill_size=2048,
        swa_ratio_arg=None, cap_mode_default=False, draft_tokens=0, speculative=False, radix_cache=False,
        decode_extra_slots=0, layout=dsv4.LAYOUT_0_5_12)
    assert round(release.bytes_per_full_token, 2) == 15955.85


def test_an_undeclared_build_s_range_holds_the_prerelease_pool() -> None:
    logged_pool = int(_logged(r", full_token=(\d+)"))
    begin_gib = float(_logged(r"DP0 TP0\] Load weight begin\. avail mem=([\d.]+) GB"))
    loaded_gib = float(_logged(r"DP0 TP0\] Load weight end\..*mem usage=([\d.]+) GB"))
    # with the log's own baseline and weights the low end is the pre-0.5.12 layout's pool, to the page
    est = _estimate(None, weights_gib_per_gpu=loaded_gib, pre_baseline_mib=MI300X_MIB - begin_gib * 1024)
    assert est.pool_range[0] == logged_pool == 529_408
    assert [f.rule for f in est.findings] == ["KV108"]
    # and with the MI300X profile's figures the range still holds it
    profiled = _estimate(None)
    assert profiled.pool_range[0] <= logged_pool <= profiled.pool_range[1]
    # a declared 0.5.12 is that release's layout: no KV108, and a pool eleven times the dev build's
    assert _estimate("0.5.12").findings == ()


@pytest.mark.parametrize(("version", "spans_prerelease"), [
    (None, True), ("0.5.12.dev0", True), ("0.5.12rc1", True), ("nightly", True),
    ("0.5.13.dev0", False), ("0.5.22rc1", False), ("0.5.24", False),
])
def test_only_a_build_that_may_predate_0_5_12_spans_the_prerelease_layout(version, spans_prerelease) -> None:
    assert (dsv4.LAYOUT_PRE_0_5_12 in dsv4.range_layouts(version)) is spans_prerelease
    assert set(dsv4.range_layouts(version)) >= {dsv4.LAYOUT_0_5_12, dsv4.LAYOUT_0_5_21}


def test_the_dp_attention_baseline_is_held_by_the_rocm_refit() -> None:
    # 9.35 GiB in use at a TP4 DP-attention MI300X baseline, 8.29 GB of it taken by init_torch_distributed
    # (NCCL and aiter's custom all-reduce); the profile interpolates 3,319 MiB at four ranks between its TP1
    # (700) and TP8 (6,810) readings, 6 GiB short of the log, until the refit of recent ROCm stacks (the image's
    # RCCL from 0.5.9, aiter's all-reduce from 0.5.10; an unreadable release takes both) fit on two MI355X images
    # (docs/estimate.md, Memory before the baseline): now 584 MiB above the log, the safe side
    begin_gib = float(_logged(r"DP0 TP0\] Load weight begin\. avail mem=([\d.]+) GB"))
    used_mib = MI300X_MIB - begin_gib * 1024
    assert used_mib == pytest.approx(9578.9, abs=0.1)
    est = _estimate(None)
    fitted = 700 + 6110 * 3 / 7
    assert est.details["pre_baseline_used_mib"] == pytest.approx(fitted + 2944 + 3900, abs=0.1)
    assert used_mib - fitted > 6000
    assert 0 < est.details["pre_baseline_used_mib"] - used_mib < 600
