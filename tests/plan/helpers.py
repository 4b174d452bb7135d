"""Inline model configs and RoleTargets for the planner's tests (no shared data needed)."""

from __future__ import annotations

import json
from pathlib import Path

from kvcheck.model import EstimateInputs, RoleTarget

# Llama-3.1-8B's architecture numbers (meta-llama/Llama-3.1-8B config.json).
LLAMA_31_8B = {
    "architectures": ["LlamaForCausalLM"],
    "hidden_size": 4096,
    "intermediate_size": 14336,
    "max_position_embeddings": 131072,
    "model_type": "llama",
    "num_attention_heads": 32,
    "num_hidden_layers": 32,
    "num_key_value_heads": 8,
    "rope_scaling": {
        "factor": 8.0,
        "low_freq_factor": 1.0,
        "high_freq_factor": 4.0,
        "original_max_position_embeddings": 8192,
        "rope_type": "llama3",
    },
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
    "vocab_size": 128256,
}


def write_config(folder: Path, config: dict | None = None, name: str = "config.json") -> Path:
    path = folder / name
    path.write_text(json.dumps(config or LLAMA_31_8B))
    return path


def role(
    config: Path,
    *,
    window: int = 131072,
    min_headroom: float = 1.0,
    gpu: str = "H100",
    weights_gib_per_gpu: float | None = 15.0,
    env: dict[str, str] | None = None,
    name: str = "server",
    **args,
) -> RoleTarget:
    """A RoleTarget as the manifest loader builds it (args keyed by SGLang field name)."""
    return RoleTarget(
        name=name,
        context_length=window,
        min_headroom=min_headroom,
        engine_version="0.5.23",
        args=args,
        argv_args=(),
        gpus=(0,),
        gpu=gpu,
        model_config=config,
        env=env or {},
        estimate=EstimateInputs(weights_gib_per_gpu=weights_gib_per_gpu),
    )
