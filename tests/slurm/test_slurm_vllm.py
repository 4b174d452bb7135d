"""`kvcheck verify --launcher slurm` of vLLM roles on the real two-node Slurm cluster, the vLLM double
(tests/doubles/fake_vllm.py, vLLM 0.32.0's lines and multi-node launch) as the engine.

A role on two nodes runs vLLM's multiprocessing multi-node launch: `vllm serve MODEL ... --nnodes 2
--master-addr <head> --master-port P --node-rank $SLURM_NODEID` on both, `--headless` on node 1 (its
workers join the head's torch.distributed group; it starts no API server). The double's head waits for
node 1's workers at the master port before it sizes the pool, and refuses a node 1 without --headless:
the pass below holds only if both nodes got what vLLM needs. The last test boots real vLLM 0.32.0 (the
real-engine harness's CPU install, KVCHECK_REAL_VLLM) as a Slurm task; it skips without the install.
"""

from __future__ import annotations

import json
import sys
import uuid
from pathlib import Path

import pytest

from tests.engines.real.conftest import RealVllm, real_vllm, wait_until_gone, write_vllm_manifest  # noqa: F401, F811
from tests.slurm.conftest import Cluster, PidFile, run_kvcheck

FAKE_VLLM = Path(__file__).resolve().parents[1] / "doubles" / "fake_vllm.py"
# 2 layers x 2 KV heads x 64 x K and V x bf16: 1,024 bytes of KV a token (the real tiny model's config)
TINY = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "max_position_embeddings": 8192,
        "vocab_size": 8192, "hidden_size": 256, "num_hidden_layers": 2, "num_attention_heads": 4,
        "num_key_value_heads": 2, "head_dim": 64}
MIB = 2**20


@pytest.fixture
def vllm_pids(pidfile: PidFile, monkeypatch: pytest.MonkeyPatch) -> PidFile:
    """The vLLM double's processes in the same pid file (every test must leave none running)."""
    monkeypatch.setenv("FAKE_VLLM_PIDFILE", str(pidfile.path))
    monkeypatch.setenv("FAKE_VLLM_STEP_S", "0.001")
    return pidfile


def vllm_manifest(tmp_path: Path, roles: str, *, window: int = 8192) -> Path:
    """A vLLM GPU deployment whose engine is the double (GPU lines, block 16); `roles` is the roles block's body."""
    model = tmp_path / "tiny-llama"
    model.mkdir()
    (model / "config.json").write_text(json.dumps(TINY))
    path = tmp_path / "deploy.yaml"
    path.write_text(
        "name: slurm-vllm-double\n"
        f"context_length: {window}\n"
        f"model:\n  path: {model}\n"
        "engine:\n"
        "  name: vllm\n"
        '  version: "0.32.0"\n'
        f"  command: [{json.dumps(sys.executable)}, {json.dumps(str(FAKE_VLLM))}, serve]\n"
        "  env: {FAKE_VLLM_DEVICE: cuda}\n"
        "launcher:\n  slurm: {partition: debug}\n"
        f"roles:\n{roles}"
    )
    return path


def _role(report: dict, name: str) -> dict:
    [role] = [role for role in report["roles"] if role["name"] == name]
    return role


def _rules(report: dict) -> list[str]:
    return sorted(f["rule"] for f in report["findings"])


def test_a_one_node_vllm_role_is_measured_through_slurm_and_passes(
    cluster: Cluster, vllm_pids: PidFile, tmp_path: Path
) -> None:
    # 16 MiB of KV: 1,024 blocks of 16 tokens, one held back (the null block): 16,368 usable tokens
    roles = (
        "  server:\n"
        "    gpus: [0]\n"
        "    args: {max-model-len: 8192}\n"
        f"    env: {{FAKE_VLLM_KV_BYTES: '{16 * MIB}'}}\n"
    )
    code, report, err = run_kvcheck(cluster, vllm_manifest(tmp_path, roles), "--timeout", "60")
    assert code == 0, err + json.dumps(report["findings"])
    server = _role(report, "server")
    assert (server["status"], server["pool_tokens"], server["details"]["engine_context_len"]) == ("pass", 16368, 8192)
    slurm = server["details"]["slurm"]
    assert len(slurm["nodes"]) == 1 and "--nodes=1" in slurm["salloc"] and "--gres=gpu:1" in slurm["salloc"]
    srun = slurm["srun"]
    engine = srun[srun.index("kvcheck-engine") + 1:]
    assert engine[:4] == [sys.executable, str(FAKE_VLLM), "serve", str(tmp_path / "tiny-llama")]
    assert engine[-4:-2] == ["--host", "0.0.0.0"]  # every interface of the node, not production's port
    assert "--nnodes" not in engine and "--headless" not in " ".join(srun)
    assert slurm["state"] == "CANCELLED" and slurm["job_id"] not in cluster.live_jobs()
    assert len(vllm_pids.pids()) == 3  # API server, engine core, worker
    assert vllm_pids.survivors() == []


