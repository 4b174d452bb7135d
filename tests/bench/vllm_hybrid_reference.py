"""Hybrid (attention + Mamba/GDN) pool layouts computed by the real vLLM 0.32.0's own functions.

Run with the real vLLM install's interpreter (tests/engines/real/install_vllm.sh; no GPU, no model):

    /tmp/kvcheck-real-vllm/venv/bin/python tests/bench/vllm_hybrid_reference.py > tests/data/vllm_logs/hybrid_vllm_0.32.0.json

Per scenario it runs, from vLLM 0.32.0 itself: the state shapes and dtypes (MambaStateShapeCalculator,
MambaStateDtypeCalculator, as each model class calls them), the state page (MambaSpec.page_size_bytes),
the attention page (FullAttentionSpec), the block-size alignment (Platform._align_hybrid_block_size, with a
stand-in attention backend whose smallest kernel block is 16, FlashAttention's and FlashInfer's), the KV
cache groups (_get_kv_cache_groups_uniform_page_size), the bytes one block costs (_get_kv_cache_bytes_per_block)
and the "Maximum concurrency" / "GPU KV cache size" figures (get_max_concurrency_for_kv_cache_config,
get_kv_cache_capacity). The model classes themselves are not imported (Qwen3.5's needs torchvision): the
configs feed the calculators with the arguments each class passes (qwen3_next.py, qwen3_5.py, nemotron_h.py).
tests/estimate/test_vllm_hybrid.py checks kvcheck's layout against the file this prints.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from types import SimpleNamespace as NS

import torch
from vllm.config.vllm import set_current_vllm_config  # noqa: F401  (used by the platform code)
from vllm.model_executor.layers.mamba.mamba_utils import MambaStateDtypeCalculator, MambaStateShapeCalculator
from vllm.platforms.interface import Platform
from vllm.utils.torch_utils import STR_DTYPE_TO_TORCH_DTYPE
from vllm.v1.attention.backend import MultipleOf
from vllm.v1.core import kv_cache_utils as kcu
from vllm.v1.kv_cache_interface import FullAttentionSpec, KVCacheConfig, MambaSpec

ROOT = Path(__file__).resolve().parents[2]
MODELS = ROOT / "tests" / "data" / "models"
CONFIGS = ROOT / "tests" / "data" / "vllm_logs" / "configs"

SCENARIOS = [
    # (config file, tp, kv_cache_dtype, mamba_cache_mode, max_model_len, available bytes)
    (MODELS / "nvidia--Qwen3.6-35B-A3B-NVFP4.json", 1, "fp8", "align", 131072, 6421000000),
    (MODELS / "Qwen--Qwen3.5-27B.json", 1, "auto", "none", 131072, 20 << 30),
    (MODELS / "Qwen--Qwen3.5-27B.json", 2, "fp8", "align", 262144, 30 << 30),
    (MODELS / "Qwen--Qwen3.5-397B-A17B.json", 8, "auto", "align", 262144, 30 << 30),
    (MODELS / "Qwen--Qwen3.5-122B-A10B.json", 4, "auto", "none", 65536, 40 << 30),
    (CONFIGS / "Qwen3-Next-80B-A3B-Instruct.json", 2, "fp8_e5m2", "none", 215040, 2200000000),
    (CONFIGS / "Qwen3-Next-80B-A3B-Instruct.json", 1, "auto", "align", 262144, 40 << 30),
    (MODELS / "nvidia--NVIDIA-Nemotron-3-Nano-30B-A3B-BF16.json", 1, "auto", "align", 262144, 40 << 30),
    (MODELS / "nvidia--NVIDIA-Nemotron-3-Super-120B-A12B-FP8.json", 4, "fp8", "none", 131072, 30 << 30),
    (MODELS / "nvidia--Nemotron-H-56B-Base-8K.json", 2, "auto", "none", 8192, 25 << 30),
    (MODELS / "nvidia--NVIDIA-Nemotron-3-Ultra-550B-A55B-BF16.json", 8, "fp8", "align", 262144, 30 << 30),
    # shapes written for the arithmetic (configs/README): one Mamba group shared across TP 4 (extra groups)
    (CONFIGS / "granite-4.0-h-shaped.json", 4, "auto", "none", 131072, 20 << 30),
    (CONFIGS / "falcon-h1-shaped.json", 2, "auto", "none", 32768, 20 << 30),
]


def _text(config: dict) -> dict:
    return config.get("text_config") or config


def _state(arch: str, hf: NS, tp: int, model_dtype: torch.dtype, mamba_ssm_cache_dtype: str):
    """(shapes, dtypes) as the model class computes them in 0.32.0."""
    if arch.startswith(("Qwen3Next", "Qwen3_5")):
        shapes = MambaStateShapeCalculator.gated_delta_net_state_shape(
            tp, hf.linear_num_key_heads, hf.linear_num_value_heads, hf.linear_key_head_dim,
            hf.linear_value_head_dim, hf.linear_conv_kernel_dim, 0)
        dtypes = MambaStateDtypeCalculator.gated_delta_net_state_dtype(model_dtype, "auto", mamba_ssm_cache_dtype)
        return shapes, dtypes
    if arch.startswith("NemotronH"):  # nemotron_h.py
        shapes = MambaStateShapeCalculator.mamba2_state_shape(
            intermediate_size=hf.mamba_num_heads * hf.mamba_head_dim, tp_world_size=tp, n_groups=hf.n_groups,
            num_heads=hf.mamba_num_heads, head_dim=hf.mamba_head_dim, state_size=hf.ssm_state_size,
            conv_kernel=hf.conv_kernel, num_spec=0)
    else:  # granitemoehybrid.py, falcon_h1.py
        inner = (getattr(hf, "mamba_d_ssm", None) if arch.startswith("FalconH1") else None) or int(
            hf.mamba_expand * hf.hidden_size)
        shapes = MambaStateShapeCalculator.mamba2_state_shape(
            intermediate_size=inner, tp_world_size=tp, n_groups=hf.mamba_n_groups, num_heads=hf.mamba_n_heads,
            head_dim=hf.mamba_d_head, state_size=hf.mamba_d_state, conv_kernel=hf.mamba_d_conv, num_spec=0)
    dtypes = MambaStateDtypeCalculator.mamba2_state_dtype(model_dtype, "auto", mamba_ssm_cache_dtype)
    return shapes, dtypes


def _layer_kinds(arch: str, text: dict) -> list[str]:
    if arch.startswith("FalconH1"):  # every decoder layer holds an attention and a Mamba2 mixer
        return ["attention"] * text["num_hidden_layers"] + ["mamba"] * text["num_hidden_layers"]
    if "hybrid_override_pattern" in text and text["hybrid_override_pattern"]:
        return ["attention" if c == "*" else "mamba" for c in text["hybrid_override_pattern"] if c in "*M"]
    if text.get("layers_block_type"):
        return [t for t in text["layers_block_type"] if t in ("attention", "mamba")]
    if text.get("layer_types"):
        return ["attention" if t in ("attention", "full_attention") else "mamba" for t in text["layer_types"]]
    n, interval = text["num_hidden_layers"], text["full_attention_interval"]
    return ["attention" if (i + 1) % interval == 0 else "mamba" for i in range(n)]


class _Backend:
    """A stand-in attention backend: FlashAttention's kernel blocks (multiples of 16), no spec change."""

    @staticmethod
    def get_supported_kernel_block_sizes(*_a):
        return [MultipleOf(16)]

    @staticmethod
    def customize_spec(spec):
        return spec

    @staticmethod
    def get_name():
        return "STANDIN_FA"


