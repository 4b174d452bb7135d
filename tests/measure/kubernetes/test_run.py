"""The Kubernetes launcher's run loop against the API double (fake_api.py): create, watch, stream, read,
delete, and every way a role can fail in a cluster. The engine is the engine double, run by the fake
kubelet; the measurement goes through the real measure backend and the real `kubernetes` client."""

from __future__ import annotations

import dataclasses
import random
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("kubernetes")

from kvcheck.backends.measure.backend import MeasureBackend  # noqa: E402
from kvcheck.backends.measure.launchers.kubernetes.api import KubeApi  # noqa: E402
from kvcheck.backends.measure.launchers.kubernetes.launcher import KubernetesLauncher  # noqa: E402
from kvcheck.backends.measure.launchers.kubernetes.settings import KubernetesSettings  # noqa: E402
from tests.measure.conftest import make_target  # noqa: E402
from tests.measure.kubernetes.fake_api import FakeCluster  # noqa: E402

NS = "ml-gate"


def _free_port() -> int:
    """A port free now, below the kernel's ephemeral range (32768-60999 here), as kvcheck's launchers draw
    theirs: the fake kubelet runs every pod in this host's network, and a port the kernel hands out for
    outgoing connections (the client's, the proxy's) could be taken before the engine binds it."""
    for _ in range(200):
        port = random.randint(20000, 31999)
        with socket.socket() as sock:
            try:
                sock.bind(("", port))
            except OSError:
                continue
            return port
    raise RuntimeError("no free port in 20000-31999")


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[FakeCluster]:
    fake = FakeCluster(tmp_path, nodes=2, gpus_per_node=8)
    yield fake
    fake.close()


def settings(**kw) -> KubernetesSettings:
    kw.setdefault("namespace", NS)
    kw.setdefault("image", "lmsysorg/sglang:v0.5.23")
    kw.setdefault("http_port", _free_port())
    kw.setdefault("dist_init_port", _free_port())
    return KubernetesSettings(**kw)


def measure(cluster: FakeCluster, targets, *, run_id: str = "0a1b2c3d", timeout_s: float = 30, **kw):
    api = KubeApi.connect(kubeconfig=str(cluster.kubeconfig))
    launcher = KubernetesLauncher(kw.pop("settings", None) or settings(), run_id=run_id, api=api,
                                  poll_s=kw.pop("poll_s", 0.05))
    backend = MeasureBackend(timeout_s=timeout_s, grace_s=kw.pop("grace_s", 2.0), progress=False, launcher=launcher,
                             ready_wait_s=kw.pop("ready_wait_s", 10.0), **kw)
    try:
        return backend.measure(targets)
    finally:
        api.close()


def target(name: str = "prefill", *, env: dict | None = None, **kw):
    return make_target(name, env={"FAKE_SGLANG_POOL_TOKENS": "947824", **(env or {})}, **kw)


def calls(cluster: FakeCluster) -> list[tuple[str, str]]:
    """The API calls kvcheck made, with repeated listings folded into one."""
    out: list[tuple[str, str]] = []
    for call in cluster.requests:
        if not out or out[-1] != call:
            out.append(call)
    return out


