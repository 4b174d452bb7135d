"""SGLang on the CPU (`--device cpu`): what a host must offer before such a role can boot.

From SGLang 0.5.23's source: each rank binds its OpenMP threads to one NUMA node
(`numa_utils.init_threads_binding`): with SGLANG_CPU_OMP_THREADS_BIND unset (or "all"), the ranks
(dp_size x tp_size x pp_size; attention DP runs inside the TP group and adds none) must not outnumber
the NUMA nodes with CPUs, or the scheduler asserts at start; with it set, it must name one
`|`-separated CPU group per rank. Each rank then sizes its pool from the memory available divided
by the NUMA nodes (`get_available_gpu_memory("cpu")`), which `kvcheck.hostmem` reads the same way.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from kvcheck.hostmem import HostMemory
    from kvcheck.model import RoleTarget

BIND_ENV = "SGLANG_CPU_OMP_THREADS_BIND"


def cpu_ranks(target: RoleTarget) -> int:
    """The scheduler processes a CPU role starts on one host, each bound to a NUMA node (or CPU group)."""
    args = target.args

    def width(name: str) -> int:
        try:
            return max(int(args.get(name) or 1), 1)
        except (TypeError, ValueError):
            return 1

    replicas = 1 if args.get("enable_dp_attention") else width("dp_size")
    return width("tp_size") * width("pp_size") * replicas


def check_host(target: RoleTarget, host: HostMemory) -> tuple[str, str] | None:
    """(message, hint) when SGLang would refuse to bind the role's ranks on this host; None otherwise."""
    from kvcheck.engines.sglang.sizing.environ import effective_env

    ranks = cpu_ranks(target)
    # the server inherits this process's environment under the role's, and renames legacy SGL_ names itself
    bind = effective_env({**os.environ, **target.env}, target.engine_version).get(BIND_ENV, "all")
    if bind in ("", "all"):
        if ranks > host.cpu_nodes:
            return (
                f"role {target.name} runs {ranks} SGLang CPU ranks (dp x tp x pp), and this host has "
                f"{host.cpu_nodes} NUMA node(s) with CPUs: without {BIND_ENV} SGLang binds one rank per NUMA node "
                "and stops at start",
                f"lower tp-size (or pp-size, dp-size) to at most {host.cpu_nodes}, or set {BIND_ENV} in the role's "
                "env to one CPU group per rank (e.g. 0-15|16-31)",
            )
        return None
    groups = bind.split("|")
    if len(groups) < ranks:
        return (
            f"role {target.name} runs {ranks} SGLang CPU ranks, and {BIND_ENV}={bind} names {len(groups)} CPU "
            "group(s): SGLang needs one per rank and stops at start",
            f"set {BIND_ENV} to {ranks} '|'-separated CPU groups, or lower tp-size",
        )
    return None
