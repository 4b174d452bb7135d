"""The weights one vLLM worker loads ("Model loading took X GiB"): the checkpoint's own size from
`model.safetensors.index.json` split over TP x PP when the config sits in a checkpoint folder, else a
parameter count from config.json (embedding and lm_head split by TP as vLLM's VocabParallelEmbedding
does; KV projections replicated when TP exceeds the KV heads), each with a band."""

from __future__ import annotations

import fnmatch
import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

from kvcheck.engines.vllm.sizing.moe import MoeSplit
from kvcheck.errors import EngineRefusal, EstimateError
from kvcheck.io.jsontext import JsonRejected
from kvcheck.io.jsontext import loads as json_loads

# Bytes per weight of a quantized linear layer, scales included (per-group scales of 4-bit formats).
QUANT_LINEAR_BYTES = {
    "fp8": 1.0, "fbgemm_fp8": 1.0, "modelopt": 1.0, "ptpc_fp8": 1.0,
    "awq": 0.53, "awq_marlin": 0.53, "gptq": 0.53, "gptq_marlin": 0.53,
    "modelopt_fp4": 0.5625, "nvfp4": 0.5625, "mxfp4": 0.53, "bitsandbytes": 0.53,
}  # fmt: skip
# MXFP4 experts: the Triton/Marlin kernels pad the expert width to 256 on CUDA GPUs without FP4 units (and
# Marlin the hidden size too); the band covers no padding to both.
MXFP4_EXPERT_PAD = 256
MXFP4_WEIGHTS_BAND = 0.04


def _i(text: Mapping[str, Any], *names: str, default: int = 0) -> int:
    for name in names:
        value = text.get(name)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return default


def linear_bytes(quant: Mapping[str, Any] | None, model_bytes: int, quantization_arg: str | None) -> tuple[float, str]:
    """Bytes per weight of the linear layers and the scheme's name."""
    method = str(quantization_arg or (quant or {}).get("quant_method") or "").lower()
    if not method:
        return float(model_bytes), "none"
    if method == "modelopt":
        algo = str((quant or {}).get("quant_algo") or "FP8").upper()
        method = "nvfp4" if "FP4" in algo else "fp8"
    if method == "compressed-tensors":
        groups = (quant or {}).get("config_groups") or {}
        bits = 8
        for group in groups.values() if isinstance(groups, Mapping) else ():
            weights = group.get("weights") if isinstance(group, Mapping) else None
            if isinstance(weights, Mapping) and isinstance(weights.get("num_bits"), int):
                bits = min(bits, int(weights["num_bits"]))
        return (1.0 if bits >= 8 else 0.53), f"compressed-tensors w{bits}"
    if method not in QUANT_LINEAR_BYTES:
        raise EstimateError(f"quantization {method} is not priced by the vLLM estimate model",
                            hint="set estimate.weights_gib_per_gpu (the `Model loading took` figure of a boot)")
    return QUANT_LINEAR_BYTES[method], method


def attention_unquantized(quant: Mapping[str, Any] | None) -> bool:
    """The checkpoint keeps its attention projections in the model dtype (modules_to_not_convert,
    ignore lists naming self_attn): gpt-oss's MXFP4 covers the experts only."""
    if not quant:
        return False
    names = list(quant.get("modules_to_not_convert") or []) + list(quant.get("ignore") or [])
    return any("self_attn" in str(name) or "attn" == str(name).rsplit(".", 1)[-1] for name in names)


