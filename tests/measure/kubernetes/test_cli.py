"""`kvcheck verify --launcher kubernetes` end to end: a manifest on disk, the real CLI in a subprocess,
the API double (fake_api.py) as the cluster and the engine double as the engine."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

pytest.importorskip("kubernetes")

from tests.conftest import run_kvcheck  # noqa: E402
from tests.measure.conftest import FAKE_SGLANG  # noqa: E402
from tests.measure.kubernetes.fake_api import FakeCluster  # noqa: E402
from tests.measure.kubernetes.schemas import validation_errors  # noqa: E402
from tests.measure.kubernetes.test_run import _free_port  # noqa: E402

NS = "ml-gate"


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[FakeCluster]:
    fake = FakeCluster(tmp_path, nodes=2, gpus_per_node=8)
    yield fake
    fake.close()


def manifest(tmp_path: Path, kubeconfig: Path | None, *, kubernetes: str = "", roles: str = "", extra: str = "") -> Path:
    path = tmp_path / "deploy.yaml"
    path.write_text(
        "context_length: 131072\n"
        "model: {path: meta-llama/Llama-3.1-8B-Instruct}\n"
        f"engine: {{version: \"0.5.23\", command: [{sys.executable}, {FAKE_SGLANG}]}}\n"
        f"{extra}"
        "launcher:\n"
        "  kind: kubernetes\n"
        "  kubernetes:\n"
        f"    namespace: {NS}\n"
        + (f"    kubeconfig: {kubeconfig}\n" if kubeconfig else "")
        + f"    http_port: {_free_port()}\n"
        f"    dist_init_port: {_free_port()}\n"
        f"{kubernetes}"
        "roles:\n"
        + (roles or "  prefill: {args: {tp_size: 2, nnodes: 2}}\n  decode: {args: {tp_size: 4}}\n")
    )
    return path


def test_verify_measures_every_role_in_the_cluster_and_leaves_nothing(cluster, tmp_path):
    path = manifest(tmp_path, cluster.kubeconfig, kubernetes="    image: lmsysorg/sglang:v0.5.23\n")
    result = run_kvcheck("verify", str(path), "--format", "json", "--timeout", "60")
    assert result.exit_code == 0, result.stderr
    report = json.loads(result.stdout)
    roles = {role["name"]: role for role in report["roles"]}
    assert {name: (r["status"], r["pool_tokens"]) for name, r in roles.items()} == {
        "prefill": ("pass", 947824), "decode": ("pass", 947824)}
    k8s = roles["prefill"]["details"]["kubernetes"]
    assert k8s["objects"][0].startswith("Job/kvcheck-") and k8s["objects"][0].endswith("-prefill-deadline")
    assert k8s["nnodes"] == 2 and k8s["gpus_per_pod"] == 1
    assert roles["decode"]["details"]["kubernetes"]["gpus_per_pod"] == 4
    assert cluster.objects == {} and cluster.pods == {}


def test_the_command_line_launcher_wins_over_the_manifests_kind(cluster, tmp_path):
    path = manifest(tmp_path, cluster.kubeconfig, kubernetes="    image: i\n",
                    roles="  decode: {gpus: [0], args: {tp_size: 1}}\n")
    path.write_text(path.read_text().replace("kind: kubernetes", "kind: local"))
    result = run_kvcheck("verify", str(path), "--launcher", "kubernetes", "--format", "json", "--timeout", "60")
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout)["roles"][0]["details"]["kubernetes"]["namespace"] == NS


def test_a_role_no_node_can_hold_is_exit_3_with_the_schedulers_reason(cluster, tmp_path):
    path = manifest(tmp_path, cluster.kubeconfig, kubernetes="    image: i\n",
                    roles="  decode: {args: {tp_size: 16}}\n")
    result = run_kvcheck("verify", str(path), "--format", "json", "--timeout", "600")
    assert result.exit_code == 3
    (finding,) = json.loads(result.stdout)["findings"]
    assert finding["rule"] == "KV301"
    assert "0/2 nodes are available: 2 Insufficient nvidia.com/gpu." in finding["message"]
    assert cluster.objects == {} and cluster.pods == {}


def test_no_image_is_exit_2_before_anything_is_created(cluster, tmp_path):
    path = manifest(tmp_path, cluster.kubeconfig)
    result = run_kvcheck("verify", str(path))
    assert (result.exit_code, result.stdout) == (2, "")
    assert result.stderr == (
        "kvcheck: error: role prefill: the Kubernetes launcher needs the engine's image\n"
        "kvcheck: hint: set launcher.kubernetes.image in the manifest, e.g. lmsysorg/sglang:v0.5.23\n")
    assert [call for call in cluster.requests if call[0] != "GET"] == []


def test_launcher_settings_that_do_not_exist_are_exit_2_with_file_and_line(tmp_path):
    path = manifest(tmp_path, None, kubernetes="    image: i\n    namespce: prod\n    gpus_per_node: 0\n")
    result = run_kvcheck("verify", str(path))
    assert (result.exit_code, result.stdout) == (2, "")
    assert f"{path}:11:5: launcher.kubernetes.namespce: " in result.stderr
    assert f"{path}:12:20: launcher.kubernetes.gpus_per_node: Input should be greater than or equal to 1" in (
        result.stderr)


def test_dry_run_prints_every_object_and_creates_nothing(tmp_path):
    path = manifest(tmp_path, None, kubernetes="    image: lmsysorg/sglang:v0.5.23\n",
                    extra="args: {api_key: sk-live-abcdefghijklmnop}\n")
    result = run_kvcheck("verify", str(path), "--dry-run", "--timeout", "600")
    assert (result.exit_code, result.stderr) == (0, "")
    assert result.stdout.startswith("# kvcheck verify --launcher kubernetes --dry-run: nothing was created.\n")
    docs = list(yaml.safe_load_all(result.stdout))
    kinds = [(d["kind"], d["metadata"]["name"].split("-", 2)[2]) for d in docs]
    assert kinds == [("Job", "prefill-deadline"), ("LeaderWorkerSet", "prefill"), ("Job", "decode")]
    assert docs[2]["spec"]["activeDeadlineSeconds"] == 675
    assert "sk-live-abcdefghijklmnop" not in result.stdout
    for doc in docs:
        assert validation_errors(doc) == []


def test_dry_run_without_the_kubernetes_launcher_is_exit_2(tmp_path):
    path = manifest(tmp_path, None, kubernetes="    image: i\n")
    path.write_text(path.read_text().replace("kind: kubernetes", "kind: local"))
    result = run_kvcheck("verify", str(path), "--dry-run")
    assert (result.exit_code, result.stdout) == (2, "")
    assert result.stderr == (
        "kvcheck: error: --dry-run prints the Kubernetes objects a run would create; the launcher here is local\n"
        "kvcheck: hint: add --launcher kubernetes (or launcher.kind: kubernetes in the manifest)\n")


def test_dry_run_of_a_leaderworkerset_deployment_file_uses_its_pod_templates(tmp_path):
    deployment = tmp_path / "lws.yaml"
    deployment.write_text(Path(__file__).with_name("test_templates.py").read_text().split('LWS = """\\\n')[1]
                          .split('"""')[0])
    result = run_kvcheck("verify", str(deployment), "--launcher", "kubernetes", "--dry-run",
                         "--gpu", "H100", "--context-length", "131072", "--sglang-version", "0.5.23")
    assert result.exit_code == 0, result.stderr
    anchor, lws = yaml.safe_load_all(result.stdout)
    leader = lws["spec"]["leaderWorkerTemplate"]["leaderTemplate"]
    assert leader["spec"]["containers"][0]["image"] == "lmsysorg/sglang:v0.5.23"
    assert leader["spec"]["volumes"] == [{"name": "weights", "hostPath": {"path": "/mnt/models"}}]
    assert leader["spec"]["containers"][0]["command"][-2:] == ["--node-rank", "$(LWS_WORKER_INDEX)"]
    assert lws["metadata"]["namespace"] == "default"
    for doc in (anchor, lws):
        assert validation_errors(doc) == []


