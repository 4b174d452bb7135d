"""kvcheck.hostmem: the host's memory and NUMA nodes as a CPU engine sizes its pool from them, read bounded."""

from __future__ import annotations

from pathlib import Path

from kvcheck.hostmem import MAX_FILE_BYTES, read_host

MEMINFO = "MemTotal:       65536000 kB\nMemFree:        1024000 kB\nMemAvailable:   32768000 kB\nBuffers: 1 kB\n"


def fake_host(tmp_path: Path, *, meminfo: str | None = MEMINFO, nodes: dict[int, str] | None = None,
              cgroup: tuple[str, str] | None = None) -> dict[str, Path]:
    tmp_path.mkdir(parents=True, exist_ok=True)
    paths = {"meminfo": tmp_path / "meminfo", "node_root": tmp_path / "node", "cgroup_root": tmp_path / "cgroup"}
    if meminfo is not None:
        paths["meminfo"].write_text(meminfo)
    paths["node_root"].mkdir()
    for index, cpulist in (nodes or {}).items():
        folder = paths["node_root"] / f"node{index}"
        folder.mkdir()
        (folder / "cpulist").write_text(cpulist + "\n")
        (folder / "meminfo").write_text(f"Node {index} MemTotal:       32768000 kB\nNode {index} MemFree:   100 kB\n")
    (paths["node_root"] / "possible").write_text("0-3\n")  # not a node folder
    paths["cgroup_root"].mkdir()
    if cgroup is not None:
        (paths["cgroup_root"] / "memory.max").write_text(cgroup[0] + "\n")
        (paths["cgroup_root"] / "memory.current").write_text(cgroup[1] + "\n")
    return paths


def test_the_available_memory_is_divided_among_the_numa_nodes_with_cpus(tmp_path: Path) -> None:
    host = read_host(**fake_host(tmp_path, nodes={0: "0-15,32-47", 1: "16-31", 2: ""}))
    assert host.mem_total_bytes == 65536000 * 1024
    assert host.mem_available_bytes == 32768000 * 1024
    assert [(n.index, n.cpus, n.mem_total_bytes, n.mem_free_bytes) for n in host.nodes] == [
        (0, 32, 32768000 * 1024, 100 * 1024), (1, 16, 32768000 * 1024, 100 * 1024), (2, 0, 32768000 * 1024, 100 * 1024)]
    assert host.cpu_nodes == 2  # a memory-only node (CXL, HBM) takes no rank
    assert host.available_per_node_bytes == 32768000 * 1024 // 2
    assert host.as_details() == {"mem_total_gib": 62.5, "mem_available_gib": 31.25, "cgroup_limit_gib": None,
                                 "numa_nodes": 2, "mem_available_per_node_gib": 15.62}
    assert host.notes == ()


def test_the_cgroup_limit_caps_what_is_available(tmp_path: Path) -> None:
    host = read_host(**fake_host(tmp_path, cgroup=(str(8 * 2**30), str(6 * 2**30))))
    assert host.mem_available_bytes == 2 * 2**30  # as SGLang's get_free_cpu_memory: limit - current
    assert host.mem_total_bytes == 8 * 2**30
    assert host.cgroup_limit_bytes == 8 * 2**30
    assert read_host(**fake_host(tmp_path / "unlimited", cgroup=("max", "123"))).mem_available_bytes == 32768000 * 1024


def test_no_numa_folder_counts_as_one_node(tmp_path: Path) -> None:
    paths = fake_host(tmp_path)
    paths["node_root"] = tmp_path / "absent"
    host = read_host(**paths)
    assert (host.nodes, host.cpu_nodes) == ((), 1)
    assert host.notes == (f"{tmp_path / 'absent'} is not readable: NUMA nodes unknown, counted as 1",)


def test_unreadable_or_oversized_meminfo_gives_no_figure(tmp_path: Path) -> None:
    host = read_host(**fake_host(tmp_path, meminfo=None))
    assert (host.mem_available_bytes, host.available_per_node_bytes) == (None, None)
    assert host.notes == (f"{tmp_path / 'meminfo'} is not readable",)
    (tmp_path / "meminfo").write_text("MemAvailable: 1 kB\n" + "x" * MAX_FILE_BYTES)
    assert read_host(**{**fake_host(tmp_path / "big"), "meminfo": tmp_path / "meminfo"}).mem_available_bytes is None
    (tmp_path / "old").write_text("MemTotal: 100 kB\nMemFree: 10 kB\n")  # a kernel before 3.14
    old = read_host(**{**fake_host(tmp_path / "old-kernel"), "meminfo": tmp_path / "old"})
    assert (old.mem_total_bytes, old.mem_available_bytes) == (102400, None)
    assert old.notes == (f"{tmp_path / 'old'} states no MemAvailable",)


def test_a_malformed_cpulist_counts_no_cpus(tmp_path: Path) -> None:
    host = read_host(**fake_host(tmp_path, nodes={0: "0-3", 1: "7-2", 2: "a,b"}))
    assert [node.cpus for node in host.nodes] == [4, 0, 0]
    assert host.cpu_nodes == 1


def test_this_host_reads_without_error() -> None:
    host = read_host()  # Linux CI: /proc/meminfo is there
    assert host.mem_available_bytes is not None and host.mem_available_bytes > 0
    assert host.cpu_nodes >= 1
