"""`kvcheck verify --launcher slurm` against a real two-node Slurm cluster, the engine double as the engine."""

from __future__ import annotations

import signal
import subprocess
import time
from pathlib import Path

from tests.slurm.conftest import (
    REPO,
    Cluster,
    PidFile,
    kvcheck_argv,
    kvcheck_env,
    run_kvcheck,
    write_manifest,
)


def _roles(report: dict) -> dict[str, dict]:
    return {role["name"]: role for role in report["roles"]}


def _kv301(report: dict) -> list[str]:
    return [f["message"] for f in report["findings"] if f["rule"] == "KV301"]


def test_two_node_prefill_and_one_node_decode_are_measured_together(
    cluster: Cluster, pidfile: PidFile, tmp_path: Path
) -> None:
    # Each role waits, before it says it is ready, for the file the other creates as it starts:
    # the run passes only if both allocations ran at the same time.
    roles = (
        "  prefill:\n"
        "    gpus: [0, 1, 2, 3]\n"
        "    args: {tp-size: 8, nnodes: 2, disaggregation-mode: prefill}\n"
        f"    env: {{FAKE_SGLANG_TOUCH: {tmp_path}/prefill.up, FAKE_SGLANG_WAIT_FOR: {tmp_path}/decode.up}}\n"
        "  decode:\n"
        "    gpus: [0, 1]\n"
        "    args: {tp-size: 2, disaggregation-mode: decode}\n"
        f"    env: {{FAKE_SGLANG_TOUCH: {tmp_path}/decode.up, FAKE_SGLANG_WAIT_FOR: {tmp_path}/prefill.up}}\n"
    )
    manifest = write_manifest(tmp_path, roles, launcher="launcher:\n  slurm: {partition: debug}\n")
    code, report, err = run_kvcheck(cluster, manifest, "--timeout", "60")
    assert code == 0, err + str(_kv301(report))
    prefill, decode = _roles(report)["prefill"], _roles(report)["decode"]
    assert (prefill["status"], prefill["pool_tokens"]) == ("pass", 947824)
    assert (decode["status"], decode["pool_tokens"]) == ("pass", 947824)
    slurm = prefill["details"]["slurm"]
    assert slurm["nodes"] == ["n1", "n2"] and slurm["head"] == "n1"
    assert slurm["address"].startswith("10.77.0.11:")  # the head node's NodeAddr answered /server_info
    assert slurm["salloc"][:2] == ["salloc", "--no-shell"]
    for option in ("--nodes=2", "--ntasks-per-node=1", "--gres=gpu:4", "--partition=debug", "--time=2"):
        # --time: 60 s timeout + 15 s grace + 15 s margin, in whole minutes
        assert option in slurm["salloc"]
    assert slurm["srun"][-4:-1] == ["--nnodes", "2", "--dist-init-addr"]
    assert slurm["srun"][-1].startswith("10.77.0.11:")  # the allocation's first node
    [script] = [arg for arg in slurm["srun"] if "--node-rank" in arg]
    assert '"$@" --node-rank "$SLURM_NODEID";' in script  # expanded by each task's own shell
    assert prefill["details"]["server_info"]["endpoint"] == "/server_info"
    # the head's final line and every rank's allocation line, from both nodes' tasks through srun (the head's
    # two lines agree, so the other ranks' allocation lines count as final)
    assert prefill["details"]["log_ranks"] == [{"rank": "TP0", "pool_tokens": 947824, "context_len": 131072}] + [
        {"rank": f"TP{i}", "pool_tokens": 947824, "context_len": None} for i in range(1, 8)]
    assert sorted(prefill["details"]["kv_allocated_tokens"]) == sorted(f"TP{i}" for i in range(8))
    assert decode["details"]["slurm"]["nodes"] in (["n1"], ["n2"])
    jobs = [prefill["details"]["slurm"]["job_id"], decode["details"]["slurm"]["job_id"]]
    assert jobs[0] != jobs[1]
    assert [prefill["details"]["slurm"]["state"], decode["details"]["slurm"]["state"]] == ["CANCELLED"] * 2
    assert not set(jobs) & set(cluster.live_jobs())
    # launcher + 4 schedulers + detokenizer on each of 2 nodes; launcher + 2 + 1 for decode
    assert len(pidfile.pids()) == 16
    assert pidfile.survivors() == []


