"""vLLM's JSON-valued flags (--hf-overrides, --compilation-config, --speculative-config, --eplb-config) as
the estimate reads them: a mapping given inline or as JSON text, read through the bounded JSON reader."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from kvcheck.errors import EstimateError
from kvcheck.io.jsontext import JsonRejected
from kvcheck.io.jsontext import loads as json_loads

_UNSET = (None, "", "{}", "None")


def json_arg(value: Any, flag: str) -> dict[str, Any]:
    """The flag's mapping ({} when unset or not a mapping); EstimateError naming `flag` on bad JSON."""
    if value in _UNSET:
        return {}
    if isinstance(value, Mapping):
        return dict(value)
    try:
        parsed = json_loads(str(value))
    except json.JSONDecodeError as exc:
        raise EstimateError(f"{flag} {value!r} is not valid JSON: {exc}") from exc
    except JsonRejected as exc:
        raise EstimateError(f"{flag} cannot be read safely: {exc}") from exc
    return dict(parsed) if isinstance(parsed, Mapping) else {}
