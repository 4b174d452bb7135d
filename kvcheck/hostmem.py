"""This host's memory and NUMA nodes, as a CPU role's engine sizes its pool from them.

A CPU deployment (SGLang `--device cpu`, vLLM's CPU backend) keeps its weights and KV cache in host
RAM: SGLang takes the memory available (MemAvailable, capped by the cgroup v2 limit) divided by the
NUMA nodes that have CPUs, and binds one rank to each such node; vLLM allocates its KV space
(VLLM_CPU_KVCACHE_SPACE) from the same RAM. Measure mode reads these figures before a CPU role boots
(instead of NVML), to refuse a host that cannot hold the role and to record what its pool was sized
from.

Every read is bounded (bytes per file, nodes listed): a /proc or /sys entry is never trusted to be
small. A figure that cannot be read is None, never a guess; callers fail closed on None.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

MEMINFO = Path("/proc/meminfo")
NODE_ROOT = Path("/sys/devices/system/node")
CGROUP_ROOT = Path("/sys/fs/cgroup")

MAX_FILE_BYTES = 64 * 1024  # /proc/meminfo is ~1.5 KiB; a node's meminfo ~1 KiB; a cpulist a few bytes
MAX_NODES = 1024  # Linux's MAX_NUMNODES on the largest configurations
MAX_CPUS = 1 << 16

_NODE = re.compile(r"node(\d{1,4})")
_MEMINFO_LINE = re.compile(r"^(?:Node \d+ )?(\w+):\s+(\d{1,20}) kB$")


@dataclass(frozen=True)
class NumaNode:
    """One NUMA node: its CPUs (as the kernel lists them) and its memory, bytes (None when unreadable)."""

    index: int
    cpus: int
    mem_total_bytes: int | None
    mem_free_bytes: int | None


@dataclass(frozen=True)
class HostMemory:
    """The host's RAM as a CPU engine sees it; None where the figure could not be read."""

    mem_total_bytes: int | None
    mem_available_bytes: int | None  # MemAvailable, capped by the cgroup's free room (SGLang's get_free_cpu_memory)
    cgroup_limit_bytes: int | None  # memory.max (None: no limit, or no cgroup v2)
    nodes: tuple[NumaNode, ...]  # every NUMA node the kernel lists (empty when /sys shows none)
    notes: tuple[str, ...] = ()  # what could not be read, and why

    @property
    def cpu_nodes(self) -> int:
        """NUMA nodes with CPUs: SGLang binds one rank to each (get_cpu_ids_by_node); 1 when /sys lists none."""
        return sum(1 for node in self.nodes if node.cpus > 0) or 1

    @property
    def available_per_node_bytes(self) -> int | None:
        """What SGLang's get_available_gpu_memory("cpu") reports to each rank: available / CPU nodes."""
        if self.mem_available_bytes is None:
            return None
        return self.mem_available_bytes // self.cpu_nodes

    def as_details(self) -> dict[str, int | float | None]:
        """The report's `details.host`: GiB, rounded to 0.01."""

        def gib(value: int | None) -> float | None:
            return round(value / 2**30, 2) if value is not None else None

        return {
            "mem_total_gib": gib(self.mem_total_bytes),
            "mem_available_gib": gib(self.mem_available_bytes),
            "cgroup_limit_gib": gib(self.cgroup_limit_bytes),
            "numa_nodes": self.cpu_nodes,
            "mem_available_per_node_gib": gib(self.available_per_node_bytes),
        }


def _read_small(path: Path) -> str | None:
    """A /proc or /sys file's text, at most MAX_FILE_BYTES; None when it cannot be read."""
    try:
        with path.open("rb") as handle:
            data = handle.read(MAX_FILE_BYTES + 1)
    except OSError:
        return None
    if len(data) > MAX_FILE_BYTES:
        return None
    return data.decode("ascii", errors="replace")


def _meminfo(text: str) -> dict[str, int]:
    """`Key: N kB` lines (also `Node 0 Key: N kB`), bytes."""
    fields: dict[str, int] = {}
    for line in text.splitlines():
        match = _MEMINFO_LINE.match(line.strip())
        if match:
            fields.setdefault(match[1], int(match[2]) * 1024)
    return fields


def _cpulist_count(text: str) -> int | None:
    """How many CPUs a kernel cpulist names ("0-3,8,10-11" is 7); None when it is not one."""
    text = text.strip()
    if not text:
        return 0
    count = 0
    for part in text.split(","):
        low, sep, high = part.partition("-")
        if not low.isdigit() or (sep and not high.isdigit()):
            return None
        first, last = int(low), int(high) if sep else int(low)
        if last < first:
            return None
        count += last - first + 1
        if count > MAX_CPUS:
            return None
    return count


def _cgroup_int(name: str, root: Path) -> int | None:
    text = _read_small(root / name)
    if text is None or not text.strip().isdigit():
        return None  # "max" (no limit), no cgroup v2, or unreadable
    return int(text.strip())


def _nodes(root: Path, notes: list[str]) -> tuple[NumaNode, ...]:
    try:
        entries = []
        with os.scandir(root) as scan:
            for entry in scan:
                match = _NODE.fullmatch(entry.name)
                if match:
                    entries.append(int(match[1]))
                    if len(entries) > MAX_NODES:
                        notes.append(f"{root} lists more than {MAX_NODES} NUMA nodes: read the first {MAX_NODES}")
                        break
    except OSError:
        notes.append(f"{root} is not readable: NUMA nodes unknown, counted as 1")
        return ()
    nodes = []
    for index in sorted(entries)[:MAX_NODES]:
        folder = root / f"node{index}"
        cpulist = _read_small(folder / "cpulist")
        cpus = _cpulist_count(cpulist) if cpulist is not None else None
        mem = _meminfo(_read_small(folder / "meminfo") or "")
        nodes.append(NumaNode(index, cpus or 0, mem.get("MemTotal"), mem.get("MemFree")))
    return tuple(nodes)


def read_host(
    *, meminfo: Path = MEMINFO, node_root: Path = NODE_ROOT, cgroup_root: Path = CGROUP_ROOT
) -> HostMemory:
    """This host's memory and NUMA nodes now (the paths are parameters for tests)."""
    notes: list[str] = []
    text = _read_small(meminfo)
    fields = _meminfo(text) if text is not None else {}
    if text is None:
        notes.append(f"{meminfo} is not readable")
    total = fields.get("MemTotal")
    available = fields.get("MemAvailable")
    if text is not None and available is None:
        notes.append(f"{meminfo} states no MemAvailable")
    limit = _cgroup_int("memory.max", cgroup_root)
    current = _cgroup_int("memory.current", cgroup_root)
    if available is not None and limit is not None and current is not None:
        available = min(available, max(0, limit - current))  # as SGLang's get_free_cpu_memory
    if total is not None and limit is not None:
        total = min(total, limit)
    return HostMemory(total, available, limit, _nodes(node_root, notes), tuple(notes))
