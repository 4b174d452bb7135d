"""From a container (or a compose service, or a command line) to the engine server arguments it runs.

Kubernetes expands `$(VAR)` in `command`/`args` from the container's `env` before anything runs; a
shell, when the container starts one (`sh -c SCRIPT`), then expands `$VAR`/`${VAR}` and picks the
commands. kvcheck does both, in that order, finds the one command that starts a server of a
registered engine (each engine recognises its own launch lines, `Engine.launch_index`: SGLang's
`python -m sglang.launch_server`, `sglang serve`, `python -m dynamo.sglang`), parses it with that
engine's flag catalogue for the release, and keeps each value's place in the user's file.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from kvcheck.engines import ENGINES, get_engine
from kvcheck.engines.argv import ParsedArgv, ParsedFlag
from kvcheck.engines.flags import Catalogue, Flag, FlagError
from kvcheck.errors import InputError, InputIssue
from kvcheck.inputs.deploy.budget import VARIABLE_COST, ExpansionBudgetExceeded, current, ensure_budget, spend
from kvcheck.inputs.deploy.rules import file_finding
from kvcheck.inputs.deploy.shell import (
    ShellBudgetError,
    ShellSyntaxError,
    launch_environment,
    parse_script,
    shell_script,
    strip_prefixes,
)
from kvcheck.inputs.deploy.source import Doc
from kvcheck.io.yamlpos import Path_, load_yaml_documents
from kvcheck.model import Finding, Location

if TYPE_CHECKING:
    from kvcheck.engines.base import Engine

_K8S_VAR_RE = re.compile(r"\$\(([A-Za-z_][A-Za-z0-9_.-]*)\)")
_SHELL_VAR_RE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)[^}]*\}|\$([A-Za-z_][A-Za-z0-9_]*)")
# Flags that only place one process (which node, which address): not part of a role's arguments
# (SGLang's and vLLM's: `--master-addr`, `--data-parallel-address`, `--data-parallel-start-rank` place one
# node of a multi-node vLLM instance, `--headless` runs a node without its API server).
PLACEMENT_FLAGS = frozenset({
    "node-rank", "dist-init-addr", "host", "port", "master-addr", "master-port", "data-parallel-address",
    "data-parallel-rpc-port", "data-parallel-start-rank", "data-parallel-rank", "headless",
})
# Flags that name credentials, endpoints or text formats and never size memory: an unresolved value
# (a Secret, most often) is a warning for these, not a role left unchecked.
NON_SIZING_FLAGS = frozenset({
    "api-key", "admin-api-key", "served-model-name", "log-level", "log-level-http", "chat-template",
    "hf-chat-template-name", "tool-call-parser", "reasoning-parser", "ssl-keyfile", "ssl-certfile",
    "ssl-ca-certs", "ssl-keyfile-password", "file-storage-path", "fastapi-root-path", "grpc-port",
    "nccl-port", "disaggregation-bootstrap-port", "export-metrics-to-file-dir",
    # vLLM's
    "uvicorn-log-level", "root-path", "allowed-origins", "allowed-methods", "allowed-headers", "ssl-ciphers",
    "response-role", "chat-template-content-format", "hf-token", "otlp-traces-endpoint", "middleware",
})
# Server arguments handled apart: the model is the manifest's model.path (SGLang's --model-path, vLLM's
# positional model or --model), --config is read inline.
MODEL_FLAGS = frozenset({"model-path", "model"})
_CONFIG_FLAG = "config"


@dataclass(frozen=True)
class Sourced:
    """A value and where it comes from: the user's file, or how an operator derives it."""

    value: Any
    location: Location | None
    origin: str | None = None  # e.g. "LeaderWorkerSet size", "nvidia.com/gpu limit"


@dataclass
class Token:
    """One argv word with its place in the file and the variables it could not resolve."""

    text: str
    location: Location
    unresolved: list[str] = field(default_factory=list)
    raw: str | None = None  # the text as written, before Kubernetes' $(VAR) expansion
    via: list[tuple[str, Sourced]] = field(default_factory=list)  # variables whose values it holds
    why: dict[str, str] = field(default_factory=dict)  # unresolved name -> why the files do not set it