def test_one_role_is_created_watched_streamed_read_through_the_proxy_and_deleted(cluster, tmp_path):
    (m,) = measure(cluster, [target()], logs_dir=tmp_path / "logs")
    assert (m.pool_tokens, m.max_input_tokens, m.engine_version) == (947824, 131066, "0.5.23")
    assert [f.rule for f in m.findings] == []
    k8s = m.details["kubernetes"]
    assert (k8s["namespace"], k8s["run_id"], k8s["server_version"]) == (NS, "0a1b2c3d", "v1.30.0-fake")
    assert k8s["objects"] == ["Job/kvcheck-0a1b2c3d-prefill"]
    (pod,) = k8s["pods"]
    assert pod.startswith("kvcheck-0a1b2c3d-prefill-") and k8s["nodes"] == {pod: "gpu-node-0"}
    assert m.argv[-4:] == ("--host", "0.0.0.0", "--port", str(m.details["ports"]["http"]))
    seen = calls(cluster)
    assert seen[:2] == [("GET", "/version/"), ("POST", f"/apis/batch/v1/namespaces/{NS}/jobs")]
    assert ("GET", f"/api/v1/namespaces/{NS}/pods") in seen
    assert ("GET", f"/api/v1/namespaces/{NS}/pods/{pod}/log") in seen
    assert ("GET", f"/api/v1/namespaces/{NS}/pods/{pod}:{m.details['ports']['http']}/proxy/server_info") in seen
    assert ("DELETE", f"/apis/batch/v1/namespaces/{NS}/jobs/kvcheck-0a1b2c3d-prefill") in seen
    assert cluster.objects == {} and cluster.pods == {}
    log = Path(m.details["log_file"]).read_text()
    assert "The server is fired up and ready to roll!" in log
    assert "max_total_num_tokens=947824" in log


def test_two_roles_and_a_two_node_role_boot_side_by_side(cluster):
    prefill = target("prefill", args={"tp_size": 2, "nnodes": 2}, gpus=(), env={"FAKE_SGLANG_POOL_TOKENS": "500000"})
    decode = target("decode", args={"tp_size": 4}, gpus=(), env={"FAKE_SGLANG_POOL_TOKENS": "800000"})
    m_prefill, m_decode = measure(cluster, [prefill, decode])
    assert (m_prefill.pool_tokens, m_decode.pool_tokens) == (500000, 800000)
    assert m_prefill.details["kubernetes"]["objects"] == [
        "Job/kvcheck-0a1b2c3d-prefill-deadline", "LeaderWorkerSet/kvcheck-0a1b2c3d-prefill"]
    assert sorted(m_prefill.details["kubernetes"]["pods"]) == ["kvcheck-0a1b2c3d-prefill-0", "kvcheck-0a1b2c3d-prefill-0-1"]
    assert m_prefill.details["kubernetes"]["gpus_per_pod"] == 1
    assert cluster.objects == {} and cluster.pods == {}


def test_a_role_larger_than_any_node_fails_closed_at_once_with_the_schedulers_reason(cluster):
    role = target(args={"tp_size": 16}, gpus=())
    (m,) = measure(cluster, [role], timeout_s=60)
    assert m.pool_tokens is None
    (finding,) = m.findings
    assert finding.rule == "KV301"
    assert finding.message.startswith("the cluster cannot place pod kvcheck-0a1b2c3d-prefill-")
    assert finding.message.endswith(
        ": 0/2 nodes are available: 2 Insufficient nvidia.com/gpu. preemption: 0/2 nodes are available: 2 No "
        "preemption victims found for incoming pod. (the role asks for 16 nvidia.com/gpu per pod on 1 node)")
    assert m.details["boot_s"] < 10
    assert cluster.objects == {} and cluster.pods == {}


def test_an_image_that_cannot_be_pulled_fails_closed(cluster):
    (m,) = measure(cluster, [target()], settings=settings(image="registry.example.com/no-such-image:v1"))
    (finding,) = m.findings
    assert finding.rule == "KV301"
    assert "cannot pull image registry.example.com/no-such-image:v1: ErrImagePull: rpc error" in finding.message
    assert finding.hint == "check the image name and tag, and the pull secrets (launcher.kubernetes.image_pull_secrets)"
    assert cluster.pods == {}


def test_an_engine_that_runs_out_of_gpu_memory_reports_sglangs_exit_and_lines(cluster):
    (m,) = measure(cluster, [target(env={"FAKE_SGLANG_MODE": "oom"})])
    (finding,) = m.findings
    assert finding.message.startswith("the engine exited with status 137 before reporting its pool (phase: ")
    assert "Scheduler hit an exception" in finding.message
    assert cluster.pods == {}


