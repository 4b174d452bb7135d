"""Weight bytes one GPU rank holds after loading, from config.json and the quantization config."""

from __future__ import annotations

import functools
import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from kvcheck.engines.sglang.sizing.allocator import SLACK, block_slack, pinned_segment
from kvcheck.engines.sglang.sizing.quant import FMT_BYTES, QuantScheme, tensor_bytes
from kvcheck.engines.sglang.sizing.shape import DSA, HYBRID_LINEAR, ModelShape, kda_config, nemotron_pattern
from kvcheck.errors import EstimateError

GIB = float(1 << 30)


@dataclass(frozen=True)
class Mxfp4ExpertLayout:
    """What SGLang's Mxfp4MoEMethod (layers/quantization/mxfp4.py) holds for one rank's MXFP4 experts once the
    model is loaded, where that differs from the checkpoint's packed e2m1 weights and e8m0 scales (sizing/
    mxfp4_moe.py picks it by path; only Kimi-K3's compressed-tensors MXFP4 experts take this path today).

    `inter_align` / `hidden_align`: each rank's expert intermediate and the hidden size padded up to these
    (create_weights, or a re-layout after loading). `scale_k_align`: the scales' group columns padded up to a
    multiple of this (aiter's shuffle_scale, DeepGEMM's packed UE8M0). `upcast_bf16`: the experts materialised in
    bf16 and their scales freed (the last-resort upcast). `bias_bytes`: bytes per element of the w13/w2 biases
    the rank holds (0: none); `bias_as_made`: they are the zero tensors create_weights made, not re-made after
    loading. `expert_scalars`: float32 vectors of one value per local expert the path adds (SwiGLU constants).
    """

    inter_align: int = 1
    hidden_align: int = 1
    scale_k_align: int = 1
    upcast_bf16: bool = False
    bias_bytes: int = 0
    bias_as_made: bool = False
    expert_scalars: int = 0


