"""vLLM roles through the Kubernetes launcher: the objects a vLLM role becomes (checked against the cluster's
schemas) and `kvcheck verify` end to end against the API double, the vLLM double (tests/doubles/fake_vllm.py)
as the engine run by the fake kubelet.

On several nodes vLLM runs its multiprocessing multi-node launch (`--nnodes --node-rank --master-addr
--master-port`); the LeaderWorkerSet's worker pods add `--headless` (vLLM starts no API server there). The
double's leader waits for the workers at the master port before it sizes the pool and refuses a worker
without --headless, so the multi-node pass holds only if both templates are what vLLM needs.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

pytest.importorskip("kubernetes")

from kvcheck.backends.measure.launchers.kubernetes.render import render_role  # noqa: E402
from kvcheck.backends.measure.launchers.kubernetes.settings import KubernetesSettings  # noqa: E402
from kvcheck.model import RoleTarget  # noqa: E402
from tests.conftest import run_kvcheck  # noqa: E402
from tests.measure.kubernetes.fake_api import FakeCluster  # noqa: E402
from tests.measure.kubernetes.schemas import K8S_VERSIONS, validation_errors  # noqa: E402
from tests.measure.kubernetes.test_run import _free_port  # noqa: E402

NS = "ml-gate"
FAKE_VLLM = Path(__file__).resolve().parents[2] / "doubles" / "fake_vllm.py"
IMAGE = "vllm/vllm-openai:v0.32.0"
TINY = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "max_position_embeddings": 8192,
        "vocab_size": 8192, "hidden_size": 256, "num_hidden_layers": 2, "num_attention_heads": 4,
        "num_key_value_heads": 2, "head_dim": 64}  # 1,024 bytes of KV a token
MIB = 2**20


def vllm_target(args: dict[str, object], argv: tuple[str, ...], **kw: object) -> RoleTarget:
    fields: dict[str, object] = {
        "name": "decode", "context_length": 8192, "min_headroom": 1.0, "engine_version": "0.32.0",
        "engine": "vllm", "args": args, "argv_args": argv, "gpus": (), "gpu": None,
        "model_path": "meta-llama/Llama-3.1-8B-Instruct", "engine_command": (), "env": {},
    }
    fields.update(kw)
    return RoleTarget(**fields)  # type: ignore[arg-type]


def test_a_one_node_vllm_role_is_a_job_running_vllm_serve_with_its_gpus():
    target = vllm_target({"tensor_parallel_size": 4, "max_model_len": 8192},
                         ("--tensor-parallel-size", "4", "--max-model-len", "8192"))
    rendered = render_role(target, KubernetesSettings(namespace=NS, image=IMAGE), run_id="0a1b2c3d", timeout_s=600)
    assert (rendered.kind, rendered.nnodes, rendered.gpus_per_node) == ("Job", 1, 4)  # vLLM's TP, not SGLang's tp_size
    (job,) = rendered.objects
    [container] = job["spec"]["template"]["spec"]["containers"]
    assert container["image"] == IMAGE
    assert container["command"] == [
        "vllm", "serve", "meta-llama/Llama-3.1-8B-Instruct", "--tensor-parallel-size", "4", "--max-model-len", "8192",
        "--host", "0.0.0.0", "--port", "30000",
    ]
    assert container["resources"] == {"limits": {"nvidia.com/gpu": "4"}}
    for version in K8S_VERSIONS:
        assert validation_errors(job, version) == []


def test_a_two_node_vllm_role_is_a_leaderworkerset_whose_workers_are_headless():
    target = vllm_target({"tensor_parallel_size": 8, "pipeline_parallel_size": 2, "nnodes": 2},
                         ("--tensor-parallel-size", "8", "--pipeline-parallel-size", "2", "--nnodes", "2"))
    settings = KubernetesSettings(namespace=NS, image=IMAGE, dist_init_port=29501)
    rendered = render_role(target, settings, run_id="0a1b2c3d", timeout_s=600, dummy_weights=True)
    assert (rendered.kind, rendered.nnodes, rendered.gpus_per_node) == ("LeaderWorkerSet", 2, 8)
    anchor, lws = rendered.objects
    group = lws["spec"]["leaderWorkerTemplate"]
    leader = group["leaderTemplate"]["spec"]["containers"][0]["command"]
    worker = group["workerTemplate"]["spec"]["containers"][0]["command"]
    assert leader == [
        "vllm", "serve", "meta-llama/Llama-3.1-8B-Instruct", "--tensor-parallel-size", "8",
        "--pipeline-parallel-size", "2", "--nnodes", "2", "--host", "0.0.0.0", "--port", "30000",
        "--load-format", "dummy", "--node-rank", "$(LWS_WORKER_INDEX)", "--master-addr", "$(LWS_LEADER_ADDRESS)",
        "--master-port", "29501",
    ]
    assert worker == [*leader, "--headless"]  # vLLM's other nodes: workers only, no API server
    for key in ("leaderTemplate", "workerTemplate"):
        assert group[key]["spec"]["containers"][0]["resources"] == {"limits": {"nvidia.com/gpu": "8"}}
    for version in K8S_VERSIONS:
        assert validation_errors(anchor, version) == []
        assert validation_errors(lws, version) == []


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[FakeCluster]:
    fake = FakeCluster(tmp_path, nodes=2, gpus_per_node=8)
    yield fake
    fake.close()


def vllm_manifest(tmp_path: Path, kubeconfig: Path | None, roles: str, *, window: int = 8192) -> Path:
    model = tmp_path / "tiny-llama"
    model.mkdir(exist_ok=True)
    (model / "config.json").write_text(json.dumps(TINY))
    path = tmp_path / "deploy.yaml"
    path.write_text(
        f"context_length: {window}\n"
        f"model: {{path: {model}}}\n"
        f"engine: {{name: vllm, version: \"0.32.0\", command: [{sys.executable}, {FAKE_VLLM}, serve]}}\n"
        "launcher:\n"
        "  kind: kubernetes\n"
        "  kubernetes:\n"
        f"    namespace: {NS}\n"
        f"    image: {IMAGE}\n"
        + (f"    kubeconfig: {kubeconfig}\n" if kubeconfig else "")
        + f"    http_port: {_free_port()}\n"
        f"    dist_init_port: {_free_port()}\n"
        f"roles:\n{roles}"
    )
    return path


ENV = f"{{FAKE_VLLM_DEVICE: cuda, FAKE_VLLM_STEP_S: '0.001', FAKE_VLLM_KV_BYTES: '{16 * MIB}'}}"


def test_verify_measures_a_vllm_role_in_the_cluster_from_its_metrics(cluster, tmp_path):
    # 16 MiB of KV: 1,024 blocks of 16 tokens, the null block held back: 16,368 usable tokens
    path = vllm_manifest(tmp_path, cluster.kubeconfig,
                         f"  decode: {{args: {{tensor-parallel-size: 2, max-model-len: 8192}}, env: {ENV}}}\n")
    result = run_kvcheck("verify", str(path), "--format", "json", "--timeout", "60")
    assert result.exit_code == 0, result.stderr + result.stdout
    [role] = json.loads(result.stdout)["roles"]
    assert (role["status"], role["pool_tokens"], role["details"]["engine_context_len"]) == ("pass", 16368, 8192)
    assert role["details"]["server_info"]["endpoint"] == "/metrics (vllm:cache_config_info)"  # through the proxy
    k8s = role["details"]["kubernetes"]
    assert k8s["nnodes"] == 1 and k8s["gpus_per_pod"] == 2
    assert cluster.objects == {} and cluster.pods == {}


def test_verify_of_a_vllm_role_whose_window_shrank_fails_the_gate(cluster, tmp_path):
    env = ENV.replace(str(16 * MIB), str(4 * MIB))  # 4,080 usable tokens; auto-fit shrinks the window to them
    path = vllm_manifest(tmp_path, cluster.kubeconfig, f"  decode: {{args: {{max-model-len: auto}}, env: {env}}}\n")
    result = run_kvcheck("verify", str(path), "--format", "json", "--timeout", "60")
    assert result.exit_code == 1, result.stderr
    report = json.loads(result.stdout)
    [role] = report["roles"]
    assert (role["status"], role["pool_tokens"], role["details"]["engine_context_len"]) == ("fail", 4080, 4080)
    assert sorted(f["rule"] for f in report["findings"]) == ["KV101", "KV102"]
    assert cluster.objects == {} and cluster.pods == {}


def test_verify_of_a_two_node_vllm_role_meets_at_the_leader_and_passes(cluster, tmp_path):
    roles = f"  decode: {{args: {{tensor-parallel-size: 2, nnodes: 2, max-model-len: 8192}}, env: {ENV}}}\n"
    path = vllm_manifest(tmp_path, cluster.kubeconfig, roles)
    result = run_kvcheck("verify", str(path), "--format", "json", "--timeout", "60")
    assert result.exit_code == 0, result.stderr + result.stdout
    [role] = json.loads(result.stdout)["roles"]
    assert (role["status"], role["pool_tokens"]) == ("pass", 16368)
    k8s = role["details"]["kubernetes"]
    assert k8s["nnodes"] == 2 and k8s["gpus_per_pod"] == 1
    assert cluster.objects == {} and cluster.pods == {}


def test_dry_run_of_a_vllm_role_prints_schema_valid_objects(tmp_path):
    roles = "  decode: {args: {tensor-parallel-size: 2, nnodes: 2}}\n  prefill: {args: {max-model-len: 8192}}\n"
    result = run_kvcheck("verify", str(vllm_manifest(tmp_path, None, roles)), "--dry-run", "--timeout", "600")
    assert (result.exit_code, result.stderr) == (0, "")
    docs = list(yaml.safe_load_all(result.stdout))
    assert [d["kind"] for d in docs] == ["Job", "LeaderWorkerSet", "Job"]
    worker = docs[1]["spec"]["leaderWorkerTemplate"]["workerTemplate"]["spec"]["containers"][0]["command"]
    assert worker[-1] == "--headless"
    for doc in docs:
        assert validation_errors(doc) == []

