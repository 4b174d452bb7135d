"""The model-config reader SGLang's sizing uses: the engine-neutral one in kvcheck.engines.modelconfig (vLLM's sizing reads it too)."""

from __future__ import annotations

from kvcheck.engines.modelconfig import (
    HF_ENDPOINT,
    TEXT_CONFIG_KEYS,
    ModelSource,
    build_source,
    check_counts,
    load_model_source,
    parse_override_args,
    text_config_of,
)

__all__ = [
    "HF_ENDPOINT",
    "TEXT_CONFIG_KEYS",
    "ModelSource",
    "build_source",
    "check_counts",
    "load_model_source",
    "parse_override_args",
    "text_config_of",
]
