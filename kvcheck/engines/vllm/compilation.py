"""vLLM's CompilationConfig values: the fields kvcheck's sizing reads, checked and read as vLLM reads them.

A key check alone (`catalogue.VllmCatalogue._check_keys`) passes `{"cudagraph_mode": "FULLL"}`, which
vLLM refuses before any model loads, and an estimate would then size a server that never starts. The
rules below are vLLM's own, the same in every release whose catalogue lists CompilationConfig's keys
(0.13.0 to 0.33.0; read in vllm/config/compilation.py of 0.13.0, 0.18.0, 0.32.0 and 0.33.0):

- `cudagraph_mode` (enum CUDAGraphMode): a name in any case (`validate_cudagraph_mode_before` looks up
  `CUDAGraphMode[value.upper()]`), or the value 0, 1 or 2 of NONE, PIECEWISE or FULL;
- `mode` (IntEnum CompilationMode): a name in any case (`validate_mode_before`, "Invalid compilation
  mode"), or 0 to 3; a digit string is not a name, so "3" is refused;
- `level` (int, 0.13.0 to 0.17.0, the deprecated spelling of `mode`), `max_cudagraph_capture_size`
  (int) and `cudagraph_capture_sizes` (list of int): pydantic's lax integers (3, "3"; not 2.5 or true).

Other fields are left to vLLM: kvcheck does not read them, and a measured boot reports its refusal.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from typing import Any

CUDAGRAPH_MODES = ("NONE", "PIECEWISE", "FULL", "FULL_DECODE_ONLY", "FULL_AND_PIECEWISE")
CUDAGRAPH_MODE_VALUES = {0: "NONE", 1: "PIECEWISE", 2: "FULL"}  # the enum's plain values (the others are tuples)
COMPILATION_MODES = ("NONE", "STOCK_TORCH_COMPILE", "DYNAMO_TRACE_ONCE", "VLLM_COMPILE")  # 0 to 3


def lax_int(value: Any) -> int | None:
    """pydantic's lax int: an int (not a bool), or a string of one; None for anything else."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str):
        try:
            return int(value.strip())
        except ValueError:
            return None
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return None


def cudagraph_mode(value: Any) -> str | None:
    """The CUDAGraphMode name vLLM makes of `value` (`"none"` -> NONE, 2 -> FULL); None when it refuses it."""
    if isinstance(value, str):
        name = value.upper()
        return name if name in CUDAGRAPH_MODES else None
    number = None if isinstance(value, str) else lax_int(value)
    return None if number is None else CUDAGRAPH_MODE_VALUES.get(number)


def compilation_mode(value: Any) -> int | None:
    """The CompilationMode number vLLM makes of `value` (`"vllm_compile"` -> 3, 0 -> 0); None when refused."""
    if isinstance(value, str):
        name = value.upper()
        return COMPILATION_MODES.index(name) if name in COMPILATION_MODES else None
    number = None if isinstance(value, str) else lax_int(value)
    return number if number is not None and 0 <= number < len(COMPILATION_MODES) else None


def _close(value: Any, names: tuple[str, ...]) -> str:
    close = difflib.get_close_matches(str(value).upper(), names, n=1, cutoff=0.6) if isinstance(value, str) else []
    return f" (did you mean {close[0]}?)" if close else ""


def value_problem(config: Mapping[str, Any], keys: frozenset[str] | set[str] | tuple[str, ...]) -> str | None:
    """Why vLLM refuses one of the read fields of `config` (a --compilation-config mapping), None when none.

    `keys` are the release's CompilationConfig fields (the catalogue's): a field the release lacks is the
    key check's to refuse, not this one's.
    """
    if "cudagraph_mode" in config and "cudagraph_mode" in keys and config["cudagraph_mode"] is not None:
        if cudagraph_mode(config["cudagraph_mode"]) is None:
            return (f"'cudagraph_mode' must be one of {', '.join(CUDAGRAPH_MODES)} (any case), or 0, 1 or 2; "
                    f"got {config['cudagraph_mode']!r}{_close(config['cudagraph_mode'], CUDAGRAPH_MODES)}")
    if "mode" in config and "mode" in keys and config["mode"] is not None:
        if compilation_mode(config["mode"]) is None:
            return (f"'mode' must be one of {', '.join(COMPILATION_MODES)} (any case), or 0 to 3; got "
                    f"{config['mode']!r}{_close(config['mode'], COMPILATION_MODES)} (\"Invalid compilation mode\")")
    for key in ("level", "max_cudagraph_capture_size"):
        if key in config and key in keys and config[key] is not None and lax_int(config[key]) is None:
            return f"'{key}' must be an integer; got {config[key]!r}"
    sizes = config.get("cudagraph_capture_sizes")
    if "cudagraph_capture_sizes" in keys and sizes is not None:
        if not isinstance(sizes, list) or any(lax_int(size) is None for size in sizes):
            return f"'cudagraph_capture_sizes' must be a list of integers; got {sizes!r}"
    return None


def graphs_off(config: Mapping[str, Any]) -> bool:
    """True when the config turns CUDA graphs off (`cudagraph_mode` NONE in any spelling vLLM accepts)."""
    return cudagraph_mode(config.get("cudagraph_mode")) == "NONE"


def compiled(config: Mapping[str, Any]) -> bool:
    """False when the config turns compilation off (`mode` NONE, or the older `level` 0), as vLLM reads them."""
    if config.get("mode") is not None:
        return compilation_mode(config["mode"]) != 0
    if config.get("level") is not None:
        return lax_int(config["level"]) != 0
    return True


__all__ = ["compilation_mode", "compiled", "cudagraph_mode", "graphs_off", "lax_int", "value_problem"]