def test_a_container_oomkilled_by_the_kernel_says_so(cluster):
    (m,) = measure(cluster, [target(env={"FAKE_SGLANG_MODE": "hang", "FAKE_KUBELET_OOMKILL_AFTER_S": "0.5"})])
    (finding,) = m.findings
    assert finding.message.startswith("the engine exited with status 137 before reporting its pool")
    assert ": OOMKilled (the kernel killed it at the container's memory limit; raise resources.limits.memory)" in (
        finding.message)


def test_a_crashing_worker_of_a_two_node_role_ends_the_role(cluster):
    role = target(args={"nnodes": 2}, env={"FAKE_SGLANG_MODE": "crash_before_pool"})
    (m,) = measure(cluster, [role])
    (finding,) = m.findings
    assert finding.message.startswith("the engine exited with status 1 before reporting its pool")
    assert "(restarted)" in finding.message
    assert cluster.objects == {} and cluster.pods == {}


def test_a_hanging_engine_times_out_and_is_deleted(cluster):
    (m,) = measure(cluster, [target(env={"FAKE_SGLANG_MODE": "hang"})], timeout_s=3)
    (finding,) = m.findings
    assert finding.message.startswith("the engine did not report its pool within 3 s (phase: ")
    assert cluster.objects == {} and cluster.pods == {}


def test_a_namespace_that_forbids_kvcheck_is_a_measurement_error_with_the_rbac_hint(cluster):
    cluster.refuse[("POST", f"/apis/batch/v1/namespaces/{NS}/jobs")] = (
        403, "Forbidden", f'jobs.batch is forbidden: User "ci" cannot create resource "jobs" in the namespace "{NS}"')
    (m,) = measure(cluster, [target()])
    (finding,) = m.findings
    assert finding.message == (
        f"the cluster refused Job {NS}/kvcheck-0a1b2c3d-prefill: jobs.batch is forbidden: User \"ci\" cannot "
        f"create resource \"jobs\" in the namespace \"{NS}\"")
    assert finding.hint == f'kvcheck needs the Role in docs/measure.md ("Kubernetes") in the namespace {NS}'


def test_no_leaderworkerset_controller_refuses_a_multi_node_role_and_removes_its_deadline_job(cluster):
    cluster.refuse[("POST", f"/apis/leaderworkerset.x-k8s.io/v1/namespaces/{NS}/leaderworkersets")] = (
        404, "NotFound", "the server could not find the requested resource")
    (m,) = measure(cluster, [target(args={"nnodes": 2})])
    (finding,) = m.findings
    assert finding.message == (
        f"the cluster refused LeaderWorkerSet {NS}/kvcheck-0a1b2c3d-prefill: the server could not find the "
        "requested resource")
    assert finding.hint.startswith("multi-node roles need the LeaderWorkerSet controller")
    assert cluster.objects == {}
    assert ("DELETE", f"/apis/batch/v1/namespaces/{NS}/jobs/kvcheck-0a1b2c3d-prefill-deadline") in cluster.requests


def test_dataclass_settings_are_frozen():
    with pytest.raises(dataclasses.FrozenInstanceError):
        settings().namespace = "x"  # type: ignore[misc]


def test_a_log_stream_that_breaks_is_resumed_without_losing_or_repeating_a_line(cluster, tmp_path):
    cluster.break_streams = 2  # the first two streams of the pod reset after 5 lines
    (m,) = measure(cluster, [target()], logs_dir=tmp_path / "logs")
    assert (m.pool_tokens, [f.rule for f in m.findings]) == (947824, [])
    ours = Path(m.details["log_file"]).read_text().splitlines()
    notes = [line for line in ours if line.startswith("kvcheck: the log stream of pod ")]
    assert len(notes) == 2 and all(line.endswith("; resuming") for line in notes)
    engine_lines = [line for line in ours if not line.startswith("kvcheck: ")]
    log_calls = [path for method, path in cluster.requests if path.endswith("/log")]
    assert len(log_calls) == 3
    (pod,) = m.details["kubernetes"]["pods"]
    # exactly the pod's output, in order, up to where kvcheck stopped reading (after the ready line)
    printed = cluster.finished_logs[pod]
    assert engine_lines == printed[: len(engine_lines)]
    assert any("The server is fired up and ready to roll!" in line for line in engine_lines)
    assert len(engine_lines) > 10


