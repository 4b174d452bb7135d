"""Shell completion (click's protocol: `eval "$(_KVCHECK_COMPLETE=bash_source kvcheck)"`) for the values
kvcheck knows: GPU names from the profiles (`--gpu`), rule codes (`kvcheck rules CODE`) and the role
names of the files already on the command line (`--role`).

Completion runs on every Tab: it imports only what the value needs, and never fails or prints: an input
it cannot read completes to nothing.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import click
from click.shell_completion import CompletionItem

from kvcheck.errors import KvcheckError


def _starts(value: str, incomplete: str) -> bool:
    return value.lower().startswith(incomplete.lower())


def complete_gpu(ctx: click.Context, param: click.Parameter, incomplete: str) -> list[CompletionItem]:
    """Every GPU profile's name (the shipped ones and --profiles DIR's) that starts as typed."""
    from kvcheck.gpus import default_profiles

    try:
        profiles = default_profiles()
    except (KvcheckError, OSError):
        return []
    return [CompletionItem(name) for name in profiles.names if _starts(name, incomplete)]


def complete_rule(ctx: click.Context, param: click.Parameter, incomplete: str) -> list[CompletionItem]:
    """Every rule code that starts as typed, with its title as the shell's help text."""
    from kvcheck.policy.catalogue import catalogue

    return [CompletionItem(rule.code, help=rule.title) for rule in catalogue() if _starts(rule.code, incomplete)]


def complete_role(ctx: click.Context, param: click.Parameter, incomplete: str) -> list[CompletionItem]:
    """The roles of the manifest or deployment files (or --cmd) given before `--role`, as --role names them."""
    # with `--role` last and its value still to type, click leaves the files in ctx.args, not ctx.params
    files = tuple(ctx.params.get("files") or ctx.args or ())
    cmd = ctx.params.get("cmd")
    if not files and cmd is None:
        return []
    chosen = set(ctx.params.get("roles") or ())
    return [CompletionItem(name) for name in role_names(files, cmd, ctx.params)
            if _starts(name, incomplete) and name not in chosen]


def role_names(files: Sequence[str], cmd: str | None, params: dict[str, Any]) -> list[str]:
    """The role names `--role` matches, read as the command would read the inputs; when they lack what a
    check needs (a window, a GPU), the roles the deployment files declare; nothing when unreadable."""
    from kvcheck.commands.import_ import overrides_from_options
    from kvcheck.inputs.load import load_inputs

    overrides = overrides_from_options(gpu=params.get("gpu"), context_length=params.get("context_length"),
                                       model_config=params.get("model_config"),
                                       sglang_version=params.get("sglang_version"))
    try:
        return [target.name for target in load_inputs(files, overrides, cmd=cmd).targets]
    except (KvcheckError, OSError, ValueError):
        pass
    from kvcheck.inputs.deploy.build import read_deployments

    try:
        deployments = read_deployments(files, cmd=cmd)
    except (KvcheckError, OSError, ValueError):
        return []
    several = len(deployments) > 1
    return [f"{d.name}/{r.name}" if several else r.name for d in deployments for r in d.roles]
