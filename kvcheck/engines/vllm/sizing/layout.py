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
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from packaging.version import Version

from kvcheck.engines.vllm import serving
from kvcheck.engines.vllm.sizing.weights import stage_layer_counts
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
# "GPU KV cache size" is int(max_concurrency x max_model_len) from 0.20.1 (num_blocks // groups x block before)
CONCURRENCY_REPORT_FROM = Version("0.20.1")

# Config keys of recurrent-state layers (Mamba, GDN, KDA, linear attention): `hybrid_layout` prices the
# families it reproduces (HYBRID_FAMILIES); any other architecture with one of them is refused, never priced
# as attention.
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
    # hybrid attention + recurrent state (Mamba, GDN): the state layers of the most loaded worker, each one
    # page (padded to the attention page) per block, and the blocks one request holds in each state group
    # (1 in mamba_cache_mode "none", 2 in "align": MambaSpec.max_memory_usage_bytes)
    mamba_layers: int = 0
    mamba_blocks_per_request: int = 0
    mamba_state_bytes: int = 0  # one layer's state before padding
    mamba_cache_mode: str | None = None
    # from 0.14.0 vLLM checks one request against the groups (_max_memory_usage_bytes_from_groups: bytes per
    # block x the groups' blocks, padding layers included), not against the sum over layers
    group_usage: bool = False

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

    @property
    def mamba_groups(self) -> int:
        return math.ceil(self.mamba_layers / self.group_layers) if self.mamba_layers else 0

    @property
    def groups(self) -> int:
        return self.full_groups + self.sliding_groups + self.mamba_groups

    def _window_blocks(self, max_model_len: int, max_num_batched_tokens: int) -> int:
        assert self.sliding_window is not None
        tokens = min(self.sliding_window - 1 + max_num_batched_tokens, max_model_len)
        return math.ceil(tokens / self.block_size) + 1

    def usable_tokens(self, num_blocks: int, max_num_batched_tokens: int = 0) -> int:
        """Tokens one request can hold: every block but the null block; in a hybrid model the blocks
        are shared by the groups, each sliding-window group keeps its window's blocks and each state
        group its request's state blocks."""
        free = max(num_blocks - 1, 0) - self.mamba_groups * self.mamba_blocks_per_request
        if self.sliding_groups and self.sliding_window is not None:
            window_blocks = math.ceil((self.sliding_window - 1 + max_num_batched_tokens) / self.block_size) + 1
            free -= self.sliding_groups * window_blocks
        return max(free, 0) // max(1, self.full_groups) * self.block_size

    def blocks_per_request(self, max_model_len: int, max_num_batched_tokens: int) -> int:
        """The blocks one request of max_model_len takes from the shared pool, summed over the groups
        (`get_max_concurrency_for_kv_cache_config`: cdiv(max_memory_usage_bytes, page) per group)."""
        blocks = self.full_groups * math.ceil(max_model_len / self.block_size)
        if self.sliding_groups and self.sliding_window is not None:
            blocks += self.sliding_groups * self._window_blocks(max_model_len, max_num_batched_tokens)
        return blocks + self.mamba_groups * self.mamba_blocks_per_request

    def max_concurrency(self, num_blocks: int, max_model_len: int, max_num_batched_tokens: int) -> float:
        """vLLM's "Maximum concurrency for N tokens per request" (from 0.10: blocks / blocks per request)."""
        per_request = self.blocks_per_request(max_model_len, max_num_batched_tokens)
        return num_blocks / per_request if per_request else 0.0

    def reported_tokens(self, num_blocks: int, max_model_len: int, max_num_batched_tokens: int,
                        version: Version | None) -> int:
        """The "GPU KV cache size: N tokens" line vLLM prints. Through 0.20.0 it is num_blocks //
        len(kv_cache_groups) x block_size (a single group: num_blocks x block_size); from 0.20.1 it is
        int(max_concurrency x max_model_len) (v1/core/kv_cache_utils.py, _report_kv_cache_config)."""
        if version is not None and version < CONCURRENCY_REPORT_FROM:
            return num_blocks // max(1, self.groups) * self.block_size
        return int(self.max_concurrency(num_blocks, max_model_len, max_num_batched_tokens) * max_model_len)

    def max_memory_usage(self, max_model_len: int, max_num_batched_tokens: int) -> int:
        """vLLM's `max_memory_usage_bytes` for one request of max_model_len (FullAttentionSpec:
        cdiv(len, block) pages per layer; SlidingWindowSpec: min(window - 1 + batched, len) tokens + 1 block)."""
        if self.group_usage:
            return self.bytes_per_block * self.blocks_per_request(max_model_len, max_num_batched_tokens)
        full = math.ceil(max_model_len / self.block_size) * self.page_bytes * self.full_layers
        # MambaSpec: its padded page per block, (1 + spec) blocks in "none" mode, (2 + spec) in "align"
        full += self.mamba_layers * self.page_bytes * self.mamba_blocks_per_request
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


