"""The launcher seam: where and how a role's engine processes run, for measure mode.

Measure mode reads a role's pool the same way wherever the engine runs (its log lines, then the head
node's `/server_info`); a `Launcher` decides only where the processes run and how they are stopped.
`local` starts them on this host; `slurm` hands them to the cluster's scheduler. Every launcher
gives the same guarantees: the exact production arguments, lines streamed as they arrive, and
every process or job it started stopped on every way out.
"""

from __future__ import annotations

import threading
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from kvcheck.model import Finding, RoleTarget


@dataclass(frozen=True)
class LaunchRequest:
    """One role to start: its target, how long it may take (seconds), where its lines go."""

    target: RoleTarget
    log_path: Path
    on_line: Callable[[str], None]
    timeout_s: float
    grace_s: float
    dummy_weights: bool = False
    temporary_log: bool = False  # log_path is kvcheck's temporary file (no --logs-dir): removed at the end


@dataclass(frozen=True)
class Refusal:
    """Why a role is not started at all (findings for its measurement) and what progress shows."""

    findings: tuple[Finding, ...]
    summary: str  # the progress line, e.g. "GPUs not usable (KV302)"
    details: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class CleanupReport:
    """What a launcher's cleanup removed of killed runs, and what it could not (`kvcheck cleanup`)."""

    lines: tuple[str, ...]  # one per object removed (or why there was none), then notes
    problem: str | None  # what is left and why; None: nothing of kvcheck's is left


