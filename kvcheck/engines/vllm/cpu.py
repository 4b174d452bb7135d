"""vLLM's CPU backend: what a host must offer before a CPU role can boot.

From vLLM 0.32.0's source: `VLLM_CPU_KVCACHE_SPACE` (GiB, the legacy setting; it overrides
`--kv-cache-memory-bytes`, platforms/cpu.py; the CPU worker reads the flag from 0.20.0) fixes the KV cache, and the
CPU worker refuses at boot a KV size above the memory available on its NUMA node (cpu_worker.py, determine_available_memory).
A node never has more available than the whole host, so a space above the host's available memory
is refused for certain; below it, the boot itself tells.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import TYPE_CHECKING

from kvcheck.engines.vllm.serving import explicit_kv_bytes

if TYPE_CHECKING:
    from kvcheck.hostmem import HostMemory
    from kvcheck.model import RoleTarget

KV_SPACE_ENV = "VLLM_CPU_KVCACHE_SPACE"
GIB = 2**30


def kv_space_gib(env: Mapping[str, str]) -> int | None:
    """The explicit KV space, GiB, as vLLM reads it (`int(...)`); None when unset or empty; ValueError if not one."""
    value = env.get(KV_SPACE_ENV)
    if value is None or value == "":
        return None
    return int(value)


def check_host(target: RoleTarget, host: HostMemory) -> tuple[str, str] | None:
    """(message, hint) when vLLM would refuse the role's explicit KV space on this host; None otherwise."""
    env = {**os.environ, **target.env}
    try:
        space = kv_space_gib(env)
    except ValueError:
        return (f"role {target.name}: {KV_SPACE_ENV}={env[KV_SPACE_ENV]!r} is not a whole number of GiB, and vLLM "
                "stops at start on it",
                f"set {KV_SPACE_ENV} to the KV cache's size in GiB, e.g. {KV_SPACE_ENV}: \"4\"")
    flag = explicit_kv_bytes(target.args, "cpu", target.engine_version)
    if space is not None:
        wanted, named = space * GIB, f"a {space} GiB KV cache ({KV_SPACE_ENV})"
    elif isinstance(flag, int) and not isinstance(flag, bool):
        wanted, named = flag, f"a {flag / GIB:.2f} GiB KV cache (--kv-cache-memory-bytes {flag})"
    else:
        return None  # sized from what is free at boot (--gpu-memory-utilization): the boot tells
    available = host.mem_available_bytes
    if available is None or wanted <= available:
        return None
    return (f"role {target.name} asks for {named}, and this host has {available / GIB:.2f} GiB available: "
            "vLLM refuses a KV space above its NUMA node's available memory",
            f"lower {KV_SPACE_ENV} (or --kv-cache-memory-bytes), or measure on a host with more free RAM")
