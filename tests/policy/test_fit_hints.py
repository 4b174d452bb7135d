"""KV101's generic fix comes from the role's engine: SGLang's memory flags for SGLang, vLLM's for vLLM."""

from __future__ import annotations

from kvcheck.model import Location, PoolMeasurement, RoleTarget
from kvcheck.policy.rules import evaluate_role


def kv101_hint(engine: str, args: dict | None = None, env: dict | None = None) -> str:
    target = RoleTarget(name="server", context_length=4096, min_headroom=1.0, engine_version=None, args=args or {},
                        argv_args=(), location=Location("m.yaml", 1, 1), engine=engine, env=env or {})
    measurement = PoolMeasurement(role="server", source="measure", pool_tokens=1920, max_input_tokens=None)
    [found] = [f for f in evaluate_role(target, measurement) if f.rule == "KV101"]
    return found.hint or ""


FITS = "the largest context that fits this pool is 1,920 tokens; "


def test_sglang_roles_are_told_sglang_s_flags() -> None:
    assert kv101_hint("sglang") == FITS + (
        "or give the pool more memory: raise --mem-fraction-static, widen TP, or use an FP8 KV cache "
        "(`kvcheck plan` computes the settings that fit)")
    assert kv101_hint("sglang", {"device": "cpu"}) == FITS + (
        "or give the pool more host memory: raise --mem-fraction-static, or serve on a host with more RAM per "
        "NUMA node")


def test_vllm_roles_are_told_vllm_s_flags() -> None:
    assert kv101_hint("vllm") == FITS + (
        "or give the pool more memory: raise --gpu-memory-utilization, widen --tensor-parallel-size, or use an "
        "FP8 KV cache (--kv-cache-dtype fp8)")
    # an explicit KV cache size replaces the utilisation's profiling; an FP8 cache is not offered twice
    assert kv101_hint("vllm", {"kv_cache_memory_bytes": 2**21, "kv_cache_dtype": "fp8"}) == FITS + (
        "or give the pool more memory: raise --kv-cache-memory-bytes (it is set, so --gpu-memory-utilization "
        "does not size the pool), or widen --tensor-parallel-size")
    # vLLM's CPU backend sizes its pool from VLLM_CPU_KVCACHE_SPACE
    assert kv101_hint("vllm", env={"VLLM_CPU_KVCACHE_SPACE": "1"}) == FITS + (
        "or give the pool more host memory: raise VLLM_CPU_KVCACHE_SPACE (now 1 GiB) or --kv-cache-memory-bytes")
    assert "mem-fraction-static" not in kv101_hint("vllm")
