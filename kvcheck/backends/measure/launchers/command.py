"""The engine's command line and environment for one role, whichever launcher starts it.

The command line is `engine.command + --model-path + the role's args + host and ports`; nothing that
changes the pool is added or dropped. The host and ports come last so they win over any `host`/`port`
in the args (argparse keeps the last value): the measurement must not listen where production does.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from kvcheck.engines import get_engine
from kvcheck.errors import InputError
from kvcheck.model import RoleTarget

LOOPBACK = "127.0.0.1"


def role_nnodes(target: RoleTarget) -> int:
    """How many hosts the role spans (SGLang's --nnodes, 1 when unset)."""
    value = target.args.get("nnodes")
    try:
        return int(value) if value is not None else 1
    except (TypeError, ValueError):
        return 1


def build_argv(
    target: RoleTarget,
    *,
    port: int,
    bootstrap_port: int | None,
    dummy_weights: bool,
    host: str = LOOPBACK,
) -> tuple[str, ...]:
    """The exact command line for one role; `bootstrap_port` only for disaggregated roles."""
    argv = list(target.engine_command or get_engine(target.engine).default_command)
    if target.model_path is not None:
        argv += ["--model-path", target.model_path]
    elif "model_path" not in target.args:
        raise InputError(
            f"role {target.name}: the manifest names no model (model.path); measure mode must know "
            "what the engine loads",
            hint="set model.path in the manifest",
        )
    argv += list(target.argv_args)
    argv += ["--host", host, "--port", str(port)]
    if bootstrap_port is not None:
        argv += ["--disaggregation-bootstrap-port", str(bootstrap_port)]
    if dummy_weights:
        argv += ["--load-format", "dummy"]
    return tuple(argv)


def needs_bootstrap_port(target: RoleTarget) -> bool:
    """Disaggregated roles listen on a bootstrap port (8998 by default); give each a free one."""
    return (
        get_engine(target.engine).role_mode(target.args) is not None
        and "disaggregation_bootstrap_port" not in target.args
    )


def build_env(
    target: RoleTarget, base: Mapping[str, str] | None = None, *, set_gpus: bool = True
) -> dict[str, str]:
    """The engine's environment: kvcheck's own, the role's GPUs, then the manifest's env (which wins).

    CUDA_DEVICE_ORDER=PCI_BUS_ID (unless set) makes CUDA number GPUs as NVML and nvidia-smi do, so the
    GPUs kvcheck inspected are the GPUs the engine uses; it does not change what a GPU holds.
    `set_gpus=False` where a scheduler hands each task its GPUs (Slurm sets CUDA_VISIBLE_DEVICES).
    """
    env = dict(os.environ if base is None else base)
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
