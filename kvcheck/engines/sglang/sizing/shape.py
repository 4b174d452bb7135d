"""Which attention family a model is, and the per-token KV bytes SGLang 0.5.23 prices for it."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from kvcheck.engines.sglang.sizing.config import ModelSource
from kvcheck.errors import EstimateError

# Families the estimate model prices (see docs/estimate.md); anything else is refused.
MHA = "mha"  # standard multi-head / grouped-query attention
MLA = "mla"  # multi-head latent attention (DeepSeek V2/V3/R1, Kimi K2.x, GLM-4-MoE-Lite)
DSA = "dsa"  # MLA + DeepSeek sparse-attention indexer (V3.2, GLM-5)
HYBRID_SWA = "hybrid_swa"  # full + sliding-window pools
HYBRID_LINEAR = "hybrid_linear"  # Mamba / gated-delta-net state + full-attention KV
DSV4 = "dsv4"  # DeepSeek-V4: SWA ring + compressed (c4/c128) pools + indexer (sizing/dsv4.py)
DSV4_ARCHS = frozenset({"DeepseekV4ForCausalLM"})

MLA_ARCHS = frozenset(
    {
        "DeepseekV2ForCausalLM",
        "DeepseekV3ForCausalLM",
        "DeepseekV32ForCausalLM",
        "Glm4MoeLiteForCausalLM",
        "GlmMoeDsaForCausalLM",
        "KimiK25ForConditionalGeneration",
    }
)
DSA_CAPABLE_ARCHS = frozenset(
    {"DeepseekV3ForCausalLM", "DeepseekV32ForCausalLM", "GlmMoeDsaForCausalLM"}
)
MHA_ARCHS = frozenset(
    {
        "LlamaForCausalLM",
        "MistralForCausalLM",
        "Qwen2ForCausalLM",
        "Qwen3ForCausalLM",
        "Qwen2MoeForCausalLM",
        "Qwen3MoeForCausalLM",
        "MixtralForCausalLM",
        "MiMoForCausalLM",
        "MiniMaxM2ForCausalLM",
        "Glm4MoeForCausalLM",
        "Qwen3VLForConditionalGeneration",
        "Qwen3VLMoeForConditionalGeneration",
        "MiniMaxM3SparseForCausalLM",  # MiniMax-M3: dense + sparse (MSA) layers and an index-K pool
        "MiniMaxM3SparseForConditionalGeneration",
        # separate speculative drafts SGLang serves (models/llama_eagle*.py, qwen2_eagle.py, mistral_eagle.py)
        "LlamaForCausalLMEagle",
        "LlamaForCausalLMEagle3",
        "Qwen2ForCausalLMEagle",
        "MistralForCausalLMEagle",
        "DeciLMForCausalLM",  # Nemotron-NAS: per-layer blocks, one KV-head count (model_config.py:1655-1667)
    }
)
SWA_ARCHS = frozenset(
    {
        "GptOssForCausalLM",
        "Llama4ForConditionalGeneration",
        "MiMoV2FlashForCausalLM",
        "Step3p5ForCausalLM",
        "Step3p7ForConditionalGeneration",  # Step-3.7: Step3p5 language model + vision (models/step3p7.py)
        "Gemma4ForCausalLM",
        "Gemma4ForConditionalGeneration",
    }
)
LINEAR_ARCHS = frozenset(
    {
        "Qwen3NextForCausalLM",
        "Qwen3_5ForConditionalGeneration",
        "Qwen3_5MoeForConditionalGeneration",
        "NemotronHForCausalLM",
        "KimiK3ForConditionalGeneration",  # Kimi-K3: KDA linear attention + MLA full-attention layers
        "KimiK3LinearForCausalLM",
    }
)
SUPPORTED_ARCHS = MLA_ARCHS | MHA_ARCHS | SWA_ARCHS | LINEAR_ARCHS | DSV4_ARCHS
# Multimodal wrappers: SGLang loads a vision tower and reserves memory for it (docs/estimate.md).
MULTIMODAL_ARCHS = frozenset(
    {
        "Qwen3VLForConditionalGeneration",
        "Qwen3VLMoeForConditionalGeneration",
        "KimiK25ForConditionalGeneration",
        "Llama4ForConditionalGeneration",
        "Gemma4ForConditionalGeneration",
        "Step3p7ForConditionalGeneration",
        "KimiK3ForConditionalGeneration",
        "MiniMaxM3SparseForConditionalGeneration",
        "Qwen3_5ForConditionalGeneration",
        "Qwen3_5MoeForConditionalGeneration",
    }
)

KV_DTYPE_BYTES = {"bfloat16": 2, "float16": 2, "fp8_e4m3": 1, "fp8_e5m2": 1, "mxfp8": 1, "nvfp4": 1}
DSA_QUANT_BLOCK = 128  # DSATokenToKVPool.quant_block_size
DSA_ROPE_BYTES = 2  # rope part kept in bf16


# Architectures real checkpoints name that SGLang 0.5.23 does not serve: its model registry has no
# such class and the config gives no auto_map for the Transformers fallback (models/registry.py:64,
# model_loader/utils.py:111), so the engine refuses to load them; kvcheck says so instead of guessing.
NOT_SERVED = {
    "Step3p7FlashForCausalLM": "SGLang 0.5.23 serves Step-3.7 only as Step3p7ForConditionalGeneration "
    "(models/step3p7.py); a text-only Step3p7FlashForCausalLM checkpoint is refused at load",
    "MiniMaxM3ForCausalLM": "SGLang 0.5.23 serves MiniMax-M3 as MiniMaxM3SparseForCausalLM / "
    "MiniMaxM3SparseForConditionalGeneration (models/minimax_m3.py, minimax_m3_vl.py); this name is refused at load",
}


def not_understood(arch: str, why: str = "") -> EstimateError:
    detail = f" ({why})" if why else ""
    return EstimateError(
        f"architecture {arch} is not understood by the estimate model{detail}",
        hint="measure the pool on a GPU (kvcheck verify without --mode estimate)",
    )


@dataclass(frozen=True)
class MambaShape:
    """Recurrent state of one linear-attention layer, as SGLang's Mamba2StateShape lays it out."""

    kind: str  # "gdn" (Qwen3-Next/3.5 gated delta net) or "mamba2" (Nemotron-H)
    d_inner: int  # heads x head_dim (value width for GDN)
    groups: int  # n_groups (Mamba2) or key heads (GDN)
    state_size: int  # d_state (Mamba2) or key head dim (GDN)
    num_heads: int  # Mamba heads or value heads
    head_dim: int
    conv_kernel: int
    ssm_dtype: str  # "float32" unless the config/flag says otherwise

    def conv_dim(self, tp: int) -> int:
        """Conv channels before sharding; groups not divisible by TP are extended to TP."""
        groups = self.groups if self.groups % tp == 0 else self.groups + (tp - self.groups)
        return self.d_inner + 2 * groups * self.state_size

    def state_bytes_per_layer(self, tp: int) -> int:
        """conv (bf16) + SSM state bytes one request holds in one layer on one rank."""
        tp = max(1, tp)
        conv = (self.conv_dim(tp) // tp) * (self.conv_kernel - 1) * 2
        ssm_elem = 4 if self.ssm_dtype == "float32" else 2
        ssm = (self.num_heads // tp) * self.head_dim * self.state_size * ssm_elem
        return conv + ssm


@dataclass(frozen=True)
class ModelShape:
    """Attention geometry of the language model, enough to price one token of KV."""

    architecture: str
    kind: str
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    v_head_dim: int
    hidden_size: int
    vocab_size: int
    model_dtype: str  # bfloat16 / float16
    full_layer_ids: tuple[int, ...]  # layers that keep a full-length KV pool
    swa_layer_ids: tuple[int, ...] = ()
    linear_layer_ids: tuple[int, ...] = ()
    sliding_window: int | None = None
    swa_num_kv_heads: int | None = None
    swa_head_dim: int | None = None
    swa_v_head_dim: int | None = None
    kv_lora_rank: int = 0
    qk_rope_head_dim: int = 0
    index_head_dim: int = 0
    index_kpool: int = 1
    indexer_layer_ids: tuple[int, ...] = ()  # DSA layers that carry a fresh index-K row
    mamba: MambaShape | None = None
    mtp_layers: int = 0  # num_nextn_predict_layers shipped with the checkpoint
    # MiniMax-M3 sparse attention (MiniMaxSparseKVPool): which layers are sparse, which of those keep
    # only index-K (no index-V), and the index row width; empty for every other model.
    msa_sparse_layer_ids: tuple[int, ...] = ()
    msa_k_only_layer_ids: tuple[int, ...] = ()
    msa_index_dim: int = 0
    compress_ratios: tuple[int, ...] = ()  # DeepSeek-V4: per layer, 0 (SWA only), 4 or 128
    model_type: str = ""
    is_multimodal: bool = False
    has_attention_sinks: bool = False
    notes: tuple[str, ...] = field(default=())

    @property
    def is_mla(self) -> bool:
        return self.kind in (MLA, DSA)

    @property
    def mla_full_attention(self) -> bool:
        """Full-attention layers keep an MLA latent (MLA/DSA models, Kimi-K3's hybrid)."""
        return self.kind in (MLA, DSA) or (self.kind == HYBRID_LINEAR and self.kv_lora_rank > 0)

    def kv_heads_per_rank(self, attn_tp: int, dcp: int = 1, *, swa: bool = False) -> int:
        """SGLang's get_num_kv_heads: heads shard over tp/dcp; fewer heads than ranks => one each."""
        total = self.swa_num_kv_heads if swa and self.swa_num_kv_heads else self.num_kv_heads
        return max(1, total // max(1, attn_tp // max(1, dcp)))

    def mha_token_bytes(self, attn_tp: int, dcp: int, kv_dtype: str, *, swa: bool = False) -> float:
        """K+V bytes of one token in one layer on one rank (MHA/GQA pools)."""
        n = self.kv_heads_per_rank(attn_tp, dcp, swa=swa)
        hd = (self.swa_head_dim or self.head_dim) if swa else self.head_dim
        vd = (self.swa_v_head_dim or self.v_head_dim) if swa else self.v_head_dim
        if kv_dtype == "nvfp4":
            # packed FP4 data + one fp8 block scale per 16 elements, for K and V
            return n * (hd // 2) * 2 + n * (hd // 16) * 2
        elem = KV_DTYPE_BYTES[kv_dtype]
        row = n * (hd + vd) * elem
        if kv_dtype == "mxfp8":
            return row + n * (hd + vd) / 32
        return row

    def mla_row_bytes(self, kv_dtype: str, *, scaled_dsa_layout: bool) -> int:
        """Latent bytes per token per layer (MLA), with DSA's fp8 scaled layout when it applies."""
        dim = self.kv_lora_rank + self.qk_rope_head_dim
        if kv_dtype == "nvfp4":
            return dim // 2 + dim // 16
        if self.kind == DSA and kv_dtype == "fp8_e4m3" and scaled_dsa_layout:
            return (
                self.kv_lora_rank
                + self.kv_lora_rank // DSA_QUANT_BLOCK * 4
                + self.qk_rope_head_dim * DSA_ROPE_BYTES
            )
        return dim * KV_DTYPE_BYTES[kv_dtype]

    def indexer_row_bytes(self) -> int:
        """DSA index-K bytes per token per indexer layer (fp8 + fp32 scale per 128, uint8 buffer)."""
        return math.ceil(
            (self.index_head_dim + self.index_head_dim // DSA_QUANT_BLOCK * 4) / max(1, self.index_kpool)
        )


def _get(text: Mapping[str, Any], *names: str, default: Any = None) -> Any:
    for name in names:
        value = text.get(name)
        if value is not None:
            return value
    return default


def _int(text: Mapping[str, Any], arch: str, *names: str) -> int:
    value = _get(text, *names)
    if value is None:
        raise not_understood(arch, f"config has no {' / '.join(names)}")
    return int(value)


def model_dtype_of(config: Mapping[str, Any], text: Mapping[str, Any], dtype_arg: str | None) -> str:
    """SGLang's model dtype: --dtype, else the config's dtype; fp32 checkpoints run in fp16 (Gemma: bf16)."""
    aliases = {"half": "float16", "float16": "float16", "bfloat16": "bfloat16", "float": "float32", "float32": "float32"}
    if dtype_arg and dtype_arg != "auto":
        dtype = aliases.get(dtype_arg, dtype_arg)
    else:
        raw = _get(text, "torch_dtype", "dtype") or _get(config, "torch_dtype", "dtype") or "bfloat16"
        dtype = aliases.get(str(raw).replace("torch.", ""), "bfloat16")
    if dtype == "float32":
        model_type = str(_get(text, "model_type") or "")
        return "bfloat16" if model_type.startswith("gemma") else "float16"
    return dtype


def _layer_types(text: Mapping[str, Any], n: int) -> Sequence[str]:
    types = text.get("layer_types")
    if not isinstance(types, list):
        return []
    return types[:n]


def _hybrid_swa_layers(arch: str, text: Mapping[str, Any], n: int) -> tuple[list[int], list[int]]:
    """(full, swa) layer ids as SGLang's get_hybrid_layer_ids splits them."""
    if arch == "Llama4ForConditionalGeneration":
        return [i for i in range(n) if (i + 1) % 4 == 0], [i for i in range(n) if (i + 1) % 4 != 0]
    if arch == "MiMoV2FlashForCausalLM":
        pattern = text.get("hybrid_layer_pattern")
        if not isinstance(pattern, list) or len(pattern) < n:
            raise not_understood(arch, "config has no hybrid_layer_pattern for every layer")
        return [i for i in range(n) if pattern[i] == 0], [i for i in range(n) if pattern[i] == 1]
    types = _layer_types(text, n)
    if len(types) < n:
        raise not_understood(arch, "config has no layer_types for every layer")
    return (
        [i for i, t in enumerate(types) if t == "full_attention"],
        [i for i, t in enumerate(types) if t == "sliding_attention"],
    )


def _mamba_shape(arch: str, text: Mapping[str, Any], ssm_dtype: str) -> MambaShape:
    if arch.startswith("KimiK3"):
        # KimiLinearStateShape (configs/mamba_utils.py:323-366): conv over q, k and v (K-1 rows, bf16),
        # a heads x head_dim x head_dim temporal state; laid out like a GDN state with k heads = heads
        cfg = kda_config(arch, text)
        heads, hd = int(cfg["num_heads"]), int(cfg["head_dim"])
        return MambaShape(
            kind="kda", d_inner=heads * hd, groups=heads, state_size=hd, num_heads=heads, head_dim=hd,
            conv_kernel=int(cfg.get("short_conv_kernel_size") or 4), ssm_dtype=ssm_dtype,
        )
    if arch == "NemotronHForCausalLM":
        heads = _int(text, arch, "mamba_num_heads")
        head_dim = _int(text, arch, "mamba_head_dim")
        return MambaShape(
            kind="mamba2",
            d_inner=heads * head_dim,
            groups=_int(text, arch, "n_groups"),
            state_size=_int(text, arch, "ssm_state_size"),
            num_heads=heads,
            head_dim=head_dim,
            conv_kernel=_int(text, arch, "conv_kernel"),
            ssm_dtype=ssm_dtype,
        )
    v_heads = _int(text, arch, "linear_num_value_heads")
    v_dim = _int(text, arch, "linear_value_head_dim")
    return MambaShape(
        kind="gdn",
        d_inner=v_heads * v_dim,
        groups=_int(text, arch, "linear_num_key_heads"),
        state_size=_int(text, arch, "linear_key_head_dim"),
        num_heads=v_heads,
        head_dim=v_dim,
        conv_kernel=_int(text, arch, "linear_conv_kernel_dim"),
        ssm_dtype=ssm_dtype,
    )


NEMOTRON_BLOCKS = {"mamba": "M", "attention": "*", "moe": "E", "mlp": "-"}


def nemotron_pattern(text: Mapping[str, Any]) -> str | None:
    """Nemotron-H layer kinds as a pattern string (M mamba, * attention, E MoE, - MLP)."""
    blocks = text.get("layers_block_type")
    if isinstance(blocks, list) and blocks:
        if any(b not in NEMOTRON_BLOCKS for b in blocks):
            return None
        return "".join(NEMOTRON_BLOCKS[b] for b in blocks)
    pattern = text.get("hybrid_override_pattern")
    return pattern if isinstance(pattern, str) else None


def kda_config(arch: str, text: Mapping[str, Any]) -> Mapping[str, Any]:
    cfg = text.get("linear_attn_config")
    if isinstance(cfg, str):  # some exports keep it as the repr of a dict
        from kvcheck.io.pyast import literal_eval

        try:
            cfg = literal_eval(cfg)
        except (ValueError, SyntaxError) as exc:
            raise not_understood(arch, "linear_attn_config is not a mapping") from exc
    if not isinstance(cfg, Mapping) or not isinstance(cfg.get("kda_layers"), list):
        raise not_understood(arch, "config has no linear_attn_config.kda_layers")
    return cfg


def _linear_layers(arch: str, text: Mapping[str, Any], n: int) -> tuple[list[int], list[int]]:
    """(full-attention, linear) layer ids for hybrid linear models."""
    if arch.startswith("KimiK3"):
        # configs/kimi_linear.py: kda_layers are 1-based; every other layer is full (MLA) attention
        kda = {int(i) for i in kda_config(arch, text)["kda_layers"]}
        return [i for i in range(n) if i + 1 not in kda], [i for i in range(n) if i + 1 in kda]
    if arch == "NemotronHForCausalLM":
        pattern = nemotron_pattern(text)
        if pattern is None:
            raise not_understood(arch, "config has neither layers_block_type nor hybrid_override_pattern")
        return [i for i, c in enumerate(pattern) if c == "*"], [i for i, c in enumerate(pattern) if c == "M"]
    types = _layer_types(text, n)
    if len(types) >= n:
        return (
            [i for i, t in enumerate(types) if t == "full_attention"],
            [i for i, t in enumerate(types) if t == "linear_attention"],
        )
    interval = text.get("full_attention_interval")
    if not interval:
        raise not_understood(arch, "config has neither layer_types nor full_attention_interval")
    interval = int(interval)
    return [i for i in range(n) if (i + 1) % interval == 0], [i for i in range(n) if (i + 1) % interval != 0]


def _dsa_skips_topk(text: Mapping[str, Any], layer_id: int) -> bool:
    """Layers that reuse the previous layer's top-k keep no index-K row (SGLang dsa_layer_skips_topk)."""
    types = text.get("indexer_types")
    if isinstance(types, list):
        return 0 <= layer_id < len(types) and types[layer_id] == "shared"
    cli = text.get("cli_factor") or 1
    if cli > 1:
        return layer_id % cli != 0
    pattern = text.get("index_topk_pattern")
    if pattern is not None:
        return layer_id < len(pattern) and pattern[layer_id] == "S"
    freq = text.get("index_topk_freq") or 1
    offset = text.get("index_skip_topk_offset")
    if offset is not None:
        return bool(max(layer_id - offset + 1, 0) % freq != 0)
    return layer_id % freq != 0 if freq > 1 else False


def decilm_blocks(text: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    blocks = text.get("block_configs")
    if not isinstance(blocks, list) or not blocks or not all(isinstance(b, Mapping) for b in blocks):
        raise not_understood("DeciLMForCausalLM", "config has no block_configs")
    return blocks


def decilm_kv_heads(text: Mapping[str, Any], heads: int) -> int:
    """SGLang's KV-head count for Nemotron-NAS: one value over the blocks that keep attention.

    Every layer gets a KV slot in the pool, no-op attention blocks included (the pool is sized over
    num_hidden_layers), so the cell is this count x every layer.
    """
    counts = {
        heads // int(b["attention"]["n_heads_in_group"])
        for b in decilm_blocks(text)
        if not b.get("attention", {}).get("no_op") and b.get("attention", {}).get("n_heads_in_group")
    }
    if not counts:
        raise not_understood("DeciLMForCausalLM", "no block keeps attention: SGLang cannot determine its KV heads")
    if len(counts) > 1:
        raise not_understood(
            "DeciLMForCausalLM",
            "its blocks use different KV-head counts; SGLang 0.5.23 refuses with 'Variable GQA (VGQA) is not yet "
            "supported for nemotron-nas in sglang'",
        )
    return counts.pop()


def model_shape(source: ModelSource, *, dtype_arg: str | None = None, mamba_ssm_dtype: str | None = None) -> ModelShape:
    """Classify the model and read its attention geometry; EstimateError for anything unknown."""
    arch = source.architecture
    text = source.text
    if arch in NOT_SERVED:
        raise EstimateError(
            f"architecture {arch} is not served by SGLang 0.5.23: {NOT_SERVED[arch]}",
            hint="use the checkpoint SGLang serves for this model, or measure on a GPU with the release you deploy",
        )
    if arch not in SUPPORTED_ARCHS:
        raise not_understood(arch)
    if arch == "NemotronHForCausalLM" and text.get("num_hidden_layers") is None and nemotron_pattern(text):
        n_layers = len(nemotron_pattern(text) or "")
    else:
        n_layers = _int(text, arch, "num_hidden_layers", "n_layers", "num_layers")
    n_layers = max(n_layers, int(text.get("num_attention_layers") or 0))
    hidden = _int(text, arch, "hidden_size")
    heads = _int(text, arch, "num_attention_heads")
    kv_heads = int(_get(text, "num_key_value_heads", "num_kv_heads", "n_head_kv", default=heads))
    if arch == "DeciLMForCausalLM":
        kv_heads = decilm_kv_heads(text, heads)
    head_dim = int(_get(text, "head_dim", default=hidden // heads))
    v_head_dim = int(_get(text, "v_head_dim", default=head_dim))
    common: dict[str, Any] = dict(
        architecture=arch,
        num_layers=n_layers,
        num_heads=heads,
        num_kv_heads=kv_heads,
        head_dim=head_dim,
        v_head_dim=v_head_dim,
        hidden_size=hidden,
        vocab_size=_int(text, arch, "vocab_size"),
        model_dtype=model_dtype_of(source.config, text, dtype_arg),
        mtp_layers=int(text.get("num_nextn_predict_layers") or 0),
        is_multimodal=arch in MULTIMODAL_ARCHS and source.vision is not None,
    )
    if arch in DSV4_ARCHS:
        return _dsv4_shape(arch, text, common, head_dim)
    if arch in MLA_ARCHS:
        return _mla_shape(arch, text, common)
    if arch in MHA_ARCHS:
        return _mha_shape(source, common)
    if arch in SWA_ARCHS:
        return _hybrid_swa_shape(arch, text, common)
    return _hybrid_linear_shape(arch, text, common, mamba_ssm_dtype)


def _dsv4_shape(arch: str, text: Mapping[str, Any], common: dict[str, Any], head_dim: int) -> ModelShape:
    """DeepSeek-V4: compressed full-attention pools beside a sliding window."""
    all_layers = tuple(range(common["num_layers"]))
    ratios = text.get("compress_ratios")
    window = text.get("sliding_window")
    if not isinstance(ratios, list) or window is None or text.get("index_head_dim") is None:
        raise not_understood(arch, "config has no compress_ratios, sliding_window or index_head_dim")
    rope = _int(text, arch, "qk_rope_head_dim")
    common.update(head_dim=head_dim, v_head_dim=head_dim)
    return ModelShape(
        kind=DSV4,
        full_layer_ids=all_layers,
        sliding_window=int(window),
        qk_rope_head_dim=rope,
        index_head_dim=int(text["index_head_dim"]),
        compress_ratios=tuple(int(r) for r in ratios),
        model_type=str(text.get("model_type") or ""),
        **common,
    )


def _mla_shape(arch: str, text: Mapping[str, Any], common: dict[str, Any]) -> ModelShape:
    """MLA latent attention, with DeepSeek's sparse-attention indexer (DSA) where the config has one."""
    all_layers = tuple(range(common["num_layers"]))
    kv_lora = _int(text, arch, "kv_lora_rank")
    rope = _int(text, arch, "qk_rope_head_dim")
    if arch in DSA_CAPABLE_ARCHS and text.get("index_topk") is not None:
        indexer = tuple(i for i in all_layers if not _dsa_skips_topk(text, i))
        return ModelShape(
            kind=DSA,
            full_layer_ids=all_layers,
            kv_lora_rank=kv_lora,
            qk_rope_head_dim=rope,
            index_head_dim=_int(text, arch, "index_head_dim"),
            index_kpool=int(text.get("index_kpool") or 1),
            indexer_layer_ids=indexer,
            has_attention_sinks=bool(text.get("learnable_sink")),
            **common,
        )
    if arch == "DeepseekV32ForCausalLM" or arch == "GlmMoeDsaForCausalLM":
        raise not_understood(arch, "DSA model without index_topk")
    return ModelShape(kind=MLA, full_layer_ids=all_layers, kv_lora_rank=kv_lora, qk_rope_head_dim=rope, **common)


def _mha_shape(source: ModelSource, common: dict[str, Any]) -> ModelShape:
    """Full attention on every layer (MiniMax-M3's sparse layers add index rows)."""
    arch, text = source.architecture, source.text
    n_layers = common["num_layers"]
    all_layers = tuple(range(n_layers))
    if arch.startswith("MiniMaxM3Sparse"):
        sparse_cfg = text.get("sparse_attention_config") or source.config.get("sparse_attention_config")
        if not isinstance(sparse_cfg, Mapping) or not isinstance(sparse_cfg.get("sparse_attention_freq"), list):
            raise not_understood(arch, "config has no sparse_attention_config.sparse_attention_freq")
        freq = sparse_cfg["sparse_attention_freq"][:n_layers]
        flags = sparse_cfg.get("sparse_disable_index_value") or []
        sparse = tuple(i for i, f in enumerate(freq) if f)
        return ModelShape(
            kind=MHA, full_layer_ids=all_layers, msa_sparse_layer_ids=sparse,
            msa_k_only_layer_ids=tuple(i for i, f in enumerate(flags[:n_layers]) if f and i in sparse),
            msa_index_dim=int(sparse_cfg.get("sparse_index_dim") or 0), **common,
        )
    return ModelShape(kind=MHA, full_layer_ids=all_layers, **common)


def _hybrid_swa_shape(arch: str, text: Mapping[str, Any], common: dict[str, Any]) -> ModelShape:
    """Full-attention layers beside sliding-window ones, each with its own head geometry."""
    n_layers, head_dim, v_head_dim, kv_heads = (
        common["num_layers"], common["head_dim"], common["v_head_dim"], common["num_kv_heads"]
    )
    full, swa = _hybrid_swa_layers(arch, text, n_layers)
    window = _get(text, "sliding_window", "sliding_window_size", "attention_chunk_size")
    if arch == "Llama4ForConditionalGeneration":
        window = text.get("attention_chunk_size")
    if not swa or window is None:
        raise not_understood(arch, "no sliding-window layers or window size in the config")
    swa_head = _get(text, "swa_head_dim")
    if arch.startswith("Gemma4"):
        # Gemma 4: full layers use global_head_dim / num_global_key_value_heads when present
        global_hd = text.get("global_head_dim")
        global_kv = text.get("num_global_key_value_heads")
        common["head_dim"] = int(global_hd or head_dim)
        common["v_head_dim"] = int(global_hd or head_dim)
        common["num_kv_heads"] = int(global_kv or kv_heads)
        swa_head = head_dim
        swa_kv = kv_heads
    else:
        swa_kv = _get(text, "swa_num_key_value_heads", default=kv_heads)
    return ModelShape(
        kind=HYBRID_SWA,
        full_layer_ids=tuple(full),
        swa_layer_ids=tuple(swa),
        sliding_window=int(window),
        swa_num_kv_heads=int(swa_kv),
        swa_head_dim=int(swa_head or head_dim),
        swa_v_head_dim=int(_get(text, "swa_v_head_dim", default=swa_head or v_head_dim)),
        has_attention_sinks=arch == "GptOssForCausalLM",
        **common,
    )


def _hybrid_linear_shape(
    arch: str, text: Mapping[str, Any], common: dict[str, Any], mamba_ssm_dtype: str | None
) -> ModelShape:
    """Hybrid linear attention (Mamba2 / gated delta net / Kimi delta attention) beside full attention."""
    n_layers = common["num_layers"]
    full, linear = _linear_layers(arch, text, n_layers)
    if arch.startswith("KimiK3"):
        # the full-attention layers are MLA (kimi_k3.py): one latent row per token, not split by TP
        common.update(kv_lora_rank=_int(text, arch, "kv_lora_rank"), qk_rope_head_dim=_int(text, arch, "qk_rope_head_dim"))
        latent = text.get("routed_expert_hidden_size")
        if latent:
            common["notes"] = (f"Kimi-K3 routed experts work in a {latent}-wide latent space",)
    ssm_dtype = mamba_ssm_dtype or str(text.get("mamba_ssm_dtype") or "float32")
    ssm_dtype = {"bfloat16": "bfloat16", "float16": "float16"}.get(ssm_dtype, "float32")
    return ModelShape(
        kind=HYBRID_LINEAR,
        full_layer_ids=tuple(full),
        linear_layer_ids=tuple(linear),
        mamba=_mamba_shape(arch, text, ssm_dtype),
        **common,
    )