class LaunchError(Exception):
    """The launcher could not start the role (a missing program); a KV301 for that role, not a crash."""

    def __init__(
        self,
        message: str,
        *,
        hint: str | None = None,
        argv: tuple[str, ...] | None = None,
        details: Mapping[str, Any] | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint
        self.argv = argv
        self.details = dict(details or {})


class RunningEngine(ABC):
    """A started role: its processes (or jobs), where its server answers, and a guaranteed end."""

    argv: tuple[str, ...]  # the engine's command line as the report shows it
    started_at: float  # time.monotonic() when the launch began; --timeout counts from here
    # The grace a role gets once its figures are in (boot.py): nothing is being served, and SGLang's
    # own SIGTERM path only reports a crash, sleeps 5 s and SIGKILLs itself, so waiting for it buys
    # nothing. 0 = force at once; a launcher whose forced stop is unsafe sets its own.
    measured_grace_s: float = 0.0

    @property
    def pump_error(self) -> Exception | None:
        """kvcheck's own log parsing failed (a bug, exit 4); a launcher that reads logs overrides this."""
        return None

    @property
    def output_held(self) -> bool:
        """A process outside kvcheck's reach still holds the output (after stop())."""
        return False

    @property
    @abstractmethod
    def details(self) -> Mapping[str, Any]:
        """What the report records about this launch (environment set, ports, job ids)."""

    @property
    @abstractmethod
    def http_port(self) -> int:
        """The port the head node's HTTP server was told to listen on."""

    @abstractmethod
    def base_url(self) -> str | None:
        """Where the head node's server answers, e.g. http://127.0.0.1:31000; None until known."""

    @abstractmethod
    def poll(self) -> int | None:
        """The engine's exit status (negative: killed by that signal); None while it runs."""

    @property
    @abstractmethod
    def returncode(self) -> int | None: ...

    def phase(self) -> str | None:
        """The launcher's own phase while the engine is not running yet (queued); None otherwise."""
        return None

    def failure(self) -> tuple[str, str] | None:
        """(message, hint) when the launcher, not the engine, ended the role (a job refused)."""
        return None

    def exit_note(self) -> str:
        """What the launcher adds to an engine's exit message (e.g. the job's final state)."""
        return ""

    @abstractmethod
    def stop(self, grace_s: float) -> str | None:
        """End everything started: graceful first, forced after `grace_s` (0: forced at once). Idempotent.

        Returns None when nothing is left, else the KV301 message naming what survived.
        """


class Launcher(ABC):
    """Starts roles' engines somewhere and stops them; one instance per measure run.

    Used as a context manager around the run (the local launcher holds an NVML session there).
    """

    name: ClassVar[str]
    # The manifest must list each role's GPU indices (the local launcher boots on exactly those);
    # a scheduler's launcher sizes the request from the role's layout when they are missing.
    needs_gpu_list: ClassVar[bool] = False
    # What `verify --dry-run` prints for this launcher ("the Kubernetes objects"); None: it has no
    # dry run, so the command refuses --dry-run with it.
    dry_run_shows: ClassVar[str | None] = None
    # Whether the launcher can run a CPU deployment (no GPU requested, none assigned).
    runs_cpu_roles: ClassVar[bool] = False
    # Whether each start() picks the engine's HTTP port afresh (a boot whose port another process took
    # before the engine bound it is then retried); a launcher with a fixed port (a pod's) does not.
    picks_ports: ClassVar[bool] = False

    @classmethod
    @abstractmethod
    def from_settings(cls, settings: Any, *, gpu_check: bool) -> Launcher:
        """The launcher for a run, from its own block of the manifest's `launcher:` (None: absent).

        `gpu_check` is False with --no-gpu-check (only a launcher with a GPU inventory reads it).
        """

    def dry_run(self, targets: Sequence[RoleTarget], *, timeout_s: float, dummy_weights: bool) -> str:
        """What a run of these roles would create, as text, creating nothing (see `dry_run_shows`)."""
        raise NotImplementedError(f"the {self.name} launcher has no dry run")

    @classmethod
    def cleanup(cls, *, run_id: str | None, grace_s: float, where: Mapping[str, str | None]) -> CleanupReport:
        """Remove what killed runs of this launcher left (only run `run_id`'s, when given).

        `where` holds the command line's location options (namespace, context, kubeconfig; None: the
        launcher's default); `grace_s` is each engine's time to stop before it is killed.
        """
        raise NotImplementedError(f"the {cls.name} launcher leaves nothing for kvcheck cleanup")

    def __enter__(self) -> Launcher:
        return self

    def __exit__(self, *exc_info: object) -> None:
        return None

    def waits(self, targets: Sequence[RoleTarget]) -> list[list[int]]:
        """For each role, the earlier roles whose engines must be gone before it starts."""
        return [[] for _ in targets]

    def preflight(
        self,
        target: RoleTarget,
        *,
        settle: bool,
        cancel: threading.Event,
        on_phase: Callable[[str], None],
    ) -> Refusal | None:
        """A check before the role starts (the local launcher's GPU inventory); None: go ahead."""
        return None

    def refuse(self, target: RoleTarget) -> tuple[str, str] | None:
        """(message, hint) when this launcher cannot run the role's shape at all (nnodes, a CPU role)."""
        from kvcheck.backends.measure.launchers.command import on_cpu

        if target.nodes > 1:
            # the instance is a Ray cluster the group's pods form; kvcheck launches multi-node engines
            # with their own flags (--nnodes), so booting this shape would start a different deployment
            return (
                f"role {target.name} spans {target.nodes} nodes as one Ray cluster (roles.{target.name}.nodes), "
                f"and the {self.name} launcher does not build Ray clusters",
                "state the node count as args.nnodes (vLLM 0.11.1 and later launch across nodes without Ray) "
                "to measure the role, measure a single-node variant, or use --mode estimate for this role",
            )
        if on_cpu(target) and not self.runs_cpu_roles:
            return (
                f"role {target.name} runs on the CPU (device: cpu), and the {self.name} launcher requests GPUs "
                "for every role it runs",
                "measure CPU roles with the local launcher on a host like the production one, or audit the "
                "running server",
            )
        return None

    @abstractmethod
    def start(self, request: LaunchRequest) -> RunningEngine:
        """Start the role and return at once; raises LaunchError when it cannot be started."""
