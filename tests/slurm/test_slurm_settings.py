"""What the Slurm launcher asks Slurm for, from the manifest's launcher block (no cluster needed)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from kvcheck.backends.measure.launchers.slurm import (
    SlurmContainer,
    SlurmSettings,
    gpus_per_node,
    salloc_argv,
    srun_argv,
    task_script,
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
        "srun", "--jobid=42", "--nodes=2", "--ntasks=2", "--ntasks-per-node=1", "--kill-on-bad-exit=0", "--wait=5",
        "--container-image=lmsysorg/sglang:v0.5.23", "--container-mounts=/models:/models",
        "--container-workdir=/w", "--mpi=none",
        "sh", "-c", 'trap : TERM INT HUP; "$@" --node-rank "$SLURM_NODEID"; status=$?; sleep 1; exit $status',
        "kvcheck-engine", "python3", "-m", "sglang.launch_server", "--tp-size", "16",
    )  # fmt: skip
    one = srun_argv("7", 1, SlurmSettings(), ("engine",))
    assert one[-5:] == ("sh", "-c", 'trap : TERM INT HUP; "$@"; status=$?; sleep 1; exit $status',
                        "kvcheck-engine", "engine")  # fmt: skip  (one node: no node rank at all)


ECHO_ARGS = "import json, sys; print(json.dumps(sys.argv[1:]), flush=True)"


def _task(nnodes: int, *engine: str, node: str = "1") -> subprocess.Popen[str]:
    """The task's shell as slurmstepd runs it: `sh -c SCRIPT kvcheck-engine ENGINE...`."""
    return subprocess.Popen(
        ["sh", "-c", task_script(nnodes), "kvcheck-engine", *engine],
        env={**os.environ, "SLURM_NODEID": node},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )


def test_the_task_shell_passes_the_engines_argv_untouched_and_adds_its_own_node_rank() -> None:
    task = _task(2, sys.executable, "-c", ECHO_ARGS, "--served-model-name", "a b $HOME `id` 'q'", node="3")
    out, _ = task.communicate(timeout=30)
    assert json.loads(out) == ["--served-model-name", "a b $HOME `id` 'q'", "--node-rank", "3"]
    assert task.returncode == 0
    task = _task(1, sys.executable, "-c", ECHO_ARGS, "--port", "1")
    assert json.loads(task.communicate(timeout=30)[0]) == ["--port", "1"]


def test_the_task_outlives_its_engine_and_exits_as_it_did() -> None:
    # an engine killed by a signal: the task exits 128 + 9, a second later, with every line the engine wrote
    script = "import os, signal; print('ValueError: no memory for the KV cache', flush=True); os.kill(os.getpid(), 9)"
    start = time.monotonic()
    task = _task(2, sys.executable, "-c", script)
    out, _ = task.communicate(timeout=30)
    assert task.returncode == 137
    assert out.startswith("ValueError: no memory for the KV cache\n")  # then dash's own "Killed"
    assert time.monotonic() - start >= 1.0  # srun may stop reading output once the last task has ended
    task = _task(1, sys.executable, "-c", "raise SystemExit(3)")
    assert task.wait(timeout=30) == 3


def test_a_signal_to_the_task_reaches_the_engine_and_the_task_waits_for_it() -> None:
    # Slurm signals every process of the step: the engine gets SIGTERM at its default (it drains and
    # exits 0 here), and the shell's trap holds the task until the engine has ended
    script = (
        "import signal, sys, time\n"
        "def bye(*_): print('drained', flush=True); time.sleep(0.5); sys.exit(0)\n"
        "assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL\n"
        "signal.signal(signal.SIGTERM, bye)\n"
        "print('up', flush=True)\n"
        "time.sleep(60)\n"
    )
    task = _task(2, sys.executable, "-c", script)
    assert task.stdout is not None and task.stdout.readline() == "up\n"
    os.killpg(task.pid, signal.SIGTERM)
    out, _ = task.communicate(timeout=30)
    assert (task.returncode, out) == (0, "drained\n")


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


def test_vllms_task_shell_adds_headless_on_every_node_but_the_head() -> None:
    from kvcheck.engines import get_engine

    script = task_script(2, get_engine("vllm"))
    assert script == ('trap : TERM INT HUP; [ "$SLURM_NODEID" = 0 ] || set -- "$@" --headless; "$@" --node-rank '
                      '"$SLURM_NODEID"; status=$?; sleep 1; exit $status')
    for node, expected in (("0", ["--port", "1", "--node-rank", "0"]),
                           ("1", ["--port", "1", "--headless", "--node-rank", "1"]),
                           ("3", ["--port", "1", "--headless", "--node-rank", "3"])):
        task = subprocess.Popen(["sh", "-c", script, "kvcheck-engine", sys.executable, "-c", ECHO_ARGS, "--port", "1"],
                                env={**os.environ, "SLURM_NODEID": node}, stdout=subprocess.PIPE, text=True)
        assert json.loads(task.communicate(timeout=30)[0]) == expected
    assert task_script(1, get_engine("vllm")) == 'trap : TERM INT HUP; "$@"; status=$?; sleep 1; exit $status'


def test_a_vllm_roles_gpus_per_node_come_from_vllms_own_parallel_sizes() -> None:
    import dataclasses

    def vllm(args: dict[str, object]) -> int:
        target = dataclasses.replace(make_target(args=args, gpus=()), engine="vllm", engine_version="0.32.0")
        return gpus_per_node(target, SlurmSettings())

    assert vllm({"tensor_parallel_size": 8, "pipeline_parallel_size": 2, "nnodes": 2}) == 8
    assert vllm({"tensor_parallel_size": 2, "data_parallel_size": 4}) == 8
    assert vllm({"tp_size": 8}) == 1  # SGLang's name is no vLLM flag: one GPU, as vLLM would run it


def test_a_cpu_role_asks_slurm_for_no_gpu_unless_the_settings_do() -> None:
    import dataclasses

    target = dataclasses.replace(make_target(args={}, gpus=()), engine="vllm", engine_version="0.32.0", device="cpu")
    argv = salloc_argv(target, SlurmSettings(), name="n", minutes=1)
    assert argv == ("salloc", "--no-shell", "--job-name=n", "--nodes=1", "--ntasks-per-node=1", "--time=1")
    assert "--gres=gpu:2" in salloc_argv(target, SlurmSettings(gpus_per_node=2), name="n", minutes=1)
