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

KV210 = define_rule(
    "KV210",
    "warning",
    "a vLLM role runs NixlConnector with kv_role kv_both",
    """kv_both makes one instance both prefill and decode: the gate must reason about it as either
    role (KV104 and KV110 compare it with the prefill roles and with the decode roles). With
    NixlConnector vLLM 0.32.0 deprecates it (`Using kv_role='kv_both' with NixlConnector is deprecated
    and will be removed in a future release`, vllm/distributed/kv_transfer/kv_connector/v1/nixl/
    connector.py): a later release refuses to start such a role. Fix: set kv_role kv_producer on the
    prefill instances and kv_consumer on the decode instances.""",
)
KV211 = define_rule(
    "KV211",
    "warning",
    "--kv-cache-memory-bytes sizes a vLLM GPU pool without memory profiling",
    """With --kv-cache-memory-bytes vLLM reserves exactly that much for the KV cache and skips its
    memory profiling (`... skipped memory profiling. This does not respect the gpu_memory_utilization
    config ... If OOM'ed, check the difference of initial free memory`, vllm/v1/worker/gpu_worker.py):
    nothing at boot checks that the weights, activations and CUDA graphs fit beside the pool, so a
    role that boots and passes can run out of memory under load, and the same bytes on a GPU with
    less free memory at start leave less room. kvcheck measures the pool, not that headroom. Not
    raised for a CPU role (vLLM's CPU backend never profiles: the explicit KV space is its normal
    sizing). Fix: size the pool with --gpu-memory-utilization (vLLM profiles and keeps the headroom),
    or measure the role under peak load on the production GPU and keep --kv-cache-memory-bytes at
    most what that run left free.""",
)
KV212 = define_rule(
    "KV212",
    "warning",
    "a vLLM role recomputes KV blocks whose transfer failed (kv_load_failure_policy recompute)",
    """`--kv-transfer-config` with `kv_load_failure_policy: recompute` makes vLLM reschedule a request
    whose KV blocks failed to load from the connector and recompute them. When requests share blocks
    (prefix caching), the recompute has been reported to produce wrong output for the requests that
    share the failed blocks; `fail` (vLLM's default) ends the request with an error instead. Fix: keep
    kv_load_failure_policy at fail, unless the role runs without prefix caching.""",
)
