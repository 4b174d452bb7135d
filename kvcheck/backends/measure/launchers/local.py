"""The local launcher: each role's engine runs on this host, on the GPUs the manifest lists.

The engine listens on loopback and free ports, runs in its own session (see `process.py`), and is
refused before it starts when its GPUs are missing, of another type or busy (KV302, `gpus.py`); a CPU
role (`device: cpu`) is checked against the host's memory and NUMA nodes instead (KV324, `kvcheck.hostmem`).
Roles that share a GPU boot one after the other; the others side by side.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, ClassVar

from kvcheck.backends.measure.launchers.base import (
    Launcher,
    LaunchError,
    LaunchRequest,
    Refusal,
    RunningEngine,
)
from kvcheck.backends.measure.launchers.command import (
    LOOPBACK,
    added_env,
    build_argv,
    build_env,
    needs_bootstrap_port,
    on_cpu,
    role_nnodes,
)
from kvcheck.backends.measure.launchers.gpus import GpuInventory, GpuState, check_role_gpus
from kvcheck.backends.measure.launchers.process import EngineProcess
from kvcheck.backends.measure.launchers.watchdog import Watchdog
from kvcheck.engines import get_engine
from kvcheck.hostmem import HostMemory, read_host
from kvcheck.model import RoleTarget
from kvcheck.policy.registry import finding

GPU_SETTLE_S = 10.0  # how long a GPU a previous role just left may take to show as free

_ports_lock = threading.Lock()
_ports_handed_out: set[int] = set()


def free_port() -> int:
    """A TCP port free on loopback now, never the same twice in one kvcheck process.

    The engine binds it a moment later; roles booting side by side must not be handed the same one.
    """
    with _ports_lock:
        while True:
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
                sock.bind((LOOPBACK, 0))
                port = int(sock.getsockname()[1])
            if port not in _ports_handed_out:
                _ports_handed_out.add(port)
                return port


def conflicts(targets: Sequence[RoleTarget]) -> list[list[int]]:
    """For each role, the earlier roles it must wait for: those sharing a GPU with it.

    A role without a GPU list (only with --no-gpu-check) may use any GPU, so it shares with all.
    """
    waits: list[list[int]] = []
    cpu = [on_cpu(target) for target in targets]
    for i, target in enumerate(targets):
        if cpu[i]:  # a CPU role holds no GPU: it waits for nobody, and nobody waits for it
            waits.append([])
            continue
        mine = set(target.gpus)
        waits.append([j for j in range(i) if not cpu[j] and (not mine or not targets[j].gpus
                                                            or mine & set(targets[j].gpus))])
    return waits


class LocalEngine(RunningEngine):
    """One engine process group on this host, answering on loopback."""

    def __init__(self, process: EngineProcess, *, port: int, details: Mapping[str, Any]) -> None:
        self.process = process
        self.argv = process.argv
        self.started_at = process.started_at
        self._port = port
        self._details = dict(details)

    @property
    def details(self) -> Mapping[str, Any]:
        return self._details

    @property
    def http_port(self) -> int:
        return self._port

    def base_url(self) -> str | None:
        return f"http://{LOOPBACK}:{self._port}"

    def poll(self) -> int | None:
        return self.process.poll()

    @property
    def returncode(self) -> int | None:
        return self.process.returncode

    @property
    def pump_error(self) -> Exception | None:
        return self.process.pump_error

    @property
    def output_held(self) -> bool:
        return self.process.output_held

    def stop(self, grace_s: float) -> str | None:
        survivors = self.process.stop(grace_s)
        if not survivors:
            Watchdog.stopped(self.process.pgid)  # a group with survivors stays listed: SIGKILL again at exit
            return None
        return (
            f"engine processes {', '.join(map(str, survivors))} survived SIGKILL (uninterruptible "
            "sleep, usually a hung driver call); their GPUs may still be held"
        )


class LocalLauncher(Launcher):
    """Boots each role on this host; NVML checks its GPUs first (unless `gpu_check` is off)."""

    name = "local"
    needs_gpu_list = True
    picks_ports = True  # free_port() at each start

    @classmethod
    def from_settings(cls, settings: Any, *, gpu_check: bool) -> LocalLauncher:
        return cls(gpu_check=gpu_check)  # the manifest has no settings block for this host

    def __init__(
        self,
        *,
        gpu_check: bool = True,
        nvml: Any = None,
        gpu_settle_s: float = GPU_SETTLE_S,
        host_reader: Callable[[], HostMemory] | None = None,
    ) -> None:
        self.gpu_check = gpu_check
        self._nvml = nvml
        self._gpu_settle_s = gpu_settle_s
        self._inventory: GpuInventory | None = None
        self._read_host = read_host if host_reader is None else host_reader

    def __enter__(self) -> LocalLauncher:
        return self  # NVML opens at the first GPU role's pre-flight: a host of CPU roles needs none

    def _gpu_inventory(self) -> GpuInventory | None:
        if not self.gpu_check:
            return None
        if self._inventory is None:
            self._inventory = GpuInventory(self._nvml).__enter__()
        return self._inventory

    def __exit__(self, *exc_info: object) -> None:
        inventory, self._inventory = self._inventory, None
        if inventory is not None:
            inventory.__exit__(*exc_info)

    def waits(self, targets: Sequence[RoleTarget]) -> list[list[int]]:
        return conflicts(targets)

    def preflight(
        self,
        target: RoleTarget,
        *,
        settle: bool,
        cancel: threading.Event,
        on_phase: Callable[[str], None],
    ) -> Refusal | None:
        if on_cpu(target):  # --no-gpu-check: the engine runs where this host's inventory does not apply
            return self._check_host(target, on_phase) if self.gpu_check else None
        inventory = self._gpu_inventory()
        if inventory is None:
            return None
        on_phase("checking GPUs")
        findings, states = self._check_gpus(target, inventory, settle=settle, cancel=cancel)
        if not findings:
            return None
        return Refusal(
            findings=tuple(findings),
            summary="GPUs not usable (KV302)",
            details={"gpus_seen": {str(s.index): s.name for s in states.values() if s is not None}},
        )

    def _check_host(self, target: RoleTarget, on_phase: Callable[[str], None]) -> Refusal | None:
        """A CPU role's pre-flight in place of NVML: the host's memory and NUMA nodes must hold it (KV324)."""
        on_phase("checking host memory")
        host = self._read_host()
        refused = get_engine(target.engine).check_host(target, host)
        if refused is None:
            return None
        message, hint = refused
        return Refusal(
            findings=(finding("KV324", target.name, message, hint=hint, location=target.location),),
            summary="host cannot run the CPU role (KV324)",
            details={"host": host.as_details()},
        )

    def _check_gpus(
        self, target: RoleTarget, inventory: GpuInventory, *, settle: bool, cancel: threading.Event
    ) -> tuple[list[Any], dict[int, GpuState | None]]:
        """KV302 findings for the role's GPUs; a GPU an earlier role just left gets time to free up."""
        deadline = time.monotonic() + (self._gpu_settle_s if settle else 0.0)
        while True:
            states = {index: inventory.state(index) for index in target.gpus}
            findings = check_role_gpus(target, states, gpu_count=inventory.count)
            busy = any(state is not None and state.busy for state in states.values())
            if not findings or not busy or time.monotonic() >= deadline or cancel.is_set():
                return findings, states
            time.sleep(0.5)

    runs_cpu_roles: ClassVar[bool] = True

    def refuse(self, target: RoleTarget) -> tuple[str, str] | None:
        if (refusal := super().refuse(target)) is not None:
            return refusal
        nnodes = role_nnodes(target)
        if nnodes <= 1:
            return None
        return (
            f"role {target.name} spans {nnodes} nodes (nnodes: {nnodes}); measuring across nodes is not "
            "supported on one host",
            "measure it where its nodes are (--launcher slurm), measure a single-node variant of the role, "
            "or use --mode estimate for this role",
        )

    def start(self, request: LaunchRequest) -> LocalEngine:
        target = request.target
        port = free_port()
        bootstrap_port = free_port() if needs_bootstrap_port(target) else None
        argv = build_argv(
            target, port=port, bootstrap_port=bootstrap_port, dummy_weights=request.dummy_weights
        )
        env = build_env(target)
        details: dict[str, Any] = {
            "engine_env": added_env(target, env), "ports": {"http": port, "bootstrap": bootstrap_port}}
        if on_cpu(target):
            details["host"] = self._read_host().as_details()  # what the engine sizes its pool from
        Watchdog.prepare()  # before the engine: ends it even if kvcheck is SIGKILLed (watchdog.py)
        try:
            process = EngineProcess(
                argv, env, log_path=request.log_path, on_line=request.on_line, grace_s=request.grace_s
            )
        except OSError as exc:
            raise LaunchError(
                f"could not start the engine: {exc.strerror or exc} ({argv[0]})",
                hint="check engine.command in the manifest (the program must exist on this host)",
                argv=argv,
                details=details,
            ) from exc
        Watchdog.started(process.pgid, request.log_path if request.temporary_log else None)
        return LocalEngine(process, port=port, details=details)