def stage_layer_counts(num_layers: int, pp: int, env: Mapping[str, str]) -> list[int]:
    """The layers of each pipeline stage, as get_pp_indices splits them (distributed/utils.py:126-166 in 0.32.0, the
    same in 0.17.0): VLLM_PP_LAYER_PARTITION where it is set, else an even split whose remainder goes to the stages
    before the last, nearest the last first. vLLM raises a ValueError as the model is built for a partition that is
    not integers, one a stage, adding up to the layers: exit 2 with its words."""
    given = env.get("VLLM_PP_LAYER_PARTITION")
    if given is not None:
        try:
            parts = [int(layer) for layer in str(given).split(",")]
        except ValueError:
            raise EngineRefusal(f"VLLM_PP_LAYER_PARTITION={given!r}: vLLM refuses it as the model is built "
                                   f"('Invalid partition string: {given}', distributed/utils.py get_pp_indices)",
                                   hint="name every pipeline stage's share of the layers, adding up to the model's") from None
        if len(parts) != pp or sum(parts) != num_layers:
            mismatch = (f"{len(parts)=} does not match pp_size={pp}" if len(parts) != pp
                        else f"sum(partitions)={sum(parts)} does not match num_hidden_layers={num_layers}")
            raise EngineRefusal(f"VLLM_PP_LAYER_PARTITION={given!r}: vLLM refuses it as the model is built "
                                   f"('{mismatch}.', distributed/utils.py get_pp_indices)",
                                   hint="name every pipeline stage's share of the layers, adding up to the model's")
        if min(parts) < 1:
            raise EngineRefusal(
                f"VLLM_PP_LAYER_PARTITION={given!r}: a stage of {min(parts)} layers; vLLM does not check the shares "
                "and builds a pipeline stage with no layers (or a negative count) it cannot serve",
                hint="give every pipeline stage one layer or more")
        return parts
    parts = [num_layers // pp] * pp
    for i in range(2, num_layers % pp + 2):
        parts[-i] += 1
    return parts


def config_weights_bytes(
    text: Mapping[str, Any], *, tp: int, pp: int, model_bytes: int, linear: float, tied: bool,
    attention_bytes: float | None = None, moe_pad: int | None = None, moe_split: MoeSplit | None = None,
    stages: Sequence[int] | None = None,
) -> float:
    """Weights of the most loaded worker, bytes: each pipeline stage's layers (`stages`, vLLM's split; default its
    even one), dense and with routed experts as the stage holds them, with the embedding on the first stage and
    the lm_head on the last. The routed experts as `moe_split` places them (sizing/moe.py: over dp x tp, whole
    under EP); default: split by TP."""
    hidden = _i(text, "hidden_size", "n_embd")
    layers = _i(text, "num_hidden_layers", "n_layers", "num_layers")
    vocab = _i(text, "vocab_size")
    if not (hidden and layers and vocab):
        raise EstimateError("model config states no hidden_size / num_hidden_layers / vocab_size to count weights by")
    heads = _i(text, "num_attention_heads", default=max(1, hidden // 128))
    kv_heads = _i(text, "num_key_value_heads", default=heads)
    head_dim = _i(text, "head_dim", default=hidden // heads)
    kv_lora = _i(text, "kv_lora_rank")
    if kv_lora:
        q_lora = _i(text, "q_lora_rank")
        nope, rope, v = _i(text, "qk_nope_head_dim"), _i(text, "qk_rope_head_dim"), _i(text, "v_head_dim")
        q = hidden * q_lora + q_lora * heads * (nope + rope) if q_lora else hidden * heads * (nope + rope)
        attn_split = q + kv_lora * heads * (nope + v) + heads * v * hidden
        attn = attn_split / tp + hidden * (kv_lora + rope)
    else:
        kv_rank = max(1, kv_heads // tp) if kv_heads < tp else kv_heads / tp
        attn = (2 * hidden * heads * head_dim) / tp + 2 * hidden * kv_rank * head_dim
    experts = _i(text, "n_routed_experts", "num_experts", "num_local_experts")
    inter = _i(text, "intermediate_size", default=4 * hidden)
    dense_layers = layers
    moe = 0.0
    if experts:
        moe_inter = _i(text, "moe_intermediate_size", default=inter)
        split = moe_split or MoeSplit(tp=tp)
        split.check_split(experts, moe_inter)  # on the unpadded width, as FusedMoE asserts it
        if moe_pad:  # MXFP4 kernels pad the expert width (fused_moe/oracle/mxfp4.py round-ups)
            moe_inter = -(-moe_inter // moe_pad) * moe_pad
        shared = _i(text, "n_shared_experts") * moe_inter + _i(text, "shared_expert_intermediate_size")
        # routed experts over FusedMoE's dp x tp group (sizing/moe.py); shared experts and router per DP rank
        moe = split.routed(experts, 3 * hidden * moe_inter) + 3 * hidden * shared / split.shared_tp() + hidden * experts
        first_dense = _i(text, "first_k_dense_replace")
        dense_layers = first_dense
    attn_bytes = linear if attention_bytes is None else attention_bytes
    embed = vocab * hidden / tp * model_bytes
    head = 0.0 if (tied and pp == 1) else vocab * hidden / tp * model_bytes
    counts = list(stages) if stages is not None else stage_layer_counts(layers, max(1, pp), {})
    worst, start = 0.0, 0
    for i, count in enumerate(counts):
        dense_stage = max(0, min(start + count, dense_layers) - start) if experts else count
        moe_layers = count - dense_stage
        mlp_linear = 3 * hidden * inter / tp * dense_stage + moe * moe_layers
        ends = (embed if i == 0 else 0.0) + (head if i == len(counts) - 1 else 0.0)
        norms = 2 * hidden * count * model_bytes
        worst = max(worst, attn * count * attn_bytes + mlp_linear * linear + ends + norms)
        start += count
    return worst


def layer_bytes(
    text: Mapping[str, Any], *, dense: bool, tp: int, model_bytes: int, linear: float,
    attention_bytes: float | None = None, moe_pad: int | None = None, moe_split: MoeSplit | None = None,
) -> float:
    """Bytes one worker holds of one decoder layer, as config_weights_bytes counts them: what one more layer adds,
    a dense one (`dense`, or any layer of a model without experts) or one with routed experts."""
    first_dense = 2 if dense else 0
    one, two = ({**text, "num_hidden_layers": n, "first_k_dense_replace": first_dense} for n in (1, 2))
    common: dict[str, Any] = dict(tp=tp, pp=1, model_bytes=model_bytes, linear=linear, tied=True,
                                  attention_bytes=attention_bytes, moe_pad=moe_pad, moe_split=moe_split)
    return config_weights_bytes(two, **common) - config_weights_bytes(one, **common)


def largest_layer_bytes(
    text: Mapping[str, Any], *, tp: int, model_bytes: int, linear: float, attention_bytes: float | None = None,
    moe_pad: int | None = None, moe_split: MoeSplit | None = None,
) -> float:
    """Bytes one worker holds of the largest decoder layer, as config_weights_bytes counts them: what one more layer
    adds, dense and (for an MoE model) with routed experts. The most a CPU-offload budget can overshoot by, since
    the parameter that crosses it is moved whole."""
    common: dict[str, Any] = dict(tp=tp, model_bytes=model_bytes, linear=linear, attention_bytes=attention_bytes,
                                  moe_pad=moe_pad, moe_split=moe_split)
    return max(layer_bytes(text, dense=False, **common), layer_bytes(text, dense=True, **common))


def vision_tower_bytes(vision: Mapping[str, Any] | None, *, tp: int, model_bytes: int, text_hidden: int) -> float:
    """A ViT/CLIP tower of a multimodal checkpoint (attention 4h^2 + MLP 2hi per layer) and its projector
    into the language model, split by TP as vLLM's vision encoders are; 0 without a vision config."""
    if not vision:
        return 0.0
    hidden = _i(vision, "hidden_size", "embed_dim", "width")
    inter = _i(vision, "intermediate_size", "mlp_dim", default=4 * hidden)
    layers = _i(vision, "num_hidden_layers", "depth", "layers")
    if not (hidden and layers):
        return 0.0
    tower = layers * (4 * hidden * hidden + 2 * hidden * inter)
    projector = hidden * text_hidden + text_hidden * text_hidden
    return (tower + projector) / tp * model_bytes


# Hybrid (recurrent-state) architectures whose weights are counted from config.json as vLLM's model classes
# allocate them; others (Granite-4.0-H, Falcon-H1, Jamba, ...) are not counted.
GDN_ARCHITECTURES = frozenset({
    "Qwen3NextForCausalLM", "Qwen3_5ForCausalLM", "Qwen3_5MoeForCausalLM",
    "Qwen3_5ForConditionalGeneration", "Qwen3_5MoeForConditionalGeneration",
})  # fmt: skip
NEMOTRON_H_ARCHITECTURES = frozenset({"NemotronHForCausalLM"})
HYBRID_COUNTED = GDN_ARCHITECTURES | NEMOTRON_H_ARCHITECTURES
FP32 = 4
# Per-module schemes of a mixed-precision ModelOpt checkpoint (quantized_layers), bytes per weight.
_ALGO_BYTES = {"FP8": 1.0, "NVFP4": 0.5625, "W4A16_NVFP4": 0.5625, "W4A8_NVFP4_FP8": 0.5625, "INT4_AWQ": 0.53,
               "W4A8_AWQ": 0.53, "MXFP4": 0.53, "FP8_PB_WO": 1.0, "FP8_PER_CHANNEL_PER_TOKEN": 1.0}


class _LinearBytes:
    """Bytes per weight of one linear module by its checkpoint name: the model dtype where the quantization
    config leaves it out (ignore, exclude_modules, modules_to_not_convert), the module's own scheme where a
    mixed-precision checkpoint names one (quantized_layers), else the checkpoint's scheme."""

    def __init__(self, quant: Mapping[str, Any] | None, linear: float, model_bytes: int) -> None:
        quant = quant or {}
        self.linear, self.model_bytes = linear, float(model_bytes)
        self.excluded = [str(p) for key in ("ignore", "exclude_modules", "modules_to_not_convert")
                         for p in (quant.get(key) or []) if isinstance(p, str)]
        layers = quant.get("quantized_layers")
        self.layers: Mapping[str, Any] = layers if isinstance(layers, Mapping) else {}
        self.mixed = bool(self.layers) and linear != model_bytes

    def __call__(self, *names: str) -> float:
        if self.linear == self.model_bytes:
            return self.linear
        for name in names:
            entry = self.layers.get(name)
            if isinstance(entry, Mapping):
                return _ALGO_BYTES.get(str(entry.get("quant_algo") or "").upper(), self.linear)
        if self.mixed:  # a mixed-precision checkpoint leaves the layers it does not list unquantized
            return self.model_bytes
        if any(_excluded(name, pattern) for name in names for pattern in self.excluded):
            return self.model_bytes
        return self.linear


def _excluded(name: str, pattern: str) -> bool:
    """A quantization config's exclusion: `re:` a regex (compressed-tensors), a glob (ModelOpt), else a
    module name or a dotted part of one (modules_to_not_convert)."""
    if pattern.startswith("re:"):
        try:
            return re.match(pattern[3:], name) is not None
        except re.error:
            return False
    if any(c in pattern for c in "*?["):
        return fnmatch.fnmatchcase(name, pattern)
    part = pattern.strip(".")
    return name == part or name.startswith(part + ".") or name.endswith("." + part) or f".{part}." in name


def _kv_rank(kv_heads: int, tp: int) -> float:
    """KV heads per worker as QKVParallelLinear shards them: replicated once TP exceeds the KV heads."""
    return max(1, kv_heads // tp) if kv_heads < tp else kv_heads / tp


def _list_int(value: Any, index: int) -> int:
    if isinstance(value, list):
        return int(value[0] if len(value) == 1 else value[index])
    return int(value or 0)


def _gdn_layer_kinds(text: Mapping[str, Any], layers: int) -> list[str]:
    types = text.get("layer_types")
    if isinstance(types, list) and len(types) >= layers:
        return ["attention" if str(t) == "full_attention" else "gdn" for t in types[:layers]]
    interval = _i(text, "full_attention_interval")
    if not interval:
        raise EstimateError("the GatedDeltaNet config states neither layer_types nor full_attention_interval")
    return ["attention" if (i + 1) % interval == 0 else "gdn" for i in range(layers)]


def _gdn_weights(text: Mapping[str, Any], architecture: str, tp: int, model_bytes: int, lb: _LinearBytes,
                 prefix: str, *, ba_tp: int, moe: MoeSplit) -> float:
    """Qwen3-Next / Qwen3.5 / Qwen3.6 text model per worker (models/qwen3_next.py, qwen3_5.py and
    layers/mamba/gdn/qwen_gdn_linear_attn.py): GatedDeltaNet mixers, gated full attention, dense or MoE MLPs."""
    h = _i(text, "hidden_size")
    layers = _i(text, "num_hidden_layers")
    vocab = _i(text, "vocab_size")
    heads = _i(text, "num_attention_heads")
    if not (h and layers and vocab and heads):
        raise EstimateError(f"{architecture} config states no hidden_size / num_hidden_layers / vocab_size / heads")
    kv = _i(text, "num_key_value_heads", default=heads)
    hd = _i(text, "head_dim", default=h // heads)
    nk, nv = _i(text, "linear_num_key_heads"), _i(text, "linear_num_value_heads")
    dk, dv = _i(text, "linear_key_head_dim"), _i(text, "linear_value_head_dim")
    kernel = _i(text, "linear_conv_kernel_dim", default=4)
    if not (nk and nv and dk and dv):
        raise EstimateError(f"{architecture} config states no linear_num_key_heads / linear_num_value_heads / "
                            "linear_key_head_dim / linear_value_head_dim")
    key_dim, value_dim = nk * dk, nv * dv
    gate = 2 if text.get("attn_output_gate", True) else 1  # q_proj doubled: the output gate rides with q
    experts = _i(text, "num_experts")
    step = _i(text, "decoder_sparse_step", default=1)
    mlp_only = set(text.get("mlp_only_layers") or ())
    inter, moe_inter = _i(text, "intermediate_size"), _i(text, "moe_intermediate_size")
    shared = _i(text, "shared_expert_intermediate_size")
    split = architecture.startswith("Qwen3_5")  # in_proj_qkv/in_proj_z/in_proj_b/in_proj_a in the checkpoint
    total = 0.0
    for i, kind in enumerate(_gdn_layer_kinds(text, layers)):
        p = f"{prefix}layers.{i}"
        if kind == "gdn":
            a = f"{p}.linear_attn"
            qkvz = h * (2 * key_dim + 2 * value_dim) / tp
            ba = h * 2 * nv / ba_tp
            if split:
                total += (h * (2 * key_dim + value_dim) / tp * lb(f"{a}.in_proj_qkv", f"{a}.in_proj_qkvz")
                          + h * value_dim / tp * lb(f"{a}.in_proj_z", f"{a}.in_proj_qkvz")
                          + ba * lb(f"{a}.in_proj_b", f"{a}.in_proj_a", f"{a}.in_proj_ba"))
            else:
                total += qkvz * lb(f"{a}.in_proj_qkvz") + ba * lb(f"{a}.in_proj_ba")
            total += (2 * key_dim + value_dim) * kernel / tp * model_bytes  # conv1d (unquantized)
            total += nv / tp * model_bytes + nv / tp * FP32 + dv * model_bytes  # dt_bias, A_log (fp32), norm
            total += value_dim * h / tp * lb(f"{a}.out_proj")
        else:
            a = f"{p}.self_attn"
            qkv = h * heads * gate * hd / tp + 2 * h * _kv_rank(kv, tp) * hd
            total += qkv * lb(f"{a}.q_proj", f"{a}.qkv_proj") + heads * hd * h / tp * lb(f"{a}.o_proj")
            total += 2 * hd * model_bytes  # q_norm, k_norm
        m = f"{p}.mlp"
        if experts and i not in mlp_only and (i + 1) % max(1, step) == 0:
            total += moe.routed(experts, 3 * h * moe_inter) * lb(f"{m}.experts", f"{m}.experts.0.gate_proj")
            total += (h * experts + h) * model_bytes  # router (GateLinear) and shared_expert_gate, replicated
            if shared:
                total += (3 * h * shared / moe.shared_tp()  # replicated under sequence-parallel MoE (0.20 on)
                          * lb(f"{m}.shared_expert.gate_proj", f"{m}.shared_expert"))
        else:
            total += 3 * h * inter / tp * lb(f"{m}.gate_proj")
        total += 2 * h * model_bytes  # input / post-attention layernorms
        if text.get("layer_scale"):
            total += 2 * h * model_bytes
    return total


def _nemotron_kinds(text: Mapping[str, Any]) -> list[str]:
    """NemotronH layer kinds: hybrid_override_pattern (M Mamba2, * attention, - MLP, E MoE) or, for
    Nemotron-3 Ultra / 3.5, layers_block_type."""
    pattern = text.get("hybrid_override_pattern")
    if isinstance(pattern, str) and pattern:
        names = {"M": "mamba", "*": "attention", "-": "mlp", "E": "moe"}
        if any(c not in names for c in pattern):
            raise EstimateError(f"NemotronH hybrid_override_pattern {pattern!r} names a layer kind other than M * - E")
        return [names[c] for c in pattern]
    types = text.get("layers_block_type")
    if isinstance(types, list) and types:
        kinds = [str(t).lower() for t in types]
        if any(k not in ("mamba", "attention", "mlp", "moe") for k in kinds):
            raise EstimateError("NemotronH layers_block_type names a layer kind other than mamba/attention/mlp/moe")
        return kinds
    raise EstimateError("NemotronH config states neither hybrid_override_pattern nor layers_block_type")


def _nemotron_weights(text: Mapping[str, Any], tp: int, model_bytes: int, lb: _LinearBytes, split: MoeSplit) -> float:
    """NemotronH / Nemotron-3 per worker (models/nemotron_h.py, layers/mamba/mamba_mixer2.py): Mamba2 mixers,
    attention, squared-ReLU MLPs (up/down, no gate) and MoE layers, latent MoE where moe_latent_size is set."""
    h = _i(text, "hidden_size")
    kinds = _nemotron_kinds(text)
    heads = _i(text, "num_attention_heads")
    vocab = _i(text, "vocab_size")
    if not (h and heads and vocab):
        raise EstimateError("NemotronH config states no hidden_size / num_attention_heads / vocab_size")
    kv = _i(text, "num_key_value_heads", default=heads)
    hd = _i(text, "head_dim", "attention_head_dim", default=h // heads)
    m_heads, m_dim = _i(text, "mamba_num_heads"), _i(text, "mamba_head_dim")
    groups, state = _i(text, "n_groups", default=1), _i(text, "ssm_state_size")
    kernel = _i(text, "conv_kernel", default=4)
    if "mamba" in kinds and not (m_heads and m_dim and state):
        raise EstimateError("NemotronH config states no mamba_num_heads / mamba_head_dim / ssm_state_size")
    d_inner = m_heads * m_dim
    tp_groups = groups if groups % tp == 0 else groups + (tp - groups)  # extra_groups_for_head_shards
    conv_dim = d_inner + 2 * tp_groups * state
    bias = bool(text.get("use_bias") or text.get("mamba_proj_bias"))
    conv_bias = bool(text.get("use_conv_bias", True))
    mlp_gated = str(text.get("mlp_hidden_act") or "relu2") != "relu2"
    mats = 3 if mlp_gated else 2
    experts = _i(text, "n_routed_experts")
    moe_inter = _i(text, "moe_intermediate_size")
    latent = _i(text, "moe_latent_size")
    shared = _i(text, "moe_shared_expert_intermediate_size") * _i(text, "n_shared_experts")
    total = 0.0
    mlp_index = 0
    for i, kind in enumerate(kinds):
        x = f"backbone.layers.{i}.mixer"
        if kind == "mamba":
            total += h * (d_inner + conv_dim + m_heads) / tp * lb(f"{x}.in_proj")
            total += (conv_dim * kernel + (conv_dim if conv_bias else 0)) / tp * model_bytes  # conv1d
            total += m_heads / tp * FP32 + 2 * m_heads / tp * model_bytes + d_inner / tp * model_bytes  # A, D, dt_bias, norm
            total += d_inner * h / tp * lb(f"{x}.out_proj")
            if bias:
                total += (d_inner + conv_dim + m_heads) / tp * model_bytes + h * model_bytes
        elif kind == "attention":
            qkv = h * heads * hd / tp + 2 * h * _kv_rank(kv, tp) * hd
            total += qkv * lb(f"{x}.q_proj", f"{x}.qkv_proj") + heads * hd * h / tp * lb(f"{x}.o_proj")
        elif kind == "mlp":
            inter = _list_int(text.get("intermediate_size"), mlp_index)
            mlp_index += 1
            total += mats * h * inter / tp * lb(f"{x}.up_proj")
        else:
            if not (experts and moe_inter):
                raise EstimateError("NemotronH config has MoE layers but no n_routed_experts / moe_intermediate_size")
            width = latent or h
            total += split.routed(experts, mats * width * moe_inter) * lb(f"{x}.experts", f"{x}.experts.0.up_proj")
            # router (replicated): GateLinear(force_fp32_compute) keeps it in fp32 unless a Hopper/Blackwell
            # kernel takes the model dtype (0.32.0), 0.05% of the weights; e_score_correction_bias fp32
            total += h * experts * FP32 + experts * FP32
            if shared:
                total += (mats * h * shared / split.shared_tp()  # replicated under sequence-parallel MoE
                          * lb(f"{x}.shared_experts.up_proj", f"{x}.shared_experts"))
            if latent:  # fc1/fc2 latent projections, replicated
                total += h * latent * (lb(f"{x}.fc1_latent_proj") + lb(f"{x}.fc2_latent_proj"))
        total += h * model_bytes  # the layer's norm
    return total


def qwen3_vision_bytes(vision: Mapping[str, Any], *, tp: int, model_bytes: int, text_hidden: int) -> float:
    """Qwen3-VL / Qwen3.5's vision tower (models/qwen3_vl.py Qwen3_VisionTransformer): the Conv3d patch
    embedding and learned position table (replicated), blocks of LayerNorms, qkv/proj and a two-matrix MLP,
    the patch merger and any deepstack mergers (split by TP, mm_encoder_tp_mode weights)."""
    hv = _i(vision, "hidden_size")
    depth = _i(vision, "depth", "num_hidden_layers")
    if not (hv and depth):
        return 0.0
    inter = _i(vision, "intermediate_size", default=4 * hv)
    patch, temporal = _i(vision, "patch_size", default=16), _i(vision, "temporal_patch_size", default=2)
    channels, merge = _i(vision, "in_channels", default=3), _i(vision, "spatial_merge_size", default=2)
    out = _i(vision, "out_hidden_size", default=text_hidden)
    positions = _i(vision, "num_position_embeddings")
    replicated = channels * temporal * patch * patch * hv + hv + positions * hv
    block = 4 * hv + (3 * hv * hv + 3 * hv) + (hv * hv + hv) + (hv * inter + inter) + (inter * hv + hv)
    ctx = hv * merge * merge
    merger = (ctx * ctx + ctx) + (ctx * out + out)
    deepstack = len(vision.get("deepstack_visual_indexes") or [])
    split = depth * block + (2 * hv + merger) + deepstack * (2 * ctx + merger)
    return (replicated + split / tp) * model_bytes


def vision_tower_loaded(args: Mapping[str, Any]) -> bool:
    """Whether vLLM builds a Qwen3.5 vision tower: `_mark_tower_model` (from 0.17.0, Qwen3.5's first release)
    skips it under --language-model-only or a --limit-mm-per-prompt of 0 images and 0 videos."""
    only = args.get("language_model_only")
    if only is not None and (only is True or str(only).strip().lower() not in ("false", "0", "no", "off")):
        return False
    limits = args.get("limit_mm_per_prompt")
    if isinstance(limits, str):
        try:
            limits = json_loads(limits)
        except json.JSONDecodeError as exc:
            raise EstimateError(f"--limit-mm-per-prompt {limits!r} is not valid JSON: {exc}") from exc
        except JsonRejected as exc:
            raise EstimateError(f"--limit-mm-per-prompt cannot be read safely: {exc}") from exc
    if isinstance(limits, Mapping):
        def count(modality: str) -> Any:
            value = limits.get(modality, 999)
            return value.get("count", 999) if isinstance(value, Mapping) else value
        return not (count("image") == 0 and count("video") == 0)
    return True


# From 0.22.0 vLLM replicates Qwen3.5's in_proj_ba on CUDA for AWQ/GPTQ/INC checkpoints (Marlin's minimum
# partition width; qwen_gdn_linear_attn.py maybe_disable_tp); before, it is split like the other columns.
BA_REPLICATED_FROM = (0, 22, 0)
_BA_REPLICATED_SCHEMES = ("awq", "gptq", "inc", "auto-round")


def hybrid_weights_bytes(
    text: Mapping[str, Any], architecture: str, *, vision: Mapping[str, Any] | None, tp: int, pp: int,
    model_bytes: int, linear: float, quant: Mapping[str, Any] | None, tied: bool, vision_tp: int | None = None,
    scheme: str = "none", release: tuple[int, ...] | None = None, moe_split: MoeSplit | None = None,
) -> float:
    """Weights one worker of a hybrid (GDN or Mamba2) model loads, counted from config.json the way vLLM's
    model class allocates them; MTP layers are not counted (vLLM loads them only as a speculative draft).
    `vision` None: no vision tower is built; `vision_tp` 1: --mm-encoder-tp-mode data replicates it."""
    if architecture not in HYBRID_COUNTED:
        raise EstimateError(f"{architecture}'s weights are not counted from config.json by the vLLM estimate")
    if pp > 1:
        raise EstimateError("pipeline stages split a hybrid's layers unevenly: its weights are not counted per stage")
    lb = _LinearBytes(quant, linear, model_bytes)
    h, vocab = _i(text, "hidden_size"), _i(text, "vocab_size")
    split = moe_split or MoeSplit(tp=tp)
    split.check_split(_i(text, "num_experts", "n_routed_experts"), _i(text, "moe_intermediate_size"))
    if architecture in GDN_ARCHITECTURES:
        prefix = "model.language_model." if "ConditionalGeneration" in architecture else "model."
        ba_tp = 1 if (architecture.startswith("Qwen3_5") and any(k in scheme for k in _BA_REPLICATED_SCHEMES)
                      and (release is None or release >= BA_REPLICATED_FROM)) else tp
        body = _gdn_weights(text, architecture, tp, model_bytes, lb, prefix, ba_tp=ba_tp, moe=split)
    else:
        body = _nemotron_weights(text, tp, model_bytes, lb, split)
    embed = vocab * h / tp * model_bytes
    head = 0.0 if tied else vocab * h / tp * model_bytes
    body += embed + head + h * model_bytes  # embeddings, lm_head (ParallelLMHead, model dtype), final norm
    if vision and architecture.endswith("ForConditionalGeneration"):
        body += qwen3_vision_bytes(vision, tp=vision_tp or tp, model_bytes=model_bytes, text_hidden=h)
    return body
