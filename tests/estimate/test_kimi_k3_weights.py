"""Kimi-K3's weights per GPU as SGLang builds them (models/kimi_k3.py, models/kimi_k3_vl.py and
layers/quantization/mxfp4.py, 0.5.17 to 0.5.23), module by module, to the byte.

The KDA forget gate is low-rank (f_a_proj + f_b_proj; use_full_rank_gate makes the *output* gate full-rank), the
MLA layers carry an output gate g_proj, the vision tower's attention is qkv_hidden_size wide, and the MXFP4 experts
are what Mxfp4MoEMethod holds after loading on the path it takes (sizing/mxfp4_moe.py): padded, re-laid out, with
zero biases off ROCm, or upcast to bf16."""

from __future__ import annotations

import json
import shutil
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
from tests.conftest import run_kvcheck
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


def _expert_bytes(local: int, inter_pp: int, *, scale_cols_w2: int, bias: int, scale_cols_w13: int = LATENT // 32,
                  scalars: int = 0) -> int:
    w13 = local * 2 * inter_pp * (LATENT // 2 + scale_cols_w13)
    w2 = local * LATENT * (inter_pp // 2 + scale_cols_w2)
    return w13 + w2 + bias * local * (2 * inter_pp + LATENT) + scalars * local * FP32


DEEP_GEMM = Mxfp4ExpertLayout(scale_k_align=4, bias_bytes=2, bias_as_made=True)
MARLIN = Mxfp4ExpertLayout(inter_align=128, hidden_align=256, bias_bytes=2)
CUTLASS_SM90 = Mxfp4ExpertLayout(inter_align=128, hidden_align=256, bias_bytes=2, expert_scalars=3)
CUTLASS_SM120 = Mxfp4ExpertLayout(inter_align=128, hidden_align=256, bias_bytes=2, expert_scalars=4)
TRTLLM = Mxfp4ExpertLayout(inter_align=128, hidden_align=256, bias_bytes=4, expert_scalars=3)
TRITON = Mxfp4ExpertLayout(inter_align=64, bias_bytes=4)
BF16_UPCAST = Mxfp4ExpertLayout(inter_align=64, upcast_bf16=True, bias_bytes=2, bias_as_made=True)
BF16_UPCAST_ROCM = Mxfp4ExpertLayout(inter_align=64, upcast_bf16=True)
AITER_K3_OPT = Mxfp4ExpertLayout(inter_align=128, hidden_align=256, scale_k_align=8)


def test_deep_gemm_experts_keep_zero_bf16_biases():
    # Mxfp4MoEMethod.create_weights: `create_bias = with_bias or not _is_hip`; the deep_gemm runner keeps them
    comps = _components(ep=8, mxfp4_experts=DEEP_GEMM)
    per_layer = _expert_bytes(EXPERTS // 8, INTER, scale_cols_w2=INTER // 32, bias=BF16)
    assert comps["moe_experts"] == MOE_LAYERS * per_layer
    assert MOE_LAYERS * BF16 * (EXPERTS // 8) * (2 * INTER + LATENT) == 200_474_624  # the biases, EP8


def test_deep_gemm_packs_the_scales_in_fours():
    # transform_sf_into_required_layout: UE8M0 packed four to an int32, so the K/32 columns round up to 4: at TP16
    # without EP the down projection's 192 / 32 = 6 columns take 8 (its gate_up's 3584 / 32 = 112 are a multiple)
    comps = _components(tp=16, mxfp4_experts=DEEP_GEMM)
    assert comps["moe_experts"] == MOE_LAYERS * _expert_bytes(EXPERTS, 192, scale_cols_w2=8, bias=BF16)
    assert comps["moe_experts"] - _components(tp=16, mxfp4_experts=replace(DEEP_GEMM, scale_k_align=1))[
        "moe_experts"] == MOE_LAYERS * EXPERTS * LATENT * 2 == 590_872_576


def test_marlin_pads_the_intermediate_to_128():
    # create_weights (use_marlin): round_up(intermediate, 128), round_up(hidden, 256); prepare_moe_mxfp4_layer_for_
    # marlin repacks 4-bit weights and one-byte E8M0 scales of the padded shapes and re-makes the biases in bf16.
    # TP8: 384 stays; TP16 without EP: 192 becomes 256, a third more expert bytes (28.1 GiB a GPU)
    assert _components(mxfp4_experts=MARLIN)["moe_experts"] == MOE_LAYERS * _expert_bytes(
        EXPERTS, 384, scale_cols_w2=12, bias=BF16)
    tp16 = _components(tp=16, mxfp4_experts=MARLIN)["moe_experts"]
    assert tp16 == MOE_LAYERS * _expert_bytes(EXPERTS, 256, scale_cols_w2=8, bias=BF16) == 121_213_288_448
    # with EP16 each rank holds 56 experts of the whole 3072: nothing to pad
    assert _components(tp=16, ep=16, mxfp4_experts=MARLIN)["moe_experts"] == MOE_LAYERS * _expert_bytes(
        EXPERTS // 16, INTER, scale_cols_w2=INTER // 32, bias=BF16)


@pytest.mark.parametrize(("layout", "bias", "scalars"), [(CUTLASS_SM90, BF16, 3), (CUTLASS_SM120, BF16, 4),
                                                           (TRTLLM, FP32, 3)])
def test_flashinfer_pads_to_128_and_remakes_the_biases(layout, bias, scalars):
    # the CUTLASS paths (_process_weights_for_sm90/sm120_cutlass) pad after loading and re-make the biases in their
    # dtype, with 3 (SM90: swiglu alpha/beta/limit) or 4 (SM120: and the MXFP4 global scale) float32 vectors of one
    # value per expert; trtllm-gen pads in create_weights, re-makes the biases in float32, adds gemm1 alpha/beta/limit
    comps = _components(tp=16, mxfp4_experts=layout)
    assert comps["moe_experts"] == MOE_LAYERS * _expert_bytes(EXPERTS, 256, scale_cols_w2=8, bias=bias, scalars=scalars)


def test_the_triton_kernel_runner_pads_to_64_with_float32_biases():
    # TP32: 96 -> 128 (create_weights: triton_kernels_padding_alignment); the biases become float32 Parameters
    comps = _components(tp=32, mxfp4_experts=TRITON)
    assert comps["moe_experts"] == MOE_LAYERS * _expert_bytes(EXPERTS, 128, scale_cols_w2=4, bias=FP32)


def test_the_bf16_upcast_holds_the_experts_in_bf16():
    # the last resort: upcast_from_mxfp(..., torch.bfloat16) replaces w13/w2 by bf16 tensors and frees the scales;
    # the zero biases stay as made. 3.77 times the MXFP4 bytes: 317.6 GiB a GPU at TP16, 5 TiB over 16 GPUs
    per_layer = EXPERTS * 3 * 192 * LATENT * BF16 + BF16 * EXPERTS * (2 * 192 + LATENT)
    comps = _components(tp=16, mxfp4_experts=BF16_UPCAST)
    assert comps["moe_experts"] == MOE_LAYERS * per_layer == 340_996_784_128
    mxfp4 = MOE_LAYERS * _expert_bytes(EXPERTS, 192, scale_cols_w2=6, bias=0)
    assert comps["moe_experts"] / mxfp4 == pytest.approx(3.77, abs=0.01)
    # TP32: each rank's 96 rows are padded to 128 (create_weights pads for triton_kernels, which the upcast needs)
    assert _components(tp=32, mxfp4_experts=BF16_UPCAST_ROCM)["moe_experts"] == MOE_LAYERS * EXPERTS * 3 * 128 * LATENT * BF16


def test_aiter_pads_the_down_projections_scales_to_eight_columns():
    # TP8: 3072 / 8 = 384 per rank (a multiple of 128 under SGLANG_AITER_K3_OPT), 12 scale columns -> 16
    comps = _components(mxfp4_experts=AITER_K3_OPT)
    assert comps["moe_experts"] == MOE_LAYERS * _expert_bytes(EXPERTS, INTER // 8, scale_cols_w2=16, bias=0)
    plain = _components()["moe_experts"]
    assert comps["moe_experts"] - plain == MOE_LAYERS * EXPERTS * LATENT * 4 == 1_181_745_152
    # without SGLANG_AITER_K3_OPT: 384 -> 512
    wide = _components(mxfp4_experts=replace(AITER_K3_OPT, inter_align=256))["moe_experts"]
    assert wide == MOE_LAYERS * _expert_bytes(EXPERTS, 512, scale_cols_w2=16, bias=0)


def _est(gpu: str, version: str, env: dict[str, str] | None = None, **args):
    return estimate_role(replace(role(K3, gpu=gpu, env=env, **args), engine_version=version), offline=True)


@pytest.mark.parametrize(("gpu", "version", "env", "args", "layout"), [
    # Hopper: SGLang leaves `auto` unresolved (its own resolution, tools/sglang-reference): the bf16 upcast
    ("H200", "0.5.23", None, {}, BF16_UPCAST),
    ("H100", "0.5.17", None, {}, BF16_UPCAST),
    ("H200", "0.5.23", None, {"moe_runner_backend": "marlin"}, MARLIN),
    ("H200", "0.5.23", None, {"moe_runner_backend": "flashinfer_mxfp4"}, CUTLASS_SM90),
    ("H200", "0.5.23", None, {"moe_runner_backend": "triton"}, BF16_UPCAST),  # no MXFP4 path of its own
    ("H200", "0.5.23", None, {"moe_runner_backend": "triton_kernel"}, TRITON),
    # the megamoe all-to-all takes DeepGEMM's layout whatever the runner from 0.5.18 (its runner alias too)
    ("B300", "0.5.19", None, {"moe_a2a_backend": "megamoe", "ep_size": 8}, DEEP_GEMM),
    ("B300", "0.5.19", None, {"moe_runner_backend": "megamoe", "ep_size": 8}, DEEP_GEMM),
    ("B300", "0.5.19", None, {"moe_a2a_backend": "megamoe", "ep_size": 8, "moe_runner_backend": "marlin"}, DEEP_GEMM),
    ("H200", "0.5.17", None, {"moe_a2a_backend": "megamoe", "ep_size": 8}, BF16_UPCAST),  # 0.5.17: deep_gemm only
    # SM100/SM103: `auto` is flashinfer_mxfp4 (trtllm-gen) from 0.5.17, and in a K3 branch labelled older
    ("B300", "0.5.19", None, {}, TRTLLM),
    ("B300", "0.5.18", None, {}, TRTLLM),
    ("B200", "0.5.17", {"SGLANG_TRTLLM_GEN_MOE_CUBIN_POOL": "/opt/pool"}, {}, TRTLLM),  # 0.5.17 wants the SiTU pool
    ("B200", "0.5.16", None, {}, TRTLLM),
    ("B300", "0.5.19", None, {"moe_runner_backend": "deep_gemm"}, DEEP_GEMM),
    ("B200", "0.5.23", None, {"moe_runner_backend": "triton"}, BF16_UPCAST),
    # SM120: `auto` stays unresolved
    ("RTX-PRO-6000", "0.5.23", None, {}, BF16_UPCAST),
    ("RTX-PRO-6000", "0.5.23", None, {"moe_runner_backend": "flashinfer_mxfp4"}, CUTLASS_SM120),
    # ROCm: no biases; without SGLANG_USE_AITER ('true' or '1', get_bool_env_var) the bf16 upcast
    ("MI355X", "0.5.23", None, {}, BF16_UPCAST_ROCM),
    ("MI355X", "0.5.23", {"SGLANG_USE_AITER": "yes"}, {}, BF16_UPCAST_ROCM),
    ("MI355X", "0.5.15.post1", nc.K3_MI355X_ENV, {}, AITER_K3_OPT),
    ("MI355X", "0.5.23", {"SGLANG_USE_AITER": "1"}, {}, replace(AITER_K3_OPT, inter_align=256)),
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
    (8, 8, 2, DEEP_GEMM, GATE_PINNED),  # deepep: 112 experts x 6144 rows x 2 B = 1.3125 MiB
    (8, 1, 3, DEEP_GEMM, GATE_PINNED),  # no all-to-all: 896 x 768 x 2 B, the same
    (8, 1, 3, BF16_UPCAST, GATE_PINNED),  # the upcast frees the weights and scales, not the bias
    (16, 16, 2, DEEP_GEMM, 0),  # 56 x 6144 x 2 B = 0.66 MiB: a small-pool request
    (16, 1, 3, DEEP_GEMM, 0),  # 896 x 384 x 2 B, the same
    (8, 8, 0, DEEP_GEMM, 0),  # SGLANG_K3_FUSED_FRONT=0: the gate is never freed
    (8, 1, 3, AITER_K3_OPT, 0),  # ROCm: no bias
    # paths that re-make the bias after the merge free its tail, so the gate's whole segment
    (8, 1, 3, MARLIN, 0),
    (8, 1, 3, CUTLASS_SM90, 0),
    (8, 1, 3, TRTLLM, 0),
    (8, 1, 3, TRITON, 0),
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


def test_where_the_bf16_experts_would_fit_the_range_holds_their_pool():
    # 32 B300s, EP32, a runner without an MXFP4 path: as SGLang installs, the load stops (no triton_kernels); with
    # the package the bf16 experts fit (173.4 GiB a GPU) and leave a pool: the point is the refusal, the range both
    est = _est("B300", "0.5.23", tp_size=32, ep_size=32, nnodes=4, moe_runner_backend="triton")
    assert (est.pool_tokens, est.pool_range) == (0, (0, 1_028_544))
    [kv120] = [f for f in est.findings if f.rule == "KV120"]
    assert kv120.message.endswith("With triton_kernels installed the experts are upcast to bf16: the weights come "
                                  "to 173.4 GiB a GPU, leaving a pool of 979,520 tokens")
    assert kv120.hint == "leave --moe-runner-backend auto (flashinfer_mxfp4 on SM100/SM103/SM107), or use marlin or deep_gemm"


@pytest.mark.parametrize(("runner", "message"), [
    ("marlin", "Mxfp4MoEMethod.process_weights_after_loading stops: 'MXFP4 Marlin requires SM90+.' (marlin's MXFP4 "
               "kernels run on SM90, SM100 and SM120 only)"),
    ("flashinfer_mxfp4", "Mxfp4MoEMethod stops: 'moe_runner_backend=flashinfer_mxfp4 requires SM90, SM100, or SM120.'"),
])
def test_mxfp4_kernels_off_their_gpus_are_refused(runner, message):
    est = _est("A100-80GB", "0.5.23", tp_size=8, moe_runner_backend=runner)
    assert est.pool_tokens == 0
    assert [f.message for f in est.findings if f.rule == "KV120"] == [
        f"the engine would refuse to start: Kimi-K3's MXFP4 experts: {message}"]


H200_TP16 = """\
name: kimi-k3-h200
context_length: 131072
model:
  path: moonshotai/Kimi-K3
  config: k3.json
engine:
  version: "0.5.23"
gpu: H200
args:
  tp-size: 16
  nnodes: 2
roles:
  server:
    gpus: [0, 1, 2, 3, 4, 5, 6, 7]
"""


def _verify(tmp_path, manifest: str):
    shutil.copy(model_config(K3), tmp_path / "k3.json")
    (tmp_path / "m.yaml").write_text(manifest)
    done = run_kvcheck("verify", str(tmp_path / "m.yaml"), "--mode", "estimate", "--format", "json")
    return done, json.loads(done.stdout)


def test_the_default_runner_on_h200_is_a_refused_start(tmp_path):
    # SGLang leaves `auto` unresolved on Hopper, so Mxfp4MoEMethod takes its last resort: the bf16 upcast through
    # triton_kernels, which SGLang does not install; where it is installed, 335 GiB of weights a GPU
    done, report = _verify(tmp_path, H200_TP16)
    assert done.exit_code == 1, done.stderr
    findings = {f["rule"]: f for f in report["findings"]}
    assert findings["KV120"]["message"] == (
        "the engine would refuse to start: Kimi-K3's MXFP4 experts: the `auto` runner stays unresolved on SM90, so "
        "Mxfp4MoEMethod.process_weights_after_loading imports triton_kernels for the bf16 upcast (upcast_from_mxfp), "
        "a package SGLang 0.5.23 does not install (no release from 0.5.17 to 0.5.23 depends on it): the load stops "
        "with ModuleNotFoundError: No module named 'triton_kernels'. With triton_kernels installed the experts are "
        "upcast to bf16: the weights come to 335.4 GiB a GPU, more than the 137.3 GiB free before them: CUDA out of "
        "memory while loading")
    assert findings["KV120"]["hint"] == "use --moe-runner-backend marlin (or flashinfer_mxfp4, FlashInfer's SM90 CUTLASS kernels)"
    assert findings["KV101"]["message"].startswith("no KV pool:")
    [role_report] = report["roles"]
    assert role_report["pool_tokens"] == 0


def test_marlin_with_ep16_on_h200_loads(tmp_path):
    # the llm-jp ABCI launch (TP16 EP16, marlin): each rank's 56 experts keep the whole 3072 intermediate, nothing
    # to pad; without EP marlin pads 192 to 256 and the weights (130.9 GiB) leave no pool under the default fraction
    done, report = _verify(tmp_path, H200_TP16.replace("  nnodes: 2\n", "  nnodes: 2\n  ep-size: 16\n"
                                                       "  moe-runner-backend: marlin\n"))
    assert done.exit_code == 0, done.stdout
    [role_report] = report["roles"]
    assert role_report["pool_tokens"] == 247_955
    done, report = _verify(tmp_path, H200_TP16.replace("  nnodes: 2\n", "  nnodes: 2\n  moe-runner-backend: marlin\n"))
    assert done.exit_code == 1
    assert {f["rule"] for f in report["findings"]} >= {"KV120", "KV101"}


def test_an_expert_path_that_cannot_load_stays_a_refused_start_beside_cpu_offload(tmp_path):
    # the triton_kernel runner needs triton_kernels, which SGLang does not install: moving weights to the CPU cannot
    # install a package, so --cpu-offload-gb leaves the refused start (KV120, exit 1), not "could not check" (exit 3)
    manifest = H200_TP16.replace("  nnodes: 2\n", "  nnodes: 2\n  cpu-offload-gb: 10\n"
                                 "  moe-runner-backend: triton_kernel\n").replace("gpu: H200", "gpu: B300")
    done, report = _verify(tmp_path, manifest)
    assert done.exit_code == 1, done.stderr
    findings = {f["rule"]: f for f in report["findings"]}
    # no "may fit" (KV113) or "might not fit" (KV105) beside a refusal no offload can lift
    assert [f["rule"] for f in report["findings"]] == ["KV120", "KV101"]
    assert findings["KV120"]["message"].startswith(
        "the engine would refuse to start: Kimi-K3's MXFP4 experts: Mxfp4MoEMethod.process_weights_after_loading "
        "imports triton_kernels for the triton_kernel runner's weight swizzle (triton_kernels.matmul), a package "
        "SGLang 0.5.23 does not install")
    [role_report] = report["roles"]
    assert role_report["pool_tokens"] == 0


B300_0517 = H200_TP16.replace("gpu: H200", "gpu: B300").replace('version: "0.5.23"', 'version: "0.5.17"').replace(
    "  tp-size: 16\n  nnodes: 2\n", "  tp-size: 8\n").replace("  server:\n", "  server:\n")

SITU_REFUSAL = (
    "role server: SGLang 0.5.17 stops while it resolves the arguments: \"Kimi-K3 on Blackwell with "
    "moe_runner_backend='auto' or 'flashinfer_mxfp4' requires a valid SGLANG_TRTLLM_GEN_MOE_CUBIN_POOL.\" "
    "(arg_groups/overrides.py _kimi_k3_moe_runner_overrides; SGLANG_TRTLLM_GEN_MOE_CUBIN_POOL is unset in the role's "
    "environment and has no default)")


@pytest.mark.parametrize("runner", ["", "  moe-runner-backend: auto\n", "  moe-runner-backend: flashinfer_mxfp4\n"])
def test_0517_without_the_situ_cubin_pool_is_refused_at_argument_time(tmp_path, runner):
    # 0.5.17's _kimi_k3_moe_runner_overrides raises RuntimeError on SM100/SM103 under auto or flashinfer_mxfp4 when
    # trtllm_gen_moe.available() is false: SGLANG_TRTLLM_GEN_MOE_CUBIN_POOL is EnvStr(None), no default
    shutil.copy(model_config(K3), tmp_path / "k3.json")
    (tmp_path / "m.yaml").write_text(B300_0517.replace("  tp-size: 8\n", "  tp-size: 8\n" + runner))
    done = run_kvcheck("verify", str(tmp_path / "m.yaml"), "--mode", "estimate")
    assert done.exit_code == 2, done.stdout
    assert SITU_REFUSAL in done.stderr
    assert "set SGLANG_TRTLLM_GEN_MOE_CUBIN_POOL in engine.env" in done.stderr


@pytest.mark.parametrize(("version", "env", "runner"), [
    ("0.5.17", {"SGLANG_TRTLLM_GEN_MOE_CUBIN_POOL": "/opt/trtllm_gen_moe_cubin_pool"}, "auto"),  # the image sets it
    ("0.5.17", None, "marlin"),  # an explicit non-FlashInfer runner wins
    ("0.5.18", None, "auto"),  # FlashInfer 0.6.17 ships the SiTU kernels: the guard is gone
    ("0.5.16", None, "auto"),  # a K3 branch labelled older: not known to carry the guard (the B200 server started)
])
def test_the_situ_guard_only_where_0517_raises_it(version, env, runner):
    est = _est("B300", version, env, tp_size=8, moe_runner_backend=runner)
    assert est.pool_tokens > 0


def test_the_situ_guard_is_not_raised_off_sm100_sm103():
    est = _est("H200", "0.5.17", None, tp_size=16, nnodes=2, ep_size=16, moe_runner_backend="flashinfer_mxfp4")
    assert not [f for f in est.findings if f.rule == "KV120" and "CUBIN_POOL" in f.message]


@pytest.mark.parametrize(("gpu", "args", "where"), [
    ("H200", {"tp_size": 16, "nnodes": 2, "moe_runner_backend": "deep_gemm"}, "SM90"),
    ("H100", {"tp_size": 16, "nnodes": 2, "moe_runner_backend": "deep_gemm"}, "SM90"),
    ("H200", {"tp_size": 16, "nnodes": 2, "ep_size": 16, "moe_a2a_backend": "megamoe"}, "SM90"),
    ("MI355X", {"tp_size": 8, "moe_runner_backend": "deep_gemm"}, "ROCm"),
])
def test_deep_gemm_off_sm100_is_not_a_pass(gpu, args, where):
    # Mxfp4MoEMethod's DeepGEMM path is the SM100 fp8_fp4 grouped GEMM and imports deep_gemm on every device; no
    # release guards it while the arguments resolve, and whether it loads elsewhere is not in SGLang's source
    with pytest.raises(sizing_model.EstimateError, match=f"SGLang does not refuse it on {where} while the arguments"):
        _est(gpu, "0.5.19", None, **args)


def test_deep_gemm_off_sm100_is_could_not_check_end_to_end(tmp_path):
    done, report = _verify(tmp_path, H200_TP16.replace("  nnodes: 2\n", "  nnodes: 2\n  moe-runner-backend: deep_gemm\n"))
    assert done.exit_code == 3, done.stdout
    [kv305] = [f for f in report["findings"] if f["rule"] == "KV305"]
    assert kv305["message"].startswith(
        "pool could not be estimated: Kimi-K3's MXFP4 experts on the deep_gemm runner use DeepGEMM's fp8_fp4 grouped "
        "GEMM, an SM100 kernel")


def _linear_config(tmp_path) -> None:
    """Kimi-K3's text config under KimiK3LinearForCausalLM (an EntryClass of models/kimi_k3.py from 0.5.19)."""
    text = json.loads(open(model_config(K3)).read())["text_config"]
    text.update(architectures=["KimiK3LinearForCausalLM"], model_type="kimi_linear")
    (tmp_path / "k3.json").write_text(json.dumps(text))


LINEAR_B300 = B300_0517.replace('version: "0.5.17"', 'version: "0.5.19"')
NOT_OVERRIDDEN = ("the `auto` runner stays unresolved on SM103 (SGLang's `auto` -> flashinfer_mxfp4 override is "
                  "registered for KimiK3ForConditionalGeneration only, not KimiK3LinearForCausalLM)")


@pytest.mark.parametrize("version", ["0.5.19", "0.5.23"])
def test_the_linear_class_keeps_auto_on_b300_a_refused_start(tmp_path, version):
    # _kimi_k3_moe_runner_overrides is registered for KimiK3ForConditionalGeneration only (keyed on architectures[0]):
    # for KimiK3LinearForCausalLM `auto` stays `auto`, and Mxfp4MoEMethod takes the bf16 upcast through
    # triton_kernels, which SGLang does not install
    _linear_config(tmp_path)
    (tmp_path / "m.yaml").write_text(LINEAR_B300.replace('version: "0.5.19"', f'version: "{version}"'))
    done = run_kvcheck("verify", str(tmp_path / "m.yaml"), "--mode", "estimate", "--format", "json")
    assert done.exit_code == 1, done.stdout + done.stderr
    report = json.loads(done.stdout)
    assert [f["rule"] for f in report["findings"]] == ["KV120", "KV101"]
    kv120 = report["findings"][0]
    assert kv120["message"].startswith(f"the engine would refuse to start: Kimi-K3's MXFP4 experts: {NOT_OVERRIDDEN}, "
                                       "so Mxfp4MoEMethod.process_weights_after_loading imports triton_kernels")
    assert kv120["hint"].startswith("use --moe-runner-backend flashinfer_mxfp4")
    [role_report] = report["roles"]
    assert role_report["pool_tokens"] == 0
    assert "Kimi-K3 MLA layers: attention backend flashinfer, page size 1" in role_report["details"]["assumptions"]


def test_the_linear_class_gets_no_0517_situ_refusal(tmp_path):
    # 0.5.17's SiTU guard lives in the same override: not raised for KimiK3LinearForCausalLM (exit 2 before)
    _linear_config(tmp_path)
    (tmp_path / "m.yaml").write_text(B300_0517)
    done = run_kvcheck("verify", str(tmp_path / "m.yaml"), "--mode", "estimate", "--format", "json")
    assert done.exit_code == 1, done.stdout + done.stderr
    assert "CUBIN_POOL" not in done.stdout + done.stderr
    assert [f["rule"] for f in json.loads(done.stdout)["findings"]] == ["KV120", "KV101"]


def test_the_linear_class_with_flashinfer_mxfp4_loads(tmp_path):
    # the weights are priced alike for both classes (one models/kimi_k3.py): flashinfer_mxfp4 named explicitly
    # takes the trtllm-gen path for either
    _linear_config(tmp_path)
    (tmp_path / "m.yaml").write_text(LINEAR_B300.replace("  tp-size: 8\n", "  tp-size: 8\n"
                                                         "  moe-runner-backend: flashinfer_mxfp4\n"))
    done = run_kvcheck("verify", str(tmp_path / "m.yaml"), "--mode", "estimate", "--format", "json")
    assert done.exit_code == 0, done.stdout + done.stderr
    report = json.loads(done.stdout)
    assert [f["rule"] for f in report["findings"]] == []
    [role_report] = report["roles"]
    assert any(a.startswith("Kimi-K3 MXFP4 experts on flashinfer_mxfp4, the trtllm-gen kernel")
               for a in role_report["details"]["assumptions"])