def test_a_hanging_role_times_out_with_exit_3_and_its_job_is_gone(
    cluster: Cluster, pidfile: PidFile, tmp_path: Path
) -> None:
    roles = "  prefill:\n    gpus: [0, 1]\n    args: {tp-size: 4, nnodes: 2}\n"
    manifest = write_manifest(tmp_path, roles)
    start = time.monotonic()
    code, report, err = run_kvcheck(cluster, manifest, "--timeout", "5", FAKE_SGLANG_MODE="hang")
    elapsed = time.monotonic() - start
    assert code == 3, err
    [message] = _kv301(report)
    assert message.startswith("the engine did not report its pool within 5 s (phase: loading weights)")
    job = _roles(report)["prefill"]["details"]["slurm"]["job_id"]
    assert job not in cluster.live_jobs()
    assert cluster.state(job) == "CANCELLED"
    assert pidfile.pids() and pidfile.survivors() == []
    assert elapsed < 60, elapsed  # grace 15 s, Slurm's KillWait 5 s: never the job's time limit


def test_a_crash_on_node_1_is_exit_3_with_the_engines_words(
    cluster: Cluster, pidfile: PidFile, tmp_path: Path
) -> None:
    roles = "  prefill:\n    gpus: [0, 1]\n    args: {tp-size: 4, nnodes: 2}\n"
    manifest = write_manifest(tmp_path, roles)
    code, report, err = run_kvcheck(
        cluster, manifest, "--timeout", "60", FAKE_SGLANG_MODE="oom", FAKE_SGLANG_MODE_NODE="1"
    )
    assert code == 3, err
    [message] = _kv301(report)
    assert message.startswith("the engine exited with status ")
    assert "Loaded weights leave no GPU memory for the KV cache" in message
    job = _roles(report)["prefill"]["details"]["slurm"]["job_id"]
    assert f"(Slurm job {job}: " in message
    assert job not in cluster.live_jobs()
    assert pidfile.survivors() == []


def test_more_nodes_than_the_partition_has_is_exit_3_at_once(cluster: Cluster, tmp_path: Path) -> None:
    roles = "  prefill:\n    gpus: [0]\n    args: {tp-size: 3, nnodes: 3}\n"
    manifest = write_manifest(tmp_path, roles)
    start = time.monotonic()
    code, report, err = run_kvcheck(cluster, manifest, "--timeout", "600")
    assert code == 3, err
    assert time.monotonic() - start < 30  # not the timeout
    [message] = _kv301(report)
    job = _roles(report)["prefill"]["details"]["slurm"]["job_id"]
    # slurmctld says PartitionConfig or PartitionNodeLimit, depending on when its scheduler looked
    assert message.startswith(f"Slurm cannot run job {job} as requested: it stays pending with reason Partition")
    assert "the role asks for 3 node(s) with 1 GPU(s) each" in message
    assert job not in cluster.live_jobs()


def test_a_partition_limit_the_role_exceeds_is_exit_3_with_slurms_reason(cluster: Cluster, tmp_path: Path) -> None:
    roles = "  prefill:\n    gpus: [0, 1]\n    args: {tp-size: 4, nnodes: 2}\n"
    manifest = write_manifest(tmp_path, roles, launcher="launcher:\n  slurm: {partition: small}\n")
    code, report, err = run_kvcheck(cluster, manifest, "--timeout", "600")
    assert code == 3, err
    [message] = _kv301(report)
    assert "it stays pending with reason Partition" in message


def test_more_gpus_than_a_node_has_is_exit_3_with_slurms_message(cluster: Cluster, tmp_path: Path) -> None:
    roles = "  prefill:\n    gpus: [0]\n"
    launcher = "launcher:\n  kind: slurm\n  slurm: {gpus_per_node: 16, gres_type: null}\n"
    manifest = write_manifest(tmp_path, roles, launcher=launcher)
    code, report, err = run_kvcheck(cluster, manifest, "--timeout", "600")
    assert code == 3, err
    [message] = _kv301(report)
    assert message.startswith("Slurm did not allocate the role's nodes (salloc exited with status 1):")
    assert "Requested node configuration is not available" in message


