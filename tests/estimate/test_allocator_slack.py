"""The caching allocator's rounding of the weight tensors (sizing/allocator.py): each tensor of 10 MiB or more
holds a block rounded up to 2 MiB, per tensor as SGLang allocates it (fused qkv_proj, gate_up_proj,
in_proj_qkvz, MoE w13/w2 per layer), and none under expandable segments or on an Ascend NPU."""

from __future__ import annotations

import json

import pytest

from kvcheck.engines.sglang.sizing import estimate_role
from kvcheck.engines.sglang.sizing import model as sizing_model
from kvcheck.engines.sglang.sizing.allocator import SLACK, block_slack, expandable_segments, pinned_segment
from kvcheck.engines.sglang.sizing.weights import Parallel, config_weights
from kvcheck.model import RoleTarget
from tests.datapaths import MODELS_ABSENT

from . import calibration_cases as cc
from . import newest_cases as nc

pytestmark = pytest.mark.skipif(not cc.available(), reason=MODELS_ABSENT)

MIB = 1 << 20
QWEN = "Qwen3.8-27B-FP8"  # Qwen3.5-27B shapes, block FP8 (tests/estimate/newest_cases.py)


def _target(tp: int, env: dict[str, str] | None = None, gpu: str = "MI355X") -> RoleTarget:
    return RoleTarget(
        name="x", context_length=1, min_headroom=1.0, engine_version="0.5.17",
        args={"mem_fraction_static": 0.85, "max_running_requests": 32, "tp_size": tp}, argv_args=(), gpu=gpu,
        model_config=nc._config(QWEN), env=env or {},
    )


def _stage(tp: int, rounding: bool = True):
    target = _target(tp)
    model = sizing_model._model(target, target.args, offline=True)
    par = Parallel(tp=tp, hip=True, allocator_rounding=rounding)
    return config_weights(model.shape, model.source.text, model.scheme, par, tied=False).stages[0]


def test_the_rule_per_tensor():
    assert block_slack(10 * MIB - 512) == 0  # under kMinLargeAlloc: not modelled (20 MiB blocks shared)
    assert block_slack(10 * MIB - 1) == 1  # rounded to 512 B first: 10 MiB, a block of its own
    assert block_slack(10 * MIB) == 0  # a multiple of 2 MiB
    assert block_slack(10 * MIB + 1) == 2 * MIB - 1  # the 512 B rounding is part of the slack
    assert block_slack(63 * MIB) == MIB
    assert block_slack(62.5 * MIB) == 1.5 * MIB


def test_a_freed_tensor_whose_split_tail_another_took_keeps_its_segment():
    # Kimi-K3's router gate (12.25 MiB: a 14 MiB segment) and the 1.3125 MiB w13 bias that takes its tail
    assert pinned_segment(12.25 * MIB, 1.3125 * MIB) == 14 * MIB - 1.3125 * MIB
    assert pinned_segment(12.25 * MIB, 1.75 * MIB) == 12.25 * MIB  # a tenant filling the tail exactly
    assert pinned_segment(12.25 * MIB, 1.75 * MIB + 1) == 0  # rounded to 512 B it no longer fits the tail
    assert pinned_segment(12.25 * MIB, MIB) == 0  # a small-pool request: it never looks at large blocks
    assert pinned_segment(12.25 * MIB, MIB + 1) == 14 * MIB - MIB - 1  # 1 MiB + 512 B: the large pool
    assert pinned_segment(49 * MIB, 0.9 * MIB) == 0  # a 1 MiB tail is not split off (kSmallSize)
    assert pinned_segment(49 * MIB, 1.5 * MIB) == 0
    assert pinned_segment(8 * MIB, 1.5 * MIB) == 0  # under 10 MiB: a shared 20 MiB segment, not modelled
    assert pinned_segment(12 * MIB, 1.5 * MIB) == 0  # a multiple of 2 MiB leaves no tail


def test_qwen3_8_27b_fp8_at_tp1_holds_66_mib():
    # TP1: every layer's down_proj (5120 x 17408 FP8 = 85 MiB) leaves 1 MiB, the embedding and the lm_head
    # (248320 x 5120 bf16 = 2425 MiB) 1 MiB each: 64 + 1 + 1 MiB (the FP8 block scales are each under 10 MiB)
    stage = _stage(1)
    assert stage.components[SLACK] == 66 * MIB
    assert stage.slack == {"mlp": 64 * MIB, "embedding": MIB, "lm_head": MIB}


def test_qwen3_8_27b_fp8_at_tp2_holds_243_mib():
    # TP2: gate_up_proj 85 MiB (1 MiB) and down_proj 42.5 MiB (1.5 MiB) on 64 layers, out_proj 15 MiB (1 MiB)
    # on 48 GDN layers (the fused in_proj_qkvz, 40 MiB, none), the fused qkv_proj 35 MiB (1 MiB) and o_proj
    # 15 MiB (1 MiB) on 16 attention layers, the embedding and the lm_head 1212.5 MiB (1.5 MiB each)
    stage = _stage(2)
    assert stage.components[SLACK] == 243 * MIB
    assert stage.slack == {"mlp": 160 * MIB, "linear_attention": 48 * MIB, "attention": 32 * MIB,
                           "embedding": 1.5 * MIB, "lm_head": 1.5 * MIB}
    # the priced bytes of each component do not move
    plain = _stage(2, rounding=False)
    assert SLACK not in plain.components
    assert stage.total_bytes - plain.total_bytes == 243 * MIB


