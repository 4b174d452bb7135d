"""The engine's command line and environment for one role, whichever launcher starts it.

The command line is the role's engine's own (`Engine.launch_argv`): its exact production arguments,
then where to listen, last so they win over the args' (the measurement must not listen where
production does). Launchers never write an engine's flags themselves.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from kvcheck.engines import get_engine
from kvcheck.engines.base import NodeLaunch
from kvcheck.model import RoleTarget

LOOPBACK = "127.0.0.1"


def role_nnodes(target: RoleTarget) -> int:
    """How many hosts the role spans (1 when its args do not say)."""
    return get_engine(target.engine).launch_nodes(target.args)


def build_argv(
    target: RoleTarget,
    *,
    port: int,
    bootstrap_port: int | None,
    dummy_weights: bool,
    host: str = LOOPBACK,
    node: NodeLaunch | None = None,
) -> tuple[str, ...]:
    """The exact command line for one role; `bootstrap_port` only for disaggregated roles."""
    return tuple(
        get_engine(target.engine).launch_argv(
            target, host=host, port=port, node=node, dummy_weights=dummy_weights, bootstrap_port=bootstrap_port
        )
    )


def needs_bootstrap_port(target: RoleTarget) -> bool:
    """Whether the role needs a free port of its own besides HTTP (a disaggregated role's bootstrap)."""
    return get_engine(target.engine).needs_bootstrap_port(target.args)


def on_cpu(target: RoleTarget) -> bool:
    """Whether the role is a CPU deployment (the manifest's `device: cpu`, or SGLang `--device cpu`)."""
    return get_engine(target.engine).device(target) == "cpu"


def build_env(
    target: RoleTarget, base: Mapping[str, str] | None = None, *, set_gpus: bool = True
) -> dict[str, str]:
    """The engine's environment: kvcheck's own, the role's GPUs, then the manifest's env (which wins).

    CUDA_DEVICE_ORDER=PCI_BUS_ID (unless set) makes CUDA number GPUs as NVML and nvidia-smi do, so the
    GPUs kvcheck inspected are the GPUs the engine uses; it does not change what a GPU holds.
    `set_gpus=False` where a scheduler hands each task its GPUs (Slurm sets CUDA_VISIBLE_DEVICES).
    """
    env = dict(os.environ if base is None else base)
    if not on_cpu(target):  # a CPU role is given no GPU, and no CUDA settings
        if target.gpus and set_gpus:
            env["CUDA_VISIBLE_DEVICES"] = ",".join(str(i) for i in target.gpus)
        env.setdefault("CUDA_DEVICE_ORDER", "PCI_BUS_ID")
    env.update({str(k): str(v) for k, v in target.env.items()})
    return env


def added_env(target: RoleTarget, env: Mapping[str, str]) -> dict[str, str]:
    """The variables kvcheck set for the engine (the report's `details.engine_env`)."""
    added = {k: env[k] for k in ("CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER") if k in env}
    added.update({str(k): str(v) for k, v in target.env.items()})
    return added
