"""The rules only vLLM's knowledge raises (Engine.rules() hands them to the catalogue)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from packaging.version import InvalidVersion, Version

from kvcheck.policy.registry import define_rule

if TYPE_CHECKING:
    from kvcheck.model import Finding, RoleTarget

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
    sizing), nor for 0, which the GPU worker reads as unset (`if kv_cache_memory_bytes := ...`) and
    profiles. Fix: size the pool with --gpu-memory-utilization (vLLM profiles and keeps the headroom),
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

# -- version rules: known prefill/decode defects of vLLM releases, each with its public issue or PR and the
# releases it affects, read in each release's own source (vllm/config/kv_transfer.py, vllm/v1/core/sched/
# scheduler.py, vllm/distributed/kv_transfer/kv_connector/v1/nixl_connector.py).

KV213 = define_rule(
    "KV213",
    "warning",
    "a vLLM release that recomputes failed KV loads by default runs a KV-transfer role without kv_load_failure_policy",
    """vLLM 0.11.1 added the recovery from failed KV loads (vllm-project/vllm#19330): the scheduler
    reschedules a request whose KV blocks failed to arrive and recomputes them (`Recovered from KV load
    failure: N request(s) rescheduled`). Through 0.12.x it always does; 0.13.0 added
    `kv_load_failure_policy` with `recompute` as its default, and 0.17.0 made `fail` the default
    (vllm-project/vllm#34896, after the RFC vllm-project/vllm#32200). On 0.11.1-0.16.x a transfer that
    fails is therefore hidden: the decode instance redoes the prefill with its decode settings, so a
    broken pair looks healthy with poor latency, and the recompute has been reported to give wrong
    output when requests share blocks (KV212; vllm-project/vllm#49250). Affects 0.11.1 to 0.16.x; fixed
    in 0.17.0. Fix: on 0.13.0-0.16.x set `kv_load_failure_policy: fail` in --kv-transfer-config; on
    0.11.1-0.12.x, where it cannot be set, deploy 0.17.0 or later.""",
)
KV214 = define_rule(
    "KV214",
    "warning",
    "a NixlConnector role with its own --block-size runs vLLM 0.11.1 or 0.11.2 (block_size_ratio defect)",
    """vLLM 0.11.1 let NIXL pairs use different block sizes (vllm-project/vllm#26759). When a role's
    logical block size (--block-size) differs from its attention kernel's block size, vLLM logs `User-
    specified logical block size (N) does not match physical kernel block size (M). Using the latter.`
    and uses the kernel's, but 0.11.1 and 0.11.2 keep the old size in the table the NIXL handshake
    reads: the block-size ratio comes out wrong, the handshake raises, and requests between prefill
    and decode hang (vllm-project/vllm#28925, "currently hangs on main ... with eg block_size=128").
    Affects 0.11.1 and 0.11.2; fixed in 0.12.0. Fix: deploy vLLM 0.12.0 or later, or leave
    --block-size at the attention backend's own size on both roles.""",
)

LOAD_POLICY_SINCE = Version("0.11.1")  # vllm-project/vllm#19330: failed loads are recomputed
LOAD_POLICY_SETTABLE = Version("0.13.0")  # kv_load_failure_policy, default recompute
LOAD_POLICY_FAIL_DEFAULT = Version("0.17.0")  # vllm-project/vllm#34896
RATIO_DEFECT = (Version("0.11.1"), Version("0.12.0"))  # vllm-project/vllm#26759 .. #28925


def _release(text: str | None) -> Version | None:
    try:
        return Version(str(text)) if text else None
    except InvalidVersion:
        return None


def version_findings(target: RoleTarget, args: Mapping[str, Any], mode: str | None) -> list[Finding]:
    """KV213-KV214: the known P/D defects of the role's declared vLLM release (engine.version)."""
    from kvcheck.engines.vllm.serving import kv_transfer_config
    from kvcheck.policy.registry import finding

    release = _release(target.engine_version)
    config = kv_transfer_config(args)
    if release is None or config is None:
        return []
    base = Version(release.base_version)  # 0.12.0rc1 and 0.12.0.post1 are 0.12.0's code
    found = []
    where = target.arg_location("kv_transfer_config")
    if LOAD_POLICY_SINCE <= base < LOAD_POLICY_FAIL_DEFAULT and "kv_load_failure_policy" not in config \
            and mode is not None:
        settable = base >= LOAD_POLICY_SETTABLE
        found.append(finding(
            "KV213", target.name,
            f"vLLM {target.engine_version} recomputes a request whose KV blocks failed to load "
            + ("(kv_load_failure_policy defaults to recompute)" if settable else "(it cannot be turned off)")
            + ": a failing transfer is hidden, and recompute has given wrong output when requests share blocks",
            hint="set kv_load_failure_policy: fail in --kv-transfer-config" if settable
            else "deploy vLLM 0.17.0 or later (0.13.0 to 0.16.x: set kv_load_failure_policy: fail)",
            location=where,
        ))
    connector = str(config.get("kv_connector", ""))
    if RATIO_DEFECT[0] <= base < RATIO_DEFECT[1] and connector.startswith("Nixl") and args.get("block_size"):
        found.append(finding(
            "KV214", target.name,
            f"NixlConnector with --block-size {args['block_size']} on vLLM {target.engine_version}: where the "
            "attention kernel's block size differs, the NIXL handshake computes a wrong block-size ratio and "
            "requests between prefill and decode hang (fixed in 0.12.0)",
            hint="deploy vLLM 0.12.0 or later, or drop --block-size on both roles",
            location=target.arg_location("block_size"),
        ))
    return found
