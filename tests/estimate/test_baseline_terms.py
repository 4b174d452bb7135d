"""Memory before the baseline: the profile terms keyed by release, custom all-reduce groups and ROCm.

The figures are the profiles' (profiles/gpus/*.yaml); the logged readings are the three logs the
fitted figures miss (tests/data/logs, docs/estimate.md "Memory before the baseline"): each must sit
inside the widened band, and outside the band the figure had without the term (so the term is what
holds it).
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from kvcheck.engines.sglang.sizing import estimate_role
from kvcheck.errors import InputError
from kvcheck.gpus import GpuProfiles, PreBaselineFigure

from .helpers import role

GIB = 1024


def _used(total_mib: int, free_gib: float) -> float:
    """MiB in use at the baseline: the card's memory less the logged free GiB."""
    return total_mib - free_gib * GIB


# (profile, ranks on the host, declared release, custom all-reduce groups, MiB in use logged, log)
LOGS = [
    # 0.5.2rc2 on 8x H100: "Load weight begin. avail mem=77.43 GB"
    ("H100", 8, "0.5.2rc2", 1, _used(81559, 77.43), "sglang-grok2-fp8-8xH100-tp8-k8s-blog"),
    # ROCm 7.2 development image, 4x MI300X TP4 DP4 with DP attention (attention TP 1: only the TP group
    # has a custom all-reduce): the least free rank, 182.61 GB, is the one SGLang sizes by
    ("MI300X", 4, "rocm720-mi30x-339e36e-20260512-DSv4", 1, _used(196592, 182.61),
     "sglang-dsv4-flash-fp8-4xMI300X-tp4-dp4-dpattn-issue25118"),
]


def _figure(name: str, ranks: int, release: str | None, groups: int) -> PreBaselineFigure:
    return GpuProfiles.load().get(name).pre_baseline.figure(ranks, release=release, custom_ar_groups=groups)


# 0.5.18 (torch 2.13.0+cu130) on one H100: 50.01 GiB free after 28.47 GiB of weights
CUDA13_TP1_USED = _used(81559, 50.01 + 28.47)


def test_logged_readings_are_what_the_test_says():
    assert [round(used, 1) for *_, used, _ in LOGS] == [2270.7, 9599.4]
    assert round(CUDA13_TP1_USED, 1) == 1195.5


def test_cuda13_tp1_log_is_inside_the_tp1_band_without_a_term():
    fig = _figure("H100", 1, "0.5.18", 0)
    assert fig.notes == ()
    assert fig.mib - fig.below_mib <= CUDA13_TP1_USED <= fig.mib + fig.above_mib
    assert fig.mib + fig.above_mib - CUDA13_TP1_USED == pytest.approx(4.52, abs=0.01)  # at the edge: see docs


@pytest.mark.parametrize(("gpu", "ranks", "release", "groups", "used", "log"), LOGS, ids=[entry[-1] for entry in LOGS])
def test_each_log_falls_inside_the_widened_band(gpu, ranks, release, groups, used, log):
    fig = _figure(gpu, ranks, release, groups)
    assert fig.mib - fig.below_mib <= used <= fig.mib + fig.above_mib, (log, fig)
    assert fig.notes  # the estimate says it cannot know this part
    bare = GpuProfiles.load().get(gpu).pre_baseline
    low, high = bare.mib(ranks) - bare.band(ranks), bare.mib(ranks) + bare.band(ranks)
    # without the term each log is outside the band; with it, 250 MiB or more inside
    assert not low <= used <= high, log
    assert min(used - fig.mib + fig.below_mib, fig.mib + fig.above_mib - used) >= 250, log


def test_h100_lazy_nccl_term_widens_below_per_peer_from_0_4_7():
    # 2990 +/- (300 + 40 x 7); the term adds 60 MiB per peer below from 0.4.7 (torch 2.7.1, NCCL 2.26)
    assert _figure("H100", 8, "0.4.6.post5", 1) == PreBaselineFigure(2990.0, 580.0, 580.0, ())
    fig = _figure("H100", 8, "0.4.7", 1)
    assert (fig.mib, fig.below_mib, fig.above_mib) == (2990.0, 1000.0, 580.0)
    assert len(fig.notes) == 1 and "NCCL lazy connection" in fig.notes[0] and "420 MiB below" in fig.notes[0]
    fig = _figure("H800", 8, "0.5.23", 1)
    assert (fig.mib, fig.below_mib, fig.above_mib) == (2775.0, 1000.0, 580.0)