def is_hybrid(text: Mapping[str, Any], architecture: str) -> bool:
    """Whether the model keeps recurrent state (Mamba, GDN, KDA, linear attention) in some layers."""
    return any(marker in key for key in text for marker in STATE_MARKERS) or "Mamba" in architecture


def _layer_types(text: Mapping[str, Any], n: int) -> list[str]:
    types = text.get("layer_types")
    if isinstance(types, list) and len(types) >= n:
        return [str(t) for t in types[:n]]
    window = _int(text, "sliding_window")
    pattern = text.get("sliding_window_pattern")
    if window and isinstance(pattern, int) and pattern > 1:  # Gemma 2/3: every pattern-th layer is global
        return ["full_attention" if (i + 1) % pattern == 0 else "sliding_attention" for i in range(n)]
    return ["full_attention"] * n


def _swa_pages_per_block(sliding_ids: Sequence[int], layers_total: int, stages: Sequence[int],
                         version: Version | None) -> int:
    """Pages one block of a sliding-window model's pool costs on its most costly pipeline stage.

    get_kv_cache_configs (v1/core/kv_cache_utils.py, 0.14.0 to 0.32.0) groups the layers of the whole model
    once (_get_kv_cache_groups_uniform_page_size): groups of the smaller type's layer count, or of the larger
    one's when it is less than 1.25 times the smaller (1.5 from 0.18.0), the i-th group of a type taking its
    layers[i::num_groups]. Each worker keeps its own layers of every group, and a block costs a page for each
    layer of its largest group there (_get_kv_cache_bytes_per_block): a PP stage of 3 full and 2 sliding layers
    of gpt-oss (18 and 18: one group of each) pays 3 pages, not the 2 its own counts would group by. The stage
    that pays most is taken, beside the heaviest stage's weights: the pool is at or below the smallest worker's."""
    sliding_set = set(sliding_ids)
    buckets = [[i for i in range(layers_total) if i not in sliding_set], sorted(sliding_set)]
    buckets = [b for b in buckets if b]
    threshold = 1.5 if (version or NEWEST_RULES) >= Version("0.18.0") else 1.25
    fewest, most = min(len(b) for b in buckets), max(len(b) for b in buckets)
    size = most if most < fewest * threshold else fewest
    groups = [bucket[i::-(-len(bucket) // size)] for bucket in buckets for i in range(-(-len(bucket) // size))]
    worst, start = 0, 0
    for count in stages:
        stage = range(start, start + count)
        worst = max(worst, max(sum(1 for i in group if i in stage) for group in groups))
        start += count
    return worst


def kv_layout(
    text: Mapping[str, Any],
    architecture: str,
    *,
    tp: int,
    pp: int,
    kv_dtype: str,
    block_size: int | None,
    device: str,
    model_dtype: str | None = None,
    version: Version | None = None,
    sm: int | None = None,
    args: Mapping[str, Any] | None = None,
    stages: Sequence[int] | None = None,
) -> KvLayout:
    """The KV layout of the most loaded worker: the PP stage with the most layers, of `stages` (vLLM's split,
    weights.stage_layer_counts; default ceil(layers / pp) from the first layer). Paired with the heaviest stage's
    weights, which for an uneven split may be another stage's, the pool is the smaller of the two's or below it.

    A model with recurrent-state layers goes to `hybrid_layout` (the release, the GPU's SM and the role's
    arguments decide its block size and state dtype there); the others need only the shapes."""
    if is_hybrid(text, architecture):
        if stages is not None and len(set(stages)) > 1 and list(stages) != stage_layer_counts(sum(stages), pp, {}):
            raise EstimateError(
                f"VLLM_PP_LAYER_PARTITION {','.join(map(str, stages))} on {architecture}: the vLLM estimate prices a "
                "hybrid model's stages as the even split only", hint="measure the role (kvcheck verify MANIFEST)")
        return hybrid_layout(text, architecture, tp=tp, pp=pp, kv_dtype=kv_dtype, block_size=block_size,
                             device=device, model_dtype=model_dtype or model_dtype_of({}, text, None),
                             version=version, sm=sm, args=args or {})
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
    if stages:
        most = max(range(len(stages)), key=lambda i: stages[i])  # the first stage with the most layers
        stage = range(sum(stages[:most]), sum(stages[:most]) + stages[most])
    else:
        stage = range(0, math.ceil(layers_total / max(1, pp)))
    layers = len(stage)
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
    sliding = sum(1 for i in sliding_ids if i in stage) if window else 0
    full = layers - sliding
    parts: dict[str, Any] = {"kv_heads_per_rank": per_rank, "head_dim": head_dim, "layers": layers,
                             "bytes_per_token_per_layer": 2 * per_rank * head_dim * elem}
    if sliding and (off := hma_off(args or {}, version)):
        # unify_hybrid_kv_cache_specs: every sliding-window layer keeps a full-length cache, one group of all layers
        parts["sliding_layers_as_full"] = sliding
        parts["hybrid_manager_off"] = off
        sliding = 0
    if not sliding:
        return KvLayout(kind=FULL, block_size=block, full_layers=layers, sliding_layers=0, sliding_window=None,
                        page_bytes=page, group_layers=layers, kv_dtype=kv_dtype, kv_heads_per_rank=per_rank,
                        parts=parts)
    group = _swa_pages_per_block(sliding_ids, layers_total, stages or stage_layer_counts(layers_total, max(1, pp), {}),
                                 version)
    parts.update(full_layers=full, sliding_layers=sliding, sliding_window=window, group_layers=group)
    return KvLayout(kind="hybrid_swa", block_size=block, full_layers=full, sliding_layers=sliding,
                    sliding_window=window, page_bytes=page, group_layers=group, kv_dtype=kv_dtype,
                    kv_heads_per_rank=per_rank, parts=parts)


# ---------------------------------------------------------------------------------------------------------
# Hybrid models: attention layers beside recurrent-state layers (vLLM's MambaSpec)
#
# vLLM (0.10.0 to 0.32.0) gives every state layer one page per block holding its whole state (conv state and
# SSM/GDN state, MambaStateShapeCalculator), raises the attention block size until an attention page holds
# that state (HybridAttentionMambaModelConfig.verify_and_update_config; from 0.20.0
# Platform._align_hybrid_block_size), pads the state page to the attention page (mamba_page_size_padded), and
# then groups the layers of one page size as it groups sliding-window models
# (_get_kv_cache_groups_uniform_page_size). One block of the pool costs group_layers pages.

HYBRID_FAMILIES = {
    # architecture -> (state kind, the first release that serves it)
    "Qwen3NextForCausalLM": ("gdn", Version("0.10.2")),
    "Qwen3_5ForConditionalGeneration": ("gdn", Version("0.17.0")),
    "Qwen3_5MoeForConditionalGeneration": ("gdn", Version("0.17.0")),
    "Qwen3_5ForCausalLM": ("gdn", Version("0.17.0")),
    "Qwen3_5MoeForCausalLM": ("gdn", Version("0.17.0")),
    # 0.10.0 already served these, but stored the whole state in the KV cache dtype: not reproduced
    "NemotronHForCausalLM": ("mamba2", Version("0.10.1")),
    "GraniteMoeHybridForCausalLM": ("mamba2", Version("0.10.1")),
    "FalconH1ForCausalLM": ("mamba2", Version("0.10.1")),
}
# Models whose Mamba layers support prefix caching in mamba_cache_mode "all" (SupportsMambaPrefixCaching):
# with prefix caching on, 0.15.0-0.27.x pick "all" for them, a mode whose block size follows the SSD
# kernel's chunk size; the estimate does not price it.
MAMBA_ALL_MODE = {"NemotronHForCausalLM", "GraniteMoeHybridForCausalLM", "FalconH1ForCausalLM"}
TORCH_BYTES = {"bfloat16": 2, "float16": 2, "half": 2, "float32": 4, "float": 4, "fp8": 1, "fp8_e4m3": 1,
               "fp8_e5m2": 1}
NEWEST_RULES = Version("0.32.0")
GROUP_USAGE_FROM = Version("0.14.0")  # get_kv_cache_configs checks one request against the groups
ALIGN_MODE_FROM = Version("0.15.0")  # mamba_cache_mode ("none" | "align" | "all")
HYBRID_PREFIX_DEFAULT_FROM = Version("0.26.0")  # is_prefix_caching_supported: True for generative hybrids
ALIGN_FOR_ALL_FROM = Version("0.28.0")  # prefix caching on and mode "none": "align" for every hybrid
NEMOTRON_SSM_DEFAULT = ((Version("0.13.0"), "float16"), (Version("0.20.0"), "float32"))
QWEN35_SSM_DTYPE_FROM = Version("0.17.0")  # Qwen3_5ForConditionalGenerationConfig: config's mamba_ssm_dtype
GDN_SSM_DTYPE_FROM = Version("0.17.0")  # before, the GDN state is all in the conv dtype (--mamba-ssm-cache-dtype unread)
# Blackwell with 256-wide heads: FlashInfer's kernels need 32-token blocks, on SM 10.0 from 0.11.1 and on
# every SM 10.x from 0.13.0, until 0.18.0 (the check moved to the backends, whose smallest block is 16)
BLACKWELL_HEAD256_32 = (Version("0.11.1"), Version("0.18.0"))
BLACKWELL_FAMILY_FROM = Version("0.13.0")


def _unpriced_hybrid(architecture: str, why: str) -> EstimateError:
    return EstimateError(f"{architecture}: {why}; the vLLM estimate model does not price it",
                         hint="measure the role (kvcheck verify MANIFEST)")


# KV connectors that keep the hybrid KV cache manager on, by the release whose source first shows each a
# SupportsHMA subclass (distributed/kv_transfer/kv_connector/v1, read in 0.23.0, 0.25.0, 0.31.0 and 0.32.0;
# 0.24 and 0.26-0.30 were not read: a connector is keyed from the later wheel, the smaller pool for them).
# Before 0.23.0 (0.22.0 read) any --kv-transfer-config turns the manager off (vllm/config/vllm.py).
HMA_BY_CONNECTOR = "0.23.0"
HMA_CONNECTORS: tuple[tuple[str, frozenset[str]], ...] = (
    ("0.23.0", frozenset({"NixlConnector", "MooncakeConnector", "MooncakeStoreConnector", "OffloadingConnector",
                          "SimpleCPUOffloadConnector", "DecodeBenchConnector", "ExampleHiddenStatesConnector"})),
    ("0.25.0", frozenset({"NixlPullConnector", "NixlPushConnector"})),
    ("0.31.0", frozenset({"HiSparseConnector", "MoRIIOConnector"})),
)


def hma_off(args: Mapping[str, Any], version: Version | None) -> str | None:
    """Why vLLM runs without its hybrid KV cache manager (sliding-window layers then keep full-length caches,
    state layers are refused), or None when it keeps it: --disable-hybrid-kv-cache-manager, or, the flag
    unset, a KV connector that does not support the manager (VllmConfig.__post_init__'s HMA rules)."""
    stated = arg_flag(args, "disable_hybrid_kv_cache_manager")
    if stated is not None:
        return "--disable-hybrid-kv-cache-manager" if stated else None
    config = serving.kv_transfer_config(args)
    name = config.get("kv_connector") if config else None
    if config is None or not name:
        return None
    rules = version or NEWEST_RULES
    if rules < Version(HMA_BY_CONNECTOR):
        return f"--kv-transfer-config ({name}): vLLM {rules} turns the hybrid KV cache manager off for any connector"
    supported = frozenset().union(*(names for since, names in HMA_CONNECTORS if rules >= Version(since)))
    if name == "MultiConnector":  # the manager stays on only when every child connector supports it
        children = (config.get("kv_connector_extra_config") or {}).get("connectors")
        names = [c.get("kv_connector") for c in children or [] if isinstance(c, Mapping)]
        if names and all(n in supported for n in names):
            return None
        return f"--kv-transfer-config (MultiConnector of {', '.join(map(str, names)) or 'no listed connector'})" \
            ": a child connector does not support the hybrid KV cache manager"
    if name in supported and not config.get("kv_connector_module_path"):
        return None
    return f"--kv-transfer-config ({name}): the connector does not support the hybrid KV cache manager"


def arg_flag(args: Mapping[str, Any], name: str) -> bool | None:
    """A boolean engine argument as vLLM reads it; None when unset."""
    value = args.get(name)
    if value is None:
        return None
    if isinstance(value, bool):
        return value
    return str(value).strip().lower() not in ("false", "0", "no", "off")


def _state_layer_types(text: Mapping[str, Any], architecture: str, n: int) -> tuple[int, int]:
    """(attention layers, state layers) of the whole model, the way the architecture states them."""
    if architecture == "FalconH1ForCausalLM":  # every layer runs attention and Mamba2 side by side
        return n, n
    pattern = text.get("hybrid_override_pattern")
    if isinstance(pattern, str) and pattern:  # NemotronH: M Mamba2, * attention, - MLP, E MoE
        return pattern.count("*"), pattern.count("M")
    types = text.get("layers_block_type") or text.get("layer_types")
    if isinstance(types, list) and types:
        kinds = [str(t).lower() for t in types]
        attention = sum(1 for t in kinds if t in ("attention", "full_attention"))
        state = sum(1 for t in kinds if t in ("mamba", "linear_attention"))
        if attention + state:
            return attention, state
    interval = _int(text, "full_attention_interval")
    if interval:  # Qwen3-Next: layer i is full attention when (i + 1) % interval == 0
        attention = sum(1 for i in range(n) if (i + 1) % interval == 0)
        return attention, n - attention
    raise _unpriced_hybrid(architecture, "its config states no layer pattern (layer_types, "
                           "hybrid_override_pattern, full_attention_interval)")


def _need(text: Mapping[str, Any], architecture: str, *names: str) -> int:
    value = _int(text, *names)
    if value is None:
        raise _unpriced_hybrid(architecture, f"its config states no {names[0]}")
    return value


def _divide(value: int, tp: int, what: str, architecture: str) -> int:
    if value % tp:
        raise EstimateError(f"vLLM refuses it: {architecture}'s {what} ({value}) is not divisible by "
                            f"--tensor-parallel-size {tp}")
    return value // tp


def mamba_state(text: Mapping[str, Any], architecture: str, *, tp: int, model_dtype: str,
                version: Version | None, args: Mapping[str, Any]) -> tuple[list[int], list[int], dict[str, Any]]:
    """One state layer's state as vLLM allocates it: (elements per tensor, bytes per element, parts).

    Shapes from MambaStateShapeCalculator (gated_delta_net_state_shape, mamba2_state_shape), dtypes from
    MambaStateDtypeCalculator: the conv state in --mamba-cache-dtype (auto: the model dtype), the SSM/GDN
    state in --mamba-ssm-cache-dtype (auto: the conv dtype), which Qwen3.5 (from 0.17.0) and NemotronH
    (from 0.13.0) set from their config when it is auto. Before 0.17.0 a GDN state is all in the conv dtype."""
    kind = HYBRID_FAMILIES[architecture][0]
    conv_arg = str(args.get("mamba_cache_dtype") or "auto")
    ssm_arg = str(args.get("mamba_ssm_cache_dtype") or "auto")
    for name, value in (("--mamba-cache-dtype", conv_arg), ("--mamba-ssm-cache-dtype", ssm_arg)):
        if value != "auto" and value not in TORCH_BYTES:
            raise _unpriced_hybrid(architecture, f"{name} {value} is not a dtype the estimate knows")
    conv_dtype = model_dtype if conv_arg == "auto" else conv_arg
    rules = version or NEWEST_RULES
    if ssm_arg == "auto" and architecture.startswith("Qwen3_5") and rules >= QWEN35_SSM_DTYPE_FROM:
        ssm_arg = str(text.get("mamba_ssm_dtype") or "auto")
    if ssm_arg == "auto" and architecture == "NemotronHForCausalLM":
        for since, default in NEMOTRON_SSM_DEFAULT:
            if rules >= since:
                ssm_arg = str(text.get("mamba_ssm_cache_dtype") or default)
    ssm_dtype = conv_dtype if ssm_arg == "auto" or (kind == "gdn" and rules < GDN_SSM_DTYPE_FROM) else ssm_arg
    if ssm_dtype not in TORCH_BYTES:
        raise _unpriced_hybrid(architecture, f"its SSM state dtype {ssm_dtype} is not one the estimate knows")
    if kind == "gdn":
        k_heads = _need(text, architecture, "linear_num_key_heads")
        v_heads = _need(text, architecture, "linear_num_value_heads")
        k_dim = _need(text, architecture, "linear_key_head_dim")
        v_dim = _need(text, architecture, "linear_value_head_dim")
        kernel = _need(text, architecture, "linear_conv_kernel_dim")
        conv_dim = _divide(k_dim * k_heads * 2 + v_dim * v_heads, tp, "GDN conv width", architecture)
        conv = conv_dim * (kernel - 1)
        ssm = _divide(v_heads, tp, "linear_num_value_heads", architecture) * v_dim * k_dim
        parts = {"state": "gated delta net", "conv_state": [kernel - 1, conv_dim],
                 "ssm_state": [v_heads // tp, v_dim, k_dim]}
    else:
        if architecture == "NemotronHForCausalLM":
            heads = _need(text, architecture, "mamba_num_heads")
            head_dim = _need(text, architecture, "mamba_head_dim")
            groups = _need(text, architecture, "n_groups")
            state = _need(text, architecture, "ssm_state_size")
            kernel = _need(text, architecture, "conv_kernel")
            inner = heads * head_dim
        else:  # Granite-4.0-H, Falcon-H1
            heads = _need(text, architecture, "mamba_n_heads")
            head_dim = _need(text, architecture, "mamba_d_head")
            groups = _need(text, architecture, "mamba_n_groups")
            state = _need(text, architecture, "mamba_d_state")
            kernel = _need(text, architecture, "mamba_d_conv")
            expand = text.get("mamba_expand")
            d_ssm = _int(text, "mamba_d_ssm") if architecture == "FalconH1ForCausalLM" else None
            hidden = _need(text, architecture, "hidden_size")
            if d_ssm is not None:
                inner = d_ssm
            elif isinstance(expand, int | float) and not isinstance(expand, bool):
                inner = int(expand * hidden)
            else:
                raise _unpriced_hybrid(architecture, "its config states no mamba_expand")
        groups += 0 if groups % tp == 0 else tp - groups  # extra_groups_for_head_shards
        conv_dim = _divide(inner + 2 * groups * state, tp, "Mamba2 conv width", architecture)
        conv = conv_dim * (kernel - 1)
        ssm = _divide(heads, tp, "Mamba2 head count", architecture) * head_dim * state
        parts = {"state": "mamba2", "conv_state": [kernel - 1, conv_dim], "ssm_state": [heads // tp, head_dim, state]}
    dtypes = [TORCH_BYTES[conv_dtype], TORCH_BYTES[ssm_dtype]]
    parts.update(conv_dtype=conv_dtype, ssm_dtype=ssm_dtype)
    return [conv, ssm], dtypes, parts


def mamba_cache_mode(architecture: str, args: Mapping[str, Any], version: Version | None) -> str:
    """The mamba_cache_mode vLLM runs the role in (MambaModelConfig.verify_and_update_config)."""
    rules = version or NEWEST_RULES
    prefix = arg_flag(args, "enable_prefix_caching")
    asked = str(args.get("mamba_cache_mode") or "none")
    if asked not in ("none", "align", "all"):
        raise _unpriced_hybrid(architecture, f"--mamba-cache-mode {asked} is not a mode vLLM knows")
    if rules < ALIGN_MODE_FROM:
        # 0.11.0 turns prefix caching off for hybrids; 0.11.1-0.14.x keep it (off by default) only for models
        # whose Mamba layers support it, in what became mode "all"
        if prefix and architecture in MAMBA_ALL_MODE and rules >= Version("0.11.1"):
            raise _unpriced_hybrid(architecture, f"prefix caching on Mamba layers in vLLM {rules} sizes blocks "
                                   "by the SSD kernel's chunk size")
        return "none"
    if prefix is None:
        prefix = rules >= HYBRID_PREFIX_DEFAULT_FROM
    if not prefix:
        return "none"
    mode = asked
    if mode == "none":
        mode = "align" if rules >= ALIGN_FOR_ALL_FROM or architecture not in MAMBA_ALL_MODE else "all"
    if mode == "all" and architecture not in MAMBA_ALL_MODE:
        mode = "align"
    if mode == "all":
        raise _unpriced_hybrid(architecture, "prefix caching in mamba_cache_mode 'all' sizes blocks by the "
                               "Mamba2 SSD kernel's chunk size (set --mamba-cache-mode align, or measure)")
    return mode


def hybrid_layout(text: Mapping[str, Any], architecture: str, *, tp: int, pp: int, kv_dtype: str,
                  block_size: int | None, device: str, model_dtype: str, version: Version | None,
                  sm: int | None, args: Mapping[str, Any]) -> KvLayout:
    """The pool layout of a hybrid model as vLLM builds it, or an EstimateError naming what it does not price."""
    family = HYBRID_FAMILIES.get(architecture)
    if family is None:
        raise _unpriced_hybrid(architecture, "its layers keep recurrent (Mamba, linear-attention or KDA) state "
                               "of a kind the estimate does not reproduce (it prices Qwen3-Next/Qwen3.5 GDN and "
                               "the NemotronH, Granite-4.0-H and Falcon-H1 Mamba2 hybrids)")
    rules = version or NEWEST_RULES
    if version is not None and version < family[1]:
        raise EstimateError(f"vLLM {version} does not serve {architecture} the way the estimate prices it "
                            f"(from {family[1]})", hint="pin a newer vLLM release, or measure the role")
    if _int(text, "kv_lora_rank") is not None:
        raise _unpriced_hybrid(architecture, "MLA attention beside state layers aligns blocks to the MLA kernels")
    if device == "cpu":
        raise _unpriced_hybrid(architecture, "vLLM's CPU backend lays hybrid state pages out its own way")
    if pp > 1:
        raise _unpriced_hybrid(architecture, "pipeline stages split the attention and state layers unevenly")
    if off := hma_off(args, version):
        raise _unpriced_hybrid(architecture, f"{off}: state layers without the hybrid KV cache manager they need "
                               "(vLLM refuses such a start)")
    if args.get("speculative_config"):
        raise _unpriced_hybrid(architecture, "speculative decoding widens the state (conv state and "
                               "speculative blocks per request)")
    if kv_dtype not in KV_DTYPE_BYTES:
        raise _unpriced_hybrid(architecture, f"--kv-cache-dtype {kv_dtype}")
    block_types = text.get("layers_block_type")
    if _int(text, "num_hidden_layers", "n_layers", "num_layers") is None and isinstance(block_types, list) and block_types:
        layers = len(block_types)  # Nemotron-3 Ultra states its layers only as layers_block_type
    else:
        layers = _need(text, architecture, "num_hidden_layers", "n_layers", "num_layers")
    attention, state_layers = _state_layer_types(text, architecture, layers)
    if not attention or not state_layers:
        raise _unpriced_hybrid(architecture, f"{attention} attention and {state_layers} state layers: not a hybrid "
                               "of both")
    heads = _need(text, architecture, "num_attention_heads")
    hidden = _need(text, architecture, "hidden_size")
    kv_heads = _int(text, "num_key_value_heads") or heads
    head_dim = _int(text, "head_dim", "attention_head_dim") or hidden // heads
    per_rank = max(1, kv_heads // tp)
    elem = KV_DTYPE_BYTES[kv_dtype]
    attn_token = 2 * per_rank * head_dim * elem  # FullAttentionSpec page of one token
    sizes, dtypes, parts = mamba_state(text, architecture, tp=tp, model_dtype=model_dtype, version=version, args=args)
    state_bytes = sum(n * b for n, b in zip(sizes, dtypes, strict=True))
    mode = mamba_cache_mode(architecture, args, version)
    # the attention block: the smallest multiple of the kernel alignment whose page holds the state
    blackwell = sm is not None and (sm // 10 == 10 if rules >= BLACKWELL_FAMILY_FROM else sm == 100)
    blackwell_32 = blackwell and head_dim == 256 and BLACKWELL_HEAD256_32[0] <= rules < BLACKWELL_HEAD256_32[1]
    align = 32 if blackwell_32 else 16
    if block_size is not None and rules >= Version("0.20.0"):
        align = max(align, block_size)  # _align_hybrid_block_size: max(kernel block, cache block size)
    needed = align * math.ceil(state_bytes / (align * attn_token))
    block = max(block_size or 16, needed)
    page = block * attn_token
    # groups: the attention layers and the state layers (one page size after padding), in groups of the
    # smaller count (the larger when they differ by less than 25%, 50% from 0.18.0)
    threshold = 1.5 if rules >= Version("0.18.0") else 1.25
    fewest, most = min(attention, state_layers), max(attention, state_layers)
    group = most if most < fewest * threshold else fewest
    parts.update(kv_heads_per_rank=per_rank, head_dim=head_dim, layers=layers, full_layers=attention,
                 mamba_layers=state_layers, group_layers=group, attention_bytes_per_token_per_layer=attn_token,
                 mamba_state_bytes=state_bytes, mamba_page_padded_bytes=page, mamba_cache_mode=mode,
                 kernel_block_alignment=align)
    return KvLayout(kind="hybrid_mamba", block_size=block, full_layers=attention, sliding_layers=0,
                    sliding_window=None, page_bytes=page, group_layers=group, kv_dtype=kv_dtype,
                    kv_heads_per_rank=per_rank, parts=parts, mamba_layers=state_layers,
                    mamba_blocks_per_request=2 if mode == "align" else 1, mamba_state_bytes=state_bytes,
                    mamba_cache_mode=mode, group_usage=rules >= GROUP_USAGE_FROM)
