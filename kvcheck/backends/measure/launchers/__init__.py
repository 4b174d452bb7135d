"""Launchers: where a role's engine runs during a measurement (this host, or a cluster's scheduler).

Add a launcher by subclassing `Launcher` (base.py) and registering a loader of its class in
`LAUNCHERS`; its settings block (a pydantic model beside the launcher) goes into the manifest's
`launcher:` block under its kind. The boot loop (`boot.py`) and the figures it reads do not change.
`LAUNCHERS` also feeds the choices of `kvcheck verify --launcher`, so the command line cannot drift
from what exists, and commands reach a launcher's dry run and cleanup through it (`launcher_class`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from kvcheck.backends.measure.launchers.base import (
    CleanupReport,
    Launcher,
    LaunchError,
    LaunchRequest,
    Refusal,
    RunningEngine,
)
from kvcheck.backends.measure.launchers.kubernetes.spec import KubernetesSpec
from kvcheck.backends.measure.launchers.slurm_spec import SlurmContainerSpec, SlurmSpec
from kvcheck.errors import InputError

__all__ = [
    "LAUNCHERS",
    "CleanupReport",
    "KubernetesSpec",
    "LaunchError",
    "LaunchRequest",
    "Launcher",
    "Refusal",
    "RunningEngine",
    "SlurmContainerSpec",
    "SlurmSpec",
    "build_launcher",
    "launcher_class",
]


def _local() -> type[Launcher]:
    from kvcheck.backends.measure.launchers.local import LocalLauncher

    return LocalLauncher


def _slurm() -> type[Launcher]:
    from kvcheck.backends.measure.launchers.slurm import SlurmLauncher

    return SlurmLauncher


def _kubernetes() -> type[Launcher]:
    from kvcheck.backends.measure.launchers.kubernetes.launcher import KubernetesLauncher

    return KubernetesLauncher


# Loaders, so that importing the registry (the manifest model does) imports no launcher's machinery.
LAUNCHERS: dict[str, Callable[[], type[Launcher]]] = {
    "local": _local,
    "slurm": _slurm,
    "kubernetes": _kubernetes,
}


def launcher_class(kind: str) -> type[Launcher]:
    """The launcher class registered under `kind`; InputError for a kind kvcheck does not know."""
    if kind not in LAUNCHERS:
        raise InputError(f"unknown launcher '{kind}' (choose from {', '.join(sorted(LAUNCHERS))})")
    return LAUNCHERS[kind]()


def chosen_kind(kind: str | None, spec: Any = None) -> str:
    """The launcher `kind` names (--launcher), else the manifest's `launcher.kind`, else local."""
    return kind or getattr(spec, "kind", None) or "local"


def build_launcher(kind: str | None, spec: Any = None, *, gpu_check: bool = True) -> Launcher:
    """The chosen launcher (`chosen_kind`), built from its own block of the manifest's `launcher:`.

    `spec` is the manifest's `launcher:` block (None when it has none); `gpu_check` is the local
    launcher's NVML pre-flight (off with --no-gpu-check).
    """
    chosen = chosen_kind(kind, spec)
    return launcher_class(chosen).from_settings(getattr(spec, chosen, None), gpu_check=gpu_check)