def test_an_api_server_that_does_not_answer_ends_the_run_before_anything_is_created(tmp_path):
    from kvcheck.backends.measure.launchers.kubernetes.api import KubeError

    port = _free_port()
    config = tmp_path / "kubeconfig"
    config.write_text(
        "apiVersion: v1\nkind: Config\n"
        f"clusters: [{{name: gone, cluster: {{server: 'http://127.0.0.1:{port}'}}}}]\n"
        "users: [{name: u, user: {token: t}}]\ncontexts: [{name: gone, context: {cluster: gone, user: u}}]\n"
        "current-context: gone\n")
    launcher = KubernetesLauncher(settings(kubeconfig=str(config)), run_id="0a1b2c3d", poll_s=0.05)
    backend = MeasureBackend(timeout_s=30, progress=False, launcher=launcher)
    with pytest.raises(KubeError) as err:
        backend.measure([target()])
    assert err.value.exit_code == 3
    assert err.value.message.startswith(
        "the Kubernetes API server cannot be reached: asking the API server for its version: the API server at "
        f"http://127.0.0.1:{port} did not answer (")
    assert err.value.hint.endswith("nothing was created")


def test_a_pod_listing_kvcheck_cannot_read_is_a_kvcheck_bug_not_a_hang(cluster, monkeypatch):
    from kvcheck.backends.measure.launchers.kubernetes import launcher as module

    def broken(self, pods):
        raise KeyError("metadata")

    monkeypatch.setattr(module.KubernetesEngine, "_judge", broken)
    with pytest.raises(RuntimeError) as err:
        measure(cluster, [target()], timeout_s=60)
    assert "reading role prefill's engine log failed: KeyError('metadata')" in str(err.value)
    assert cluster.objects == {} and cluster.pods == {}


def test_a_role_on_more_nodes_than_the_pool_has_fails_closed_at_once(cluster):
    role = target(args={"tp_size": 24, "nnodes": 3}, gpus=())  # 3 pods of 8 GPUs; the pool has 2 nodes of 8
    (m,) = measure(cluster, [role], timeout_s=600)
    (finding,) = m.findings
    assert finding.message.startswith("the cluster cannot place pod kvcheck-0a1b2c3d-prefill-0-2: 0/2 nodes are ")
    assert finding.message.endswith("(the role asks for 8 nvidia.com/gpu per pod on 3 nodes)")
    assert m.details["boot_s"] < 10
    assert cluster.objects == {} and cluster.pods == {}


def test_an_autoscaling_cluster_gets_the_unschedulable_wait(cluster):
    role = target(args={"tp_size": 16}, gpus=())
    (m,) = measure(cluster, [role], settings=settings(unschedulable_wait_s=2.0), timeout_s=600)
    assert m.findings[0].message.startswith("the cluster cannot place pod ")
    assert 2.0 <= m.details["boot_s"] < 10


def test_an_engine_that_crashed_before_kvcheck_followed_it_is_quoted_from_its_log(cluster, monkeypatch):
    from kvcheck.backends.measure.launchers.kubernetes import launcher as module

    monkeypatch.setattr(module.KubernetesEngine, "_follow", lambda self, pod: None)  # never caught running
    (m,) = measure(cluster, [target(env={"FAKE_SGLANG_MODE": "oom"})])
    (finding,) = m.findings
    assert finding.message.startswith("the engine exited with status 137 before reporting its pool")
    assert "Scheduler hit an exception" in finding.message
    assert ("GET", f"/api/v1/namespaces/{NS}/pods/{m.details['kubernetes']['pods'][0]}/log") in cluster.requests


