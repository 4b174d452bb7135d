"""What the vLLM estimate model sizes at all: the speculative methods that leave the pool as the target
model alone sizes it. Anything else is refused (KV305), never priced as if it were not there."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from kvcheck.errors import EstimateError

# --speculative-config methods with no draft model (vllm/config/speculative.py, 0.32.0): the proposer
# matches the request's own tokens on the CPU, so nothing is loaded beside the target and no KV layer is
# added. ngram_gpu is not one: it keeps a [max_num_seqs, max_model_len] token buffer on the GPU.
NO_DRAFT_METHODS = frozenset({"ngram", "[ngram]", "suffix"})


def _speculative(value: Any) -> dict[str, Any] | None:
    if value in (None, "", "{}", "None"):
        return None
    if isinstance(value, Mapping):
        return dict(value)
    try:
        parsed = json.loads(str(value))
    except json.JSONDecodeError as exc:
        raise EstimateError(f"--speculative-config is not valid JSON: {exc}") from exc
    return dict(parsed) if isinstance(parsed, Mapping) else None


def check_speculative(args: Mapping[str, Any]) -> None:
    """KV305 for a speculative method that loads a draft: vLLM puts its weights on the same GPUs and gives
    its attention layers KV cache from the same pool, which the estimate does not price; a pool sized for
    the target alone would pass a deployment too big for it."""
    config = _speculative(args.get("speculative_config"))
    if not config:
        return
    model = config.get("model")
    method = config.get("method")
    if method is None:  # SpeculativeConfig.__post_init__: "ngram" by its model name, else a draft model
        method = "ngram" if model in ("ngram", "[ngram]") else "draft_model"
    method = str(method)
    if method in NO_DRAFT_METHODS:
        return
    if method == "ngram_gpu":
        raise EstimateError(
            "speculative decoding with --speculative-config method 'ngram_gpu' keeps the requests' tokens in GPU "
            "buffers beside the pool, which the vLLM estimate model does not price",
            hint="measure the role, or estimate with method ngram (matched on the CPU)")
    draft = f"the draft {model!r}" if model else "the target checkpoint's own MTP/draft layers"
    raise EstimateError(
        f"speculative decoding with --speculative-config method {method!r} loads {draft} on the same GPUs: its "
        "weights and its attention layers' KV cache come out of the pool, and the vLLM estimate model has no "
        "draft config or weights to price them from",
        hint="measure the role (kvcheck verify MANIFEST without --mode estimate), or estimate with an "
        "ngram/suffix method (no draft model)")