@dataclass(frozen=True)
class Parallel:
    """The parallel layout that decides how weights shard; sizes as SGLang resolves them."""

    tp: int = 1
    pp: int = 1
    ep: int = 1
    attn_dp: int = 1
    attn_cp: int = 1
    moe_dense_tp: int | None = None
    redundant_experts: int = 0
    hip: bool = False  # ROCm keeps MLA kv_b copies in fp8 (fnuz) instead of bf16
    # the caching allocator rounds each large weight tensor's block up to 2 MiB (sizing/allocator.py; off under
    # expandable segments and on Ascend NPUs)
    allocator_rounding: bool = True
    # ranks the shared experts, the input embedding and the lm_head shard over where SGLang keeps them off
    # the TP group (sizing/placement.py; None: the MoE dense TP size, tp, tp)
    shared_tp: int | None = None
    embed_tp: int | None = None
    lm_head_tp: int | None = None
    mxfp4_experts: Mxfp4ExpertLayout | None = None  # None: the checkpoint's bytes (FMT_BYTES)
    # Kimi-K3's merged MoE front (models/kimi_k3.py KimiK3MoE._merge_front_weights): 3 = [shared gate_up | gate |
    # routed_expert_down_proj], 2 = [gate | routed_expert_down_proj], 0 = each its own tensor
    k3_front: int = 0

    @property
    def attn_tp(self) -> int:
        return max(1, self.tp // self.attn_dp // self.attn_cp)


@dataclass(frozen=True)
class StageWeights:
    """Bytes on the most loaded rank of one PP stage, by component."""

    layers: tuple[int, ...]
    components: Mapping[str, float]  # component -> bytes (SLACK: the allocator's rounding of them all)
    slack: Mapping[str, float] = field(default_factory=dict)  # component -> the part of SLACK its tensors leave

    @property
    def total_bytes(self) -> float:
        return sum(self.components.values())


@dataclass(frozen=True)
class WeightsEstimate:
    stages: tuple[StageWeights, ...]
    method: str  # "config", "checkpoint-index", "override"
    notes: tuple[str, ...] = field(default=())

    @property
    def max_bytes(self) -> float:
        return max(s.total_bytes for s in self.stages)


def pp_layer_split(num_layers: int, pp: int) -> list[range]:
    """SGLang's even split with the remainder on the last stages."""
    base, rem = divmod(num_layers, pp)
    ranges, start = [], 0
    for stage in range(pp):
        size = base + (1 if stage >= pp - rem else 0)
        ranges.append(range(start, start + size))
        start += size
    return ranges


def _int(text: Mapping[str, Any], *names: str, default: int | None = None) -> int | None:
    for name in names:
        value = text.get(name)
        if value is not None:
            return int(value)
    return default


@dataclass(frozen=True)
class _Moe:
    experts: int
    inter: int
    shared_inter: int  # total shared-expert intermediate width (0: none)
    gated: bool
    moe_layers: frozenset[int]
    dense_inter: int
    bias: bool = False


def _moe_layout(shape: ModelShape, text: Mapping[str, Any]) -> _Moe:
    n = shape.num_layers
    arch = shape.architecture
    experts = _int(text, "n_routed_experts", "num_experts", "num_local_experts", default=0) or 0
    inter = _int(text, "moe_intermediate_size", default=None)
    dense = _int(text, "intermediate_size", default=0) or 0
    gated = str(text.get("mlp_hidden_act") or text.get("hidden_act") or "silu") != "relu2"
    shared = 0
    layers: set[int] = set()
    if experts:
        if arch in ("MixtralForCausalLM", "MiniMaxM2ForCausalLM", "GptOssForCausalLM"):
            inter = inter or dense
            layers = set(range(n))
        elif arch == "Llama4ForConditionalGeneration":
            inter = dense
            dense = _int(text, "intermediate_size_mlp", default=dense) or dense
            step = _int(text, "interleave_moe_layer_step", default=1) or 1
            layers = {i for i in range(n) if (i + 1) % step == 0}
            shared = inter
        elif arch.startswith("MiniMaxM3Sparse"):
            # models/minimax_m3.py: intermediate_size is the expert width, dense_intermediate_size the
            # first dense layers', shared_intermediate_size each shared expert's
            inter = _int(text, "intermediate_size", default=0) or 0
            dense = _int(text, "dense_intermediate_size", default=0) or 0
            freq = text.get("moe_layer_freq")
            layers = {i for i, f in enumerate(freq[:n]) if f} if isinstance(freq, list | tuple) else set(range(n))
            shared = (_int(text, "n_shared_experts", default=0) or 0) * (
                _int(text, "shared_intermediate_size", default=0) or 0
            )
        elif arch == "NemotronHForCausalLM":
            pattern = nemotron_pattern(text) or ""
            layers = {i for i, c in enumerate(pattern) if c == "E"}
            shared = (_int(text, "n_shared_experts", default=0) or 0) and (
                _int(text, "moe_shared_expert_intermediate_size", default=0) or 0
            )
        elif isinstance(text.get("mlp_layer_types"), list):
            layers = {i for i, t in enumerate(text["mlp_layer_types"][:n]) if t == "sparse"}
        elif isinstance(text.get("moe_layer_freq"), list):
            layers = {i for i, f in enumerate(text["moe_layer_freq"][:n]) if f}
        elif "first_k_dense_replace" in text:
            first = int(text.get("first_k_dense_replace") or 0)
            freq = int(text.get("moe_layer_freq") or 1)
            layers = {i for i in range(n) if i >= first and i % freq == 0}
        else:
            step = int(text.get("decoder_sparse_step") or 1)
            only = set(text.get("mlp_only_layers") or ())
            layers = {i for i in range(n) if (i + 1) % step == 0 and i not in only}
        if not shared:
            shared = _shared_width(text, inter)
        if not inter:
            raise EstimateError(f"architecture {arch}: MoE config without moe_intermediate_size")
    return _Moe(experts, inter or 0, shared, gated, frozenset(layers), dense, bias=arch == "GptOssForCausalLM")


def has_shared_experts(shape: ModelShape, text: Mapping[str, Any]) -> bool:
    """Whether the model's MoE layers carry shared experts (a separate MLP beside the routed ones)."""
    if shape.architecture == "DeepseekV4ForCausalLM":
        return bool(text.get("n_shared_experts"))
    return shared_expert_width(shape, text) > 0


def shared_expert_width(shape: ModelShape, text: Mapping[str, Any]) -> int:
    """The total intermediate width of a MoE layer's shared experts (0: none)."""
    return _moe_layout(shape, dict(text)).shared_inter


def _shared_width(text: Mapping[str, Any], inter: int | None) -> int:
    """Total shared-expert width from the common config keys (0: no shared expert)."""
    if text.get("shared_expert_intermediate_size"):
        return int(text["shared_expert_intermediate_size"])
    count = text.get("n_shared_experts") or text.get("num_shared_experts")
    if count and inter:
        return int(count) * int(text.get("share_expert_dim") or inter)
    return 0


class _Acc:
    """Accumulates bytes per component for one rank, and the tensors they are in as SGLang allocates them.

    A linear weight is one tensor unless `parts` splits its parameters into several in those proportions (a
    gated MLP's gate_up_proj and down_proj: (2, 1)); pieces that name the same `fused` tensor (q/k/v_proj in
    qkv_proj) add up into it. A plain weight is tracked only where `parts` is given: plain() otherwise prices
    sums of small tensors (norms, biases, routers, conv weights) under the allocator's 10 MiB rounding. Each
    tensor's scales are tensors of their own. `seal()` turns the tensors gathered so far into the caching
    allocator's rounding (component SLACK; sizing/allocator.py), so tensors never fuse across a seal.
    """

    def __init__(self, scheme: QuantScheme, *, rounding: bool = True) -> None:
        self.scheme = scheme
        self.rounding = rounding
        self.bytes: dict[str, float] = {}
        self.slack: dict[str, float] = {}  # component -> slack of its tensors
        self._tensors: dict[tuple[str, int], tuple[str, float]] = {}  # (tensor, part) -> (component, bytes)

    def linear(
        self, component: str, name: str, params: float, *, fused: str | None = None, parts: tuple[int, ...] = (1,)
    ) -> None:
        fmt = self.scheme.fmt(name)
        self.bytes[component] = self.bytes.get(component, 0.0) + params * FMT_BYTES[fmt]
        self._track(component, fused or name, params, fmt, parts)

    def plain(
        self, component: str, params: float, fmt: str | None = None, *, tensor: str = "", parts: tuple[int, ...] = ()
    ) -> None:
        fmt = fmt or self.scheme.unquantized_fmt
        self.bytes[component] = self.bytes.get(component, 0.0) + params * FMT_BYTES[fmt]
        if parts:
            self._track(component, tensor or component, params, fmt, parts)

    def _track(self, component: str, tensor: str, params: float, fmt: str, parts: tuple[int, ...]) -> None:
        total = sum(parts)
        for p, share in enumerate(parts):
            for s, per_param in enumerate(tensor_bytes(fmt)):
                key = (f"{tensor}#{p}", s)
                _, held = self._tensors.get(key, (component, 0.0))
                self._tensors[key] = (component, held + params * share / total * per_param)

    def pinned(self, component: str, nbytes: float) -> None:
        """Reserved bytes no live tensor holds (allocator.pinned_segment), in SLACK, told against `component`."""
        if nbytes and self.rounding:
            self.slack[component] = self.slack.get(component, 0.0) + nbytes
            self.bytes[SLACK] = self.bytes.get(SLACK, 0.0) + nbytes

    def seal(self) -> None:
        for component, nbytes in self._tensors.values():
            slack = block_slack(nbytes) if self.rounding else 0.0
            if slack:
                self.slack[component] = self.slack.get(component, 0.0) + slack
                self.bytes[SLACK] = self.bytes.get(SLACK, 0.0) + slack
        self._tensors.clear()


def _attention(acc: _Acc, shape: ModelShape, text: Mapping[str, Any], i: int, par: Parallel) -> None:
    h = shape.hidden_size
    tp = par.attn_tp
    prefix = f"model.layers.{i}.self_attn"
    if shape.mla_full_attention:
        nh = shape.num_heads / tp
        q_lora = _int(text, "q_lora_rank")
        nope = _int(text, "qk_nope_head_dim", default=128) or 128
        rope = shape.qk_rope_head_dim
        v = _int(text, "v_head_dim", default=128) or 128
        kv_lora = shape.kv_lora_rank
        # with a q LoRA, q_a_proj and kv_a_proj_with_mqa are one replicated fused_qkv_a_proj_with_mqa
        qkv_a = f"{prefix}.fused_qkv_a_proj_with_mqa" if q_lora else None
        if q_lora:
            acc.linear("attention", f"{prefix}.q_a_proj", h * q_lora, fused=qkv_a)  # replicated
            acc.linear("attention", f"{prefix}.q_b_proj", q_lora * nh * (nope + rope))
            acc.plain("norms", q_lora)
        else:
            acc.linear("attention", f"{prefix}.q_proj", h * nh * (nope + rope))
        acc.linear("attention", f"{prefix}.kv_a_proj_with_mqa", h * (kv_lora + rope), fused=qkv_a)  # replicated
        acc.linear("attention", f"{prefix}.kv_b_proj", kv_lora * nh * (nope + v))
        acc.linear("attention", f"{prefix}.o_proj", nh * v * h)
        if text.get("mla_use_output_gate"):
            # models/kimi_k3.py KimiK3MLAAttention (0.5.17 to 0.5.23): an output gate g_proj (hidden -> heads x
            # v_head_dim), column-parallel over the attention TP group, multiplied in before o_proj
            acc.linear("attention", f"{prefix}.g_proj", h * nh * v)
        acc.plain("norms", kv_lora)
        # absorbed-attention copies w_kc / w_vc made from kv_b_proj after loading (bf16; fp8 on ROCm)
        kv_b_fmt = acc.scheme.fmt(f"{prefix}.kv_b_proj")
        copy_fmt = "fp8" if par.hip and kv_b_fmt.startswith("fp8") else "bf16"
        acc.plain("mla_absorbed_copies", nh * (nope + v) * kv_lora, copy_fmt, tensor=f"{prefix}.w_kc_w_vc",
                  parts=(nope, v))  # w_kc and w_vc
        if shape.kind == DSA and i in shape.indexer_layer_ids:
            idx_heads = _int(text, "index_n_heads", default=64) or 64
            idx_dim = shape.index_head_dim
            acc.linear("dsa_indexer", f"{prefix}.indexer.wq_b", (q_lora or h) * idx_heads * idx_dim)
            acc.linear("dsa_indexer", f"{prefix}.indexer.wk", h * idx_dim)
            acc.plain("dsa_indexer", h * idx_heads + 2 * idx_dim)  # weights_proj (bf16) + k_norm
        return
    swa = i in shape.swa_layer_ids
    hd = (shape.swa_head_dim or shape.head_dim) if swa else shape.head_dim
    vd = (shape.swa_v_head_dim or shape.v_head_dim) if swa else shape.v_head_dim
    kv_rank = shape.kv_heads_per_rank(tp, swa=swa)
    nh = shape.num_heads / tp
    gate = 2 if text.get("attn_output_gate") or shape.architecture == "Qwen3NextForCausalLM" else 1
    qkv = f"{prefix}.qkv_proj"  # SGLang's QKVParallelLinear: one tensor
    acc.linear("attention", f"{prefix}.q_proj", h * nh * hd * gate, fused=qkv)
    kv_share = 1 if (text.get("attention_k_eq_v") and not swa) else 2
    acc.linear("attention", f"{prefix}.k_proj", h * kv_rank * hd, fused=qkv)
    if kv_share == 2:
        acc.linear("attention", f"{prefix}.v_proj", h * kv_rank * vd, fused=qkv)
    acc.linear("attention", f"{prefix}.o_proj", nh * vd * h)
    if text.get("attention_bias"):
        acc.plain("attention", nh * hd + kv_rank * (hd + vd) + h)
    if shape.has_attention_sinks:
        acc.plain("attention", nh, "fp32")
    acc.plain("norms", 2 * hd)  # q/k norms where present (negligible otherwise)


def _linear_mixer(acc: _Acc, shape: ModelShape, text: Mapping[str, Any], i: int, par: Parallel) -> None:
    m = shape.mamba
    assert m is not None
    h = shape.hidden_size
    tp = par.attn_tp
    prefix = f"model.layers.{i}"
    conv_dim = m.d_inner + 2 * m.groups * m.state_size
    if m.kind == "kda":
        # Kimi delta attention as models/kimi_k3.py KimiK3DeltaAttention builds it (the same in 0.5.17 to 0.5.23),
        # head-sharded over the attention TP group. Under linear_attn_config.use_full_rank_gate (Kimi-K3): one
        # column-parallel [q, k, v, g] tensor (fused_qkvg_proj: q/k/v and a full-rank *output* gate, heads x
        # head_dim each), the beta projection b_proj (one row per head), a low-rank *forget* gate f_a_proj
        # (hidden -> head_dim, replicated) + f_b_proj (head_dim -> heads x head_dim) and o_proj. After loading,
        # _merge_bfa_weights re-points f_a_proj and b_proj at one [f_a | b] buffer padded to a multiple of 8 rows
        # (_merge_weights_as_views(pad_rows_to=8)): that buffer is what stays. Without the full-rank gate the
        # output gate is low-rank too (g_a_proj replicated + g_b_proj). In fp32: the q/k/v short-conv weights
        # (qkv_conv1d, params_dtype=float32), dt_bias (one per channel) and A_log (one per head).
        mixer = f"{prefix}.self_attn"
        p_local = m.d_inner / tp  # heads x head_dim on this rank
        full_rank_gate = bool(kda_config(shape.architecture, text).get("use_full_rank_gate", False))
        qkvg = f"{mixer}.fused_qkvg_proj" if full_rank_gate else f"{mixer}.qkv_proj"
        acc.linear("linear_attention", f"{mixer}.q_proj", h * 3 * p_local, fused=qkvg)  # q, k, v
        if full_rank_gate:
            acc.linear("linear_attention", f"{mixer}.g_proj", h * p_local, fused=qkvg)
        else:
            acc.linear("linear_attention", f"{mixer}.g_a_proj", h * m.head_dim)
            acc.linear("linear_attention", f"{mixer}.g_b_proj", m.head_dim * p_local)
        bfa = f"{mixer}._bfa_w" if full_rank_gate else None
        acc.linear("linear_attention", f"{mixer}.f_a_proj", h * m.head_dim, fused=bfa)
        acc.linear("linear_attention", f"{mixer}.b_proj", h * m.num_heads / tp, fused=bfa)
        if full_rank_gate:
            pad_rows = -(m.head_dim + m.num_heads // tp) % 8
            acc.linear("linear_attention", f"{mixer}.b_proj", h * pad_rows, fused=bfa)  # the zero pad rows
        acc.linear("linear_attention", f"{mixer}.f_b_proj", m.head_dim * p_local)
        acc.plain("linear_attention", 3 * p_local * m.conv_kernel + p_local + m.num_heads / tp, "fp32")
        acc.plain("norms", m.head_dim)  # o_norm
        acc.linear("linear_attention", f"{mixer}.o_proj", p_local * h)
    elif m.kind == "gdn":
        key_dim = 2 * m.groups * m.state_size
        qkvz = f"{prefix}.linear_attn.in_proj_qkvz"  # one tensor in SGLang (qwen3_next.py, qwen3_5.py)
        acc.linear("linear_attention", f"{prefix}.linear_attn.in_proj_qkv", h * (key_dim + m.d_inner) / tp, fused=qkvz)
        acc.linear("linear_attention", f"{prefix}.linear_attn.in_proj_z", h * m.d_inner / tp, fused=qkvz)
        acc.plain("linear_attention", h * 2 * m.num_heads / tp)  # in_proj_b / in_proj_a
        acc.plain("linear_attention", conv_dim * m.conv_kernel / tp)
        acc.plain("linear_attention", 2 * m.num_heads / tp + m.head_dim, "fp32")
        acc.linear("linear_attention", f"{prefix}.linear_attn.out_proj", m.d_inner * h / tp)
    else:
        acc.linear(
            "linear_attention", f"{prefix}.mixer.in_proj", h * (m.d_inner + conv_dim + m.num_heads) / tp
        )
        acc.plain("linear_attention", conv_dim * m.conv_kernel / tp)
        acc.plain("linear_attention", 3 * m.num_heads / tp + m.d_inner / tp, "fp32")
        acc.linear("linear_attention", f"{prefix}.mixer.out_proj", m.d_inner * h / tp)


def _mlp(acc: _Acc, shape: ModelShape, moe: _Moe, i: int, par: Parallel, text: Mapping[str, Any]) -> None:
    h = shape.hidden_size
    mats = 3 if moe.gated else 2
    split = (mats - 1, 1)  # gate_up_proj (w13) and down_proj (w2), or up and down
    dense_tp = par.moe_dense_tp or par.tp
    mlp = "mixer" if shape.architecture == "NemotronHForCausalLM" else "mlp"
    prefix = f"model.layers.{i}.{mlp}"
    if i in moe.moe_layers:
        experts = moe.experts + par.redundant_experts
        latent = text.get("moe_latent_size") or text.get("routed_expert_hidden_size")
        expert_h = int(latent) if latent else h
        per_rank = experts * mats * expert_h * moe.inter / par.tp
        k3 = shape.architecture.startswith("KimiK3") and bool(latent)
        # Kimi-K3 (0.5.17 to 0.5.23): post_load_weights -> _merge_front_weights re-points the router gate, the
        # replicated latent down projection and (k3_front 3) the shared experts' gate_up at views of one
        # torch.cat buffer, which is the tensor that stays
        front = f"{prefix}._front_w" if k3 and par.k3_front else None
        if k3:
            acc.plain("moe_latent_projections", h * expert_h, tensor=front or f"{prefix}.routed_expert_down_proj",
                      parts=(1,))
            acc.plain("moe_latent_projections", h * expert_h, tensor=f"{prefix}.routed_expert_up_proj", parts=(1,))
        elif latent:
            acc.plain("moe_latent_projections", 2 * h * expert_h)  # fc1/fc2 latent projections, replicated
        expert_name = f"{prefix}.experts.0.up_proj"
        w13_bias = 0.0
        if par.mxfp4_experts is not None and acc.scheme.fmt(expert_name) == "mxfp4":
            w13_bias = _mxfp4_experts(acc, par.mxfp4_experts, par, experts, expert_h, moe.inter, mats)
        else:
            acc.linear("moe_experts", expert_name, per_rank, parts=split)  # w13, w2: all experts
        if moe.bias:
            acc.plain("moe_experts", experts * (mats - 1) * moe.inter / par.tp + experts * h / par.ep)
        if moe.shared_inter:
            _shared_experts(acc, moe, par, text, prefix, h, front if par.k3_front == 3 else None)
        if k3:  # a tensor of its own (12.25 MiB on Kimi-K3), or part of the merged front
            acc.plain("router", moe.experts * h, tensor=front or f"{prefix}.gate", parts=(1,))
            if front and w13_bias:
                # KimiK3MoE builds the gate (12.25 MiB: a 14 MiB segment with a 1.75 MiB split tail), then the
                # experts, whose bf16 zero w13 bias (1.3125 MiB at TP8, with or without EP) takes that tail;
                # load_weights ends in post_load_weights -> _merge_front_weights, which copies the gate into the
                # front and frees it before the loader's process_weights_after_loading, and where that leaves the
                # bias as made (deep_gemm, megamoe, the bf16 upcast) it keeps the segment: 12.69 MiB a layer stay
                # reserved (1.14 GiB a rank; a replay of the whole load through the allocator's rules,
                # tests/bench/k3_allocator_replay.py, holds 0.05 GiB more
                # than the estimate in all under an all-to-all). A path that re-makes the bias (marlin,
                # flashinfer_mxfp4, triton_kernel) frees the tail, and with it the whole segment.
                acc.pinned("router", pinned_segment(moe.experts * h * FMT_BYTES[acc.scheme.unquantized_fmt],
                                                    w13_bias))
        else:
            acc.plain("router", moe.experts * h)  # replicated gate
        acc.plain("router", moe.experts, "fp32")  # correction bias where present
        if shape.architecture.startswith("Gemma4") and moe.dense_inter:
            acc.linear("mlp", f"{prefix}.gate_proj", mats * h * moe.dense_inter / dense_tp, parts=split)
    elif shape.architecture == "NemotronHForCausalLM" and i not in _nemotron_mlp_layers(text):
        return
    elif moe.dense_inter:
        acc.linear("mlp", f"{prefix}.gate_proj", mats * h * moe.dense_inter / dense_tp, parts=split)


def _shared_experts(
    acc: _Acc, moe: _Moe, par: Parallel, text: Mapping[str, Any], prefix: str, h: int, front: str | None
) -> None:
    """A MoE layer's shared experts on this rank; `front`: the buffer their gate_up is merged into (Kimi-K3)."""
    mats = 3 if moe.gated else 2
    shared = "shared_expert" if "shared_expert_intermediate_size" in text else "shared_experts"
    shared_tp = par.shared_tp or par.moe_dense_tp or par.tp
    if front:
        acc.linear("shared_experts", f"{prefix}.{shared}.gate_up_proj", (mats - 1) * h * moe.shared_inter / shared_tp,
                   fused=front)
        acc.linear("shared_experts", f"{prefix}.{shared}.down_proj", h * moe.shared_inter / shared_tp)
    else:
        acc.linear("shared_experts", f"{prefix}.{shared}.up_proj", mats * h * moe.shared_inter / shared_tp,
                   parts=(mats - 1, 1))
    if "shared_expert_intermediate_size" in text:
        acc.plain("router", h)  # shared_expert_gate


def _round_up(value: float, align: int) -> float:
    return math.ceil(value / align) * align


def _mxfp4_experts(
    acc: _Acc, layout: Mxfp4ExpertLayout, par: Parallel, experts: int, hidden: int, inter: int, mats: int
) -> float:
    """One rank's MXFP4 experts as Mxfp4MoEMethod holds them after loading (layers/quantization/mxfp4.py): the
    w13/w2 packed-e2m1 weights and e8m0 scales (one byte per 32 weights), or the weights in bf16 where it upcasts
    them; each rank's expert intermediate and the hidden size padded to `layout`'s alignment, the scales' group
    columns to its scale alignment; the zero w13/w2 biases and per-expert vectors where the path keeps them. Each
    is a tensor of its own to the caching allocator. Returns the bytes of the w13 bias create_weights made where
    it lives on as made (0: none, or re-made after loading)."""
    ep = max(1, par.ep)
    local = experts / ep  # num_local_experts
    inter_pp = _round_up(inter / max(1, par.tp // ep), layout.inter_align)  # over the MoE TP group (tp / ep)
    hid = _round_up(hidden, layout.hidden_align)
    rows13 = (mats - 1) * inter_pp
    if layout.upcast_bf16:  # upcast_from_mxfp(..., torch.bfloat16): new weights, the packed ones and scales freed
        acc.plain("moe_experts", local * rows13 * hid, "bf16", tensor="w13_weight", parts=(1,))
        acc.plain("moe_experts", local * hid * inter_pp, "bf16", tensor="w2_weight", parts=(1,))
    else:
        byte = "int8"  # uint8 storage: one byte per element
        acc.plain("moe_experts", local * rows13 * hid / 2, byte, tensor="w13_weight", parts=(1,))
        acc.plain("moe_experts", local * rows13 * _round_up(hid / 32, layout.scale_k_align), byte,
                  tensor="w13_weight_scale", parts=(1,))
        acc.plain("moe_experts", local * hid * inter_pp / 2, byte, tensor="w2_weight", parts=(1,))
        acc.plain("moe_experts", local * hid * _round_up(inter_pp / 32, layout.scale_k_align), byte,
                  tensor="w2_weight_scale", parts=(1,))
    if layout.expert_scalars:  # tensors of a few KiB: the small pool, no rounding of their own
        acc.plain("moe_experts", layout.expert_scalars * local, "fp32")
    if not layout.bias_bytes:
        return 0.0
    bias = "fp32" if layout.bias_bytes == 4 else "bf16"
    acc.plain("moe_experts", local * rows13, bias, tensor="w13_weight_bias", parts=(1,))
    acc.plain("moe_experts", local * hid, bias, tensor="w2_weight_bias", parts=(1,))
    return local * rows13 * FMT_BYTES[bias] if layout.bias_as_made else 0.0


def _nemotron_mlp_layers(text: Mapping[str, Any]) -> set[int]:
    return {i for i, c in enumerate(nemotron_pattern(text) or "") if c == "-"}


def _decilm_layer(acc: _Acc, shape: ModelShape, text: Mapping[str, Any], i: int, par: Parallel) -> None:
    """Nemotron-NAS block i: attention unless no-op, an MLP of its own width (models/nemotron_nas.py:53-63)."""
    h = shape.hidden_size
    block = dict(text["block_configs"][i])
    attention, ffn = dict(block.get("attention") or {}), dict(block.get("ffn") or {})
    if attention.get("replace_with_linear"):
        acc.linear("attention", f"model.layers.{i}.self_attn.linear_attn", h * h)
    elif not attention.get("no_op"):
        _attention(acc, shape, text, i, par)
        acc.plain("norms", h)
    if ffn.get("replace_with_linear"):
        acc.linear("mlp", f"model.layers.{i}.mlp.linear_mlp", h * h)
    elif not ffn.get("no_op"):
        inter = int(2 * float(ffn["ffn_mult"]) * h / 3)
        inter = inter if inter % 256 == 0 else inter + 256 - inter % 256
        acc.linear("mlp", f"model.layers.{i}.mlp.gate_proj", 3 * h * inter / (par.moe_dense_tp or par.tp), parts=(2, 1))
        acc.plain("norms", h)


def _layer(acc: _Acc, shape: ModelShape, moe: _Moe, text: Mapping[str, Any], i: int, par: Parallel) -> None:
    h = shape.hidden_size
    if shape.architecture == "DeciLMForCausalLM":
        _decilm_layer(acc, shape, text, i, par)
        acc.seal()
        return
    if shape.kind == HYBRID_LINEAR and i in shape.linear_layer_ids:
        _linear_mixer(acc, shape, text, i, par)
    elif shape.kind != HYBRID_LINEAR or i in shape.full_layer_ids:
        _attention(acc, shape, text, i, par)
    _mlp(acc, shape, moe, i, par, text)
    acc.plain("norms", 2 * h)
    acc.seal()


@functools.lru_cache(maxsize=1024)
def _config_weights(shape: ModelShape, text_json: str, scheme: QuantScheme, par: Parallel, tied: bool) -> WeightsEstimate:
    text = json.loads(text_json)  # the config keys as config.json has them: lists stay lists
    moe = _moe_layout(shape, text)
    h, v = shape.hidden_size, shape.vocab_size
    stages = []
    for s, layer_range in enumerate(pp_layer_split(shape.num_layers, par.pp)):
        acc = _Acc(scheme, rounding=par.allocator_rounding)
        if s == 0:
            acc.plain("embedding", v * h / (par.embed_tp or par.tp), parts=(1,))
        for i in layer_range:
            _layer(acc, shape, moe, text, i, par)
        if s == par.pp - 1:
            acc.plain("norms", h)
            if not tied or par.pp > 1:
                acc.linear("lm_head", "lm_head", v * h / (par.lm_head_tp or par.tp))
        acc.seal()
        stages.append(StageWeights(tuple(layer_range), dict(acc.bytes), dict(acc.slack)))
    return WeightsEstimate(tuple(stages), "config")


def config_weights(
    shape: ModelShape, text: Mapping[str, Any], scheme: QuantScheme, par: Parallel, *, tied: bool
) -> WeightsEstimate:
    """Weights per rank for every PP stage, cached per (model, quantization, layout)."""
    keys = (
        "hidden_size", "intermediate_size", "intermediate_size_mlp", "moe_intermediate_size", "n_routed_experts",
        "num_experts", "num_local_experts", "n_shared_experts", "shared_expert_intermediate_size",
        "moe_shared_expert_intermediate_size", "share_expert_dim", "first_k_dense_replace", "moe_layer_freq",
        "mlp_layer_types", "decoder_sparse_step", "mlp_only_layers", "interleave_moe_layer_step",
        "hybrid_override_pattern", "mlp_hidden_act", "hidden_act", "q_lora_rank", "qk_nope_head_dim",
        "v_head_dim", "index_n_heads", "attn_output_gate", "attention_k_eq_v", "attention_bias",
        "layers_block_type", "moe_latent_size", "block_configs", "dense_intermediate_size", "routed_expert_hidden_size",
        "num_shared_experts",
        "shared_intermediate_size", "linear_attn_config", "mla_use_output_gate",
    )
    # the cache key is the keys' JSON text, which loads back as the same lists and mappings: a frozen
    # tuple would fail every isinstance(..., list) check the layer readers make (Nemotron-H's
    # layers_block_type, mlp_layer_types, moe_layer_freq), silently dropping those layers' weights
    text_json = json.dumps({k: text[k] for k in keys if k in text}, sort_keys=True)
    return _config_weights(shape, text_json, scheme, par, tied)


def largest_layer_bytes(shape: ModelShape, text: Mapping[str, Any], scheme: QuantScheme, par: Parallel) -> float:
    """Bytes one rank holds of the largest decoder layer, as config_weights counts them (no allocator rounding):
    the most a CPU-offload budget can overshoot by, since the parameter that crosses it is moved whole."""
    moe = _moe_layout(shape, text)
    largest = 0.0
    for i in range(shape.num_layers):
        acc = _Acc(scheme, rounding=False)
        _layer(acc, shape, moe, text, i, par)
        largest = max(largest, sum(acc.bytes.values()))
    return largest


def moe_layer_ids(shape: ModelShape, text: Mapping[str, Any]) -> frozenset[int]:
    """The decoder layers (global indices) whose MLP is a routed-expert block, as config_weights places them."""
    return frozenset(_moe_layout(shape, text).moe_layers)


def expert_bytes_by_layer(shape: ModelShape, text: Mapping[str, Any], scheme: QuantScheme, par: Parallel) -> list[float]:
    """Bytes one rank holds of each layer's routed and shared experts (scales and biases included), as
    config_weights counts them (no allocator rounding); 0 for a dense layer. An upper bound on the expert
    tensors a group offload can move (the routed experts' weights, and the shared ones where SGLang fuses them)."""
    moe = _moe_layout(shape, text)
    out = []
    for i in range(shape.num_layers):
        acc = _Acc(scheme, rounding=False)
        _layer(acc, shape, moe, text, i, par)
        out.append(acc.bytes.get("moe_experts", 0.0) + acc.bytes.get("shared_experts", 0.0))
    return out


def mtp_draft_bytes(
    shape: ModelShape, text: Mapping[str, Any], scheme: QuantScheme, par: Parallel, layers: int, *,
    own_embed_head: bool = False,
) -> float:
    """Built-in MTP/NextN draft: `layers` decoder layers like the last one + eh_proj + norms.

    The EAGLE worker points the draft's embedding and lm_head at the target's (set_embed_and_head);
    `own_embed_head` counts the draft's own copies, placed as the target's, for releases that free
    them only after the target's pool is sized.
    """
    moe = _moe_layout(shape, dict(text))
    last = shape.num_layers - 1
    if shape.kind == DSA:
        # a NextN layer always builds its Indexer (models/deepseek_v2.py: `not self.skip_topk or is_nextn`)
        shape = replace(shape, indexer_layer_ids=(*shape.indexer_layer_ids, last))
    acc = _Acc(scheme, rounding=par.allocator_rounding)
    h, v = shape.hidden_size, shape.vocab_size
    for _ in range(layers):
        _layer(acc, shape, moe, text, last, par)
        acc.plain("mtp", 2 * h * h, tensor="eh_proj", parts=(1,))
        acc.plain("mtp", 3 * h)
        acc.seal()
    if own_embed_head:
        # one draft model, one embed_tokens and one lm_head however many MTP layers it stacks
        # (models/deepseek_nextn.py, mimo_mtp.py, mimo_v2_nextn.py build each once in __init__)
        acc.plain("embedding", v * h / (par.embed_tp or par.tp), parts=(1,))
        acc.linear("lm_head", "lm_head", v * h / (par.lm_head_tp or par.tp))
        acc.seal()
    return sum(acc.bytes.values())


def vision_tower_bytes(vision: Mapping[str, Any] | None, text_hidden: int) -> float:
    """A ViT encoder + patch-merger projector in bf16, replicated on every rank (assumption).

    Reads the common spellings (Qwen `depth`, Kimi `vt_*`, plain `num_hidden_layers`); 0 when the
    config carries no vision tower.
    """
    if not vision:
        return 0.0
    layers = _int(vision, "num_hidden_layers", "depth", "vt_num_hidden_layers", default=0) or 0
    hidden = _int(vision, "hidden_size", "vt_hidden_size", "embed_dim", default=0) or 0
    inter = _int(vision, "intermediate_size", "vt_intermediate_size", default=4 * hidden) or 4 * hidden
    if not layers or not hidden:
        return 0.0
    # the attention's own width where the config sets one apart from the hidden size: Kimi-K3's MoonViT3d
    # (models/kimi_k3_vl.py MoonViTEncoderLayer: wqkv hidden -> 3 x qkv_hidden_size, wo qkv_hidden_size -> hidden)
    qkv = _int(vision, "qkv_hidden_size", default=hidden) or hidden
    merge = vision.get("spatial_merge_size") or vision.get("merge_kernel_size") or 2
    merge_area = merge[0] * merge[1] if isinstance(merge, list) else int(merge) ** 2
    merged = hidden * merge_area
    out = _int(vision, "out_hidden_size", "text_hidden_size", default=text_hidden) or text_hidden
    params = layers * (4 * hidden * qkv + 2 * hidden * inter) + merged * merged + merged * out
    return params * 2.0


def routed_experts(text: Mapping[str, Any]) -> int:
    """The model's routed experts (0 for a dense model), as the MoE layers count them."""
    return _int(text, "n_routed_experts", "num_experts", "num_local_experts", default=0) or 0