@dataclass
class Env:
    """Variables a container sees: its own env, ConfigMap entries, and what its operator injects."""

    values: dict[str, Sourced] = field(default_factory=dict)
    unknown: dict[str, str] = field(default_factory=dict)  # name -> why its value is not in the files
    injected: dict[str, Sourced] = field(default_factory=dict)  # what the operator sets, not the container

    def lookup(self, name: str) -> str | None:
        found = self.values.get(name)
        return None if found is None else str(found.value)

    def with_values(self, extra: Mapping[str, Sourced]) -> Env:
        return Env({**extra, **self.values}, dict(self.unknown), {**extra, **self.injected})

    def own(self) -> dict[str, Sourced]:
        """The variables the container itself sets (env, envFrom): the engine's production environment."""
        return {name: value for name, value in self.values.items() if self.injected.get(name) is not value}


@dataclass
class Arg:
    """One server argument as the role runs it."""

    name: str  # canonical flag name, catalogue spelling without dashes
    key: str  # SGLang field name
    value: Any
    location: Location
    flag: Flag | None
    origin: str | None = None


@dataclass
class ServerCommand:
    """The server command one container runs, and the engine it starts."""

    tokens: list[Token]
    start: int  # index of the first server argument
    wrapper: str  # "dynamo" (NVIDIA Dynamo's wrapper, with flags of its own), else the engine's name
    location: Location
    engine: str  # the registry name of the engine it starts (kvcheck.engines.ENGINES)
    environment: dict[str, str] = field(default_factory=dict)  # what its script exports to it (VAR=1 exec ...)


def registered_engines() -> list[Engine]:
    """Every engine kvcheck knows, in registry order: a deployment file may launch any of them."""
    return [get_engine(name) for name in ENGINES]


def launch_engine(argv: Sequence[str]) -> tuple[Engine, int] | None:
    """The engine a command line launches and the index of its first server argument (the first registered
    engine that recognises the line), else None."""
    for engine in registered_engines():
        index = engine.launch_index(argv)
        if index is not None:
            return engine, index
    return None


def expand_k8s(text: str, env: Env, used: list[str] | None = None) -> tuple[str, list[str]]:
    """Kubernetes' `$(VAR)` expansion: defined names are replaced, others stay as written (and are returned).

    What it produces is spent from the expansion budget (ExpansionBudgetExceeded past it)."""
    missing: list[str] = []

    def replace(match: re.Match[str]) -> str:
        value = env.lookup(match.group(1))
        if value is None:
            missing.append(match.group(1))
            return match.group(0)
        spend(len(value))
        if used is not None:
            used.append(match.group(1))
        return value

    with ensure_budget(len(text)):
        spend(len(text))
        return _K8S_VAR_RE.sub(replace, text.replace("$$", "\x00")).replace("\x00", "$"), missing


def _expand_at(text: str, env: Env, used: list[str], where: Location) -> tuple[str, list[str]]:
    """expand_k8s for a word written at `where`: past the budget, an input error there that ends the read."""
    try:
        return expand_k8s(text, env, used)
    except ExpansionBudgetExceeded as exc:
        raise _too_large(where, exc) from exc


def _too_large(where: Location, exc: BaseException) -> _ScriptError:
    """The expansion budget ran out at `where`: an input error there that ends the read."""
    return _ScriptError(InputIssue(where.file, where.line, where.column, "", str(exc)), fatal=True)


def container_env(
    doc: Doc,
    container: Mapping[str, Any],
    path: Path_,
    *,
    injected: Mapping[str, Sourced],
    config_maps: Mapping[str, tuple[Doc, Path_, Mapping[str, Any]]],
) -> Env:
    """The container's variables: operator-injected first, then envFrom ConfigMaps, then env in order.

    Each entry copied and each `$(VAR)` expanded is spent from the expansion budget: a chain of
    `$(VAR)` references doubling a value, or a big ConfigMap read by many containers, stops there."""
    with ensure_budget(0):
        try:
            return _container_env(doc, container, path, injected=injected, config_maps=config_maps)
        except _BudgetAt as exc:
            raise _too_large(doc.at(exc.path), exc.__cause__ or exc) from exc


