"""How vLLM is launched, which prefill/decode role its args give it, and which prompts it admits.

The one home of these rules for vLLM; every command (logs, measure, audit) asks here.
Measured on vLLM 0.32.0 (docs/vllm.md): a prompt of at most max_model_len - 1 tokens is admitted, so prompts of max_model_len or more are refused
(a longer one is HTTP 400 "This model's maximum context length is ..."), and one KV block of the
pool is vLLM's null block, so a request can use at most (num_gpu_blocks - 1) x block_size tokens.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from kvcheck.io.jsontext import loads as json_loads

if TYPE_CHECKING:
    from kvcheck.model import Finding, RoleTarget

DEFAULT_ENGINE_COMMAND: tuple[str, ...] = ("vllm", "serve")

# vLLM keeps token counts and block ids in int32 tensors: a larger figure is damage or a lie, never a pool.
MAX_TOKEN_FIGURE = 2**31 - 1

# kv_role of --kv-transfer-config -> kvcheck's role mode. kv_both is a role of its own: it may prefill
# for others and decode for itself, so the gate must reason about both sides (docs/vllm.md).
KV_ROLES = {"kv_producer": "prefill", "kv_consumer": "decode", "kv_both": "kv_both"}

# The KV block size vLLM picks when --block-size is unset: 128 on its CPU backend (cache_config_info
# block_size="128" on 0.32.0), 16 on CUDA for full-attention models (hybrid and MLA models pick larger
# ones, which the log does not state: a figure derived with 16 is then too large, so the log reader
# prefers the block size the log or the server states).
DEFAULT_BLOCK_SIZE = {"cpu": 128, "cuda": 16}


CPU_READS_KV_BYTES_FROM = (0, 20, 0)  # before, the CPU worker sizes its cache from VLLM_CPU_KVCACHE_SPACE alone


def explicit_kv_bytes(args: Mapping[str, Any], device: str, version: str | None) -> Any:
    """--kv-cache-memory-bytes as vLLM's worker takes it; None where vLLM sizes the pool without it.

    The GPU worker tests it for truth (`if kv_cache_memory_bytes := self.cache_config.kv_cache_memory_bytes:`,
    vllm/v1/worker/gpu_worker.py, every release with the flag, 0.10.2-0.33.0): 0 is unset there, and the pool
    is profiled from --gpu-memory-utilization. The CPU worker tests `is not None` (cpu_worker.py, from 0.20.0):
    0 there is a 0-byte cache, which vLLM refuses at start ("No available memory for the cache blocks");
    before 0.20.0 it never reads the flag (`determine_available_memory` returns cpu_kvcache_space_bytes, from
    VLLM_CPU_KVCACHE_SPACE or half the NUMA node's RAM). `version` None reads as the newest release."""
    value = args.get("kv_cache_memory_bytes")
    if value is None:
        return None
    if device == "cpu":
        return value if _release(version) >= CPU_READS_KV_BYTES_FROM else None
    try:
        return None if int(value) == 0 else value
    except (TypeError, ValueError):
        return value  # the estimate names the bad value


def _release(version: str | None) -> tuple[int, ...]:
    """A release's (major, minor, micro); an unreadable or absent one reads as the newest."""
    from packaging.version import InvalidVersion, Version

    try:
        return Version(version).release if version else (10**6,)
    except InvalidVersion:
        return (10**6,)


def kv_transfer_config(args: Mapping[str, Any]) -> dict[str, Any] | None:
    """--kv-transfer-config as a mapping (JSON text as vLLM parses it), None when unset or unreadable."""
    value = args.get("kv_transfer_config")
    if isinstance(value, str):
        try:
            value = json_loads(value)
        except ValueError:  # not JSON, or JSON past the bounds: unreadable either way
            return None
    return value if isinstance(value, dict) else None


def role_mode(args: Mapping[str, Any]) -> str | None:
    """prefill (kv_producer), decode (kv_consumer), kv_both, or None for a server without KV transfer (a role
    without a `kv_connector` transfers nothing: vLLM's is_kv_transfer_instance needs both)."""
    config = kv_transfer_config(args)
    if config is None or config.get("kv_connector") is None:
        return None
    role = config.get("kv_role")
    return KV_ROLES.get(str(role)) if role is not None else None


def args_device(args: Mapping[str, Any]) -> str | None:
    """The device a `device` argument names, None when the args name none.

    vLLM 0.32.0 has no --device flag: the build decides (the vllm-cpu distribution runs on CPU), so a
    vLLM CPU role says so in the manifest (`device: cpu`, docs/manifest.md). Releases up to 0.10 had
    `--device`; a log or deployment file of theirs may carry it.
    """
    value = args.get("device")
    return None if value in (None, "", "auto") else str(value)


def max_input_len(context_len: int, pool_tokens: int | None) -> int:
    """vLLM's admission bound, as Engine.max_input_len means it: prompts of this many tokens or more are
    not served. vLLM 0.32.0 serves prompts of at most max_model_len - 1 tokens (one is left for the first
    output token; measured, docs/vllm.md), so the bound is max_model_len itself.

    vLLM refuses at boot a pool that cannot hold one request of max_model_len, so a served pool never
    lowers the bound; a pool below it (a log of a refused start, whose pool is vLLM's estimated maximum
    model length) bounds it at its own size.
    """
    bound = context_len
    if pool_tokens is not None:
        bound = min(bound, pool_tokens)
    return bound


def data_parallel_ranks(args: Mapping[str, Any]) -> int:
    """Data-parallel engines of one server (--data-parallel-size), each with its own KV pool."""
    try:
        return max(int(args.get("data_parallel_size") or 1), 1)
    except (TypeError, ValueError):
        return 1


def usable_tokens(num_blocks: int, block_size: int) -> int:
    """The tokens one request can use: every block but vLLM's null block."""
    return max(num_blocks - 1, 0) * block_size


def block_size(args: Mapping[str, Any], device: str) -> int:
    """The KV block size of the role: --block-size when set, else vLLM's default on the device."""
    stated = args.get("block_size")
    if isinstance(stated, int) and not isinstance(stated, bool) and stated > 0:
        return stated
    return DEFAULT_BLOCK_SIZE["cpu" if device == "cpu" else "cuda"]


def concurrency(pool_tokens: int, window: int, block: int) -> float:
    """Requests of `window` tokens the usable pool holds at once, in whole blocks per request as vLLM
    allocates them: (num_blocks - 1) / ceil(window / block), the pool being (num_blocks - 1) x block."""
    return (pool_tokens // block) / max(-(-window // block), 1)


def role_findings(target: RoleTarget, args: Mapping[str, Any], mode: str | None, *, device: str) -> list[Finding]:
    """KV210-KV212: the role's KV transfer and memory settings vLLM does not check itself."""
    from kvcheck.policy.registry import finding

    found = []
    config = kv_transfer_config(args) or {}
    where = target.arg_location("kv_transfer_config")
    if mode == "kv_both" and str(config.get("kv_connector", "")).startswith("Nixl"):
        found.append(finding(
            "KV210", target.name,
            f"kv_role kv_both with {config['kv_connector']}: vLLM 0.32.0 deprecates it and a later release "
            "will refuse to start the role; the role may prefill or decode, and is checked as either",
            hint="set kv_role: kv_producer on prefill instances and kv_consumer on decode instances",
            location=where,
        ))
    if config.get("kv_load_failure_policy") == "recompute":
        found.append(finding(
            "KV212", target.name,
            "kv_load_failure_policy is recompute: a request whose KV blocks failed to load is recomputed, which "
            "has produced wrong output when requests share blocks (prefix caching)",
            hint="keep kv_load_failure_policy: fail (vLLM's default), or run the role without prefix caching",
            location=where,
        ))
    memory = explicit_kv_bytes(args, device, target.engine_version)
    if memory is not None and device != "cpu":
        found.append(finding(
            "KV211", target.name,
            f"--kv-cache-memory-bytes {memory} sets the pool and vLLM skips its memory profiling: nothing "
            "checked at boot that the weights, activations and CUDA graphs fit beside it, and kvcheck measures "
            "the pool, not that headroom",
            hint="size the pool with --gpu-memory-utilization (vLLM then profiles and keeps the headroom), or "
            "measure the role under peak load on the production GPU first",
            location=target.arg_location("kv_cache_memory_bytes"),
        ))
    return found
