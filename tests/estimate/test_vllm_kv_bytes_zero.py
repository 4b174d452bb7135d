"""`--kv-cache-memory-bytes 0` as vLLM takes it. The GPU worker tests the value for truth
(`if kv_cache_memory_bytes := self.cache_config.kv_cache_memory_bytes:`, vllm/v1/worker/gpu_worker.py, the
same line in every release with the flag, 0.10.2-0.33.0), so 0 means "profile the pool from
--gpu-memory-utilization"; the estimate priced it as a 0-byte pool (KV220 + KV101, exit 1, and KV211).
The CPU worker tests `is not None` from 0.20.0 (a 0-byte cache, refused at start) and never reads the flag
before it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvcheck.engines.vllm.probe import fit_hint
from tests.conftest import run_kvcheck
from tests.datapaths import MODELS

LLAMA = MODELS / "meta-llama--Meta-Llama-3.1-8B.json"


def _manifest(tmp_path: Path, version: str, args: str, *, cpu: bool = False, env: str = "{}") -> Path:
    """A one-role vLLM manifest: Llama-3.1-8B on one H100 (a 32k window), or on vLLM's CPU backend (4k)."""
    window = 4096 if cpu else 32768
    path = tmp_path / "m.yaml"
    path.write_text(
        f"context_length: {window}\n"
        f"model: {{path: meta-llama/Llama-3.1-8B-Instruct, config: {LLAMA}}}\n"
        f'engine: {{name: vllm, version: "{version}", env: {env}}}\n'
        + ("device: cpu\n" if cpu else "gpu: H100\n")
        + f"args: {{max-model-len: {window}{args}}}\n"
        + ("roles:\n  server: {}\n" if cpu else "roles:\n  server: {gpus: [0]}\n"), encoding="utf-8")
    return path


def _verify(path: Path) -> tuple[int, dict]:
    done = run_kvcheck("verify", str(path), "--mode", "estimate", "--format", "json")
    return done.exit_code, json.loads(done.stdout) if done.stdout.strip() else {"stderr": done.stderr}


@pytest.mark.parametrize("version", ["0.10.2", "0.11.0", "0.20.0", "0.32.0", "0.33.0"])
def test_zero_on_a_gpu_is_the_profiled_pool_in_every_release(tmp_path: Path, version: str) -> None:
    code, unset = _verify(_manifest(tmp_path, version, ""))
    assert code == 0, unset
    code, zero = _verify(_manifest(tmp_path, version, ", kv-cache-memory-bytes: 0"))
    assert code == 0, zero
    assert zero["findings"] == []  # no KV220/KV101 (a 0-byte pool), no KV211 (vLLM profiles)
    [role], [same] = zero["roles"], unset["roles"]
    assert role["pool_tokens"] == same["pool_tokens"] > 32768
    assert "kv_cache_memory_bytes" not in role["details"]
    assert role["details"]["gpu_memory_utilization"] == same["details"]["gpu_memory_utilization"]


def test_zero_on_vllm_cpu_from_0_20_is_a_refused_start(tmp_path: Path) -> None:
    """cpu_worker.py (0.32.0): `explicit_kv_cache_size is not None` -> a 0-byte cache -> kv_cache_utils.py
    `if available_memory <= 0: raise ValueError("No available memory for the cache blocks. ...")`."""
    code, report = _verify(_manifest(tmp_path, "0.32.0", ", kv-cache-memory-bytes: 0", cpu=True))
    assert code == 1, report
    assert [f["rule"] for f in report["findings"]] == ["KV220", "KV101"]
    assert report["findings"][0]["message"] == (
        "vLLM would refuse to start (predicted): No available memory for the cache blocks")


def test_the_flag_on_vllm_cpu_before_0_20_is_ignored_by_vllm_so_the_pool_is_not_guessed(tmp_path: Path) -> None:
    """0.19.0's CPU worker: `determine_available_memory` returns cpu_kvcache_space_bytes (VLLM_CPU_KVCACHE_SPACE,
    else half the NUMA node's RAM); the flag was priced as the pool."""
    code, report = _verify(_manifest(tmp_path, "0.19.0", ", kv-cache-memory-bytes: 1073741824", cpu=True))
    assert code == 3, report
    [f] = report["findings"]
    assert f["rule"] == "KV305"
    assert "vLLM 0.19.0's CPU backend ignores --kv-cache-memory-bytes (its worker reads it from 0.20.0)" in f["message"]
    # VLLM_CPU_KVCACHE_SPACE is what that release reads: priced from it
    code, report = _verify(_manifest(tmp_path, "0.19.0", ", kv-cache-memory-bytes: 1073741824", cpu=True,
                                     env='{VLLM_CPU_KVCACHE_SPACE: "2"}'))
    assert code == 0, report
    assert report["roles"][0]["details"]["kv_cache_memory_bytes"] == 2 << 30


def test_explicit_kv_bytes_and_the_kv101_hint_read_zero_as_vllm_does() -> None:
    from kvcheck.engines.vllm.serving import explicit_kv_bytes

    assert explicit_kv_bytes({"kv_cache_memory_bytes": 0}, "cuda", "0.32.0") is None
    assert explicit_kv_bytes({"kv_cache_memory_bytes": 0}, "cpu", "0.32.0") == 0
    assert explicit_kv_bytes({"kv_cache_memory_bytes": 2**30}, "cpu", "0.19.0") is None
    assert explicit_kv_bytes({"kv_cache_memory_bytes": 2**30}, "cuda", "0.19.0") == 2**30
    assert fit_hint({"kv_cache_memory_bytes": 0}, "cuda", {}).startswith(
        "or give the pool more memory: raise --gpu-memory-utilization,")
