"""vLLM's own maximum model length (`_get_and_verify_max_len`, vllm/config/model.py; vllm/config.py before
0.10.1): the length it derives from the model's config, and its refusal of a longer --max-model-len."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

# model_arch_config_convertor.py's possible_keys (0.8.0-0.33.0 alike): the smallest one the config states wins
LENGTH_KEYS = ("max_position_embeddings", "n_positions", "max_seq_len", "seq_length", "model_max_length",
               "max_target_positions", "max_sequence_length", "max_seq_length", "seq_len")
DEFAULT_LEN = 2048  # no key stated: vLLM assumes 2,048 and warns
# rope types whose max_position_embeddings already states the scaled length: vLLM applies no factor
UNSCALED = ("su", "longrope", "llama3")
UNSCALED_FROM_030 = (*UNSCALED, "yarn", "deepseek_yarn", "deepseek_llama_scaling")  # 0.30.0: YaRN too
YARN_UNSCALED_FROM = (0, 30, 0)
TOP_LEVEL_MULTIPLY_FROM = (0, 12, 0)  # from 0.12.0 the factor (1.0 by default) multiplies whenever RoPE is set
WARNING_FROM = (0, 10, 2)  # the "extreme caution" sentence joins the message


@dataclass(frozen=True)
class DerivedLen:
    """What vLLM derives: the length, the key it names in its error, and the number as its message prints it."""

    length: int
    key: str | None
    shown: str
    model_max_length: int | None
    longrope_default: int | None  # LongRoPE: an unset --max-model-len takes original_max_position_embeddings


def _rope_sections(text: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    rope = text.get("rope_scaling") or text.get("rope_parameters")
    if not isinstance(rope, Mapping):
        return []
    if all(isinstance(v, Mapping) for v in rope.values()) and rope:  # per-layer-type sections (Gemma-style)
        return [v for v in rope.values() if isinstance(v, Mapping)]
    return [rope]


def _rope_type(section: Mapping[str, Any]) -> str:
    return str(section.get("rope_type") or section.get("type") or "default")


def derive(text: Mapping[str, Any], release: tuple[int, ...] | None, *, disable_sliding_window: bool = False) -> DerivedLen:
    """The derived max_model_len of a generative model (the tokenizer's model_max_length counts only for
    pooling models with absolute position embeddings, which kvcheck does not size). An unknown release
    reads as the newest."""
    rel = release or (99,)
    found: float | None = None
    key: str | None = None
    for name in LENGTH_KEYS:
        value = text.get(name)
        if isinstance(value, int | float) and not isinstance(value, bool):
            if found is None or value < found:
                key, found = name, value
    model_max = text.get("model_max_length")
    if isinstance(model_max, int) and not isinstance(model_max, bool) and model_max:  # Command-R / Cohere
        key, found = "model_max_length", model_max
    window = text.get("sliding_window")
    if (disable_sliding_window and found is not None and isinstance(window, int) and not isinstance(window, bool)
            and window < found):
        key, found = "sliding_window", window
    derived: float = found if found is not None else DEFAULT_LEN
    sections = _rope_sections(text)
    multiplied = False
    if sections and "gemma3" not in str(text.get("model_type") or ""):
        unscaled = UNSCALED_FROM_030 if rel >= YARN_UNSCALED_FROM else UNSCALED
        factor: Any = 1.0
        scaling = False
        for section in sections:
            kind = _rope_type(section)
            if kind not in unscaled:
                scaling = True
                factor = section.get("factor", factor)
                if kind == "yarn" and isinstance(section.get("original_max_position_embeddings"), int):
                    derived = section["original_max_position_embeddings"]  # before 0.30.0
        if factor is None:
            factor = 1.0  # vLLM warns about a null factor and takes 1.0
        if scaling or rel >= TOP_LEVEL_MULTIPLY_FROM:
            derived = derived * float(factor)
            multiplied = True
    longrope = any(_rope_type(s) == "longrope" for s in sections)
    original = text.get("original_max_position_embeddings")
    return DerivedLen(
        length=int(derived), key=key, shown=repr(float(derived)) if multiplied else str(int(derived)),
        model_max_length=model_max if isinstance(model_max, int) and not isinstance(model_max, bool) else None,
        longrope_default=int(original) if longrope and isinstance(original, int) else None,
    )


def allow_long(env: Mapping[str, str]) -> bool:
    """vllm/envs.py: VLLM_ALLOW_LONG_MAX_MODEL_LEN is on for "1" or "true" (any case, stripped)."""
    return env.get("VLLM_ALLOW_LONG_MAX_MODEL_LEN", "0").strip().lower() in ("1", "true")


def refusal(max_model_len: int, derived: DerivedLen, release: tuple[int, ...] | None,
            env: Mapping[str, str]) -> str | None:
    """vLLM's ValueError for a --max-model-len above the derived length, word for word by release; None where
    vLLM accepts it (not above, at most the config's model_max_length, or VLLM_ALLOW_LONG_MAX_MODEL_LEN on)."""
    if derived.key is None or max_model_len <= derived.length:
        return None  # no length key stated: vLLM takes a given --max-model-len as it is
    if derived.model_max_length is not None and max_model_len <= derived.model_max_length:
        return None
    if allow_long(env):
        return None
    rel = release or (99,)
    msg = (f"User-specified max_model_len ({max_model_len}) is greater than the derived max_model_len "
           f"({derived.key}={derived.shown} or model_max_length={derived.model_max_length} in model's config.json).")
    if rel < WARNING_FROM:
        return (f"{msg} This may lead to incorrect model outputs or CUDA errors. To allow overriding this maximum, "
                "set the env var VLLM_ALLOW_LONG_MAX_MODEL_LEN=1")
    return (f"{msg} To allow overriding this maximum, set the env var VLLM_ALLOW_LONG_MAX_MODEL_LEN=1. "
            "VLLM_ALLOW_LONG_MAX_MODEL_LEN must be used with extreme caution. If the model uses relative position "
            "encoding (RoPE), positions exceeding derived_max_model_len lead to nan. If the model uses absolute "
            "position encoding, positions exceeding derived_max_model_len will cause a CUDA array out-of-bounds "
            "error.")
