"""The rules only vLLM's knowledge raises (Engine.rules() hands them to the catalogue)."""

from __future__ import annotations

from kvcheck.policy.registry import define_rule

KV109 = define_rule(
    "KV109",
    "error",
    "the engine refused to start: one request of its context length does not fit its KV cache",
    """vLLM checks at boot that one request of `--max-model-len` fits the KV cache it allocated, and
    exits otherwise (`ValueError: To serve at least one request with the model's max seq len (L) ...
    the estimated maximum model length is N`). The pool was measured, by vLLM itself: N tokens hold
    one request at most, so the role, started with its production arguments, serves nothing. This
    is a gate failure (exit 1), not a failure to measure. Fix: give the KV cache more memory
    (`--gpu-memory-utilization`, `--kv-cache-memory-bytes`, `VLLM_CPU_KVCACHE_SPACE` on CPU, more GPUs
    with `--tensor-parallel-size`, an fp8 KV cache), or lower `--max-model-len` to at most N and
    advertise no more than that.""",
)