def _rbac_rule(method: str, path: str) -> tuple[str, str, str] | None:
    """(apiGroup, resource, verb) that authorises one request, as the API server's RBAC maps it."""
    import re

    if path.rstrip("/") == "/version":
        return None  # a non-resource URL every authenticated user may read
    m = re.fullmatch(r"/apis?/(?:(batch|leaderworkerset\.x-k8s\.io)/)?v1/namespaces/[^/]+/(\w+)(/[^/]+)?(/log|/proxy/.*)?",
                     path)
    assert m, path
    group, resource, name, sub = m.groups()
    if sub == "/log":
        resource += "/log"
    elif sub:
        resource += "/proxy"
    verb = {"POST": "create", "DELETE": "delete"}.get(method) or ("get" if name else "list")
    return (group or "", resource, verb)


def test_the_documented_role_allows_every_request_a_run_and_a_cleanup_make(cluster, tmp_path):
    docs = (Path(__file__).resolve().parents[3] / "docs" / "measure.md").read_text()
    section = docs.split("## Launcher: Kubernetes", 1)[1]
    block = section.split("### What it needs", 1)[1].split("```yaml\n", 1)[1].split("```", 1)[0]
    role = yaml.safe_load(block)
    assert role["kind"] == "Role" and role["apiVersion"] == "rbac.authorization.k8s.io/v1"
    allowed = {(g, r, v) for rule in role["rules"] for g in rule["apiGroups"] for r in rule["resources"]
               for v in rule["verbs"]}
    path = manifest(tmp_path, cluster.kubeconfig, kubernetes="    image: i\n")
    assert run_kvcheck("verify", str(path), "--timeout", "60").exit_code == 0
    cluster.quota_gpus = 0  # and a run whose pod the quota refuses: kvcheck reads the controller's Event
    assert run_kvcheck("verify", str(path), "--timeout", "60").exit_code == 3
    assert run_kvcheck("cleanup", "--kubeconfig", str(cluster.kubeconfig), "-n", NS).exit_code == 0
    needed = {_rbac_rule(method, p) for method, p in cluster.requests} - {None}
    assert needed - allowed == set()
    assert needed == allowed  # and the Role asks for nothing kvcheck does not use