def test_no_reachable_scheduler_is_exit_3_with_slurms_message(cluster: Cluster, tmp_path: Path) -> None:
    # A copy of the cluster's configuration whose controller port nothing listens on.
    conf = tmp_path / "slurm.conf"
    lines = cluster.conf.read_text().splitlines()
    conf.write_text("\n".join("SlurmctldPort=6999" if line.startswith("SlurmctldPort=") else line for line in lines))
    manifest = write_manifest(tmp_path, "  prefill:\n    gpus: [0]\n")
    code, report, err = run_kvcheck(Cluster(conf), manifest, "--timeout", "600")
    assert code == 3, err
    [message] = _kv301(report)
    assert "Unable to contact slurm controller (connect failure)" in message


def _two_roles_hanging(
    cluster: Cluster, pidfile: PidFile, tmp_path: Path, *, timeout: str, mode: str
) -> tuple[subprocess.Popen[str], list[str]]:
    """kvcheck measuring a 2-node prefill and a 1-node decode whose engines hang in loading: returned
    once every engine is up, with the two job ids."""
    roles = "  prefill:\n    gpus: [0, 1]\n    args: {tp-size: 4, nnodes: 2}\n  decode:\n    gpus: [0]\n"
    proc = subprocess.Popen(
        kvcheck_argv(write_manifest(tmp_path, roles), "--timeout", timeout),
        cwd=REPO,
        env=kvcheck_env(cluster, FAKE_SGLANG_MODE=mode),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 60
        while len(pidfile.pids()) < 2 * 4 + 3:  # both roles' engines are up (and hang in loading)
            assert proc.poll() is None and time.monotonic() < deadline, "engines did not start"
            time.sleep(0.1)
        jobs = [job for job, name in cluster.live_jobs().items() if name.startswith("kvcheck-")]
        assert len(jobs) == 2
    except BaseException:
        proc.kill()
        proc.wait()
        raise
    return proc, jobs


def test_kvcheck_killed_with_sigkill_has_its_watchdog_cancel_every_job(
    cluster: Cluster, pidfile: PidFile, tmp_path: Path
) -> None:
    # SIGKILL runs no cleanup in kvcheck; its watchdog sees the end of its pipe and cancels each job by
    # its unique name: scancel --signal=TERM at once, scancel after the 5 s grace. The jobs used to run
    # on until their time limit (--time=1 here, and up to 30 s more until slurmctld checks limits).
    proc, jobs = _two_roles_hanging(cluster, pidfile, tmp_path, timeout="10", mode="hang,ignore_sigterm")
    try:
        proc.send_signal(signal.SIGKILL)
        proc.communicate(timeout=10)
        waited = cluster.wait_gone(jobs, timeout_s=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    print(f"SIGKILL of kvcheck to both jobs gone: {waited:.1f} s")
    assert [cluster.state(job) for job in jobs] == ["CANCELLED", "CANCELLED"]
    assert waited < 30  # the grace and Slurm's KillWait, not the time limit
    deadline = time.monotonic() + 30
    while pidfile.survivors() and time.monotonic() < deadline:
        time.sleep(0.5)
    assert pidfile.survivors() == []


def test_sigterm_to_kvcheck_cancels_every_job_before_it_dies(
    cluster: Cluster, pidfile: PidFile, tmp_path: Path
) -> None:
    proc, jobs = _two_roles_hanging(cluster, pidfile, tmp_path, timeout="300", mode="hang")
    try:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == -signal.SIGTERM, err[-2000:]
    # kvcheck died of the signal only after Slurm had let go of both jobs
    assert not set(jobs) & set(cluster.live_jobs())
    assert [cluster.state(job) for job in jobs] == ["CANCELLED", "CANCELLED"]
    assert pidfile.survivors() == []