def test_a_pool_that_auto_fit_shrinks_below_the_window_fails_the_gate(
    cluster: Cluster, vllm_pids: PidFile, tmp_path: Path
) -> None:
    # 4 MiB: 256 blocks, 4,080 usable tokens; `--max-model-len auto` fits the window to them and only logs it
    roles = (
        "  server:\n"
        "    gpus: [0]\n"
        "    args: {max-model-len: auto}\n"
        f"    env: {{FAKE_VLLM_KV_BYTES: '{4 * MIB}'}}\n"
    )
    code, report, err = run_kvcheck(cluster, vllm_manifest(tmp_path, roles), "--timeout", "60")
    assert code == 1, err
    server = _role(report, "server")
    assert (server["status"], server["pool_tokens"], server["details"]["engine_context_len"]) == ("fail", 4080, 4080)
    assert _rules(report) == ["KV101", "KV102"]  # the pool below the window; the window below the promise
    assert vllm_pids.survivors() == []


def test_a_refusal_at_boot_is_a_measured_kv109_not_a_failure_to_measure(
    cluster: Cluster, vllm_pids: PidFile, tmp_path: Path
) -> None:
    roles = (
        "  server:\n"
        "    gpus: [0]\n"
        "    args: {max-model-len: 8192}\n"
        f"    env: {{FAKE_VLLM_KV_BYTES: '{4 * MIB}'}}\n"
    )
    code, report, err = run_kvcheck(cluster, vllm_manifest(tmp_path, roles), "--timeout", "60")
    assert code == 1, err
    [refusal] = [f for f in report["findings"] if f["rule"] == "KV109"]
    assert "the estimated maximum model length is 4080" in refusal["message"]
    assert _rules(report) == ["KV101", "KV109"]  # measured, not "could not measure" (KV301)
    job = _role(report, "server")["details"]["slurm"]["job_id"]
    assert job not in cluster.live_jobs()
    assert vllm_pids.survivors() == []


def test_a_two_node_vllm_role_runs_vllms_multi_node_launch_with_a_headless_node(
    cluster: Cluster, vllm_pids: PidFile, tmp_path: Path
) -> None:
    roles = (
        "  server:\n"
        "    gpus: [0]\n"
        "    args: {tensor-parallel-size: 2, nnodes: 2, max-model-len: 8192}\n"
        f"    env: {{FAKE_VLLM_KV_BYTES: '{16 * MIB}', FAKE_VLLM_RENDEZVOUS_S: '40'}}\n"
    )
    code, report, err = run_kvcheck(cluster, vllm_manifest(tmp_path, roles), "--timeout", "60")
    assert code == 0, err + json.dumps(report["findings"])
    server = _role(report, "server")
    assert (server["status"], server["pool_tokens"]) == ("pass", 16368)
    slurm = server["details"]["slurm"]
    assert slurm["nodes"] == ["n1", "n2"] and slurm["head"] == "n1"
    assert "--nodes=2" in slurm["salloc"] and "--gres=gpu:1" in slurm["salloc"]
    srun = slurm["srun"]
    assert srun[-6:-1] == ["--nnodes", "2", "--master-addr", "10.77.0.11", "--master-port"]  # the head's NodeAddr
    assert srun[-1].isdigit()
    [script] = [arg for arg in srun if "--node-rank" in arg]
    # node 1 (and any above) adds --headless in its own shell; every node its rank
    assert script.startswith('trap : TERM INT HUP; [ "$SLURM_NODEID" = 0 ] || set -- "$@" --headless; ')
    assert '"$@" --node-rank "$SLURM_NODEID";' in script
    # head: API server, engine core, 1 worker; node 1: the headless process and its worker
    assert len(vllm_pids.pids()) == 5
    assert slurm["state"] == "CANCELLED" and slurm["job_id"] not in cluster.live_jobs()
    assert vllm_pids.survivors() == []


@pytest.mark.real_engine
def test_real_vllm_on_cpu_is_measured_through_slurm(
    cluster: Cluster, real_vllm: RealVllm, tmp_path: Path  # noqa: F811  (the fixture)
) -> None:
    """Real vLLM 0.32.0 (the CPU build of the real-engine harness) as one Slurm task: a CPU role asks for
    no GPU; 16 MiB of KV are 128 blocks of 128 tokens, 127 usable."""
    tag = uuid.uuid4().hex
    path = write_vllm_manifest(real_vllm, tmp_path / "deploy.yaml", tag, 4096, max_model_len=4096,
                               kv_cache_memory_bytes=16 * MIB)
    path.write_text(path.read_text() + "launcher:\n  slurm: {partition: debug}\n")
    try:
        code, report, err = run_kvcheck(cluster, path, "--timeout", "600", timeout_s=900)
    finally:
        survivors = wait_until_gone(tag, within_s=60)
    assert code == 0, err + json.dumps(report["findings"])
    server = _role(report, "server")
    assert (server["status"], server["pool_tokens"], server["details"]["engine_context_len"]) == ("pass", 16256, 4096)
    assert server["details"]["engine_version"] == "0.32.0"
    salloc = server["details"]["slurm"]["salloc"]
    assert not [arg for arg in salloc if arg.startswith(("--gres", "--gpus"))]
    assert server["details"]["slurm"]["job_id"] not in cluster.live_jobs()
    assert survivors == []
