"""GPU inventory: missing, other-type and busy GPUs are KV302 errors; no driver is exit 3."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from kvcheck.backends.measure.launchers.gpus import GpuInventory, check_role_gpus, gpu_type_matches, load_nvml
from kvcheck.errors import GpuInventoryError, MissingExtraError
from tests.doubles.fake_nvml import MIB, FakeGpu, FakeNvml, FakeProcess
from tests.measure.conftest import make_target


@pytest.mark.parametrize(
    ("wanted", "device", "matches"),
    [
        ("H200", "NVIDIA H200", True),
        ("h200", "NVIDIA H200", True),
        ("H100", "NVIDIA H100 80GB HBM3", True),
        ("NVIDIA H100 80GB HBM3", "NVIDIA H100 80GB HBM3", True),
        ("A100-80GB", "NVIDIA A100-SXM4-80GB", True),
        ("A100-80GB", "NVIDIA A100-SXM4-40GB", False),
        ("H20", "NVIDIA H200", False),
        ("H200", "NVIDIA H20", False),
        ("L40", "NVIDIA L40S", False),
        ("L40S", "NVIDIA L40S", True),
        ("B200", "NVIDIA H200", False),
        ("H200-SXM", "NVIDIA H200", True),  # profiles/gpus/H200.yaml aliases
        ("H200-SXM", "NVIDIA H20", False),
        ("", "NVIDIA H200", False),
    ],
)
def test_gpu_type_matches_whole_words(wanted: str, device: str, matches: bool) -> None:
    assert gpu_type_matches(wanted, device) is matches


def states_for(nvml: FakeNvml, indices: tuple[int, ...], proc_root: Path | None = None):
    with GpuInventory(nvml, proc_root=proc_root or Path("/nonexistent")) as inventory:
        return {i: inventory.state(i) for i in indices}, inventory.count


def test_idle_gpus_of_the_right_type_pass() -> None:
    nvml = FakeNvml([FakeGpu(), FakeGpu(name_as_bytes=True)])
    states, count = states_for(nvml, (0, 1))
    assert states[1].name == "NVIDIA H200"
    assert states[0].total_mib == 143771 and states[0].used_mib == 523
    assert check_role_gpus(make_target(gpus=(0, 1), gpu="H200"), states, gpu_count=count) == []
    assert nvml.calls == ["init", "shutdown"]


def test_missing_gpu_is_kv302() -> None:
    states, count = states_for(FakeNvml([FakeGpu(), FakeGpu()]), (1, 2, 3))
    [finding] = check_role_gpus(make_target(gpus=(1, 2, 3)), states, gpu_count=count)
    assert (finding.rule, finding.severity, finding.role) == ("KV302", "error", "prefill")
    assert finding.message == "GPUs 2, 3 not found: this host has 2 GPUs (indices 0-1)"


def test_other_gpu_type_is_kv302() -> None:
    nvml = FakeNvml([FakeGpu(name="NVIDIA H100 80GB HBM3"), FakeGpu(name="NVIDIA H100 80GB HBM3")])
    states, count = states_for(nvml, (0, 1))
    [finding] = check_role_gpus(make_target(gpus=(0, 1), gpu="H200"), states, gpu_count=count)
    assert finding.rule == "KV302"
    assert finding.message.startswith(
        "the manifest says H200, but GPU 0 is NVIDIA H100 80GB HBM3, GPU 1 is NVIDIA H100 80GB HBM3"
    )


def test_busy_gpu_names_the_processes(tmp_path: Path) -> None:
    (tmp_path / "4242").mkdir()
    (tmp_path / "4242" / "comm").write_text("python3\n")
    busy = FakeGpu(used_mib=70000, processes=[FakeProcess(4242, 69000 * MIB), FakeProcess(777, None)])
    states, count = states_for(FakeNvml([FakeGpu(), busy]), (0, 1), proc_root=tmp_path)
    [finding] = check_role_gpus(make_target(gpus=(0, 1)), states, gpu_count=count)
    assert finding.rule == "KV302"
    assert finding.message.startswith(
        "GPU 1 has 70000 MiB of 143771 MiB in use by python3 (pid 4242, 69000 MiB), ? (pid 777): "
    )


def test_memory_held_by_unlisted_processes_is_busy() -> None:
    states, count = states_for(FakeNvml([FakeGpu(used_mib=30000)]), (0,))
    [finding] = check_role_gpus(make_target(gpus=(0,)), states, gpu_count=count)
    assert "in use by processes this host cannot list" in finding.message


def test_missing_wrong_and_busy_are_reported_together() -> None:
    nvml = FakeNvml([FakeGpu(name="NVIDIA L4", used_mib=9000, processes=[FakeProcess(1, 8000 * MIB)])])
    states, count = states_for(nvml, (0, 5))
    findings = check_role_gpus(make_target(gpus=(0, 5), gpu="H200"), states, gpu_count=count)
    assert [f.rule for f in findings] == ["KV302", "KV302", "KV302"]
    assert [f.message.split(":")[0] for f in findings] == [
        "GPU 5 not found",
        "the manifest says H200, but GPU 0 is NVIDIA L4",
        "GPU 0 has 9000 MiB of 143771 MiB in use by ? (pid 1, 8000 MiB)",
    ]


def test_no_driver_is_a_check_error_pointing_to_estimate_mode() -> None:
    with pytest.raises(GpuInventoryError) as caught, GpuInventory(FakeNvml(driver=False)):
        pass
    assert caught.value.exit_code == 3
    assert "NVML Shared Library Not Found" in caught.value.message
    assert "--mode estimate" in caught.value.hint


def test_missing_pynvml_names_the_extra(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", None)
    (tmp_path / "proc" / "driver" / "nvidia").mkdir(parents=True)
    (tmp_path / "proc" / "driver" / "nvidia" / "version").write_text("NVRM version: 570.86.15\n")
    with pytest.raises(MissingExtraError) as caught:
        load_nvml(tmp_path)
    assert caught.value.exit_code == 3
    assert "pip install 'kvcheck[gpu]'" in caught.value.hint


def test_no_gpu_on_this_host_says_so_first_and_points_to_estimate_mode(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", None)
    (tmp_path / "dev").mkdir()
    (tmp_path / "dev" / "nvidiactl").touch()  # a control node alone is not a GPU
    with pytest.raises(GpuInventoryError) as caught:
        load_nvml(tmp_path)
    assert caught.value.exit_code == 3
    assert caught.value.message.startswith("no NVIDIA GPU is visible on this host")
    assert caught.value.hint.startswith("run `kvcheck verify --mode estimate` here (no GPU needed), or measure on "
                                        "a cluster's GPUs with --launcher slurm or --launcher kubernetes")
    (tmp_path / "dev" / "nvidia0").touch()
    with pytest.raises(MissingExtraError):
        load_nvml(tmp_path)


def test_same_name_other_memory_is_kv302() -> None:
    # "H100" matches "NVIDIA H100 NVL" by name, but the NVL card has 94 GB: another pool than an H100 80GB
    nvml = FakeNvml([FakeGpu(name="NVIDIA H100 NVL", total_mib=95830)])
    states, count = states_for(nvml, (0,))
    [found] = check_role_gpus(make_target(gpus=(0,), gpu="H100"), states, gpu_count=count)
    assert (found.rule, found.severity) == ("KV302", "error")
    assert found.message == (
        "the manifest's H100 has 81,559 MiB, but GPU 0 (NVIDIA H100 NVL) has 95,830 MiB: a pool measured "
        "there is not the production pool"
    )
    right = FakeNvml([FakeGpu(name="NVIDIA H100 80GB HBM3", total_mib=81559)])
    states, count = states_for(right, (0,))
    assert check_role_gpus(make_target(gpus=(0,), gpu="H100"), states, gpu_count=count) == []