RBG_RAY = "tests/data/vllm-deploy/rbg-v1alpha1-multi-nodes-vllm.yaml"  # one vLLM instance over 2 pods (Ray)

RBG_RAY_REPORT = """\
kvcheck verify: ERROR (exit 3)  {source}
measure mode: no engine was booted, no pool was measured
advertised context window: 32,768 tokens
role               status   pool tokens   required   pool/req   input <   source
━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━
vllm-multi-nodes   ERROR              -     32,768          -         -   measure
findings
ERROR KV301 [vllm-multi-nodes] role vllm-multi-nodes spans 2 nodes as one Ray cluster
            (roles.vllm-multi-nodes.nodes), and the kubernetes launcher does not build Ray clusters
            at {at}:27:13
            fix: state the node count as args.nnodes (vLLM 0.11.1 and later launch across nodes
            without Ray) to measure the role, measure a single-node variant, or use --mode estimate
            for this role
"""


def test_dry_run_of_a_role_the_launcher_refuses_is_the_runs_kv301_report_not_objects(cluster, tmp_path):
    # before: a 1-GPU Job for the 16-GPU Ray role, exit 0, though a run refuses the role before creating anything
    dry = run_kvcheck("verify", RBG_RAY, "--launcher", "kubernetes", "--dry-run", "--context-length", "32768",
                      env={"COLUMNS": "100"})
    assert (dry.exit_code, dry.stderr, dry.stdout) == (3, "", RBG_RAY_REPORT.format(source=RBG_RAY, at=RBG_RAY))
    # the run against a cluster refuses the role with the same report, word for word, and creates nothing
    overlay = tmp_path / "overlay.yaml"
    overlay.write_text(f"context_length: 32768\ndeployment: {Path(RBG_RAY).resolve()}\n"
                       f"launcher: {{kind: kubernetes, kubernetes: {{kubeconfig: {cluster.kubeconfig}}}}}\n")
    dry = run_kvcheck("verify", str(overlay), "--dry-run", "--format", "json")
    real = run_kvcheck("verify", str(overlay), "--format", "json")
    assert (real.exit_code, dry.exit_code) == (3, 3), real.stderr
    dry_report, real_report = json.loads(dry.stdout), json.loads(real.stdout)
    assert dry_report["findings"] == real_report["findings"]
    assert [f["message"] for f in dry_report["findings"]] == [
        "role vllm-multi-nodes spans 2 nodes as one Ray cluster (roles.vllm-multi-nodes.nodes), and the kubernetes "
        "launcher does not build Ray clusters"]
    assert [(r["name"], r["status"], r["pool_tokens"]) for r in dry_report["roles"]] == [
        (r["name"], r["status"], r["pool_tokens"]) for r in real_report["roles"]] == [("vllm-multi-nodes", "error", None)]
    assert [call for call in cluster.requests if call[0] != "GET"] == []
    as_json = run_kvcheck("verify", RBG_RAY, "--launcher", "kubernetes", "--dry-run", "--context-length", "32768",
                          "--format", "json")
    report = json.loads(as_json.stdout)
    assert (as_json.exit_code, report["mode"], [(f["rule"], f["role"]) for f in report["findings"]]) == (
        3, "measure", [("KV301", "vllm-multi-nodes")])


def test_dry_run_of_a_cpu_role_is_kv301_exit_3_as_a_run_would_be(tmp_path):
    path = manifest(tmp_path, None, kubernetes="    image: lmsysorg/sglang:v0.5.23\n",
                    roles="  decode: {device: cpu, args: {tp_size: 1}}\n")
    result = run_kvcheck("verify", str(path), "--dry-run", "--format", "json")
    assert result.exit_code == 3, result.stderr
    (finding,) = json.loads(result.stdout)["findings"]
    assert (finding["rule"], finding["message"]) == (
        "KV301", "role decode runs on the CPU (device: cpu), and the kubernetes launcher requests GPUs for every "
        "role it runs")