def _env_from(
    env: Env, container: Mapping[str, Any], path: Path_, config_maps: Mapping[str, tuple[Doc, Path_, Mapping[str, Any]]]
) -> None:
    """The variables of the ConfigMaps the container's envFrom names, each entry spent from the budget."""
    for i, source in enumerate(container.get("envFrom") or []):
        if not isinstance(source, Mapping):
            continue
        ref = source.get("configMapRef")
        prefix = str(source.get("prefix") or "")
        if isinstance(ref, Mapping) and ref.get("name") in config_maps:
            try:
                env.values.update(_config_map_variables(ref["name"], prefix, config_maps))
            except ExpansionBudgetExceeded as exc:
                raise _BudgetAt((*path, "envFrom", i)) from exc
        elif isinstance(ref, Mapping):
            env.unknown[f"envFrom[{i}]"] = f"ConfigMap {ref.get('name')!r} is not among the files read"


def _config_map_variables(
    name: str, prefix: str, config_maps: Mapping[str, tuple[Doc, Path_, Mapping[str, Any]]]
) -> dict[str, Sourced]:
    """A ConfigMap's variables as envFrom gives them, built once per read and shared by every container
    that reads it; each container's copy is spent from the budget (a dict slot per variable)."""
    cm_doc, cm_path, data = config_maps[name]
    budget = current()
    key = (id(data), prefix)
    shared = budget.shared.get(key) if budget is not None else None
    if shared is None:
        spend(sum(len(prefix) + len(str(k)) for k in data))
        shared = {prefix + str(k): Sourced(str(value), cm_doc.at((*cm_path, k)), f"ConfigMap {name}")
                  for k, value in data.items()}
        if budget is not None:
            budget.shared[key] = shared
    spend(VARIABLE_COST * len(shared))
    return shared


class _BudgetAt(Exception):
    """The budget ran out while reading the container's entry at `path`."""

    def __init__(self, path: Path_) -> None:
        super().__init__(path)
        self.path = path


def _container_env(
    doc: Doc,
    container: Mapping[str, Any],
    path: Path_,
    *,
    injected: Mapping[str, Sourced],
    config_maps: Mapping[str, tuple[Doc, Path_, Mapping[str, Any]]],
) -> Env:
    env = Env(dict(injected), injected=dict(injected))
    _env_from(env, container, path, config_maps)
    for i, item in enumerate(container.get("env") or []):
        if not isinstance(item, Mapping) or not isinstance(item.get("name"), str):
            continue
        name = item["name"]
        where = doc.at((*path, "env", i, "value")) if "value" in item else doc.at((*path, "env", i))
        if "value" in item:
            try:
                text, missing = expand_k8s("" if item["value"] is None else str(item["value"]), env)
            except ExpansionBudgetExceeded as exc:
                raise _BudgetAt((*path, "env", i, "value")) from exc
            if missing:
                env.values.pop(name, None)
                env.unknown[name] = f"its value uses $({missing[0]}), which is not set"
            else:
                env.values[name] = Sourced(text, where, None)
                env.unknown.pop(name, None)
            continue
        ref = item.get("valueFrom")
        cm_ref = ref.get("configMapKeyRef") if isinstance(ref, Mapping) else None
        if isinstance(cm_ref, Mapping) and cm_ref.get("name") in config_maps:
            cm_doc, cm_path, data = config_maps[cm_ref["name"]]
            if cm_ref.get("key") in data:
                key = cm_ref["key"]
                env.values[name] = Sourced(str(data[key]), cm_doc.at((*cm_path, key)), f"ConfigMap {cm_ref['name']}")
                continue
        kind = next(iter(ref), "valueFrom") if isinstance(ref, Mapping) and ref else "valueFrom"
        env.values.pop(name, None)
        env.unknown[name] = f"it comes from a {kind} reference"
    return env


