"""`kvcheck cleanup`: what killed runs left is found by label and deleted; nothing else is touched."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("kubernetes")

from kvcheck.backends.measure.launchers.kubernetes.render import render_role  # noqa: E402
from kvcheck.backends.measure.launchers.kubernetes.settings import KubernetesSettings  # noqa: E402
from tests.conftest import REPO_ROOT, run_kvcheck, run_kvcheck_process  # noqa: E402
from tests.measure.conftest import make_target  # noqa: E402
from tests.measure.kubernetes.fake_api import FakeCluster  # noqa: E402

NS = "ml-gate"


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[FakeCluster]:
    fake = FakeCluster(tmp_path)
    yield fake
    fake.close()


def _leave(cluster: FakeCluster, run_id: str, role: str, **kw) -> None:
    """What a run killed with SIGKILL leaves: its objects, their pods running the engine double."""
    target = make_target(role, env={"FAKE_SGLANG_MODE": "hang"}, **kw)
    rendered = render_role(target, KubernetesSettings(namespace=NS, image="i", http_port=0), run_id=run_id,
                           timeout_s=60)
    owner_uid = None
    for obj in rendered.objects:
        if obj["kind"] == "LeaderWorkerSet":
            obj["metadata"]["ownerReferences"][0]["uid"] = owner_uid
        cluster.add_object(obj)
        owner_uid = cluster.objects[(obj["kind"], NS, obj["metadata"]["name"])]["metadata"]["uid"]


def _created(cluster: FakeCluster) -> list[str]:
    return sorted(f"{kind}/{name}" for kind, _, name in cluster.objects)


def test_cleanup_deletes_every_object_and_pod_of_kvcheck_runs_and_nothing_else(cluster):
    _leave(cluster, "0a1b2c3d", "prefill", args={"nnodes": 2})
    _leave(cluster, "0a1b2c3d", "decode")
    _leave(cluster, "99999999", "decode")
    production = {"apiVersion": "batch/v1", "kind": "Job",
                  "metadata": {"name": "nightly-eval", "namespace": NS, "labels": {"app": "eval"}},
                  "spec": {"template": {"spec": {"restartPolicy": "Never",
                                                 "containers": [{"name": "c", "image": "pause"}]}}}}
    cluster.add_object(production)
    assert len(cluster.pods) == 6
    result = run_kvcheck("cleanup", "--kubeconfig", str(cluster.kubeconfig), "--namespace", NS, "--grace", "1")
    assert (result.exit_code, result.stderr) == (0, "")
    lines = result.stdout.splitlines()
    assert [line.split(" (run ")[0] for line in lines] == [
        f"deleted LeaderWorkerSet {NS}/kvcheck-0a1b2c3d-prefill",
        f"deleted Job {NS}/kvcheck-0a1b2c3d-prefill-deadline",
        f"deleted Job {NS}/kvcheck-0a1b2c3d-decode",
        f"deleted Job {NS}/kvcheck-99999999-decode",
    ]
    assert lines[0].startswith(f"deleted LeaderWorkerSet {NS}/kvcheck-0a1b2c3d-prefill (run 0a1b2c3d, created 20")
    assert _created(cluster) == ["Job/nightly-eval"]
    assert [pod.name for pod in cluster.pods.values()] == [p.name for p in cluster.pods.values()
                                                            if p.name.startswith("nightly-eval-")]
    again = run_kvcheck("cleanup", "--kubeconfig", str(cluster.kubeconfig), "--namespace", NS)
    assert (again.exit_code, again.stdout) == (0, f"nothing left by kvcheck runs in namespace {NS}\n")


def test_cleanup_of_one_run_keeps_the_others(cluster):
    _leave(cluster, "0a1b2c3d", "decode")
    _leave(cluster, "99999999", "decode")
    result = run_kvcheck("cleanup", "--kubeconfig", str(cluster.kubeconfig), "-n", NS, "--run-id", "99999999")
    assert result.exit_code == 0
    assert result.stdout.startswith(f"deleted Job {NS}/kvcheck-99999999-decode (run 99999999, created ")
    assert _created(cluster) == ["Job/kvcheck-0a1b2c3d-decode"]


def test_the_namespace_defaults_to_the_kubeconfig_contexts(cluster):
    text = cluster.kubeconfig.read_text().replace("{cluster: fake, user: kvcheck}",
                                                  f"{{cluster: fake, user: kvcheck, namespace: {NS}}}")
    cluster.kubeconfig.write_text(text)
    _leave(cluster, "0a1b2c3d", "decode")
    result = run_kvcheck("cleanup", "--kubeconfig", str(cluster.kubeconfig))
    assert result.exit_code == 0 and result.stdout.startswith(f"deleted Job {NS}/kvcheck-0a1b2c3d-decode ")


def test_no_cluster_to_reach_is_exit_3_with_the_clients_reason(tmp_path):
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    config = tmp_path / "kubeconfig"
    config.write_text(
        "apiVersion: v1\nkind: Config\n"
        f"clusters: [{{name: gone, cluster: {{server: 'http://127.0.0.1:{port}'}}}}]\n"
        "users: [{name: u, user: {token: t}}]\ncontexts: [{name: gone, context: {cluster: gone, user: u}}]\n"
        "current-context: gone\n")
    result = run_kvcheck("cleanup", "--kubeconfig", str(config), "-n", NS)
    assert result.exit_code == 3
    assert result.stdout == ""
    assert result.stderr.startswith(
        f"kvcheck: error: listing LeaderWorkerSets in {NS}: the API server at http://127.0.0.1:{port} did not answer (")


def test_a_kubeconfig_that_does_not_exist_is_exit_3(tmp_path):
    result = run_kvcheck("cleanup", "--kubeconfig", str(tmp_path / "nope"), "-n", NS)
    assert result.exit_code == 3
    assert result.stderr.startswith(f"kvcheck: error: cannot load the Kubernetes configuration ({tmp_path / 'nope'}")


def test_a_run_id_that_is_not_a_label_value_is_exit_2(cluster):
    result = run_kvcheck("cleanup", "--kubeconfig", str(cluster.kubeconfig), "-n", NS, "--run-id", "a,b")
    assert result.exit_code == 2
    assert result.stderr == "kvcheck: error: --run-id 'a,b' is not a run id (a label value such as 0a1b2c3d)\n"


def test_without_the_kubernetes_library_the_hint_names_the_extra(tmp_path):
    shadow = tmp_path / "shadow" / "kubernetes"
    shadow.mkdir(parents=True)
    (shadow / "__init__.py").write_text("raise ImportError('No module named kubernetes')\n")
    # a process: the shadowing package must be the first `kubernetes` its interpreter imports
    result = run_kvcheck_process("cleanup", "-n", NS, env={"PYTHONPATH": f"{shadow.parent}:{REPO_ROOT}"})
    assert (result.exit_code, result.stdout) == (3, "")
    assert result.stderr == (
        "kvcheck: error: the Kubernetes launcher needs the kubernetes client library, which is not installed\n"
        "kvcheck: hint: pip install 'kvcheck[k8s]'\n")


def test_a_role_that_may_not_list_leaderworkersets_still_removes_them_through_their_deadline_jobs(cluster):
    _leave(cluster, "0a1b2c3d", "prefill", args={"nnodes": 2})
    cluster.refuse[("GET", f"/apis/leaderworkerset.x-k8s.io/v1/namespaces/{NS}/leaderworkersets")] = (
        403, "Forbidden", "leaderworkersets.leaderworkerset.x-k8s.io is forbidden")
    result = run_kvcheck("cleanup", "--kubeconfig", str(cluster.kubeconfig), "-n", NS, "--grace", "1")
    assert result.exit_code == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].startswith(f"deleted Job {NS}/kvcheck-0a1b2c3d-prefill-deadline (run 0a1b2c3d")
    assert lines[1] == (
        "note: LeaderWorkerSets could not be listed (forbidden); deleting their deadline Jobs deletes them")
    deadline = time.monotonic() + 10  # the garbage collector deletes the LeaderWorkerSet a moment later
    while (cluster.objects or cluster.pods) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert cluster.objects == {} and cluster.pods == {}