def test_a_gpu_quota_that_refuses_the_jobs_pod_fails_closed_at_once_with_the_controllers_words(cluster):
    cluster.quota_gpus = 4  # the role's pod asks for 8
    role = target(args={"tp_size": 8}, gpus=())
    (m,) = measure(cluster, [role], timeout_s=600)
    assert m.pool_tokens is None
    (finding,) = m.findings
    assert finding.rule == "KV301"
    assert finding.message.startswith(
        "the cluster refused to create the role's pods: Job kvcheck-0a1b2c3d-prefill: Error creating: pods "
        '"kvcheck-0a1b2c3d-prefill-')
    assert finding.message.endswith(
        '" is forbidden: exceeded quota: gpu-quota, requested: requests.nvidia.com/gpu=8, '
        "used: requests.nvidia.com/gpu=0, limited: requests.nvidia.com/gpu=4")
    assert finding.hint.startswith(f"a ResourceQuota, LimitRange, admission webhook or Pod Security level in namespace {NS}")
    assert m.details["boot_s"] < 10  # not the 600 s timeout
    assert ("GET", f"/api/v1/namespaces/{NS}/events") in cluster.requests
    assert cluster.objects == {} and cluster.pods == {}


def test_an_admission_webhook_that_denies_a_workers_pod_ends_a_two_node_role(cluster):
    cluster.quota_gpus = 1  # the leader (1 GPU) is admitted, the worker is not
    (m,) = measure(cluster, [target(args={"nnodes": 2})], timeout_s=600)
    (finding,) = m.findings
    assert finding.message == (
        "the cluster refused to create the role's pods: StatefulSet kvcheck-0a1b2c3d-prefill-0: create Pod "
        "kvcheck-0a1b2c3d-prefill-0-1 in StatefulSet kvcheck-0a1b2c3d-prefill-0 failed error: pods "
        '"kvcheck-0a1b2c3d-prefill-0-1" is forbidden: exceeded quota: gpu-quota, requested: '
        "requests.nvidia.com/gpu=1, used: requests.nvidia.com/gpu=1, limited: requests.nvidia.com/gpu=1")
    assert m.details["boot_s"] < 10
    assert cluster.objects == {} and cluster.pods == {}
    cluster.quota_gpus, cluster.deny_pods = None, "pods in ml-gate must set a priorityClassName"
    (m,) = measure(cluster, [target()], run_id="1b2c3d4e", timeout_s=600)
    assert m.findings[0].message == (
        "the cluster refused to create the role's pods: Job kvcheck-1b2c3d4e-prefill: Error creating: admission "
        'webhook "gpu-policy.example.com" denied the request: pods in ml-gate must set a priorityClassName')


def test_a_refusal_waits_out_the_unschedulable_wait_and_a_role_that_may_not_read_events_waits_for_the_timeout(cluster):
    cluster.quota_gpus = 4
    role = target(args={"tp_size": 8}, gpus=())
    (m,) = measure(cluster, [role], settings=settings(unschedulable_wait_s=2.0), timeout_s=600)
    assert m.findings[0].message.startswith("the cluster refused to create the role's pods: ")
    assert 2.0 <= m.details["boot_s"] < 10
    # a Role from before kvcheck read events: no refusal seen, so the role fails closed at the timeout
    cluster.refuse[("GET", f"/api/v1/namespaces/{NS}/events")] = (
        403, "Forbidden", f'events is forbidden: User "ci" cannot list resource "events" in the namespace "{NS}"')
    before = len(cluster.requests)
    (m,) = measure(cluster, [role], run_id="1b2c3d4e", timeout_s=3)
    (finding,) = m.findings
    assert finding.message.startswith(
        "the engine did not report its pool within 3 s (phase: waiting for the pods to be created (kvcheck may not "
        "list events here, so a refusal is not seen: grant list on events, docs/measure.md)); it printed nothing")
    assert cluster.requests[before:].count(("GET", f"/api/v1/namespaces/{NS}/events")) == 1  # once, not every poll
