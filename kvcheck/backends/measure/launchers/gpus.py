"""GPU inventory through NVML: a role may only be measured on idle GPUs of the manifest's type.

SGLang sizes its pool from the memory free when each scheduler starts (docs/sglang-internals.md,
Memory readings), so memory held by another process shrinks the pool below what production gets,
and another GPU model gives another pool. Both are KV302 errors, found before any engine is started.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kvcheck.errors import GpuInventoryError, MissingExtraError
from kvcheck.model import Finding, RoleTarget
from kvcheck.policy.registry import finding

MIB = 1 << 20
# A CUDA context alone holds ~0.3-0.6 GiB; more than this with no process listed means someone we
# cannot see (another container, another PID namespace) holds memory on the GPU.
UNEXPLAINED_USED_MIB = 1024


@dataclass(frozen=True)
class GpuProcess:
    """A process holding memory on a GPU; `name` from /proc/<pid>/comm ("?" when not visible)."""

    pid: int
    name: str
    used_mib: int | None  # None when the driver does not say (e.g. another container)

    def render(self) -> str:
        used = f", {self.used_mib} MiB" if self.used_mib is not None else ""
        return f"{self.name} (pid {self.pid}{used})"


@dataclass(frozen=True)
class GpuState:
    """What NVML says about one GPU at one moment; memory in MiB."""

    index: int
    name: str
    total_mib: int
    used_mib: int
    processes: tuple[GpuProcess, ...]

    @property
    def busy(self) -> bool:
        """Another process holds memory, or memory is held that no listed process explains."""
        return bool(self.processes) or self.used_mib > UNEXPLAINED_USED_MIB


def nvidia_driver_present(root: Path = Path("/")) -> bool:
    """Whether this host shows an NVIDIA driver (its /proc entry or a /dev/nvidiaN device)."""
    return (root / "proc" / "driver" / "nvidia" / "version").exists() or any(
        path.name[len("nvidia"):].isdigit() for path in (root / "dev").glob("nvidia[0-9]*")
    )


def load_nvml(root: Path = Path("/")) -> Any:
    """Import pynvml (package nvidia-ml-py) only when measure mode needs it.

    On a host without an NVIDIA driver the first thing to say is that there is no GPU here (and
    what runs without one), not which package to install.
    """
    try:
        import pynvml
    except ImportError as exc:
        if not nvidia_driver_present(root):
            raise GpuInventoryError(
                "no NVIDIA GPU is visible on this host (no NVIDIA driver), and measure mode boots each "
                "role's engine on this host's GPUs",
                hint="run `kvcheck verify --mode estimate` here (no GPU needed), or measure on a cluster's "
                "GPUs with --launcher slurm or --launcher kubernetes; on a GPU host, pip install 'kvcheck[gpu]'",
            ) from exc
        raise MissingExtraError(
            "measure mode reads the GPU inventory through NVML, but the Python package nvidia-ml-py "
            "is not installed",
            hint="pip install 'kvcheck[gpu]' (or pass --no-gpu-check when engine.command runs the engine "
            "where this host's NVML cannot see it)",
        ) from exc
    return pynvml


def _text(value: Any) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


def _process_name(pid: int, proc_root: Path) -> str:
    try:
        return (proc_root / str(pid) / "comm").read_text(encoding="utf-8", errors="replace").strip() or "?"
    except OSError:
        return "?"


class GpuInventory:
    """An open NVML session; use as a context manager. Thread-safe reads (NVML is thread-safe)."""

    def __init__(self, nvml: Any | None = None, *, proc_root: Path = Path("/proc")) -> None:
        self._nvml = nvml
        self._proc_root = proc_root
        self._count: int | None = None

    def __enter__(self) -> GpuInventory:
        nvml = self._nvml if self._nvml is not None else load_nvml()
        self._nvml = nvml
        try:
            nvml.nvmlInit()
            self._count = int(nvml.nvmlDeviceGetCount())
        except nvml.NVMLError as exc:
            raise GpuInventoryError(
                f"cannot read the GPU inventory: NVML failed ({_text(exc) or type(exc).__name__}); "
                "measure mode needs an NVIDIA driver on this host",
                hint="run `kvcheck verify --mode estimate` on hosts without GPUs, or --no-gpu-check when "
                "engine.command runs the engine on GPUs this host's driver cannot see",
            ) from exc
        return self

    def __exit__(self, *exc_info: object) -> None:
        if self._count is None:
            return
        nvml = self._session()
        try:
            nvml.nvmlShutdown()
        except nvml.NVMLError:
            pass  # the session is over either way; nothing to clean up on our side
        self._count = None

    @property
    def count(self) -> int:
        if self._count is None:
            raise RuntimeError("GpuInventory used outside its `with` block")
        return self._count

    def _session(self) -> Any:
        """The open NVML module (pynvml has no type information, hence Any)."""
        if self._nvml is None or self._count is None:
            raise RuntimeError("GpuInventory used outside its `with` block")
        return self._nvml

    def state(self, index: int) -> GpuState | None:
        """The GPU at NVML (PCI bus) index `index`, or None when there is no such GPU."""
        nvml = self._session()
        if not 0 <= index < self.count:
            return None
        try:
            handle = nvml.nvmlDeviceGetHandleByIndex(index)
            name = _text(nvml.nvmlDeviceGetName(handle))
            memory = nvml.nvmlDeviceGetMemoryInfo(handle)
            running = list(nvml.nvmlDeviceGetComputeRunningProcesses(handle))
            graphics = getattr(nvml, "nvmlDeviceGetGraphicsRunningProcesses", None)
            if graphics is not None:
                running += [p for p in graphics(handle) if p.pid not in {q.pid for q in running}]
        except nvml.NVMLError as exc:
            raise GpuInventoryError(
                f"cannot read GPU {index} through NVML: {_text(exc) or type(exc).__name__}",
                hint="check the driver with nvidia-smi; pass --no-gpu-check only when the engine does not "
                "run on this host's GPUs",
            ) from exc
        processes = tuple(
            GpuProcess(
                pid=int(p.pid),
                name=_process_name(int(p.pid), self._proc_root),
                used_mib=None if getattr(p, "usedGpuMemory", None) is None else int(p.usedGpuMemory) // MIB,
            )
            for p in running
        )
        return GpuState(
            index=index,
            name=name,
            total_mib=int(memory.total) // MIB,
            used_mib=int(memory.used) // MIB,
            processes=processes,
        )


def _tokens(name: str) -> list[str]:
    return [t for t in re.split(r"[^a-z0-9]+", name.lower()) if t and t != "nvidia"]


def _same_profile(wanted: str, device_name: str) -> bool:
    """Both names are the same GPU profile's name or aliases (profiles/gpus/*.yaml)."""
    from kvcheck.errors import KvcheckError
    from kvcheck.gpus import default_profiles

    try:
        profiles = default_profiles()
    except KvcheckError:
        return False  # no profile data installed: the word match alone decides
    profile = profiles.find(wanted)
    return profile is not None and profiles.find(device_name) is profile