def exec_tokens(doc: Doc, container: Mapping[str, Any], path: Path_, env: Env) -> list[Token]:
    """command + args as the kubelet starts them, `$(VAR)` expanded, each word at its place in the file."""
    tokens: list[Token] = []
    for key in ("command", "args"):
        items = container.get(key)
        if isinstance(items, str):  # compose allows a string; Kubernetes does not
            items = [items]
        for i, item in enumerate(items or []):
            if item is None or isinstance(item, Mapping | list):
                continue
            text = item if isinstance(item, str) else _yaml_scalar_text(item)
            used: list[str] = []
            expanded, missing = _expand_at(text, env, used, doc.at((*path, key, i)))
            tokens.append(Token(expanded, doc.at((*path, key, i)), missing, raw=text, via=_via(env, used),
                                why=unset_reasons(env, missing)))
    return tokens


def _yaml_scalar_text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def find_server(
    tokens: list[Token],
    env: Env,
    *,
    doc: Doc | None,
    script_path: Callable[[int], Path_ | None] | None = None,
) -> ServerCommand | None:
    """The server command among the tokens (exec form, or one command of a `sh -c` script), with its engine."""
    argv = [t.text for t in tokens]
    launched = launch_engine(argv)
    if launched is not None:
        engine, index = launched
        return ServerCommand(tokens, index, _wrapper(argv, index, engine.name), tokens[0].location, engine.name)
    _refuse_co_launch(argv, lambda i: tokens[i].location)
    script_at = shell_script(argv)
    if script_at is None:
        return None
    script = tokens[script_at]
    source_path = script_path(script_at) if script_path else None
    try:
        # Parsed as written (so offsets are columns in the file); the kubelet's $(VAR) expansion is
        # applied to each word after, which is what the shell would have seen.
        # $0 is the word after the script, $1.. the rest: `bash -c SCRIPT -- ARGS...` (KServe's SGLang
        # template runs `exec "${args[@]}" "$@"`, the container's own args landing in "$@")
        params = tokens[script_at + 2 :]
        commands = parse_script(
            script.raw if script.raw is not None else script.text, env.lookup, [t.text for t in params]
        )
    except ShellSyntaxError as exc:
        where = doc.inside(source_path, exc.offset) if doc is not None and source_path else script.location
        raise _ScriptError(InputIssue(where.file, where.line, where.column, "", f"shell: {exc}"),
                           fatal=isinstance(exc, ShellBudgetError)) from exc
    servers: list[ServerCommand] = []
    for command in commands:
        words = strip_prefixes(command)
        texts = [w.text for w in words]
        launched = launch_engine(texts)
        if launched is None:
            _refuse_co_launch(texts, partial(_word_location, doc, source_path, script.location, words))
            continue
        engine, found = launched
        out: list[Token] = []
        for word in words:
            if word.positional is not None:  # a word after the script: its own token, at its own place
                out.append(params[word.positional - 1])
                continue
            if doc is not None and source_path is not None:
                where = doc.inside(source_path, word.offset)
            else:
                where = script.location
            used = list(word.variables)
            text, _ = _expand_at(word.text, env, used, where)
            # a $(VAR) the kubelet left alone is a command substitution to the shell: unresolved
            unresolved = [
                u for u in word.unresolved if not (_K8S_VAR_RE.fullmatch(u) and env.lookup(u[2:-1]) is not None)
            ]
            out.append(Token(text, where, unresolved, via=_via(env, used),
                              why={**unset_reasons(env, unresolved), **word.why}))
        servers.append(ServerCommand(out, found, _wrapper(texts, found, engine.name),
                                     out[0].location if out else script.location, engine.name,
                                     launch_environment(command)))
    if not servers:
        return None
    first = servers[0]
    zero = tokens[script_at + 1] if script_at + 1 < len(tokens) else None
    if (zero is not None and zero.text.startswith("-") and zero.text not in ("-", "--")
            and any(t is p for t in first.tokens for p in params)):
        # `sh -c SCRIPT --tp 8`: the shell names the script --tp ($0), and "$@" starts at 8
        raise _ScriptError(InputIssue(
            zero.location.file, zero.location.line, zero.location.column, "",
            f"sh -c takes the first word after the script as the script's name ($0), so {zero.text!r} never "
            'reaches the server ("$@" starts after it); put a name such as -- before the arguments '
            "(KServe's template ends its command with \"--\")",
        ))
    other = next((s for s in servers[1:] if [t.text for t in s.tokens] != [t.text for t in first.tokens]), None)
    if other is not None:
        # if/else branches, a fallback, two servers in the background: which one runs is not in the text
        where = other.location
        raise _ScriptError(InputIssue(
            where.file, where.line, where.column, "",
            f"the script starts an {get_engine(other.engine).label} server with other arguments here than at "
            f"line {first.location.line}; "
            "kvcheck cannot tell which one runs (a branch, a fallback, a second server): keep one launch "
            "line in the script, or give the role with --cmd or a manifest",
        ))
    return first


