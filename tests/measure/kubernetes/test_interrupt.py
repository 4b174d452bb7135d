"""Ctrl-C and SIGTERM to kvcheck while a role runs in the cluster: its objects and pods are deleted
first, then kvcheck dies of the signal (the backend's own contract, with the Kubernetes launcher).

The two-node prefill role is TP 2 (one rank a node): at TP 1 the engine double, like SGLang, stops at once
("tp_size must be divisible by number of nodes"), and on a loaded runner kvcheck had already ended that role
and deleted its objects by the time the test looked for them."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("kubernetes")

from tests.conftest import REPO_ROOT  # noqa: E402
from tests.measure.kubernetes.fake_api import FakeCluster  # noqa: E402

SCRIPT = """
import sys
from tests.measure.conftest import make_target
from kvcheck.backends.measure import MeasureBackend
from kvcheck.backends.measure.launchers.kubernetes.launcher import KubernetesLauncher
from kvcheck.backends.measure.launchers.kubernetes.settings import KubernetesSettings

settings = KubernetesSettings(namespace="ml-gate", image="i", kubeconfig=sys.argv[1], http_port=int(sys.argv[2]),
                              dist_init_port=int(sys.argv[3]))
targets = [make_target("prefill", args={"tp_size": 2, "nnodes": 2}, gpus=(), env={"FAKE_SGLANG_MODE": "hang"}),
           make_target("decode", env={"FAKE_SGLANG_MODE": "hang"})]
launcher = KubernetesLauncher(settings, poll_s=0.05)
MeasureBackend(progress=False, grace_s=1, timeout_s=300, launcher=launcher).measure(targets)
print("measure returned", flush=True)
"""


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[FakeCluster]:
    fake = FakeCluster(tmp_path)
    yield fake
    fake.close()


@pytest.mark.parametrize(("signum", "returncode"), [(signal.SIGINT, -signal.SIGINT), (signal.SIGTERM, -signal.SIGTERM)])
def test_a_signal_deletes_every_object_and_pod_then_kvcheck_dies_of_it(cluster, signum, returncode):
    from tests.measure.kubernetes.test_run import _free_port

    proc = subprocess.Popen(
        [sys.executable, "-c", SCRIPT, str(cluster.kubeconfig), str(_free_port()), str(_free_port())],
        cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    deadline = time.monotonic() + 60
    # three engine pods running, their logs followed, and every object created: prefill's deadline Job and
    # LeaderWorkerSet, decode's Job (kvcheck may create a deadline Job after its pods start, so the objects are
    # waited for, not asserted the moment the pods run)
    while time.monotonic() < deadline:
        with cluster.lock:
            running = [p for p in cluster.pods.values() if p.process is not None and p.log]
            followed = {path for method, path in cluster.requests if path.endswith("/log")}
            kinds = sorted(kind for kind, _, _ in cluster.objects)
        if len(running) == 3 and len(followed) == 3 and len(kinds) == 3:
            break
        time.sleep(0.05)
    else:
        proc.kill()
        with cluster.lock:
            seen = (sorted(cluster.objects), sorted(cluster.pods), len(running), sorted(followed))
        pytest.fail(f"the engines did not start (objects, pods, running, logs followed: {seen}): "
                    f"{proc.communicate()[1][-2000:]}")
    assert kinds == ["Job", "Job", "LeaderWorkerSet"]
    proc.send_signal(signum)
    out, err = proc.communicate(timeout=60)
    assert "measure returned" not in out
    assert proc.returncode == returncode, err[-2000:]
    assert cluster.objects == {}
    assert cluster.pods == {}


SIGKILL_SCRIPT = """
import sys
from tests.measure.conftest import make_target
from kvcheck.backends.measure import MeasureBackend
from kvcheck.backends.measure.launchers.kubernetes.launcher import KubernetesLauncher
from kvcheck.backends.measure.launchers.kubernetes.settings import KubernetesSettings

settings = KubernetesSettings(namespace="ml-gate", image="i", kubeconfig=sys.argv[1], http_port=int(sys.argv[2]),
                              dist_init_port=int(sys.argv[3]), ttl_s=1, deadline_margin_s=0)
targets = [make_target("prefill", args={"tp_size": 2, "nnodes": 2}, gpus=(), env={"FAKE_SGLANG_MODE": "hang"}),
           make_target("decode", env={"FAKE_SGLANG_MODE": "hang"})]
MeasureBackend(progress=False, grace_s=0, timeout_s=8, launcher=KubernetesLauncher(settings, poll_s=0.05)).measure(targets)
"""


def test_kvcheck_killed_with_sigkill_leaves_nothing_past_the_clusters_deadline_and_ttl(cluster):
    from tests.measure.kubernetes.test_run import _free_port

    proc = subprocess.Popen(
        [sys.executable, "-c", SIGKILL_SCRIPT, str(cluster.kubeconfig), str(_free_port()), str(_free_port())],
        cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        with cluster.lock:
            # every object created (kvcheck may create a deadline Job after its pods start) and the three
            # engine pods running
            if len(cluster.objects) == 3 and len([p for p in cluster.pods.values() if p.process is not None and p.log]) == 3:
                proc.kill()  # SIGKILL: kvcheck cannot delete anything
                break
        time.sleep(0.05)
    else:
        proc.kill()
        pytest.fail(f"the engines and their objects did not all start: {proc.communicate()[1][-2000:]}")
    proc.communicate(timeout=30)
    # activeDeadlineSeconds = 8 s timeout + 0 s grace + 0 s margin; TTL 1 s; the LWS goes with its deadline Job
    gone_by = time.monotonic() + 30
    while time.monotonic() < gone_by and (cluster.objects or cluster.pods):
        time.sleep(0.1)
    assert cluster.objects == {} and cluster.pods == {}
    assert sorted(name.split("-", 2)[2] for name in cluster.expired) == ["decode", "prefill-deadline"]