def _profile_memory_mib(wanted: str) -> int | None:
    """memory.total of the GPU profile the manifest's name resolves to, when there is one."""
    from kvcheck.errors import KvcheckError
    from kvcheck.gpus import default_profiles

    try:
        profile = default_profiles().find(wanted)
    except KvcheckError:
        return None
    return profile.memory_total_mib if profile is not None else None


def gpu_type_matches(wanted: str, device_name: str) -> bool:
    """True when the device is the GPU type the manifest names.

    Every word of the manifest's name must appear in the device's name ("H100" matches "NVIDIA H100
    80GB HBM3", "A100-80GB" matches "NVIDIA A100-SXM4-80GB", "H20" does not match "NVIDIA H200"), or
    both names must belong to the same GPU profile ("H200-SXM" and "NVIDIA H200").
    """
    wanted_tokens = _tokens(wanted)
    device_tokens = set(_tokens(device_name))
    if wanted_tokens and all(token in device_tokens for token in wanted_tokens):
        return True
    return bool(wanted_tokens) and _same_profile(wanted, device_name)


def check_role_gpus(
    target: RoleTarget, states: dict[int, GpuState | None], *, gpu_count: int
) -> list[Finding]:
    """KV302 findings for a role's GPUs: missing, of another type, or held by other processes."""
    location = target.arg_location("gpus", "gpu")
    findings: list[Finding] = []
    if not target.gpus:
        return [
            finding(
                "KV302",
                target.name,
                f"role {target.name} lists no GPUs to measure on",
                hint=f"set roles.{target.name}.gpus to the GPU indices the role uses on this host",
                location=target.location,
            )
        ]
    missing = [i for i in target.gpus if states.get(i) is None]
    if missing:
        findings.append(
            finding(
                "KV302",
                target.name,
                f"GPU{'s' if len(missing) > 1 else ''} {', '.join(map(str, missing))} not found: this host "
                f"has {gpu_count} GPU{'s' if gpu_count != 1 else ''} (indices 0-{gpu_count - 1})"
                if gpu_count
                else f"GPUs {', '.join(map(str, missing))} not found: NVML lists no GPU on this host",
                hint="measure on a host with the role's GPUs, or change the role's gpus list",
                location=location,
            )
        )
    present = [s for i in target.gpus if (s := states.get(i)) is not None]
    if target.gpu:
        wrong = [s for s in present if not gpu_type_matches(target.gpu, s.name)]
        if wrong:
            names = ", ".join(f"GPU {s.index} is {s.name}" for s in wrong)
            findings.append(
                finding(
                    "KV302",
                    target.name,
                    f"the manifest says {target.gpu}, but {names}: a pool measured there is not the "
                    "production pool",
                    hint="measure on the GPU type you deploy, or correct the manifest's gpu",
                    location=location,
                )
            )
        profile_mib = _profile_memory_mib(target.gpu)
        if profile_mib:
            # Same name, other memory (an "H100 NVL" 94 GB for an H100 80 GB): another pool.
            other = [
                s for s in present if s not in wrong and abs(s.total_mib - profile_mib) > 0.03 * profile_mib
            ]
            if other:
                names = ", ".join(f"GPU {s.index} ({s.name}) has {s.total_mib:,} MiB" for s in other)
                findings.append(
                    finding(
                        "KV302",
                        target.name,
                        f"the manifest's {target.gpu} has {profile_mib:,} MiB, but {names}: a pool "
                        "measured there is not the production pool",
                        hint="measure on the GPU model you deploy, or name that model in the manifest's gpu",
                        location=location,
                    )
                )
    busy = [s for s in present if s.busy]
    if busy:
        parts = []
        for s in busy:
            held = ", ".join(p.render() for p in s.processes) or "processes this host cannot list"
            parts.append(f"GPU {s.index} has {s.used_mib} MiB of {s.total_mib} MiB in use by {held}")
        findings.append(
            finding(
                "KV302",
                target.name,
                "; ".join(parts) + ": SGLang sizes the pool from free memory, so a busy GPU gives a smaller "
                "pool than production",
                hint="stop those processes or choose idle GPUs, then verify again",
                location=location,
            )
        )
    return findings