def _word_location(doc: Doc | None, source_path: Path_ | None, fallback: Location, words: Sequence[Any],
                   index: int) -> Location:
    """Where a script's word is in the file (a word after the script: the script's own place)."""
    word = words[index]
    if doc is not None and source_path is not None and word.positional is None:
        return doc.inside(source_path, word.offset)
    return fallback


def _refuse_co_launch(argv: Sequence[str], place: Callable[[int], Location]) -> None:
    """`python -m sglang_router.launch_server` starts --dp-size SGLang servers beside its router: taken for a
    router alone, the pod was no role and the file passed on its other servers. Exit 2 at the module's word."""
    index = next((i + 1 for i, word in enumerate(argv[:-1])
                  if word == "-m" and argv[i + 1] == "sglang_router.launch_server"), None)
    if index is None:
        return
    where = place(index)
    raise _ScriptError(InputIssue(
        where.file, where.line, where.column, "",
        "python -m sglang_router.launch_server starts SGLang servers beside its router, and kvcheck does not read "
        "that launcher; run the servers with python -m sglang.launch_server and the router with "
        "sglang_router.launch_router, or check the servers' arguments with --cmd or a manifest",
    ))


def unset_reasons(env: Env, names: list[str]) -> dict[str, str]:
    out = {}
    for name in names:
        bare = name[2:-1] if name.startswith("$(") and name.endswith(")") else name
        if bare in env.unknown:
            out[name] = env.unknown[bare]
    return out


def _via(env: Env, names: list[str]) -> list[tuple[str, Sourced]]:
    return [(name, env.values[name]) for name in dict.fromkeys(names) if name in env.values]


class _ScriptError(Exception):
    """A script or container kvcheck cannot read; `fatal`: the expansion budget ran out, so the read stops."""

    def __init__(self, issue: InputIssue, *, fatal: bool = False) -> None:
        super().__init__(issue.render())
        self.issue = issue
        self.fatal = fatal


ScriptError = _ScriptError


def _wrapper(argv: Sequence[str], index: int, engine: str) -> str:
    """NVIDIA Dynamo's wrapper (`python -m dynamo.sglang`) takes flags of its own beside the engine's."""
    return "dynamo" if index >= 1 and argv[index - 1].startswith("dynamo.") else engine


# Flags of `python -m dynamo.sglang` and `python -m dynamo.vllm` that are Dynamo's own (not the engine's);
# left out without a warning.
DYNAMO_FLAGS = frozenset(
    {
        "endpoint", "migration-limit", "dyn-tool-call-parser", "dyn-reasoning-parser", "use-sglang-tokenizer",
        "custom-jinja-template", "dump-config-to", "store-kv", "request-plane", "event-plane",
        "dyn-endpoint-types", "embedding-worker", "multimodal-processor", "multimodal-encode-worker",
        "multimodal-worker", "multimodal-encode-prefill-worker", "enable-local-indexer", "durable-kv-events",
        "dyn-enable-structural-tag",
        # `python -m dynamo.vllm`'s own (components/src/dynamo/vllm/backend_args.py, ai-dynamo/dynamo)
        "disaggregation-mode", "is-prefill-worker", "is-decode-worker", "no-is-prefill-worker",
        "no-is-decode-worker", "use-vllm-tokenizer", "route-to-encoder", "multimodal-decode-worker",
        "enable-multimodal", "mm-prompt-template", "frontend-decoding", "embedding-transfer-mode",
        "model-express-url", "gms-shadow-mode", "connector",
    }
)


