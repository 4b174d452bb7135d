"""`kvcheck plan` on a vLLM CPU role (`device: cpu`): its pool is the explicit KV space in host memory, so the
plan names VLLM_CPU_KVCACHE_SPACE (or --kv-cache-memory-bytes), never --gpu-memory-utilization or GPUs."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from tests.conftest import REPO_ROOT, run_kvcheck

# Llama-3.1-8B's config (docs/examples/vllm): 128 KiB of KV a token; the CPU backend's 128-token blocks, so
# 1 GiB is 64 blocks, one of them vLLM's null block: 63 x 128 = 8,064 tokens.
CONFIG = REPO_ROOT / "docs" / "examples" / "vllm" / "config.json"

MANIFEST = """\
name: vllm on cpu
context_length: 16000
model: {{path: /models/llama, config: config.json}}
engine: {{name: vllm, version: "0.32.0"{env}}}
device: cpu
args:
  max-model-len: 16000
{args}roles:
  server: {{}}
"""


def _manifest(tmp_path: Path, *, env: str = "", args: str = "") -> Path:
    shutil.copy(CONFIG, tmp_path / "config.json")
    path = tmp_path / "cpu.yaml"
    path.write_text(MANIFEST.format(env=env, args=args), encoding="utf-8")
    return path


def test_plan_on_a_cpu_role_words_its_answer_in_host_memory(tmp_path: Path) -> None:
    path = _manifest(tmp_path, env=', env: {VLLM_CPU_KVCACHE_SPACE: "1"}')
    done = run_kvcheck("plan", str(path), "--format", "json")
    assert done.exit_code == 1, done.stderr
    report = json.loads(done.stdout)
    plan = report["roles"][0]["details"]["plan"]
    fraction = plan["memory_fraction"]
    assert (fraction["flag"], fraction["current"], fraction["current_pool_tokens"]) == (
        "VLLM_CPU_KVCACHE_SPACE", 1.0, 8064)
    # 2 GiB: 128 blocks, 127 usable = 16,256 tokens, the smallest whole GiB that holds 16,000
    assert (fraction["min_fitting"], fraction["min_fitting_pool_tokens"], fraction["max_safe"]) == (2.0, 16256, None)
    tp2 = next(o for o in plan["tp_options"] if o["tensor_parallel_size"] == 2)
    assert (tp2["pool_tokens"], tp2["note"]) == (16256, "2 CPU workers x 1 GiB of host memory = 2 GiB")
    hints = [f["hint"] for f in report["findings"] if f["rule"] == "KV106"]
    assert 'set VLLM_CPU_KVCACHE_SPACE: "2" in engine.env (GiB of host memory)' in hints
    assert "set tensor-parallel-size: 2 (2 CPU workers x 1 GiB of host memory = 2 GiB)" in hints
    messages = [f["message"] for f in report["findings"] if f["rule"] == "KV106"]
    assert messages[1] == (
        "VLLM_CPU_KVCACHE_SPACE 2 GiB would hold the window: 2 GiB is the smallest value that holds 16,000 tokens "
        "(16,256 predicted); the manifest's 1 GiB gives 8,064 tokens (host memory; whether this host has it free is "
        "checked by `kvcheck verify` before boot (KV324))")

    text = run_kvcheck("plan", str(path)).stdout
    assert "VLLM_CPU_KVCACHE_SPACE   1 GiB *         8,064" in text
    assert "VLLM_CPU_KVCACHE_SPACE   1 GiB *         8,064     8,064-8,064   refused   manifest" in text
    assert "2 GiB          16,256               -   holds     smallest" in text
    for gpu_word in ("gpu-memory-utilization", "GPU", "idle"):
        assert gpu_word not in text, gpu_word


def test_plan_on_a_cpu_role_sized_in_bytes_names_the_bytes(tmp_path: Path) -> None:
    path = _manifest(tmp_path, args="  kv-cache-memory-bytes: 1073741824\n")
    done = run_kvcheck("plan", str(path), "--format", "json")
    assert done.exit_code == 1, done.stderr
    report = json.loads(done.stdout)
    fraction = report["roles"][0]["details"]["plan"]["memory_fraction"]
    # 16,000 tokens = 125 blocks of 128 plus the null block: 126 x 128 x 128 KiB = 2,016 MiB
    assert (fraction["flag"], fraction["current"], fraction["min_fitting"], fraction["min_fitting_pool_tokens"]) == (
        "kv-cache-memory-bytes", 1073741824, 2016 * 2**20, 16000)
    hints = [f["hint"] for f in report["findings"] if f["rule"] == "KV106"]
    assert f"set kv-cache-memory-bytes: {2016 * 2**20}" in hints
    assert "gpu-memory-utilization" not in run_kvcheck("plan", str(path)).stdout


def test_verify_on_a_small_cpu_pool_names_the_size_in_mib_and_ends_with_host_memory(tmp_path: Path) -> None:
    # 64 MiB: 4 blocks of 128 x 128 KiB, one of them the null block, so 384 tokens; 2,000 tokens take 16 blocks
    # plus the null block: 17 x 16 MiB = 272 MiB (2,048 usable tokens), which prints in MiB (0.27 GiB would read as nothing)
    path = _manifest(tmp_path, args="  kv-cache-memory-bytes: 67108864\n")
    text = path.read_text(encoding="utf-8").replace("16000", "2000")
    path.write_text(text, encoding="utf-8")
    done = run_kvcheck("verify", str(path), "--mode", "estimate", "--format", "json")
    assert done.exit_code == 1, done.stderr
    report = json.loads(done.stdout)
    [kv101] = [f for f in report["findings"] if f["rule"] == "KV101"]
    assert kv101["hint"].startswith(
        f"the largest context that fits this pool is 384 tokens; kv-cache-memory-bytes {272 * 2**20} (272.0 MiB) "
        "would hold 2,048 tokens, the window even at the low end of the estimate; ")
    # the planner's settings are estimates: the host's own memory settings close the hint either way
    assert kv101["hint"].endswith(
        "or give the pool more host memory: raise VLLM_CPU_KVCACHE_SPACE (GiB) or --kv-cache-memory-bytes, "
        "or serve on a host with more RAM per NUMA node")