def test_a_refused_dry_run_with_a_markdown_report_says_no_engine_was_booted(tmp_path):
    result = run_kvcheck("verify", RBG_RAY, "--launcher", "kubernetes", "--dry-run", "--context-length", "32768",
                         "--format", "markdown")
    assert result.exit_code == 3
    assert "- mode: measure mode: no engine was booted, no pool was measured\n" in result.stdout
    assert "engine booted)" not in result.stdout


VLLM_MANIFEST = """\
context_length: 131072
model: {path: Qwen/Qwen3-8B}
engine: {name: vllm, version: "0.32.0"}
launcher: {kind: kubernetes}
roles:
  main: {args: {max-model-len: 131072}}
"""


def test_no_image_for_a_vllm_role_hints_at_a_vllm_image_of_its_release(tmp_path):
    # before: "e.g. lmsysorg/sglang:v0.5.23", an SGLang image, for a vLLM role
    path = tmp_path / "vllm.yaml"
    path.write_text(VLLM_MANIFEST)
    result = run_kvcheck("verify", str(path), "--dry-run")
    assert (result.exit_code, result.stdout) == (2, "")
    assert result.stderr == (
        "kvcheck: error: role main: the Kubernetes launcher needs the engine's image\n"
        "kvcheck: hint: set launcher.kubernetes.image in the manifest, e.g. vllm/vllm-openai:v0.32.0\n")


def test_a_values_files_own_image_is_the_one_the_launcher_runs():
    # before: exit 2 "needs the engine's image" although the values file names vllm/vllm-openai:latest
    result = run_kvcheck("verify", "tests/data/vllm-deploy/production-stack-values-02-basic-config.yaml",
                         "--launcher", "kubernetes", "--dry-run", "--context-length", "4096")
    assert result.exit_code == 0, result.stderr
    (job,) = yaml.safe_load_all(result.stdout)
    (container,) = job["spec"]["template"]["spec"]["containers"]
    assert container["image"] == "vllm/vllm-openai:latest"
    assert container["command"][:3] == ["vllm", "serve", "meta-llama/Llama-3.1-8B-Instruct"]
    assert validation_errors(job) == []


def test_the_launchers_image_wins_over_the_values_files(tmp_path):
    overlay = tmp_path / "overlay.yaml"
    overlay.write_text(
        "context_length: 4096\n"
        f"deployment: {Path('tests/data/vllm-deploy/production-stack-values-02-basic-config.yaml').resolve()}\n"
        "launcher: {kind: kubernetes, kubernetes: {image: 'registry.local/vllm:v0.32.0'}}\n")
    result = run_kvcheck("verify", str(overlay), "--dry-run")
    assert result.exit_code == 0, result.stderr
    (job,) = yaml.safe_load_all(result.stdout)
    assert job["spec"]["template"]["spec"]["containers"][0]["image"] == "registry.local/vllm:v0.32.0"


OME_OVERLAY = """\
context_length: 4096
deployment: {runtime}
model: {{path: /models/llama}}
"""


@pytest.mark.parametrize(("files", "image"), [
    # before: each of these was exit 2 "the Kubernetes launcher needs the engine's image", the file's own unread
    (["dynamo-vllm-disagg.yaml"], "nvcr.io/nvidia/ai-dynamo/vllm-runtime:my-tag"),
    (["kserve-llmisvc-pd-disaggregation.yaml", "kserve-llmisvc-config-pd-disagg.yaml"],
     "ghcr.io/llm-d/llm-d-cuda:v0.9.0"),  # the baseRef config's main container, under the service
    (["OME"], "docker.io/vllm/vllm-openai:v0.9.0.1"),
])
def test_dynamo_kserve_and_ome_files_boot_their_own_image(tmp_path, files, image):
    if files == ["OME"]:  # the runtime names no model path: the manifest gives it, as measure mode needs one
        overlay = tmp_path / "ome.yaml"
        runtime = Path("tests/data/vllm-deploy/ome-vllm-llama-3-1-8b-instruct-rt.yaml").resolve()
        overlay.write_text(OME_OVERLAY.format(runtime=runtime))
        args = [str(overlay)]
    else:
        args = [f"tests/data/vllm-deploy/{name}" for name in files] + ["--context-length", "4096"]
    result = run_kvcheck("verify", *args, "--launcher", "kubernetes", "--dry-run")
    assert result.exit_code == 0, result.stderr
    jobs = [doc for doc in yaml.safe_load_all(result.stdout) if doc and doc.get("kind") == "Job"]
    assert jobs
    for job in jobs:
        containers = job["spec"]["template"]["spec"]["containers"]
        assert [c["image"] for c in containers] == [image] * len(containers)
        assert validation_errors(job) == []
