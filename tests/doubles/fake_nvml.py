"""A stand-in for the `pynvml` module (nvidia-ml-py): the calls kvcheck's GPU inventory makes.

Devices are given as FakeGpu values; `driver=False` makes nvmlInit fail as it does on a host without
an NVIDIA driver. Memory is in bytes, as NVML reports it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

MIB = 1 << 20


class NVMLError(Exception):
    """pynvml.NVMLError: the base of every NVML failure."""


class NVMLError_LibraryNotFound(NVMLError):  # noqa: N801 - pynvml's spelling
    def __str__(self) -> str:
        return "NVML Shared Library Not Found"


@dataclass
class FakeProcess:
    pid: int
    usedGpuMemory: int | None  # noqa: N815 - pynvml's spelling


@dataclass
class FakeMemory:
    total: int
    used: int
    free: int


@dataclass
class FakeGpu:
    name: str = "NVIDIA H200"
    total_mib: int = 143771
    used_mib: int = 523
    processes: list[FakeProcess] = field(default_factory=list)
    name_as_bytes: bool = False


class FakeNvml:
    """Module-like object with the pynvml functions kvcheck calls."""

    NVMLError = NVMLError

    def __init__(self, gpus: list[FakeGpu] | None = None, *, driver: bool = True) -> None:
        self.gpus = list(gpus or [])
        self.driver = driver
        self.initialised = 0
        self.calls: list[str] = []

    def nvmlInit(self) -> None:  # noqa: N802
        self.calls.append("init")
        if not self.driver:
            raise NVMLError_LibraryNotFound()
        self.initialised += 1

    def nvmlShutdown(self) -> None:  # noqa: N802
        self.calls.append("shutdown")
        self.initialised -= 1

    def nvmlDeviceGetCount(self) -> int:  # noqa: N802
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> FakeGpu:  # noqa: N802
        if not 0 <= index < len(self.gpus):
            raise NVMLError("Invalid Argument")
        return self.gpus[index]

    def nvmlDeviceGetName(self, gpu: FakeGpu) -> str | bytes:  # noqa: N802
        return gpu.name.encode() if gpu.name_as_bytes else gpu.name

    def nvmlDeviceGetMemoryInfo(self, gpu: FakeGpu) -> FakeMemory:  # noqa: N802
        return FakeMemory(
            total=gpu.total_mib * MIB, used=gpu.used_mib * MIB, free=(gpu.total_mib - gpu.used_mib) * MIB
        )

    def nvmlDeviceGetComputeRunningProcesses(self, gpu: FakeGpu) -> list[FakeProcess]:  # noqa: N802
        return list(gpu.processes)

    def nvmlDeviceGetGraphicsRunningProcesses(self, gpu: FakeGpu) -> list[FakeProcess]:  # noqa: N802
        return []
