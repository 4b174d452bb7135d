"""Launchers: where a role's engine runs during a measurement (this host, or a cluster's scheduler).

Add a launcher by subclassing `Launcher` (base.py) and registering a builder in `LAUNCHERS`; the
boot loop (`boot.py`) and the figures it reads do not change. `LAUNCHERS` also feeds the choices of
`kvcheck verify --launcher`, so the command line cannot drift from what exists.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from kvcheck.backends.measure.launchers.base import (
    Launcher,
    LaunchError,
    LaunchRequest,
    Refusal,
    RunningEngine,
)
from kvcheck.errors import InputError

__all__ = [
    "LAUNCHERS",
    "LaunchError",
    "LaunchRequest",
    "Launcher",
    "Refusal",
    "RunningEngine",
    "build_launcher",
]


def _local(spec: Any, *, gpu_check: bool) -> Launcher:
    from kvcheck.backends.measure.launchers.local import LocalLauncher

    return LocalLauncher(gpu_check=gpu_check)


def _slurm(spec: Any, *, gpu_check: bool) -> Launcher:
    from kvcheck.backends.measure.launchers.slurm import SlurmLauncher, SlurmSettings

    return SlurmLauncher(settings=SlurmSettings.from_spec(getattr(spec, "slurm", None)))


def _kubernetes(spec: Any, *, gpu_check: bool) -> Launcher:
    from kvcheck.backends.measure.launchers.kubernetes.launcher import KubernetesLauncher
    from kvcheck.backends.measure.launchers.kubernetes.settings import settings_from

    return KubernetesLauncher(settings_from(getattr(spec, "kubernetes", None)))


LAUNCHERS: dict[str, Callable[..., Launcher]] = {
    "local": _local,
    "slurm": _slurm,
    "kubernetes": _kubernetes,
}


def build_launcher(kind: str | None, spec: Any = None, *, gpu_check: bool = True) -> Launcher:
    """The launcher `kind` names (--launcher), else the manifest's `launcher.kind`, else local.

    `spec` is the manifest's `launcher:` block (None when it has none); `gpu_check` is the local
    launcher's NVML pre-flight (off with --no-gpu-check).
    """
    chosen = kind or getattr(spec, "kind", None) or "local"
    if chosen not in LAUNCHERS:
        raise InputError(f"unknown launcher '{chosen}' (choose from {', '.join(sorted(LAUNCHERS))})")
    return LAUNCHERS[chosen](spec, gpu_check=gpu_check)