def test_h100_one_rank_has_no_term():
    # the CUDA 13 log (0.5.18, 1,195.5 MiB) is held by the TP1 band itself, 4.5 MiB inside its top
    assert _figure("H100", 1, "0.5.18", 0) == PreBaselineFigure(900.0, 300.0, 300.0, ())


def test_rocm_terms_scale_with_custom_all_reduce_groups():
    # MI300X TP4: 700 + (6810 - 700) x 3 / 7 = 3318.6; band 600 + 100 x 3
    assert _figure("MI300X", 4, "0.5.7", 1) == PreBaselineFigure(pytest.approx(3318.571, abs=1e-3), 900.0, 900.0, ())
    assert _figure("MI300X", 4, "0.5.9", 1).above_mib == 900.0 + 4000.0  # image term only (from 0.5.8)
    assert _figure("MI300X", 4, "0.5.23", 1).above_mib == 900.0 + 4000.0 + 2944.0
    assert _figure("MI300X", 4, "0.5.23", 2).above_mib == 900.0 + 4000.0 + 2 * 2944.0
    assert _figure("MI300X", 4, "0.5.23", 0).above_mib == 900.0 + 4000.0  # --disable-custom-all-reduce
    assert _figure("MI300X", 1, "0.5.23", 0) == PreBaselineFigure(700.0, 600.0, 600.0, ())
    for name in ("MI308X", "MI325X", "MI355X"):
        assert _figure(name, 8, None, 1).above_mib - _figure(name, 8, "0.5.7", 1).above_mib == 6944.0, name


def test_an_unreadable_release_gets_every_term():
    # a development image tag or no version at all: the release is not known, so the band is the widest
    assert _figure("H100", 8, None, 1).below_mib == 1000.0
    assert _figure("H100", 8, "nightly", 1).below_mib == 1000.0
    assert _figure("MI300X", 4, "dev", 1).above_mib == 7844.0


def test_estimate_widens_the_low_end_and_says_why():
    # a TP4 DP4 DP-attention role on 4x MI300X, priced as the development image (release unreadable)
    base = role("Qwen--Qwen3-1.7B", gpu="MI300X", tp_size=4, dp_size=4, enable_dp_attention=True,
                mem_fraction_static=0.88)
    old = estimate_role(replace(base, engine_version="0.5.7"), offline=True)
    dev = estimate_role(replace(base, engine_version="rocm720-mi30x-339e36e-20260512-DSv4"), offline=True)
    # the refit terms move the figure (the aiter all-reduce of one group and the image's RCCL), the others widen
    # the band below the pool: the range's low end drops further than the point
    assert dev.details["pre_baseline_used_mib"] == old.details["pre_baseline_used_mib"] + 2944 + 3900
    assert dev.pool_tokens < old.pool_tokens
    assert dev.pool_range[0] < old.pool_range[0]
    assert old.pool_range[0] - dev.pool_range[0] > old.pool_tokens - dev.pool_tokens
    notes = [a for a in dev.assumptions if "not determined by the inputs" in a]
    assert [n.split("(")[1].split(")")[0] for n in notes] == ["aiter custom all-reduce", "RCCL and image"]
    moved = [a for a in dev.assumptions if a.startswith("memory before the baseline: ")]
    assert [m.split("(")[1].split(":")[0] for m in moved] == ["aiter custom all-reduce, refit", "RCCL and image, refit"]
    assert not [a for a in old.assumptions if "not determined by the inputs" in a or a in moved]


def test_the_refit_moves_the_figure_by_release():
    # MI355X TP8: 4,505 MiB fitted on 0.5.8.post1 images, + the image's RCCL from 0.5.9, + aiter's all-reduce
    # from 0.5.10 (the v0.5.13 and 0.5.15.post1 images held 11,346 MiB)
    base = role("Qwen--Qwen3-1.7B", gpu="MI355X", tp_size=8, mem_fraction_static=0.85)
    used = {v: estimate_role(replace(base, engine_version=v), offline=True).details["pre_baseline_used_mib"]
            for v in ("0.5.8.post1", "0.5.9", "0.5.10", "0.5.15.post1")}
    assert used == {"0.5.8.post1": 4505, "0.5.9": 4505 + 3900, "0.5.10": 4505 + 3900 + 2944,
                    "0.5.15.post1": 11349}
    assert abs(used["0.5.15.post1"] - 11346) < 100
    # one rank builds no communicator: TP1 does not move
    one = role("Qwen--Qwen3-1.7B", gpu="MI355X", tp_size=1, mem_fraction_static=0.85)
    assert estimate_role(replace(one, engine_version="0.5.15.post1"), offline=True).details["pre_baseline_used_mib"] \
        == estimate_role(replace(one, engine_version="0.5.8.post1"), offline=True).details["pre_baseline_used_mib"]


