"""A CPU manifest (`device: cpu`) against real SGLang 0.5.23 and real vLLM 0.32.0 (issue 19, item 7).

CPU roles are a deployment, not a test trick: with `device: cpu` the role lists no GPUs, verify needs no
`--no-gpu-check` on this GPU-less host, no CUDA variable reaches the engine, SGLang is given
`--device cpu` by kvcheck (the manifest's args do not say it) and vLLM, which has no such flag, runs
as its build decides. The host's memory and NUMA nodes are checked instead (KV324) and recorded.
Four boots in all: per engine, a pool that holds the window (exit 0) and one capped below it (exit 1);
plus host refusals (exit 3) that boot nothing. Every pool is capped (`--max-total-tokens`,
`VLLM_CPU_KVCACHE_SPACE`, `--kv-cache-memory-bytes`).
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT, run_kvcheck
from tests.engines.real.conftest import (
    WINDOW,
    RealSglang,
    RealVllm,
    Verified,
    verify,
    wait_until_gone,
    write_manifest,
    write_vllm_manifest,
)

pytestmark = [pytest.mark.real_engine, pytest.mark.slow]

HOST_KEYS = {"mem_total_gib", "mem_available_gib", "cgroup_limit_gib", "numa_nodes", "mem_available_per_node_gib"}
VLLM_WINDOW = 4096
VLLM_BOOT_S = 900
TOKEN_BYTES = 1024  # the tiny model's KV per token: 2 layers x (K + V) x 2 KV heads x 64 x 2 bytes
BLOCK = 128  # vLLM's KV block on its CPU backend
VLLM_SHORT_BYTES = 2 * 2**20  # 2,048 tokens of the tiny model = 16 blocks of 128, 15 usable: 1,920 < the window


def rules(report: dict) -> list[str]:
    return sorted(f["rule"] for f in report["findings"])


def assert_cpu_role(role: dict) -> None:
    """What makes the run a CPU deployment, whatever its verdict: no GPUs, no CUDA settings, the host read."""
    assert role["gpus"] is None
    assert not any(name.startswith("CUDA_") for name in role["details"]["engine_env"]), role["details"]["engine_env"]
    host = role["details"]["host"]
    assert set(host) == HOST_KEYS
    assert host["numa_nodes"] >= 1 and host["mem_available_gib"] > 0


# -- SGLang ---------------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def sglang_holds(real_sglang: RealSglang, tmp_path_factory: pytest.TempPathFactory) -> Verified:
    return verify(real_sglang, tmp_path_factory.mktemp("sglang-holds"), 2 * WINDOW)


@pytest.fixture(scope="module")
def sglang_short(real_sglang: RealSglang, tmp_path_factory: pytest.TempPathFactory) -> Verified:
    return verify(real_sglang, tmp_path_factory.mktemp("sglang-short"), WINDOW // 2)


def test_sglang_cpu_manifest_that_holds_the_window_is_exit_0_with_no_flag(sglang_holds: Verified) -> None:
    assert (sglang_holds.code, sglang_holds.report["verdict"]) == (0, "pass"), (sglang_holds.report,
                                                                               sglang_holds.stderr)
    [role] = sglang_holds.report["roles"]
    assert (role["status"], role["pool_tokens"], role["required_tokens"]) == ("pass", 2 * WINDOW, WINDOW)
    assert_cpu_role(role)
    # the manifest said `device: cpu` and its args did not: kvcheck gave SGLang --device cpu, once
    assert role["argv"].count("--device") == 1
    assert role["argv"][role["argv"].index("--device") + 1] == "cpu"
    # and SGLang ran on the CPU: it states the host memory left, not a GPU's
    assert "available_cpu_mem=" in sglang_holds.log.read_text(errors="replace")


def test_sglang_cpu_manifest_capped_below_the_window_is_exit_1(sglang_short: Verified) -> None:
    assert (sglang_short.code, sglang_short.report["verdict"]) == (1, "fail"), (sglang_short.report,
                                                                               sglang_short.stderr)
    [role] = sglang_short.report["roles"]
    assert (role["status"], role["pool_tokens"], role["required_tokens"]) == ("fail", WINDOW // 2, WINDOW)
    assert_cpu_role(role)
    assert "KV101" in rules(sglang_short.report)
    [kv101] = [f for f in sglang_short.report["findings"] if f["rule"] == "KV101"]
    assert f"the pool is capped by --max-total-tokens {WINDOW // 2:,}" in kv101["hint"]


def test_sglang_cpu_role_with_more_ranks_than_numa_nodes_is_refused_before_boot(
    real_sglang: RealSglang, tmp_path: Path
) -> None:
    # 2,048 TP ranks: more than any host has NUMA nodes; real SGLang would assert in init_threads_binding
    tag = f"ranks-{uuid.uuid4().hex}"
    path = write_manifest(real_sglang, tmp_path / "deploy.yaml", tag, 2 * WINDOW, **{"tp-size": 2048})
    done = run_kvcheck("verify", str(path), "--format", "json", cwd=REPO_ROOT, timeout=120)
    assert done.exit_code == 3, done.stdout + done.stderr
    assert rules(json.loads(done.stdout)) == ["KV324"]
    assert wait_until_gone(tag, within_s=5) == []  # nothing was started


# -- vLLM -----------------------------------------------------------------------------------------------------------


def verify_vllm(real: RealVllm, folder: Path, env: dict[str, str] | None = None, **args: object) -> Verified:
    """`kvcheck verify` on a one-role vLLM CPU manifest, with no --no-gpu-check; every vLLM process gone after."""
    tag = f"{folder.name}-{uuid.uuid4().hex}"
    path = write_vllm_manifest(real, folder / "deploy.yaml", tag, VLLM_WINDOW, env, max_model_len=VLLM_WINDOW, **args)
    done = run_kvcheck("verify", str(path), "--format", "json", "--timeout", str(VLLM_BOOT_S),
                       "--logs-dir", str(folder / "logs"), cwd=REPO_ROOT, timeout=VLLM_BOOT_S + 120)
    assert wait_until_gone(tag, within_s=30) == [], "vLLM processes outlived kvcheck verify"
    assert done.stdout, done.stderr
    (folder / "report.json").write_text(done.stdout)
    [run] = (folder / "logs").iterdir()
    return Verified(done.exit_code, json.loads(done.stdout), done.stderr, run / "server.log", 0.0)


@pytest.fixture(scope="module")
def vllm_holds(real_vllm: RealVllm, tmp_path_factory: pytest.TempPathFactory) -> Verified:
    # the explicit KV space of vLLM's CPU backend, GiB: 1 GiB of the tiny model's 1,024-byte tokens
    return verify_vllm(real_vllm, tmp_path_factory.mktemp("vllm-holds"), {"VLLM_CPU_KVCACHE_SPACE": "1"})


@pytest.fixture(scope="module")
def vllm_short(real_vllm: RealVllm, tmp_path_factory: pytest.TempPathFactory) -> Verified:
    return verify_vllm(real_vllm, tmp_path_factory.mktemp("vllm-short"), kv_cache_memory_bytes=VLLM_SHORT_BYTES)


def test_vllm_cpu_manifest_that_holds_the_window_is_exit_0_with_no_flag(vllm_holds: Verified) -> None:
    assert (vllm_holds.code, vllm_holds.report["verdict"]) == (0, "pass"), (vllm_holds.report, vllm_holds.stderr)
    [role] = vllm_holds.report["roles"]
    # VLLM_CPU_KVCACHE_SPACE=1: 1 GiB of 1,024-byte tokens, in 128-token blocks, every block but the null one
    assert (role["status"], role["pool_tokens"]) == ("pass", (2**30 // TOKEN_BYTES // BLOCK - 1) * BLOCK)
    assert_cpu_role(role)
    assert "--device" not in role["argv"]  # vLLM 0.32.0 has no such flag: nothing is added
    # vLLM's CPU backend sized it, from the space the manifest's env gives
    assert f"CPU KV cache size: {2**30 // TOKEN_BYTES:,} tokens" in vllm_holds.log.read_text(errors="replace")


def test_vllm_cpu_manifest_capped_below_the_window_is_exit_1(vllm_short: Verified) -> None:
    assert (vllm_short.code, vllm_short.report["verdict"]) == (1, "fail"), (vllm_short.report, vllm_short.stderr)
    [role] = vllm_short.report["roles"]
    assert (role["status"], role["pool_tokens"], role["required_tokens"]) == ("fail", 1920, VLLM_WINDOW)
    assert_cpu_role(role)
    assert rules(vllm_short.report) == ["KV101", "KV109"]
    [kv101] = [f for f in vllm_short.report["findings"] if f["rule"] == "KV101"]
    assert kv101["hint"].endswith("give the pool more host memory: raise VLLM_CPU_KVCACHE_SPACE (GiB) or "
                                  "--kv-cache-memory-bytes, or serve on a host with more RAM per NUMA node")


def test_vllm_kv_space_above_the_hosts_memory_is_refused_before_boot(real_vllm: RealVllm, tmp_path: Path) -> None:
    tag = f"space-{uuid.uuid4().hex}"
    path = write_vllm_manifest(real_vllm, tmp_path / "deploy.yaml", tag, VLLM_WINDOW,
                               {"VLLM_CPU_KVCACHE_SPACE": str(2**20)}, max_model_len=VLLM_WINDOW)  # 1 PiB
    done = run_kvcheck("verify", str(path), "--format", "json", cwd=REPO_ROOT, timeout=120)
    assert done.exit_code == 3, done.stdout + done.stderr
    [finding] = json.loads(done.stdout)["findings"]
    assert finding["rule"] == "KV324"
    assert finding["message"].startswith(f"role server asks for a {2**20} GiB KV cache (VLLM_CPU_KVCACHE_SPACE), "
                                         "and this host has ")
    assert wait_until_gone(tag, within_s=5) == []
