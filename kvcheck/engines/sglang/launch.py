"""SGLang's launch line: what kvcheck adds to a role's own arguments so that a launcher can start it.

The command line is `engine.command + --model-path + the role's args + host and ports`; nothing that
changes the pool is added or dropped. A role the manifest puts on the CPU (`device: cpu`) whose args
do not say `--device` gets `--device cpu`, which is what the manifest's key means to SGLang. The host and ports come last so they win over any `host`/`port`
in the args (argparse keeps the last value): the measurement must not listen where production does.
A role on several hosts adds each node's place in the group (`--nnodes --dist-init-addr --node-rank`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from kvcheck.engines.sglang import serving
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
    bootstrap_port: int | None = None,
) -> list[str]:
    """The exact command line for one role; `bootstrap_port` only for disaggregated roles."""
    argv = list(target.engine_command or default_command)
    if target.model_path is not None:
        argv += ["--model-path", target.model_path]
    elif "model_path" not in target.args:
        raise InputError(
            f"role {target.name}: the manifest names no model (model.path); measure mode must know "
            "what the engine loads",
            hint="set model.path in the manifest",
        )
    argv += list(target.argv_args)
    if target.device is not None and target.device != "cuda" and serving.args_device(target.args) is None:
        # the manifest's `device: cpu` is SGLang's --device cpu (the loader refused args that disagree)
        argv += ["--device", target.device]
    argv += ["--host", host, "--port", str(port)]
    if bootstrap_port is not None:
        argv += ["--disaggregation-bootstrap-port", str(bootstrap_port)]
    if dummy_weights:
        argv += ["--load-format", "dummy"]
    if node is not None:
        argv += node_argv(node)
    return argv


def node_argv(node: NodeLaunch) -> list[str]:
    """One node's place in a multi-node role, in this order; a field left None is not written."""
    argv = []
    if node.nnodes is not None:
        argv += ["--nnodes", str(node.nnodes)]
    if node.dist_init_addr is not None:
        argv += ["--dist-init-addr", node.dist_init_addr]
    if node.node_rank is not None:
        argv += ["--node-rank", node.node_rank]
    return argv


def launch_nodes(args: Mapping[str, Any]) -> int:
    """How many hosts the role spans (--nnodes, 1 when unset or unreadable)."""
    value = args.get("nnodes")
    try:
        return int(value) if value is not None else 1
    except (TypeError, ValueError):
        return 1


def needs_bootstrap_port(args: Mapping[str, Any]) -> bool:
    """Disaggregated roles listen on a bootstrap port (8998 by default); give each a free one."""
    return serving.disaggregation_mode(args) is not None and "disaggregation_bootstrap_port" not in args