@pytest.mark.parametrize("env", [
    {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"},
    {"PYTORCH_HIP_ALLOC_CONF": "max_split_size_mb:512, expandable_segments:True"},
    {"PYTORCH_ALLOC_CONF": "expandable_segments:True,garbage_collection_threshold:0.6"},
])
def test_expandable_segments_hold_no_slack(env):
    assert expandable_segments(env, rocm=True)  # _target is an MI355X role
    rounded = estimate_role(_target(2), offline=True)
    est = estimate_role(_target(2, env), offline=True)
    assert rounded.details["weights_allocator_slack_gib"] == round(243 / 1024, 3)
    assert est.details["weights_allocator_slack_gib"] == 0
    assert est.details["weights_gib_per_gpu"] == pytest.approx(
        rounded.details["weights_gib_per_gpu"] - 243 / 1024, abs=0.001)
    assert any("without the caching allocator's per-tensor rounding" in a for a in est.assumptions)


def test_segments_not_expandable_keep_the_slack():
    for env in ({"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:False"}, {"PYTORCH_CUDA_ALLOC_CONF": ""},
                {"OTHER": "expandable_segments:True"}):
        assert not expandable_segments(env)
        assert estimate_role(_target(2, env), offline=True).details["weights_allocator_slack_gib"] == 0.237


def test_pytorch_reads_the_first_allocator_setting_that_is_set():
    # PYTORCH_ALLOC_CONF wins over the older spellings, which PyTorch then does not read; the HIP spelling is read
    # on ROCm only (before the CUDA one)
    shadowed = {"PYTORCH_ALLOC_CONF": "max_split_size_mb:512", "PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"}
    assert not expandable_segments(shadowed) and not expandable_segments(shadowed, rocm=True)
    assert estimate_role(_target(2, shadowed), offline=True).details["weights_allocator_slack_gib"] == 0.237
    hip = {"PYTORCH_HIP_ALLOC_CONF": "expandable_segments:True"}
    assert expandable_segments(hip, rocm=True) and not expandable_segments(hip)
    assert estimate_role(_target(2, hip, gpu="H100"), offline=True).details["weights_allocator_slack_gib"] > 0
    hip_first = {"PYTORCH_HIP_ALLOC_CONF": "expandable_segments:False", "PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"}
    assert not expandable_segments(hip_first, rocm=True) and expandable_segments(hip_first)


def test_an_ascend_npu_holds_no_slack():
    est = estimate_role(_target(2, gpu="Ascend-910B"), offline=True)
    assert est.details["weights_allocator_slack_gib"] == 0


def test_the_tp2_mi355x_log_is_inside_its_range():
    # 14.49 GiB logged per rank; 14.27 priced from the tensors alone, 14.51 with the 243 MiB of rounding (the case
    # is priced from the MI355X profile's ROCm refit, not its logged baseline)
    [outcome] = [o for o in nc.run_all() if o.case.id == "sglang-qwen38-27b-fp8-mi355x-tp2-rocm0517"]
    assert outcome.predicted_weights_gib == pytest.approx(14.511, abs=0.0005)
    assert outcome.logged_weights_gib == 14.49
    low, high = outcome.pool_range
    assert low <= outcome.logged_tokens <= high
    assert outcome.in_range
    assert (outcome.predicted_tokens, round(outcome.error_pct, 2)) == (3_240_404, 0.37)


def test_dsv4_expert_slack_is_of_the_rank_s_own_experts():
    """Under EP a rank's w13 holds experts / ep whole experts: V4-Pro at TP8 EP8 (MXFP4) rounds 48 experts' tensors
    (92 MiB a rank over 61 layers), not 384 experts' (which happen to be whole 2 MiB multiples)."""
    from kvcheck.engines.sglang.sizing import dsv4
    from tests.datapaths import MODELS

    text = json.loads((MODELS / "deepseek-ai--DeepSeek-V4-Pro.json").read_text())

    def slack(ep: int) -> float:
        return dsv4.weights_bytes(text, stage=range(61), tp=8, attn_tp=8, ep=ep, dense_fmt="fp8", expert_fmt="mxfp4",
                                  first_stage=True, last_stage=True)[SLACK]

    routed_ep8 = 61 * sum(block_slack(b * (0.5 + 1 / 32)) for b in (48 * 2 * 7168 * 3072, 48 * 7168 * 3072))
    routed_ep1 = 61 * sum(block_slack(b * (0.5 + 1 / 32)) for b in (384 * 2 * 7168 * 384, 384 * 7168 * 384))
    assert slack(8) - slack(1) == pytest.approx(routed_ep8 - routed_ep1)
    assert round(routed_ep8 / MIB) == 92