# Dynamo's own flags that state a vLLM worker's side (components/src/dynamo/vllm/backend_args.py): the side
# Dynamo builds the worker's KV transfer for, which vLLM's own arguments (kv_role kv_both) do not show
_DYNAMO_SIDE_FLAGS = {"--is-prefill-worker": "prefill", "--is-decode-worker": "decode"}


def wrapper_side(server: ServerCommand) -> Sourced | None:
    """The prefill/decode side a Dynamo worker's own flags give it (`--is-prefill-worker`, `--is-decode-worker`,
    Dynamo's `--disaggregation-mode prefill|decode`), for an engine whose arguments cannot state it; the last
    one wins, as argparse takes it."""
    if server.wrapper != "dynamo" or get_engine(server.engine).side_flag is not None:
        return None
    side: Sourced | None = None
    tokens = server.tokens
    for i in range(server.start, len(tokens)):
        word, _, inline = tokens[i].text.partition("=")
        if word in _DYNAMO_SIDE_FLAGS and not inline:
            side = Sourced(_DYNAMO_SIDE_FLAGS[word], tokens[i].location, f"Dynamo's {word}")
        elif word == "--disaggregation-mode":
            value = inline if inline else (tokens[i + 1].text if i + 1 < len(tokens) else "")
            if value in ("prefill", "decode"):
                where = tokens[i].location if inline or i + 1 >= len(tokens) else tokens[i + 1].location
                side = Sourced(value, where, "Dynamo's --disaggregation-mode")
    return side


@dataclass
class ParsedServer:
    """A server command's arguments, checked against a catalogue."""

    args: dict[str, Arg]
    model_path: Sourced | None
    config: Token | None  # --config FILE, read by the caller (a ConfigMap among the inputs)
    issues: list[InputIssue]
    findings: list[Finding]


def parse_server(server: ServerCommand, catalogue: Catalogue, *, role: str) -> ParsedServer:
    """Typed arguments by canonical name, input issues (the engine would exit 2) and findings (KV317, KV502).

    The command line is read by its engine's own parser (`Engine.parse_argv`: vLLM's positional model,
    `-tp`, dotted JSON keys), with the catalogue of the release the role runs."""
    argv = [t.text for t in server.tokens]
    parsed = get_engine(server.engine).parse_argv(argv, version=catalogue.version, start=server.start)
    issues: list[InputIssue] = []
    findings: list[Finding] = []
    blocked = _problems(server, parsed, catalogue, role, issues, findings)
    args, model_path, config = _arguments(server, parsed, blocked, role, findings)
    return ParsedServer(args, model_path, config, issues, findings)


def _problems(
    server: ServerCommand, parsed: ParsedArgv, catalogue: Catalogue, role: str,
    issues: list[InputIssue], findings: list[Finding],
) -> set[int]:
    """What argparse would refuse: input issues, or KV317/KV502 findings; returns the tokens whose
    problem is an unresolved variable (their flags are left out, not refused)."""
    blocked: set[int] = set()
    value_of: dict[int, str] = {}  # value token index -> the flag it belongs to
    for occurrence in parsed.occurrences:
        for i in occurrence.value_indexes:
            if i != occurrence.index:
                value_of[i] = occurrence.name
    for problem in parsed.problems:
        token = server.tokens[problem.index]
        owner = value_of.get(problem.index)
        if owner in PLACEMENT_FLAGS:
            continue  # which node / address a pod takes: not part of the role's arguments
        if token.unresolved:
            blocked.add(problem.index)
            if owner is not None:
                blocked.update(o.index for o in parsed.occurrences if problem.index in o.value_indexes)
            findings.append(_unresolved(role, token, owner))
        elif problem.kind == "unknown" and server.wrapper == "dynamo":
            _wrapper_flag(token, catalogue, role, findings)
        elif problem.kind != "repeated":
            issues.append(_refused(token, problem.message))
    return blocked


