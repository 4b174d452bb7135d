"""vLLM's KV-cache specs from a model config: bytes per block per layer, the groups the hybrid allocator
forms, and the bytes one block of the pool costs (vllm/v1/core/kv_cache_utils.py, 0.32.0).

One block of the pool costs the widest group's pages: `bytes_per_block = max over groups of the sum of
its layers' page sizes` (`_get_kv_cache_bytes_per_block`); `num_blocks = available // bytes_per_block`
(`get_kv_cache_config_from_groups`). A full-attention model is one group of every layer; a model that
mixes full and sliding-window layers of one page size forms groups of equal size (the pattern's
repeats: gpt-oss's 18 full + 18 sliding layers are two groups of 18), so a block costs one group's
pages. One block of the pool is the null block: a request can use (num_blocks - 1) x block_size tokens.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kvcheck.errors import EstimateError

FULL = "full_attention"
SLIDING = "sliding_window"
MLA = "mla"

# Bytes per element of the KV cache by --kv-cache-dtype (vllm/utils/torch_utils.py STR_DTYPE_TO_TORCH_DTYPE,
# the fp8 family stored as uint8). The packed per-token-head and 4-bit/3-bit formats carry scales whose
# layout the estimate does not price: refused, never guessed.
KV_DTYPE_BYTES = {
    "bfloat16": 2, "float16": 2, "half": 2, "float": 4, "float32": 4,
    "fp8": 1, "fp8_e4m3": 1, "fp8_e5m2": 1, "fp8_inc": 1,
}  # fmt: skip
MODEL_DTYPE_BYTES = {"bfloat16": 2, "float16": 2, "half": 2, "float32": 4, "float": 4}

# Architectures whose layers keep a recurrent state (Mamba, GDN, linear attention): vLLM sizes them with
# state pages padded to the attention page; the estimate model does not price them yet.
STATE_MARKERS = ("mamba", "ssm_state_size", "linear_num_value_heads", "linear_conv_kernel_dim", "kda_layers",
                 "linear_attn_config")
# Config keys that give some layers another KV shape or attention kind than the rest: refused, never priced
# as uniform full attention (that would be a confident figure for a layout vLLM does not build).
UNPRICED_LAYOUT_KEYS = {
    "global_head_dim": "global layers of another head size (Gemma 4)",
    "num_global_key_value_heads": "global layers of another KV-head count (Gemma 4)",
    "swa_head_dim": "sliding-window layers of another head size",
    "swa_num_key_value_heads": "sliding-window layers of another KV-head count",
    "attention_chunk_size": "chunked local attention layers (Llama 4)",
    "sparse_attention_config": "sparse attention with index caches",
    "block_configs": "per-layer block configurations (Nemotron-NAS)",
}


@dataclass(frozen=True)
class KvLayout:
    """What one worker's KV cache costs, per block and per token."""

    kind: str  # full_attention | mla | hybrid_swa
    block_size: int
    full_layers: int  # layers whose pool is the full window (full attention or MLA)
    sliding_layers: int
    sliding_window: int | None
    page_bytes: int  # one block of one layer
    group_layers: int  # layers in the widest group (the layers one block pays for)
    kv_dtype: str
    kv_heads_per_rank: int | None
    parts: Mapping[str, Any]

    @property
    def bytes_per_block(self) -> int:
        return self.page_bytes * self.group_layers

    @property
    def bytes_per_token(self) -> float:
        """Bytes of the pool per usable token of the full-attention group."""
        return self.bytes_per_block / self.block_size

    def num_blocks(self, available_bytes: int) -> int:
        return max(0, available_bytes // self.bytes_per_block)

    @property
    def full_groups(self) -> int:
        return math.ceil(self.full_layers / self.group_layers) if self.full_layers else 0

    @property
    def sliding_groups(self) -> int:
        return math.ceil(self.sliding_layers / self.group_layers) if self.sliding_layers else 0

    def usable_tokens(self, num_blocks: int, max_num_batched_tokens: int = 0) -> int:
        """Tokens one request can hold: every block but the null block; in a hybrid model the blocks
        are shared by the groups, and each sliding-window group keeps its window's blocks."""
        free = max(num_blocks - 1, 0)
        if not self.sliding_groups or self.sliding_window is None:
            return free * self.block_size
        window_blocks = math.ceil((self.sliding_window - 1 + max_num_batched_tokens) / self.block_size) + 1
        free -= self.sliding_groups * window_blocks
        return max(free, 0) // max(1, self.full_groups) * self.block_size

    def max_memory_usage(self, max_model_len: int, max_num_batched_tokens: int) -> int:
        """vLLM's `max_memory_usage_bytes` for one request of max_model_len (FullAttentionSpec:
        cdiv(len, block) pages per layer; SlidingWindowSpec: min(window - 1 + batched, len) tokens + 1 block)."""
        full = math.ceil(max_model_len / self.block_size) * self.page_bytes * self.full_layers
        if not self.sliding_layers or self.sliding_window is None:
            return full
        tokens = min(self.sliding_window - 1 + max_num_batched_tokens, max_model_len)
        sliding = (math.ceil(tokens / self.block_size) + 1) * self.page_bytes * self.sliding_layers
        return full + sliding

    def largest_model_len(self, available_bytes: int, max_num_batched_tokens: int, upper: int) -> int:
        """vLLM's `estimate_max_model_len`: the largest length one request can have, by binary search."""
        check = available_bytes - self.bytes_per_block  # the null block (check_enough_kv_cache_memory)
        if check <= 0 or self.max_memory_usage(1, max_num_batched_tokens) > check:
            return 0
        lo, hi = 1, max(1, upper)
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if self.max_memory_usage(mid, max_num_batched_tokens) <= check:
                lo = mid
            else:
                hi = mid - 1
        return lo


def _int(text: Mapping[str, Any], *names: str) -> int | None:
    for name in names:
        value = text.get(name)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return None


def resolve_kv_dtype(kv_cache_dtype: str | None, model_dtype: str, quant: Mapping[str, Any] | None) -> str:
    """--kv-cache-dtype as vLLM resolves it: `auto` is the model dtype, unless the checkpoint states an
    fp8 KV cache (ModelOpt's kv_cache_quant_algo, compressed-tensors' kv_cache_scheme)."""
    value = str(kv_cache_dtype or "auto")
    if value == "auto":
        if quant and (str(quant.get("kv_cache_quant_algo") or "").upper().startswith("FP8")
                      or quant.get("kv_cache_scheme")):
            return "fp8"
        return model_dtype
    if value not in KV_DTYPE_BYTES:
        raise EstimateError(
            f"--kv-cache-dtype {value} packs scales the vLLM estimate model does not price",
            hint="measure the role, or estimate with auto, bfloat16 or an fp8 dtype",
        )
    return value


def model_dtype_of(config: Mapping[str, Any], text: Mapping[str, Any], dtype_arg: str | None) -> str:
    """--dtype as vLLM resolves it: auto takes torch_dtype (float32 checkpoints are served in bfloat16)."""
    if dtype_arg and dtype_arg != "auto":
        return {"half": "float16", "float": "float32"}.get(dtype_arg, dtype_arg)
    raw = str(text.get("torch_dtype") or text.get("dtype") or config.get("torch_dtype") or "bfloat16")
    return "bfloat16" if raw in ("float32", "float") else raw if raw in MODEL_DTYPE_BYTES else "bfloat16"


def _layer_types(text: Mapping[str, Any], n: int) -> list[str]:
    types = text.get("layer_types")
    if isinstance(types, list) and len(types) >= n:
        return [str(t) for t in types[:n]]
    window = _int(text, "sliding_window")
    pattern = text.get("sliding_window_pattern")
    if window and isinstance(pattern, int) and pattern > 1:  # Gemma 2/3: every pattern-th layer is global
        return ["full_attention" if (i + 1) % pattern == 0 else "sliding_attention" for i in range(n)]
    return ["full_attention"] * n


def kv_layout(
    text: Mapping[str, Any],
    architecture: str,
    *,
    tp: int,
    pp: int,
    kv_dtype: str,
    block_size: int | None,
    device: str,
) -> KvLayout:
    """The KV layout of the most loaded worker (its PP stage holds ceil(layers / pp) layers)."""
    if any(marker in key for key in text for marker in STATE_MARKERS) or "Mamba" in architecture:
        raise EstimateError(
            f"{architecture} keeps recurrent (Mamba/linear-attention) state: vLLM pads its state pages to "
            "the attention page, which the vLLM estimate model does not price yet",
            hint="measure the role (kvcheck verify MANIFEST)",
        )
    unpriced = next((key for key in UNPRICED_LAYOUT_KEYS if text.get(key)), None)
    if unpriced is not None:
        raise EstimateError(
            f"{architecture}'s layers do not share one KV page ({unpriced} in its config: {UNPRICED_LAYOUT_KEYS[unpriced]}); "
            "vLLM pads or regroups such pages, which the vLLM estimate model does not price yet",
            hint="measure the role (kvcheck verify MANIFEST)",
        )
    if text.get("index_topk") or text.get("compress_ratios"):
        raise EstimateError(
            f"{architecture} uses sparse-attention indexer caches the vLLM estimate model does not price yet",
            hint="measure the role (kvcheck verify MANIFEST)",
        )
    layers_total = _int(text, "num_hidden_layers", "n_layers", "num_layers")
    if layers_total is None:
        raise EstimateError(f"model config of {architecture} states no num_hidden_layers")
    layers = math.ceil(layers_total / max(1, pp))
    elem = KV_DTYPE_BYTES[kv_dtype]
    default_block = 128 if device == "cpu" else 16
    kv_lora = _int(text, "kv_lora_rank")
    if kv_lora is not None:
        rope = int(text.get("qk_rope_head_dim") or 0)
        # MLA: one latent row per token, not split by TP; the CUDA MLA backends (FlashMLA, CUTLASS MLA,
        # FlashInfer MLA) use 64-token blocks, the CPU MLA kernel 16.
        block = block_size or (16 if device == "cpu" else 64)
        row = (kv_lora + rope) * elem
        return KvLayout(
            kind=MLA, block_size=block, full_layers=layers, sliding_layers=0, sliding_window=None,
            page_bytes=block * row, group_layers=layers, kv_dtype=kv_dtype, kv_heads_per_rank=None,
            parts={"latent_bytes_per_token_per_layer": row, "layers": layers},
        )
    heads = _int(text, "num_attention_heads", "n_head")
    hidden = _int(text, "hidden_size", "n_embd")
    if heads is None or hidden is None:
        raise EstimateError(f"model config of {architecture} states no num_attention_heads / hidden_size")
    kv_heads = _int(text, "num_key_value_heads", "num_kv_heads", "n_head_kv") or heads
    head_dim = _int(text, "head_dim") or hidden // heads
    # vLLM replicates KV heads when TP exceeds them (one head per rank), else splits them.
    per_rank = max(1, kv_heads // tp)
    block = block_size or default_block
    page = 2 * block * per_rank * head_dim * elem
    types = _layer_types(text, layers_total)
    sliding_ids = [i for i, t in enumerate(types) if "sliding" in t]
    window = _int(text, "sliding_window")
    stage = range(0, layers)  # the first stage holds the most layers
    sliding = sum(1 for i in sliding_ids if i in stage) if window else 0
    full = layers - sliding
    parts: dict[str, Any] = {"kv_heads_per_rank": per_rank, "head_dim": head_dim, "layers": layers,
                             "bytes_per_token_per_layer": 2 * per_rank * head_dim * elem}
    if not sliding:
        return KvLayout(kind=FULL, block_size=block, full_layers=layers, sliding_layers=0, sliding_window=None,
                        page_bytes=page, group_layers=layers, kv_dtype=kv_dtype, kv_heads_per_rank=per_rank,
                        parts=parts)
    # hybrid: groups of gcd-size repeats (get_kv_cache_groups -> _get_kv_cache_groups_uniform_page_size)
    # _get_kv_cache_groups_uniform_page_size: groups of the smaller type's layer count, or of the larger
    # one's when they differ by less than 25% (the smaller type's group is then padded)
    fewest, most = min(full, sliding) or max(full, sliding), max(full, sliding)
    group = most if most < fewest * 1.25 else fewest
    parts.update(full_layers=full, sliding_layers=sliding, sliding_window=window, group_layers=group)
    return KvLayout(kind="hybrid_swa", block_size=block, full_layers=full, sliding_layers=sliding,
                    sliding_window=window, page_bytes=page, group_layers=group, kv_dtype=kv_dtype,
                    kv_heads_per_rank=per_rank, parts=parts)
