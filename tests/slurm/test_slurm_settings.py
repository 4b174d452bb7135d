"""What the Slurm launcher asks Slurm for, from the manifest's launcher block (no cluster needed)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from kvcheck.backends.measure.launchers.slurm import (
    NODE_RANK_SCRIPT,
    SlurmContainer,
    SlurmSettings,
    gpus_per_node,
    salloc_argv,
    srun_argv,
    time_limit_minutes,
)
from tests.measure.conftest import REPO, make_target
from tests.slurm.conftest import write_manifest


def test_salloc_asks_for_nodes_gpus_one_task_per_node_and_a_time_limit() -> None:
    settings = SlurmSettings(
        partition="gpu", account="ml", qos="high", reservation="kv", constraint="h100", gres_type="h100",
        salloc_options=("--exclusive",),
    )  # fmt: skip
    target = make_target(args={"tp_size": 16, "nnodes": 2}, gpus=tuple(range(8)))
    assert salloc_argv(target, settings, name="kvcheck-1-prefill", minutes=31) == (
        "salloc", "--no-shell", "--job-name=kvcheck-1-prefill", "--nodes=2", "--ntasks-per-node=1",
        "--gres=gpu:h100:8", "--time=31", "--partition=gpu", "--account=ml", "--qos=high",
        "--reservation=kv", "--constraint=h100", "--exclusive",
    )  # fmt: skip
    per_node = SlurmSettings(gpus_flag="gpus-per-node")
    assert "--gpus-per-node=8" in salloc_argv(target, per_node, name="n", minutes=1)


def test_srun_runs_the_engine_on_every_node_with_its_own_node_rank() -> None:
    settings = SlurmSettings(
        srun_options=("--mpi=none",),
        container=SlurmContainer(image="lmsysorg/sglang:v0.5.23", mounts=("/models:/models",), workdir="/w"),
    )
    argv = srun_argv("42", 2, settings, ("python3", "-m", "sglang.launch_server", "--tp-size", "16"))
    assert argv == (
        "srun", "--jobid=42", "--nodes=2", "--ntasks=2", "--ntasks-per-node=1", "--kill-on-bad-exit=1",
        "--container-image=lmsysorg/sglang:v0.5.23", "--container-mounts=/models:/models",
        "--container-workdir=/w", "--mpi=none",
        "sh", "-c", 'exec "$@" --node-rank "$SLURM_NODEID"', "kvcheck-engine",
        "python3", "-m", "sglang.launch_server", "--tp-size", "16",
    )  # fmt: skip
    # the script reaches the task's shell as one argument: no shell on kvcheck's side expands it
    assert NODE_RANK_SCRIPT.count("$") == 2
    one = srun_argv("7", 1, SlurmSettings(), ("engine",))
    assert one[-1] == "engine" and "sh" not in one  # one node: no node rank at all


def test_time_limit_outlives_the_timeout_and_grace_in_whole_minutes() -> None:
    assert time_limit_minutes(1800, 15) == 31
    assert time_limit_minutes(10, 15) == 1
    assert time_limit_minutes(60, 15) == 2


def test_gpus_per_node_from_the_setting_the_gpu_list_or_the_layout() -> None:
    assert gpus_per_node(make_target(gpus=(0, 1)), SlurmSettings(gpus_per_node=8)) == 8
    assert gpus_per_node(make_target(gpus=(0, 1, 2, 3)), SlurmSettings()) == 4
    layout = make_target(args={"tp_size": 8, "pp_size": 2, "nnodes": 2}, gpus=())
    assert gpus_per_node(layout, SlurmSettings()) == 8
    replicas = make_target(args={"tp_size": 2, "dp_size": 4}, gpus=())
    assert gpus_per_node(replicas, SlurmSettings()) == 8
    attention_dp = make_target(args={"tp_size": 8, "dp_size": 8, "enable_dp_attention": True}, gpus=())
    assert gpus_per_node(attention_dp, SlurmSettings()) == 8


def _verify(manifest: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "kvcheck", "verify", str(manifest), *extra],
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_an_unknown_launcher_setting_is_exit_2_with_file_and_line(tmp_path: Path) -> None:
    launcher = "launcher:\n  kind: slurm\n  slurm:\n    partition: gpu\n    partitoin: gpu\n"
    manifest = write_manifest(tmp_path, "  prefill:\n    gpus: [0]\n", launcher=launcher)
    done = _verify(manifest)
    assert done.returncode == 2, done.stderr
    assert f"{manifest}:18:5: launcher.slurm.partitoin: unknown key 'partitoin' (did you mean 'partition'?)" in done.stderr


def test_the_local_launcher_still_refuses_several_nodes(tmp_path: Path) -> None:
    manifest = write_manifest(tmp_path, "  prefill:\n    gpus: [0]\n    args: {tp-size: 2, nnodes: 2}\n")
    done = _verify(manifest, "--launcher", "local", "--no-gpu-check", "--format", "json")
    assert done.returncode == 3, done.stderr
    [finding] = [f for f in json.loads(done.stdout)["findings"] if f["rule"] == "KV301"]
    assert finding["message"] == (
        "role prefill spans 2 nodes (nnodes: 2); measuring across nodes is not supported on one host"
    )
    assert finding["hint"].startswith("measure it where its nodes are (--launcher slurm)")