def _wrapper_flag(token: Token, catalogue: Catalogue, role: str, findings: list[Finding]) -> None:
    name = token.text.partition("=")[0].lstrip("-")
    if name not in DYNAMO_FLAGS:
        findings.append(
            file_finding(
                "KV502",
                role,
                f"'{token.text.partition('=')[0]}' is not a flag of {catalogue.label} {catalogue.version}; "
                "kvcheck leaves it to the Dynamo wrapper",
                location=token.location,
            )
        )


def _refused(token: Token, message: str) -> InputIssue:
    shell_var = _SHELL_VAR_RE.search(token.text)
    if token.raw is not None and shell_var:
        # exec form: no shell runs, so $VAR reaches SGLang as written (Kubernetes expands only $(VAR))
        message += (f" ({shell_var.group(0)} is passed literally: no shell runs this command; "
                    f"write $({shell_var.group(1) or shell_var.group(2)}) for Kubernetes to expand it)")
    return InputIssue(token.location.file, token.location.line, token.location.column, "", message)


def _arguments(
    server: ServerCommand, parsed: ParsedArgv, blocked: set[int], role: str, findings: list[Finding]
) -> tuple[dict[str, Arg], Sourced | None, Token | None]:
    """The typed arguments (the last occurrence of each wins, at its own place), the model path and `--config`."""
    args: dict[str, Arg] = {}
    model_path: Sourced | None = None
    config: Token | None = None
    for occurrence in parsed.occurrences:
        if occurrence.flag is None or occurrence.index in blocked:
            continue
        flag_token = server.tokens[occurrence.index]
        value_tokens = [server.tokens[i] for i in occurrence.value_indexes]
        unresolved = [t for t in value_tokens if t.unresolved]
        if unresolved:
            if occurrence.name in MODEL_FLAGS:
                model_path = Sourced(None, unresolved[0].location, f"unresolved: {', '.join(unresolved[0].unresolved)}")
            elif occurrence.name not in PLACEMENT_FLAGS:
                findings.append(_unresolved(role, unresolved[0], occurrence.name))
            args.pop(occurrence.name, None)
            continue
        where = _value_place(occurrence, flag_token, value_tokens)
        if occurrence.name in MODEL_FLAGS:
            model_path = Sourced(occurrence.value, where)
        elif occurrence.name == _CONFIG_FLAG:
            config = value_tokens[0] if value_tokens else None
        elif occurrence.name not in PLACEMENT_FLAGS:
            args.pop(occurrence.name, None)  # the last occurrence wins, in its own place
            args[occurrence.name] = Arg(occurrence.name, occurrence.flag.key, occurrence.value, where, occurrence.flag,
                                        _origin(value_tokens))
    return args, model_path, config


def _value_place(occurrence: ParsedFlag, flag_token: Token, value_tokens: list[Token]) -> Location:
    where = value_tokens[0].location if value_tokens else flag_token.location
    inline = flag_token.text.startswith(occurrence.spelled + "=")  # not a positional model, not a dotted key
    if occurrence.value_indexes and occurrence.value_indexes[0] == occurrence.index and where.column is not None \
            and inline:
        if flag_token.raw is None or flag_token.raw == flag_token.text:
            # --flag=value: point at the value, after the '='
            where = Location(where.file, where.line, where.column + len(occurrence.spelled) + 1)
    return where


def _origin(tokens: list[Token]) -> str | None:
    """`$NAME = file:line:col` for each variable a value came through, so its true source is named too."""
    parts = []
    for token in tokens:
        for name, sourced in token.via:
            where = sourced.location.render() if sourced.location else None
            how = " at ".join(x for x in (sourced.origin, where) if x) or "set by the operator"
            parts.append(f"${name} = {how}")
    return ", ".join(parts) or None


def _unresolved(role: str, token: Token, flag: str | None) -> Finding:
    names = ", ".join(f"${n}" if not n.startswith(("$", "`")) else n for n in token.unresolved)
    # "the value given to api-key", not "--api-key VALUE": the redactor would hide the words after a flag
    subject = f"the value given to {flag}" if flag else f"the word '{token.text}'"
    reasons = "".join(f"; {name}: {why}" for name, why in token.why.items())
    harmless = flag in NON_SIZING_FLAGS
    return file_finding(
        "KV317",
        role,
        f"{subject} uses {names}, which the files do not set{reasons}"
        + (" (a flag that does not size memory: the check goes on without it)" if harmless else ""),
        severity="warning" if harmless else None,
        hint="pass the file that defines it, or set it in the container's env or the script (an overlay manifest "
             "states only the model path, GPU, release and window)",
        location=token.location,
    )


