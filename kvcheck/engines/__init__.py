"""Engine-specific knowledge, one sub-package per engine, behind the Engine interface (base.py).

`ENGINES` is the registry: the manifest's `engine.name` picks an entry; commands and backends only
ever talk to the `Engine` it returns.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from kvcheck.errors import InputError

if TYPE_CHECKING:
    from kvcheck.engines.base import Engine


def _sglang() -> Engine:
    from kvcheck.engines.sglang.engine import SglangEngine

    return SglangEngine()


# Factories, so that importing the registry does not import every engine's modules.
ENGINES: dict[str, Callable[[], Engine]] = {"sglang": _sglang}
_instances: dict[str, Engine] = {}


def get_engine(name: str = "sglang") -> Engine:
    """The engine registered under `name` (one shared instance: engines hold no per-run state)."""
    if name not in ENGINES:
        raise InputError(f"unknown engine '{name}' (kvcheck knows: {', '.join(sorted(ENGINES))})")
    if name not in _instances:
        _instances[name] = ENGINES[name]()
    return _instances[name]


__all__ = ["ENGINES", "get_engine"]
