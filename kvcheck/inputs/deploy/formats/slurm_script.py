"""Slurm batch scripts and command lines: `#SBATCH` directives, `srun` prefixes, engine launch lines.

A batch script is a shell script: its `#SBATCH` lines state the nodes and the GPUs (`--gres=gpu:h100:8`,
`--gpus-per-node`), and each `srun ... python -m sglang.launch_server ...` line (any registered engine's launch) starts one server role.
Slurm's own variables are set as Slurm sets them (`SLURM_NNODES`, `SLURM_JOB_NUM_NODES` = `--nodes`);
per-task ones (`SLURM_NODEID`, `SLURM_PROCID`) differ per node and only feed `--node-rank`, which
kvcheck does not read.
"""

from __future__ import annotations

import re

from kvcheck.errors import InputIssue
from kvcheck.inputs.deploy.formats.base import Format, Inputs, RoleSource
from kvcheck.inputs.deploy.server import (
    Env,
    ScriptError,
    ServerCommand,
    Sourced,
    Token,
    launch_engine,
    unset_reasons,
)
from kvcheck.inputs.deploy.shell import ShellBudgetError, ShellSyntaxError, launch_environment, parse_script
from kvcheck.inputs.deploy.source import Doc, SourceFile
from kvcheck.model import Location

_SBATCH_RE = re.compile(r"^#SBATCH[ \t]+(.*)$", re.M)
_GRES_RE = re.compile(r"^--gres[= ](?:.*,)?gpu(?::([A-Za-z][\w.-]*))?:(\d+)")
_GPUS_PER_NODE_RE = re.compile(r"^--gpus-per-node[= ](?:([A-Za-z][\w.-]*):)?(\d+)$")
_NODES_RE = re.compile(r"^(?:--nodes[= ]|-N ?)(\d+)$")


def is_batch_script(text: str) -> bool:
    """A shell script with `#SBATCH` directives (or an `srun` launch), not YAML."""
    return text.startswith("#!") and ("#SBATCH" in text or re.search(r"^\s*srun\b", text, re.M) is not None)


def slurm_gpus(words: list[tuple[str, Location]]) -> tuple[Sourced | None, Sourced | None]:
    """GPUs per node and their GRES type from `--gres=gpu:h100:8` / `--gpus-per-node=8` options."""
    gpus = gpu = None
    for text, where in words:
        match = _GRES_RE.match(text) or _GPUS_PER_NODE_RE.match(text)
        if match:
            kind, count = match.groups()
            gpus = Sourced(int(count), where, "Slurm GPUs per node")
            gpu = Sourced(kind, where, "Slurm GRES type") if kind else gpu
    return gpus, gpu


def _location(source: SourceFile, offset: int) -> Location:
    line = source.text.count("\n", 0, offset) + 1
    return Location(source.name, line, offset - (source.text.rfind("\n", 0, offset) + 1) + 1)


def read_batch_script(doc: Doc, inputs: Inputs) -> list[RoleSource]:
    """One role per engine server the script starts, with the job's nodes and GPUs."""
    source = doc.source
    directives: list[tuple[str, Location]] = []
    for match in _SBATCH_RE.finditer(source.text):
        where = _location(source, match.start(1))
        for option in match.group(1).split("#", 1)[0].split():
            directives.append((option, where))
    gpus, gpu = slurm_gpus(directives)
    nodes = None
    for text, where in directives:
        found = _NODES_RE.match(text)
        if found:
            nodes = Sourced(int(found.group(1)), where, "#SBATCH --nodes")
    env = Env()
    if nodes is not None:
        for name in ("SLURM_NNODES", "SLURM_JOB_NUM_NODES"):  # set by Slurm, not the script: not the role's env
            env.values[name] = env.injected[name] = Sourced(nodes.value, nodes.location, "#SBATCH --nodes")
    try:
        commands = parse_script(source.text, env.lookup)
    except ShellSyntaxError as exc:
        where = _location(source, exc.offset)
        raise ScriptError(InputIssue(where.file, where.line, where.column, "", f"shell: {exc}"),
                          fatal=isinstance(exc, ShellBudgetError)) from exc
    roles: list[RoleSource] = []
    for command in commands:
        words = command.words
        texts = [w.text for w in words]
        launched = launch_engine(texts)
        if launched is None:
            continue
        engine, start = launched
        tokens = [Token(w.text, _location(source, w.offset), list(w.unresolved),
                        why={**unset_reasons(env, w.unresolved), **w.why})
                  for w in words]
        own_gpus, own_gpu = slurm_gpus([(t.text, t.location) for t in tokens[:start]])
        own_nodes = None
        for token in tokens[:start]:
            found = _NODES_RE.match(token.text)
            if found:
                own_nodes = Sourced(int(found.group(1)), token.location, "srun --nodes")
        wrapper = "dynamo" if start >= 1 and texts[start - 1].startswith("dynamo.") else engine.name
        server = ServerCommand(tokens, start, wrapper, tokens[0].location, engine.name, launch_environment(command))
        mode = next((texts[i + 1] for i, t in enumerate(texts[:-1]) if t == "--disaggregation-mode"), None)
        roles.append(
            RoleSource(
                name=mode if mode in ("prefill", "decode") else "server",
                kind="Slurm batch script",
                group=source.name.rsplit("/", 1)[-1].rsplit(".", 1)[0] or "slurm",
                doc=doc,
                location=tokens[0].location,
                server=server,
                env=env,
                gpus_per_node=own_gpus or gpus,
                nodes=own_nodes or nodes,
                gpu=own_gpu or gpu,
                standalone=True,
            )
        )
    return roles


FORMAT = Format(
    name="Slurm batch script",
    reads="Slurm batch scripts (#SBATCH + srun)",
    detect=lambda doc: is_batch_script(doc.source.text),
    read=read_batch_script,
    marks_text=lambda text: text.startswith("#!"),  # a script without #SBATCH: not a manifest either
    whole_file=True,
)