def config_args(
    doc: Doc, path: Path_, text: str, catalogue: Catalogue, *, origin: str
) -> tuple[dict[str, Arg], list[InputIssue], Sourced | None]:
    """The arguments of a `--config` YAML file held in a ConfigMap entry (doc path `path`), and the model
    path it sets (SGLang's `model-path` or `model`, vLLM's `model`)."""
    line_starts = _line_starts(text)

    def place(line: int, column: int) -> Location:
        return doc.inside(path, line_starts[min(line, len(line_starts)) - 1] + column - 1)

    return _config_mapping(text, f"{doc.source.name} ({origin})", doc.at(path), place, catalogue, origin=origin)


# A --config file read from disk beside the deployment file: a flag file, never this large.
MAX_CONFIG_FILE_BYTES = 1024 * 1024


def config_file_args(
    file: Path, shown: str, catalogue: Catalogue, *, origin: str, at: Location
) -> tuple[dict[str, Arg], list[InputIssue], Sourced | None]:
    """The arguments of a `--config` YAML file on disk (bounded to MAX_CONFIG_FILE_BYTES), each at its own
    file:line:column (`shown` is the file as messages name it); an unreadable file is an issue at `at`."""
    from kvcheck.io.textfile import read_text_file

    try:
        text = read_text_file(file, shown, kind="--config file", max_bytes=MAX_CONFIG_FILE_BYTES)
    except InputError as exc:
        return {}, [InputIssue(at.file, at.line, at.column, "", f"{origin}: {exc.message}")], None

    def place(line: int, column: int) -> Location:
        return Location(shown, line, column)

    return _config_mapping(text, shown, Location(shown, 1, 1), place, catalogue, origin=origin)


def _config_mapping(
    text: str, name: str, top: Location, place: Callable[[int, int], Location], catalogue: Catalogue, *, origin: str
) -> tuple[dict[str, Arg], list[InputIssue], Sourced | None]:
    """A config file's mapping of flags, each key checked against the catalogue (as the engine's parser
    would check the `--KEY VALUE` it turns it into) at its place."""
    issues: list[InputIssue] = []
    model: Sourced | None = None
    try:
        documents = load_yaml_documents(text, name, max_nodes=100_000)
    except (InputError, yaml.YAMLError) as exc:  # reported where the file is named
        message = exc.message if isinstance(exc, InputError) else str(exc)
        return {}, [InputIssue(top.file, top.line, top.column, "", f"{origin}: {message}")], None
    data = documents[0].data if documents else None
    if not isinstance(data, Mapping):
        return {}, [InputIssue(top.file, top.line, top.column, "",
                               f"{origin}: not a mapping of {catalogue.label} flags")], None
    positions = documents[0].positions
    args: dict[str, Arg] = {}
    for key, value in data.items():
        where = place(*positions.keys.get((key,), (1, 1)))
        if str(key).lstrip("-").replace("_", "-") in MODEL_FLAGS:
            model = Sourced(value, place(*positions.values.get((key,), positions.keys.get((key,), (1, 1)))), origin)
            continue
        try:
            flag = catalogue.resolve(str(key))
            typed = catalogue.config_file_value(flag, value)
        except FlagError as exc:
            issues.append(InputIssue(where.file, where.line, where.column, str(key), str(exc)))
            continue
        name_ = flag.name[2:]
        if (flag.store_true and typed is False) or name_ in PLACEMENT_FLAGS:
            continue
        args[name_] = Arg(name_, flag.key, typed, where, flag, origin)
    return args, issues, model


def _line_starts(text: str) -> list[int]:
    starts = [0]
    for i, ch in enumerate(text):
        if ch == "\n":
            starts.append(i + 1)
    return starts
