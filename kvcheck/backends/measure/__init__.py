"""Measure mode: boot each role with the real engine and read the KV pool it allocated.

`MeasureBackend` is imported on first use, so listing the KV3xx rules (`kvcheck.backends.measure.rules`)
does not load the boot machinery.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from kvcheck.backends.measure.backend import MeasureBackend

__all__ = ["MeasureBackend"]


def __getattr__(name: str) -> Any:
    if name == "MeasureBackend":
        from kvcheck.backends.measure.backend import MeasureBackend

        return MeasureBackend
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
