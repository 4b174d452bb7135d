"""A real two-node Slurm cluster for the Slurm launcher's end-to-end tests.

CI (.ci/run) starts it with slurm-up.sh before pytest, exports SLURM_CONF and sets
KVCHECK_TEST_SLURM=required, so a cluster that does not answer fails the tests there. Elsewhere the
session starts one itself (root only: namespaces, device nodes, apt-get for the packages) and stops
what it started; the tests skip, saying why, only when it cannot be started. One user at a time:
the cluster's names and addresses are host-wide, and a test must see only its own jobs, so a session
takes a lock file (.ci/run holds the same lock around its whole run).
"""

from __future__ import annotations

import fcntl
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.measure.conftest import FAKE_SGLANG, REPO, PidFile, pidfile  # noqa: F401  (fixture)

SCRIPTS = Path(__file__).resolve().parent
BASE = Path(os.environ.get("SLURM_CI_DIR", "/tmp/kvcheck-slurm"))
LOCK = Path("/tmp/kvcheck-slurm.lock")
LOCK_WAIT_S = 600


def _answers(conf: Path) -> bool:
    if not conf.is_file():
        return False
    try:
        done = subprocess.run(
            ["sinfo", "-h", "-o", "%T"],
            env={**os.environ, "SLURM_CONF": str(conf)},
            capture_output=True,
            text=True,
            timeout=20,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0 and any(s in done.stdout for s in ("idle", "mix", "alloc"))


@dataclass(frozen=True)
class Cluster:
    """The running test cluster: two nodes n1, n2 with 8 fake GPUs each; partitions debug and small."""

    conf: Path

    @property
    def env(self) -> dict[str, str]:
        return {"SLURM_CONF": str(self.conf)}

    def run(self, *argv: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            list(argv), env={**os.environ, **self.env}, capture_output=True, text=True, timeout=30, check=False
        )

    def live_jobs(self) -> dict[str, str]:
        """Job id -> name of every job still pending or running."""
        out = self.run("squeue", "-h", "-o", "%i %j").stdout
        return dict(line.split(None, 1) for line in out.splitlines() if line.strip())

    def state(self, job_id: str) -> str | None:
        out = self.run("scontrol", "show", "job", "-o", job_id).stdout
        for field in out.split():
            if field.startswith("JobState="):
                return field.split("=", 1)[1]
        return None

    def wait_gone(self, job_ids: list[str], timeout_s: float) -> float:
        """Seconds until none of `job_ids` is pending or running; fails the test after `timeout_s`."""
        start = time.monotonic()
        while set(job_ids) & set(self.live_jobs()):
            assert time.monotonic() - start < timeout_s, f"jobs {job_ids} still in the queue: {self.live_jobs()}"
            time.sleep(0.5)
        return time.monotonic() - start


@contextmanager
def _exclusive(required: bool) -> Iterator[None]:
    """Hold the host-wide lock on the test cluster for this session (.ci/run holds it itself)."""
    if required:  # the runner that started the cluster holds the lock for its whole run
        yield
        return
    LOCK.touch(exist_ok=True)
    with LOCK.open("w") as lock:
        deadline = time.monotonic() + LOCK_WAIT_S
        while True:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    why = f"another test session held the Slurm test cluster ({LOCK}) for {LOCK_WAIT_S} s"
                    pytest.skip(why)
                time.sleep(1)
        yield


def _start_own() -> Iterator[Cluster]:
    if os.geteuid() != 0:
        pytest.skip("the Slurm tests start a two-node cluster (namespaces, device nodes) and need root")
    conf = BASE / "etc" / "slurm.conf"
    env = {**os.environ, "SLURM_CI_DIR": str(BASE)}
    started = False
    if not _answers(conf):
        done = subprocess.run(["bash", str(SCRIPTS / "slurm-up.sh")], env=env, capture_output=True, text=True, check=False)
        if done.returncode != 0 or not _answers(conf):
            subprocess.run(["bash", str(SCRIPTS / "slurm-down.sh")], env=env, capture_output=True, check=False)
            said = (done.stderr or done.stdout).strip().splitlines()[-3:]
            pytest.skip(f"could not start the Slurm test cluster: {' / '.join(said) or 'no output'}")
        started = True
    try:
        yield Cluster(conf)
    finally:
        if started:
            subprocess.run(["bash", str(SCRIPTS / "slurm-down.sh")], env=env, capture_output=True, check=False)


@pytest.fixture(scope="session")
def slurm_cluster() -> Iterator[Cluster]:
    required = os.environ.get("KVCHECK_TEST_SLURM") == "required"
    with _exclusive(required):
        conf = os.environ.get("SLURM_CONF")
        if conf and _answers(Path(conf)):
            yield Cluster(Path(conf))
            return
        if required:
            pytest.fail(f"KVCHECK_TEST_SLURM=required, but no Slurm cluster answers (SLURM_CONF={conf})")
        yield from _start_own()


@pytest.fixture
def cluster(slurm_cluster: Cluster) -> Iterator[Cluster]:
    """The cluster, idle when the test starts (an earlier test's job still completing would queue this one's
    for resources past a short --timeout, most of all while another pytest worker loads the host), with any
    job a failed test left behind cancelled afterwards (never a leak)."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and (
        any(name.startswith("kvcheck-") for name in slurm_cluster.live_jobs().values())
        or "comp" in slurm_cluster.run("sinfo", "-h", "-o", "%T").stdout  # a node still cleaning up a job
    ):
        time.sleep(0.25)
    before = set(slurm_cluster.live_jobs())
    yield slurm_cluster
    leftover = [
        job for job, name in slurm_cluster.live_jobs().items() if name.startswith("kvcheck-") and job not in before
    ]
    if leftover:
        slurm_cluster.run("scancel", *leftover)


def write_manifest(tmp_path: Path, roles: str, *, launcher: str = "") -> Path:
    """A manifest whose engine is the double; `roles` is the YAML of the roles block's body."""
    path = tmp_path / "deploy.yaml"
    path.write_text(
        "name: slurm-double\n"
        "context_length: 131072\n"
        "model:\n  path: meta-llama/Llama-3.1-8B-Instruct\n"
        "engine:\n"
        '  version: "0.5.23"\n'
        f"  command: [{json.dumps(sys.executable)}, {json.dumps(str(FAKE_SGLANG))}]\n"
        "args:\n  mem-fraction-static: 0.85\n  disaggregation-enable-kv-checksum: true\n"
        f"roles:\n{roles}"
        f"{launcher}"
    )
    return path


def kvcheck_argv(manifest: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "kvcheck", "verify", str(manifest), "--launcher", "slurm", "--format", "json", *extra]


def kvcheck_env(cluster: Cluster, **extra: str) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(REPO), **cluster.env, **extra}


def run_kvcheck(
    cluster: Cluster, manifest: Path, *extra: str, timeout_s: float = 180, **env: str
) -> tuple[int, dict, str]:
    done = subprocess.run(
        kvcheck_argv(manifest, *extra),
        cwd=REPO,
        env=kvcheck_env(cluster, **env),
        capture_output=True,
        text=True,
        timeout=timeout_s,
        check=False,
    )
    assert done.stdout, done.stderr
    return done.returncode, json.loads(done.stdout), done.stderr


__all__ = ["Cluster", "PidFile", "kvcheck_argv", "kvcheck_env", "pidfile", "run_kvcheck", "write_manifest"]
