"""Launchers: where a role's engine runs during a measurement (this host, or a cluster's scheduler).

Add a launcher by subclassing `Launcher` (base.py) and registering a builder in `LAUNCHERS`; the
boot loop (`boot.py`) and the figures it reads do not change.
"""

from __future__ import annotations

from kvcheck.backends.measure.launchers.base import (
    Launcher,
    LaunchError,
    LaunchRequest,
    Refusal,
    RunningEngine,
)

__all__ = ["LaunchError", "LaunchRequest", "Launcher", "Refusal", "RunningEngine"]
