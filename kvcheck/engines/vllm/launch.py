"""vLLM's launch line: `vllm serve MODEL` + the role's own arguments + where to listen.

Nothing that changes the pool is added or dropped. The host and port come last so they win over
any in the args (argparse keeps the last value): the measurement must not listen where production
does. A role on several hosts adds each node's place (`--nnodes --node-rank --master-addr
--master-port`, vLLM's multiprocessing multi-node launch), and every node but the head `--headless`:
in vLLM 0.32.0 `vllm serve --headless` starts no API server (vllm/entrypoints/cli/serve.py,
run_headless), and a node whose rank within its data-parallel group is above 0 runs only the
`MultiprocExecutor`'s workers, which join the head's torch.distributed group at
`--master-addr:--master-port`. Without `--headless` such a node would start an API server and an
engine core of its own. Data parallelism across nodes needs nothing more: with `--nnodes` vLLM infers
each node's DP rank from `--node-rank` and uses `--master-addr` as the DP address
(engine/arg_utils.py, create_engine_config).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from kvcheck.errors import InputError

if TYPE_CHECKING:
    from kvcheck.engines.base import NodeLaunch
    from kvcheck.model import RoleTarget


def launch_argv(
    target: RoleTarget,
    *,
    default_command: Sequence[str],
    host: str,
    port: int,
    node: NodeLaunch | None = None,
    dummy_weights: bool = False,
) -> list[str]:
    """The exact command line for one role: `vllm serve MODEL ARGS --host H --port P`."""
    if target.model_path is None:
        raise InputError(
            f"role {target.name}: the manifest names no model (model.path); measure mode must know what "
            "vLLM loads",
            hint="set model.path in the manifest",
        )
    argv = [*(target.engine_command or default_command), target.model_path, *target.argv_args]
    argv += ["--host", host, "--port", str(port)]
    if dummy_weights:
        argv += ["--load-format", "dummy"]
    if node is not None:
        argv += node_argv(node)
    return argv


def node_argv(node: NodeLaunch) -> list[str]:
    """One node's place in a multi-node role; a field left None is not written."""
    argv = []
    if node.nnodes is not None:
        argv += ["--nnodes", str(node.nnodes)]
    if node.node_rank is not None:
        argv += ["--node-rank", node.node_rank]
    if node.dist_init_addr is not None:
        address, _, port = node.dist_init_addr.rpartition(":")
        argv += ["--master-addr", address or node.dist_init_addr]
        if address and port:
            argv += ["--master-port", port]
    return argv


def worker_argv() -> list[str]:
    """What every node but the head adds: no API server there, only the engine's workers."""
    return ["--headless"]


def launch_nodes(args: Mapping[str, Any]) -> int:
    """How many hosts the role spans (--nnodes, 1 when unset or unreadable)."""
    try:
        return max(int(args.get("nnodes") or 1), 1)
    except (TypeError, ValueError):
        return 1
