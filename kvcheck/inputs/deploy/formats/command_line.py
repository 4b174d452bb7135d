"""`kvcheck import --cmd "..."`: one role from an engine's command line, split as a shell would split it."""

from __future__ import annotations

from kvcheck.errors import InputError
from kvcheck.inputs.deploy.formats.base import Format, Inputs, RoleSource
from kvcheck.inputs.deploy.formats.slurm_script import slurm_gpus
from kvcheck.inputs.deploy.server import Env, Token, find_server
from kvcheck.inputs.deploy.shell import ShellSyntaxError, launch_environment, parse_script
from kvcheck.inputs.deploy.source import Doc
from kvcheck.model import Location

NAME = "--cmd"  # how locations name the command line


def read_command_line(doc: Doc, inputs: Inputs) -> list[RoleSource]:
    """The server the command line starts (an `srun` prefix states its GPUs); InputError when it starts none."""
    cmd = doc.source.text
    try:
        commands = parse_script(cmd, lambda name: None)
    except ShellSyntaxError as exc:
        raise InputError(f"{NAME}:1:{exc.offset + 1}: {exc}") from exc
    for command in commands:
        words = command.words
        tokens = [Token(w.text, Location(NAME, 1, w.offset + 1), list(w.unresolved)) for w in words]
        server = find_server(tokens, Env(), doc=None) if tokens else None
        if server is not None:
            # `VAR=1 vllm serve ...`, `env VAR=1 python -m sglang.launch_server ...`: the engine runs with them
            server.environment = {**launch_environment(command), **server.environment}
            gpus, gpu = slurm_gpus([(t.text, t.location) for t in server.tokens[: server.start]])
            return [RoleSource(name="server", kind="command line", group="command-line", doc=doc,
                               location=Location(NAME, 1, 1), server=server, env=Env(), standalone=True,
                               gpus_per_node=gpus, gpu=gpu)]
    raise InputError(
        "--cmd: no engine server command (python -m sglang.launch_server ..., sglang serve ..., vllm serve ...)",
        hint="quote the whole command line: --cmd \"python3 -m sglang.launch_server --model-path M --tp 8\"",
    )


# Never found in a file: `kvcheck import --cmd` reads it (FORMATS.command_line).
FORMAT = Format(
    name="command line",
    reads="an SGLang or vLLM command line (--cmd)",
    detect=lambda doc: False,
    read=read_command_line,
)