def test_attention_tp_group_counts_a_second_custom_all_reduce_from_0_5_22():
    # TP8 DP2 with DP attention: attention TP 4, a group of its own; from 0.5.22 with a custom all-reduce
    base = role("Qwen--Qwen3-1.7B", gpu="MI300X", tp_size=8, dp_size=2, enable_dp_attention=True,
                mem_fraction_static=0.88)
    notes = {v: [a for a in estimate_role(replace(base, engine_version=v), offline=True).assumptions
                 if "aiter custom all-reduce" in a] for v in ("0.5.21", "0.5.22")}
    assert "2,944 MiB above" in notes["0.5.21"][0]
    assert "5,888 MiB above" in notes["0.5.22"][0]
    off = estimate_role(replace(base, engine_version="0.5.22", args={**base.args, "disable_custom_all_reduce": True}),
                        offline=True)
    assert not [a for a in off.assumptions if "aiter custom all-reduce" in a]


@pytest.mark.parametrize(("term", "message"), [
    ("{name: x, source: s, above: 1, when: 2}", "unknown key(s) when"),
    ("{name: x, source: s, per: rank}", "per 'rank' is not one of"),
    ("{name: x, source: s, below: -5}", "not negative"),
    ("{name: x, source: s, shift: -5}", "not negative"),
    ("{name: x, source: s, since: not-a-release}", "Invalid version"),
])
def test_a_malformed_term_is_bad_input(tmp_path: Path, term, message):
    (tmp_path / "X.yaml").write_text(
        "name: X\nvendor: nvidia\ncompute_capability: '9.0'\nmemory_total_mib: 81559\nmemory_source: s\n"
        f"pre_baseline_mib:\n  base: 900\n  source: s\n  terms:\n  - {term}\n")
    with pytest.raises(InputError, match="not a valid GPU profile") as info:
        GpuProfiles.load(tmp_path)
    assert message in str(info.value)


def test_a_card_described_in_the_manifest_gets_the_vendor_terms():
    from kvcheck.gpus import custom_profile

    amd = custom_profile("X", 200_000, vendor="amd").pre_baseline
    # 700 + (6810 - 700) x 3 / 7 at TP4; band 800 + 100 x 3, + 2,944 (one custom all-reduce group) + 4,000
    assert amd.figure(4, release="0.5.23", custom_ar_groups=1).above_mib == 8044.0
    assert amd.figure(4, release="0.5.7", custom_ar_groups=1).above_mib == 1100.0
    given = custom_profile("Y", 80_000, pre_baseline_mib=1500).pre_baseline
    assert given.figure(8, release="0.5.23", custom_ar_groups=1) == PreBaselineFigure(1500.0, 0.0, 0.0, ())


def test_b300_before_the_weights_is_what_two_tp8_starts_logged():
    """Two SGLang TP8 starts on 8 B300 SXM6 AC (tests/data/logs: 0.5.10's 'avail mem=265.27 GB' and a V4 run's
    161.06 + 104.24 GiB) against the B300's nvidia-smi total, 275,040 MiB. The profile once assumed 282,624 MiB,
    a GB300-class figure: 7.6 GiB a GPU more than a B300 has, priced into every B300 pool."""
    profile = GpuProfiles.load().get("B300")
    assert profile.memory_total_mib == 275040
    fig = _figure("B300", 8, "0.5.10", 1)
    for free_gib in (265.27, 161.06 + 104.24):
        used = _used(275040, free_gib)
        assert fig.mib - fig.below_mib <= used <= fig.mib + fig.above_mib
        assert abs(used - fig.mib) < 20  # 3,403.5 and 3,372.8 MiB in use against 3,390
    est = estimate_role(role("Qwen--Qwen3-8B", gpu="B300", tp_size=8), offline=True)
    assert (est.details["gpu_memory_mib"], est.details["pre_baseline_used_mib"]) == (275040, 3390.0)
    assert est.details["pre_baseline_gib"] == round((275040 - 3390) / 1024, 3) == 265.283
