"""Kimi-K3's weights per GPU as SGLang builds them (models/kimi_k3.py, models/kimi_k3_vl.py and
layers/quantization/mxfp4.py, the same in 0.5.17 to 0.5.23), module by module, to the byte.

The KDA forget gate is low-rank (f_a_proj + f_b_proj; use_full_rank_gate makes the *output* gate full-rank), the
MLA layers carry an output gate g_proj, the vision tower's attention is qkv_hidden_size wide, and the MXFP4 experts
carry what Mxfp4MoEMethod adds to the checkpoint's bytes: zero biases off ROCm, aiter's padded scales on ROCm."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from kvcheck.engines.sglang.sizing import estimate_role
from kvcheck.engines.sglang.sizing import model as sizing_model
from kvcheck.engines.sglang.sizing.allocator import SLACK
from kvcheck.engines.sglang.sizing.weights import (
    Mxfp4ExpertLayout,
    Parallel,
    config_weights,
    vision_tower_bytes,
)
from tests.datapaths import MODELS_ABSENT
from tests.estimate.helpers import model_config, role

from . import calibration_cases as cc
from . import newest_cases as nc

pytestmark = pytest.mark.skipif(not cc.available(), reason=MODELS_ABSENT)

K3 = "moonshotai--Kimi-K3"
H, HEADS, HD, CONV = 7168, 96, 128, 4  # hidden, KDA heads x head_dim, short-conv kernel
P = HEADS * HD  # 12288
KDA_LAYERS, MLA_LAYERS, MOE_LAYERS = 69, 24, 92
EXPERTS, INTER, LATENT = 896, 3072, 3584
BF16, FP32 = 2, 4
MIB = 1 << 20


def _components(tp: int = 8, ep: int = 1, **par) -> dict[str, float]:
    target = role(K3, gpu="H200", tp_size=tp)
    model = sizing_model._model(target, target.args, offline=True)
    stage = config_weights(model.shape, model.source.text, model.scheme, Parallel(tp=tp, ep=ep, **par), tied=False)
    return dict(stage.stages[0].components)


def _kda_layer_bytes(tp: int) -> int:
    """One KDA layer on one rank (models/kimi_k3.py KimiK3DeltaAttention, use_full_rank_gate)."""
    p = P // tp
    pad = -(HD + HEADS // tp) % 8  # _merge_bfa_weights: [f_a | b] padded to a multiple of 8 rows
    bf16 = (H * 4 * p  # fused_qkvg_proj: q, k, v and the full-rank output gate
            + H * HD + H * (HEADS // tp) + H * pad  # f_a_proj (replicated) + b_proj, merged
            + HD * p  # f_b_proj: the forget gate's second, low-rank half
            + p * H)  # o_proj
    fp32 = 3 * p * CONV + p + HEADS // tp  # qkv_conv1d (float32), dt_bias (per channel), A_log (per head)
    return bf16 * BF16 + fp32 * FP32


def test_kda_layers_have_a_low_rank_forget_gate():
    # before: a full-rank f_proj (hidden x heads*head_dim) was priced, 1.27 GiB a GPU too many at TP8
    assert _components()["linear_attention"] == KDA_LAYERS * _kda_layer_bytes(8) == 7_772_022_000
    assert _components(tp=4)["linear_attention"] == KDA_LAYERS * _kda_layer_bytes(4)


def test_mla_layers_carry_the_output_gate():
    nh, q_lora, kv_lora, nope, rope, v = 96 // 8, 1536, 512, 128, 64, 128
    per_layer = (H * (q_lora + kv_lora + rope)  # fused_qkv_a_proj_with_mqa (replicated)
                 + q_lora * nh * (nope + rope) + kv_lora * nh * (nope + v)  # q_b_proj, kv_b_proj
                 + nh * v * H  # o_proj
                 + H * nh * v)  # g_proj: KimiK3MLAAttention's output gate (mla_use_output_gate)
    assert _components()["attention"] == MLA_LAYERS * per_layer * BF16 == 2_028_994_560


def test_vision_tower_attention_is_qkv_hidden_size_wide():
    vision = json.loads(model_config(K3).read_text())["vision_config"]
    hidden, qkv, inter, layers = 1024, 1536, 4096, 27
    merged = hidden * 4  # 2 x 2 merge
    params = layers * (hidden * 3 * qkv + qkv * hidden + 2 * hidden * inter) + merged * merged + merged * H
    assert vision_tower_bytes(vision, H) == params * BF16 == 884_998_144


def _expert_bytes(local: int, inter_pp: int, *, scale_cols_w2: int, bias: int) -> int:
    w13 = local * 2 * inter_pp * (LATENT // 2 + LATENT // 32)
    w2 = local * LATENT * (inter_pp // 2 + scale_cols_w2)
    return w13 + w2 + bias * local * (2 * inter_pp + LATENT)


def test_deep_gemm_experts_keep_zero_bf16_biases():
    # Mxfp4MoEMethod.create_weights: `create_bias = with_bias or not _is_hip`; the deep_gemm runner keeps them
    comps = _components(ep=8, mxfp4_experts=Mxfp4ExpertLayout(bias_bytes=2))
    per_layer = _expert_bytes(EXPERTS // 8, INTER, scale_cols_w2=INTER // 32, bias=BF16)
    assert comps["moe_experts"] == MOE_LAYERS * per_layer
    assert MOE_LAYERS * BF16 * (EXPERTS // 8) * (2 * INTER + LATENT) == 200_474_624  # the biases, EP8


def test_aiter_pads_the_down_projections_scales_to_eight_columns():
    # TP8: 3072 / 8 = 384 per rank (a multiple of 128 under SGLANG_AITER_K3_OPT), 12 scale columns -> 16
    layout = Mxfp4ExpertLayout(inter_align=128, hidden_align=256, scale_k_align=8)
    comps = _components(mxfp4_experts=layout)
    assert comps["moe_experts"] == MOE_LAYERS * _expert_bytes(EXPERTS, INTER // 8, scale_cols_w2=16, bias=0)
    plain = _components()["moe_experts"]
    assert comps["moe_experts"] - plain == MOE_LAYERS * EXPERTS * LATENT * 4 == 1_181_745_152
    # without SGLANG_AITER_K3_OPT: 384 -> 512
    wide = _components(mxfp4_experts=replace(layout, inter_align=256))["moe_experts"]
    assert wide == MOE_LAYERS * _expert_bytes(EXPERTS, 512, scale_cols_w2=16, bias=0)


def _est(gpu: str, version: str, env: dict[str, str] | None = None, **args):
    return estimate_role(replace(role(K3, gpu=gpu, env=env, **args), engine_version=version), offline=True)


@pytest.mark.parametrize(("gpu", "version", "env", "args", "layout"), [
    ("B300", "0.5.19", None, {"moe_runner_backend": "deep_gemm"}, Mxfp4ExpertLayout(bias_bytes=2)),
    # K3's `auto` runner on SM100/SM103 is flashinfer_mxfp4 from 0.5.19 (model_overrides/kimi_k3.py), which keeps
    # the biases in float32
    ("B300", "0.5.19", None, {}, Mxfp4ExpertLayout(inter_align=128, hidden_align=256, bias_bytes=4)),
    ("B300", "0.5.18", None, {}, Mxfp4ExpertLayout(bias_bytes=2)),
    ("H200", "0.5.23", None, {}, Mxfp4ExpertLayout(bias_bytes=2)),
    ("MI355X", "0.5.23", None, {}, None),  # ROCm without aiter: no biases, no aiter layout
    ("MI355X", "0.5.15.post1", nc.K3_MI355X_ENV, {},
     Mxfp4ExpertLayout(inter_align=128, hidden_align=256, scale_k_align=8)),
    ("MI355X", "0.5.23", {"SGLANG_USE_AITER": "1"}, {},
     Mxfp4ExpertLayout(inter_align=256, hidden_align=256, scale_k_align=8)),
])
def test_the_layout_each_device_and_runner_gets(monkeypatch, gpu, version, env, args, layout):
    seen = []
    real = sizing_model.config_weights

    def spy(shape, text, scheme, par, *, tied):
        seen.append(par.mxfp4_experts)
        return real(shape, text, scheme, par, tied=tied)

    monkeypatch.setattr(sizing_model, "config_weights", spy)
    _est(gpu, version, env, tp_size=8, **args)
    assert seen == [layout]


@pytest.mark.parametrize(("args", "front"), [({}, 3), ({"moe_a2a_backend": "deepep"}, 2)])
def test_the_merged_moe_front_is_one_tensor_to_the_allocator(args, front):
    # _merge_front_weights: [shared gate_up 21 MiB | gate 12.25 | latent down 49] = 82.25 MiB -> 1.75 MiB a layer
    # without an all-to-all; [gate | latent down] = 61.25 MiB -> 0.75 MiB under deepep (shared experts apart)
    target = role(K3, gpu="H200", tp_size=8, **args)
    model = sizing_model._model(target, target.args, offline=True)
    gpu = sizing_model._gpu(target, sizing_model.as_profiles(None))
    assert sizing_model._kimi_k3_front(target, target.args, model, gpu) == front
    stage = config_weights(model.shape, model.source.text, model.scheme, Parallel(tp=8, k3_front=front), tied=False)
    assert stage.stages[0].slack["router"] == MOE_LAYERS * (1.75 if front == 3 else 0.75) * (1 << 20)
    assert SLACK in stage.stages[0].components


GATE_PINNED = 14 * MIB - 1.3125 * MIB  # the gate's 14 MiB segment, less the w13 bias that keeps it


@pytest.mark.parametrize(("tp", "ep", "front", "layout", "pinned"), [
    (8, 8, 2, Mxfp4ExpertLayout(bias_bytes=2), GATE_PINNED),  # deepep: 112 experts x 6144 rows x 2 B = 1.3125 MiB
    (8, 1, 3, Mxfp4ExpertLayout(bias_bytes=2), GATE_PINNED),  # no all-to-all: 896 x 768 x 2 B, the same
    (16, 16, 2, Mxfp4ExpertLayout(bias_bytes=2), 0),  # 56 x 6144 x 2 B = 0.66 MiB: a small-pool request
    (16, 1, 3, Mxfp4ExpertLayout(bias_bytes=2), 0),  # 896 x 384 x 2 B, the same
    (8, 8, 0, Mxfp4ExpertLayout(bias_bytes=2), 0),  # SGLANG_K3_FUSED_FRONT=0: the gate is never freed
    (8, 1, 3, Mxfp4ExpertLayout(inter_align=128, hidden_align=256, scale_k_align=8), 0),  # aiter: no bias
    (8, 1, 3, Mxfp4ExpertLayout(inter_align=128, hidden_align=256, bias_bytes=4), 0),  # flashinfer: not modelled
])
def test_the_freed_router_gate_stays_reserved_where_the_w13_bias_took_its_tail(tp, ep, front, layout, pinned):
    # KimiK3MoE builds the gate, then the experts; a w13 bias of 1-1.75 MiB takes the gate segment's split
    # tail, and _merge_front_weights frees the gate into the front buffer: the bias keeps the segment
    def router_slack(experts: Mxfp4ExpertLayout | None, rounding: bool = True) -> float:
        target = role(K3, gpu="H200", tp_size=tp)
        model = sizing_model._model(target, target.args, offline=True)
        par = Parallel(tp=tp, ep=ep, k3_front=front, mxfp4_experts=experts, allocator_rounding=rounding)
        stage = config_weights(model.shape, model.source.text, model.scheme, par, tied=False).stages[0]
        return stage.slack.get("router", 0.0)

    assert router_slack(layout) - router_slack(None) == MOE_LAYERS * pinned
    assert router_slack(layout, rounding=False) == 0  # expandable segments: one growing mapping, no segments


def test_kimi_k3_b300_weights_per_gpu():
    # the whn09/kimi-k3-sglang B300 launch, priced as 0.5.19 with deepep (tests/estimate/newest_cases.py): the
    # estimate's weights, to the MiB; its host logged 214.88 GiB. The freed router gates' segments are 1.140 GiB
    # of it (92 x 12.6875 MiB); the modules SGLang builds do not explain the rest
    est = _est("B300", "0.5.19", tp_size=8, ep_size=8, moe_a2a_backend="deepep", moe_runner_backend="deep_gemm",
               mem_fraction_static=0.85)
    assert est.details["weights_gib_per_gpu"] == 213.459
    env = {"SGLANG_K3_FUSED_FRONT": "0"}  # no merge: the gate stays a tensor of its own
    unmerged = estimate_role(replace(role(K3, gpu="B300", env=env, tp_size=8, ep_size=8, moe_a2a_backend="deepep",
                                          moe_runner_backend="deep_gemm", mem_fraction_static=0.85),
                                     engine_version="0.5.19"), offline=True)
    # 2 MiB a layer more slack unmerged (gate 1.75 + latent down 1 against the front's 0.75), no pinned segment
    assert unmerged.details["weights_gib_per_gpu"] == 212.499