def scenario(path: Path, tp: int, kv_cache_dtype: str, mode: str, max_model_len: int, available: int) -> dict:
    config = json.loads(path.read_text(encoding="utf-8"))
    text = _text(config)
    arch = config["architectures"][0]
    hf = NS(**text)
    model_dtype = STR_DTYPE_TO_TORCH_DTYPE[str(text.get("dtype") or text.get("torch_dtype") or "bfloat16")]
    # the 0.32.0 config hooks: Qwen3.5 takes mamba_ssm_dtype, NemotronH mamba_ssm_cache_dtype (default float32)
    if arch.startswith("Qwen3_5"):
        ssm = text.get("mamba_ssm_dtype") or "auto"
    elif arch.startswith("NemotronH"):
        ssm = text.get("mamba_ssm_cache_dtype") or "float32"
    else:
        ssm = "auto"
    shapes, dtypes = _state(arch, hf, tp, model_dtype, ssm)
    kv_heads = max(1, text["num_key_value_heads"] // tp)
    head = text.get("head_dim") or text.get("attention_head_dim") or text["hidden_size"] // text["num_attention_heads"]
    stub_cls = NS(get_mamba_state_shape_from_config=lambda _vc: shapes,
                  get_mamba_state_dtype_from_config=lambda _vc: dtypes)
    model_config = NS(dtype=model_dtype, use_mla=False, architecture=arch, is_hybrid=True, max_model_len=max_model_len,
                      get_num_kv_heads=lambda _pc: kv_heads, get_head_size=lambda: head)
    cache_config = NS(cache_dtype=kv_cache_dtype, block_size=16, mamba_cache_mode=mode, mamba_block_size=None,
                      mamba_page_size_padded=None, kv_cache_dtype_skip_layers=None, user_specified_block_size=False)
    vllm_config = NS(model_config=model_config, cache_config=cache_config,
                     parallel_config=NS(tensor_parallel_size=tp, decode_context_parallel_size=1,
                                        prefill_context_parallel_size=1),
                     speculative_config=None, num_speculative_tokens=0)
    from vllm.model_executor.models import ModelRegistry

    original_resolve = ModelRegistry.resolve_model_cls
    original_backends = Platform._find_non_ssm_backends
    ModelRegistry.resolve_model_cls = lambda *_a, **_k: (stub_cls, arch)  # type: ignore[method-assign]
    Platform._find_non_ssm_backends = classmethod(lambda cls, _vc: [_Backend])  # type: ignore[method-assign]
    try:
        Platform._align_hybrid_block_size(vllm_config, _Backend)
    finally:
        ModelRegistry.resolve_model_cls = original_resolve  # type: ignore[method-assign]
        Platform._find_non_ssm_backends = original_backends  # type: ignore[method-assign]
    block = cache_config.block_size
    kv_dtype = model_dtype if kv_cache_dtype == "auto" else STR_DTYPE_TO_TORCH_DTYPE[kv_cache_dtype]
    attn = FullAttentionSpec(block_size=block, num_kv_heads=kv_heads, head_size=head, dtype=kv_dtype)
    mamba = MambaSpec(shapes=tuple(shapes), dtypes=tuple(dtypes), block_size=block,
                      page_size_padded=cache_config.mamba_page_size_padded, mamba_cache_mode=mode)
    unpadded = MambaSpec(shapes=tuple(shapes), dtypes=tuple(dtypes), block_size=block).page_size_bytes
    specs = {f"layers.{i}": (attn if kind == "attention" else mamba)
             for i, kind in enumerate(_layer_kinds(arch, text))}
    groups = kcu._get_kv_cache_groups_uniform_page_size(specs)
    per_block = kcu._get_kv_cache_bytes_per_block(groups, NS(is_block_outermost=True))
    assert per_block == kcu._get_kv_cache_bytes_per_block(groups, NS(is_block_outermost=False))
    num_blocks = available // per_block
    config_out = KVCacheConfig(num_blocks=num_blocks, kv_cache_tensors=[], kv_cache_groups=groups)
    capacity_config = NS(model_config=model_config, cache_config=cache_config, parallel_config=vllm_config.parallel_config,
                         scheduler_config=NS(max_num_batched_tokens=8192, max_num_encoder_input_tokens=0),
                         speculative_config=None)
    tokens, concurrency = kcu.get_kv_cache_capacity(capacity_config, config_out)
    # the boot check (get_kv_cache_configs): the null block held back, one request against the groups
    check_config = NS(model_config=model_config, cache_config=NS(**vars(cache_config),
                      get_resolved_kv_cache_layout=lambda: NS(is_block_outermost=True)),
                      parallel_config=vllm_config.parallel_config, attention_config=NS(hisparse_config=None),
                      scheduler_config=capacity_config.scheduler_config, speculative_config=None)
    needed = kcu._max_memory_usage_bytes_from_groups(check_config, groups)
    # the length vLLM's refusal names for an eighth of the memory, searched up to 4M tokens
    model_config.max_model_len = 1 << 22
    largest = kcu._estimate_max_model_len_from_groups(check_config, groups, available // 8 - per_block)
    model_config.max_model_len = max_model_len
    return {
        "config": str(path.relative_to(ROOT / "tests" / "data")), "architecture": arch, "tp": tp,
        "kv_cache_dtype": kv_cache_dtype, "mamba_cache_mode": mode, "max_model_len": max_model_len,
        "available_bytes": available, "state_shapes": [list(s) for s in shapes],
        "state_dtypes": [str(d).removeprefix("torch.") for d in dtypes], "mamba_state_bytes": unpadded,
        "attention_page_bytes_per_token": attn.page_size_bytes // block, "block_size": block,
        "page_bytes": attn.page_size_bytes, "mamba_page_padded": mamba.page_size_bytes,
        "groups": len(groups), "layers_per_group": max(len(g.layer_names) for g in groups),
        "bytes_per_block": per_block, "num_blocks": num_blocks, "max_concurrency": concurrency,
        "reported_tokens": tokens, "needed_bytes_at_max_model_len": needed, "largest_max_model_len_eighth_memory": largest,
    }


def main() -> int:
    out = {"vllm": "0.32.0", "generated_by": "tests/bench/vllm_hybrid_reference.py",
           "scenarios": [scenario(*each) for each in SCENARIOS]}
    json.dump(out, sys.stdout, indent=1)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
