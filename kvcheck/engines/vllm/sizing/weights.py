"""The weights one vLLM worker loads ("Model loading took X GiB"): the checkpoint's own size from
`model.safetensors.index.json` split over TP x PP when the config sits in a checkpoint folder, else a
parameter count from config.json (embedding and lm_head split by TP as vLLM's VocabParallelEmbedding
does; KV projections replicated when TP exceeds the KV heads), each with a band."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from kvcheck.errors import EstimateError

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


def config_weights_bytes(
    text: Mapping[str, Any], *, tp: int, pp: int, model_bytes: int, linear: float, tied: bool,
    attention_bytes: float | None = None, moe_pad: int | None = None,
) -> float:
    """Weights of the most loaded worker, bytes (the first PP stage: its layers plus the embedding)."""
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
        if moe_pad:  # MXFP4 kernels pad the expert width (fused_moe/oracle/mxfp4.py round-ups)
            moe_inter = -(-moe_inter // moe_pad) * moe_pad
        shared = _i(text, "n_shared_experts") * moe_inter + _i(text, "shared_expert_intermediate_size")
        moe = (experts * 3 * hidden * moe_inter + 3 * hidden * shared) / tp + hidden * experts
        first_dense = _i(text, "first_k_dense_replace")
        dense_layers = first_dense
    stage_layers = math.ceil(layers / max(1, pp))
    moe_layers = max(0, stage_layers - min(dense_layers, stage_layers)) if experts else 0
    dense_stage = stage_layers - moe_layers
    attn_bytes = linear if attention_bytes is None else attention_bytes
    mlp_linear = 3 * hidden * inter / tp * dense_stage + moe * moe_layers
    embed = vocab * hidden / tp * model_bytes
    head = 0.0 if (tied and pp == 1) else vocab * hidden / tp * model_bytes
    first_stage_extra = embed + (head if pp == 1 else 0.0)
    norms = 2 * hidden * stage_layers * model_bytes
    return attn * stage_layers * attn_bytes + mlp_linear * linear + max(first_stage_extra, head) + norms


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
