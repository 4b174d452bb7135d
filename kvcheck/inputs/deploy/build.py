"""Deployment files -> checked roles: every role's engine arguments typed by its release's catalogue.

`read_deployments` reads every file once, asks FORMATS (formats/) which format reads each document, lets
that format find the server roles, parses their command lines with the flag catalogue of the engine and
release they run (`get_engine(role's engine)`), and groups the roles into deployments. Problems the
engine itself would refuse (unknown, removed or
ambiguous flags, bad values) and malformed files are input errors (exit 2) naming file:line:column;
values the files leave unknown and leaders that disagree with their workers are findings.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from kvcheck.engines import engine_names, get_engine
from kvcheck.engines.flags import Catalogue, FlagError
from kvcheck.errors import InputError, InputIssue
from kvcheck.escape import one_line
from kvcheck.inputs.deploy.budget import expansion_budget
from kvcheck.inputs.deploy.formats import COMMAND_LINE, FORMATS, RoleSource
from kvcheck.inputs.deploy.formats.base import Inputs, get, text_doc
from kvcheck.inputs.deploy.formats.command_line import NAME as CMD_NAME
from kvcheck.inputs.deploy.formats.inference_pool import Pool, pool_notes, pools_in, without_servers
from kvcheck.inputs.deploy.formats.patch import list_items
from kvcheck.inputs.deploy.formats.pods import container_server, entrypoint_server, gpu_limit
from kvcheck.inputs.deploy.rules import file_finding
from kvcheck.inputs.deploy.server import (
    NON_SIZING_FLAGS,
    PLACEMENT_FLAGS,
    Arg,
    ScriptError,
    ServerCommand,
    Sourced,
    Token,
    config_args,
    config_file_args,
    parse_server,
    wrapper_side,
)
from kvcheck.inputs.deploy.source import (
    STDIN,
    STDIN_NAME,
    Doc,
    SourceFile,
    display_name,
    parse_documents,
    read_source,
)
from kvcheck.io.yamlpos import Path_, safe_load_all
from kvcheck.model import Finding, Location, Severity

# Formats whose object is a whole deployment; loose workloads (Deployment, LWS, ...) are grouped.
_LOOSE = frozenset({"Deployment", "StatefulSet", "Pod", "LeaderWorkerSet"})


@dataclass
class ImportedRole:
    """One server role with its typed arguments, each with the place it was written."""

    name: str
    kind: str
    location: Location
    engine: str  # the registry name of the engine it runs (kvcheck.engines.ENGINES)
    args: dict[str, Arg]  # canonical flag name -> argument (nnodes included; model-path, config excluded)
    catalogue: Catalogue
    version: Sourced
    model_path: Sourced | None
    gpus_per_node: Sourced | None
    nodes: Sourced | None
    replicas: Sourced | None
    gpu: Sourced | None
    findings: list[Finding] = field(default_factory=list)
    catalogue_note: str | None = None
    env: dict[str, Sourced] = field(default_factory=dict)  # the container's own environment (env, envFrom)
    no_gpus: Location | None = None  # the container whose pod asks for no GPU (RoleSource.no_gpus)
    image: Sourced | None = None  # the server container's image
    # the prefill/decode side a format states (Dynamo's subComponentType) where the engine's arguments do not
    # (vLLM: kv_role absent or kv_both): the manifest's roles.N.side
    side: Sourced | None = None


@dataclass
class ImportedDeployment:
    """The roles that serve one model together (prefill and decode, or one unified server)."""

    name: str
    roles: list[ImportedRole]
    sources: tuple[str, ...]
    pools: list[str] = field(default_factory=list)  # which InferencePool routes to which role, or cannot be told
    unchecked: list[Finding] = field(default_factory=list)  # KV319: GPU workloads that start no server kvcheck reads

    @property
    def findings(self) -> list[Finding]:
        return [*(f for role in self.roles for f in role.findings), *self.unchecked]


def read_deployments(
    paths: Sequence[str],
    *,
    cmd: str | None = None,
    sglang_version: str | None = None,
    sglang_version_at: str | None = None,
    texts: Mapping[str, str] | None = None,
) -> list[ImportedDeployment]:
    """Every deployment the files (and `--cmd`) describe; InputError/ManifestError (exit 2) on bad input.

    `sglang_version_at`: where the release given comes from (`overlay.yaml:3:12 (overlay)`,
    `--sglang-version`), for the error when a file states another.

    `texts`: files already read, by path as given (a single input is read once, to tell a manifest from
    deployment files, and not again).
    """
    if not paths and not cmd:
        raise InputError("no deployment file given", hint="pass FILE... (- for stdin) or --cmd \"python -m sglang.launch_server ...\"")
    if list(paths).count(STDIN) > 1:
        raise InputError("'-' (stdin) is given more than once")
    known = texts or {}
    sources = [SourceFile(display_name(p), known[p]) if p in known and p != STDIN else read_source(p) for p in paths]
    issues: list[InputIssue] = []
    # one budget for every expansion of this read, proportional to all the text read (budget.py)
    with expansion_budget(sum(len(s.text) for s in sources) + len(cmd or "")):
        docs, role_sources = _parse_sources(sources)
        inputs = FORMATS.gather(docs)
        read: list[tuple[Doc, int]] = []  # documents a format reads, with the roles each gave
        role_sources += _read_docs(docs, inputs, issues, read)
        if cmd is not None:
            try:
                role_sources += COMMAND_LINE.read(text_doc(SourceFile(CMD_NAME, cmd)), FORMATS.gather([]))
            except ScriptError as exc:
                raise DeploymentFileError([*issues, exc.issue], hint=_HINT) from exc
    if issues:
        raise DeploymentFileError(issues, hint=_HINT)
    if not role_sources:
        script = next((s for s in sources if s.text.startswith("#!") and FORMATS.detect_file(s) is None), None)
        if script is not None and len(sources) == 1:
            raise InputError(
                f"{script.name}: neither a kvcheck manifest nor a deployment file kvcheck reads: a shell script "
                "without #SBATCH directives",
                hint=f"for a bare engine command line, pass the line itself: {_CMD_SUGGESTION}; a Slurm batch script "
                     "is read with its #SBATCH directives",
            )
        raise InputError(_nothing_found(sources, docs), hint=f"kvcheck reads: {FORMATS.hint}")
    roles = _build_roles(role_sources, sglang_version, sglang_version_at)
    deployments = _group(roles, tuple(s.name for s in sources) + (("--cmd",) if cmd else ()))
    _tie_pools(pools_in(docs), roles, deployments, docs)
    deployments[0].unchecked.extend(
        f for doc, roles in read if not roles or _kind(doc) in EACH_CONTAINER_ITS_OWN
        for f in unchecked_gpu_workload(doc, inputs))
    return deployments


# Kinds whose every GPU container is a server of its own or nothing: one that starts no engine is a workload
# kvcheck did not check. Elsewhere a container without the engine's command is part of a role (LeaderWorkerSet,
# RBG and KubeRay worker pods that join the leader's Ray cluster; KServe and RBG containers whose command comes
# from a config or a role template), so only a document that gave no role at all is named.
EACH_CONTAINER_ITS_OWN = frozenset({"DynamoGraphDeployment", "Deployment", "StatefulSet", "Pod"})


def _kind(doc: Doc) -> str | None:
    kind = doc.data.get("kind") if isinstance(doc.data, Mapping) else None
    return kind if isinstance(kind, str) else None


def unchecked_gpu_workload(doc: Doc, inputs: Inputs) -> list[Finding]:
    """KV319 for each container of a document that asks for GPUs and starts no server kvcheck reads: a workload
    of its own, or one service, role or sidecar of a document whose other containers are servers."""
    kind, name = _kind(doc), get(doc.data, "metadata", "name")
    found: list[Finding] = []
    for path, container, owner in _containers(doc.data, ()):
        gpus = gpu_limit(doc, container.get("resources"), (*path, "resources"))
        if gpus is None and owner is not None:  # a Dynamo service asks for its mainContainer's GPUs itself
            gpus = gpu_limit(doc, owner[1].get("resources"), (*owner[0], "resources"))
        if gpus is None or not isinstance(gpus.value, int) or gpus.value < 1:
            continue
        if _starts_a_server(doc, container, path, inputs):
            continue  # a role's server, or a worker node of one (LeaderWorkerSet workers run the engine too)
        # a Dynamo service's mainContainer goes by the service's name (its key, or `name` in v1beta1's list)
        label = container.get("name") or (owner[1].get("name") or owner[0][-1] if owner is not None else path[-1])
        words = [w for part in ("command", "args") if isinstance(w_list := container.get(part), list)
                 for w in w_list if isinstance(w, (str, int, float))]
        shown = f": {one_line(' '.join(map(str, words)))[:120]}" if words else " (no command: the image's entrypoint)"
        found.append(file_finding(
            "KV319", None,
            f"{kind} '{name}', container '{label}', asks for {gpus.value} GPU{'s' if gpus.value != 1 else ''} "
            f"({gpus.origin}) but starts no engine server kvcheck reads{shown}; it is not checked",
            hint="start the engine in the container's command (python -m sglang.launch_server ..., vllm serve ...) "
                 "so kvcheck reads its arguments; for a GPU workload that serves no model, list KV319 under "
                 "policy.ignore in an overlay manifest (deployment: [FILE]): inline and ignore-file suppressions "
                 "refuse KV3xx codes",
            location=doc.at(path),
        ))
    return found


def _starts_a_server(doc: Doc, container: Mapping[str, Any], path: Path_, inputs: Inputs) -> bool:
    """Whether the container starts an engine's server, on its command or on its engine image's entrypoint (a
    script kvcheck cannot read counts as one: its reader has said so already)."""
    try:
        return (container_server(doc, container, path, inputs, injected={}) is not None
                or entrypoint_server(doc, container, path, inputs, {}) is not None)
    except ScriptError:
        return True


_Owner = tuple[Path_, Mapping[str, Any]]


def _containers(
    node: Any, path: Path_, parent: _Owner | None = None
) -> list[tuple[Path_, Mapping[str, Any], _Owner | None]]:
    """Every long-running container of a document, however nested: a pod spec's `containers` (not its
    `initContainers`, which run to completion first), and a Dynamo service's `extraPodSpec.mainContainer`
    with that service (path, mapping), which holds the container's GPU request."""
    out: list[tuple[Path_, Mapping[str, Any], _Owner | None]] = []
    if isinstance(node, Mapping):
        for key, value in node.items():
            if key == "containers" and isinstance(value, list):
                out.extend(((*path, key, i), c, None) for i, c in enumerate(value) if isinstance(c, Mapping))
            elif key == "mainContainer" and isinstance(value, Mapping) and path[-1:] == ("extraPodSpec",):
                out.append(((*path, key), value, parent))
            elif isinstance(value, (Mapping, list)):
                out.extend(_containers(value, (*path, key), (path, node)))
    elif isinstance(node, list):
        for i, value in enumerate(node):
            out.extend(_containers(value, (*path, i), parent))
    return out


def _tie_pools(pools: list[Pool], pairs: list[tuple[RoleSource, ImportedRole]],
               deployments: list[ImportedDeployment], docs: list[Doc]) -> None:
    """Each InferencePool's servers among the roles (by the pods' labels), told on their deployment; a pool
    whose servers are not among the inputs (or whose selector kvcheck cannot evaluate), on the first."""
    if not pools:
        return
    routed, unmatched = pool_notes(pools, [s for s, _ in pairs], [r.name for _, r in pairs], docs)
    for i, (_, role) in enumerate(pairs):
        for deployment in deployments:
            if any(r is role for r in deployment.roles):
                deployment.pools.extend(routed.get(i, []))
    deployments[0].pools.extend(unmatched)


def _parse_sources(sources: list[SourceFile]) -> tuple[list[Doc], list[RoleSource]]:
    """The files' YAML documents (a List's items each on its own) and the roles of Slurm batch
    scripts; DeploymentFileError when any file does not parse."""
    docs: list[Doc] = []
    issues: list[InputIssue] = []
    role_sources: list[RoleSource] = []
    for source in sources:
        whole = FORMATS.detect_file(source)
        if whole is not None:
            try:
                role_sources.extend(whole.read(text_doc(source), FORMATS.gather([])))
            except ScriptError as exc:
                issues.append(exc.issue)
                if exc.fatal:  # the expansion budget is spent: reading on would only repeat it
                    raise DeploymentFileError(issues, hint=_HINT) from exc
            continue
        for doc in parse_documents(source):
            issues.extend(doc.yaml.issues)
            docs.extend(list_items(doc))
    if issues:
        raise DeploymentFileError(issues, hint=_HINT)
    return docs, role_sources


def _read_docs(
    docs: list[Doc], inputs: Inputs, issues: list[InputIssue], read_docs: list[tuple[Doc, int]]
) -> list[RoleSource]:
    """The roles each document declares, read by its format's reader (`inputs`: what the documents refer to
    among all of them); a reader's error is an issue. Each document a format reads goes to `read_docs`, with
    the number of roles it gave."""
    role_sources: list[RoleSource] = []
    for doc in docs:
        fmt = FORMATS.detect(doc)
        if fmt is None:
            continue
        try:
            found = fmt.read(doc, inputs)
            role_sources.extend(found)
            read_docs.append((doc, len(found)))
        except ScriptError as exc:
            issues.append(exc.issue)
            if exc.fatal:  # the expansion budget is spent: reading on would only repeat it
                raise DeploymentFileError(issues, hint=_HINT) from exc
    return role_sources


def _build_roles(role_sources: list[RoleSource], sglang_version: str | None,
                 given_at: str | None = None) -> list[tuple[RoleSource, ImportedRole]]:
    """Each role's arguments checked against its release's catalogue; DeploymentFileError with every issue."""
    issues: list[InputIssue] = []
    roles: list[tuple[RoleSource, ImportedRole]] = []
    for source in role_sources:
        try:
            roles.append((source, _build_role(source, sglang_version, issues, given_at)))
        except _Skip:
            continue
    if issues:
        issues.sort(key=lambda i: (i.file, i.line or 0, i.column or 0))
        raise DeploymentFileError(issues, hint=_HINT)
    return roles


_HINT = "fix the deployment file, or see docs/import.md for what kvcheck reads from each format"
_CMD_HINT = "fix the command line, or see docs/import.md for how kvcheck reads an engine's command line"
_CMD_SUGGESTION = 'kvcheck import --cmd "vllm serve ..." (or kvcheck verify --cmd "python -m sglang.launch_server ...")'
# The option that names the engine release the files run (--sglang-version is its older spelling).
RELEASE_OPTION = "--engine-version"


def engine_labels() -> str:
    """The engines kvcheck reads servers of, as messages name them: "SGLang, vLLM"."""
    return ", ".join(sorted((get_engine(name).label for name in engine_names()), key=str.lower))


class DeploymentFileError(InputError):
    """Deployment files with problems the engine or Kubernetes would refuse; every one, each at its place."""

    def __init__(self, issues: list[InputIssue], *, hint: str | None = None) -> None:
        self.issues = list(issues)
        count = len(self.issues)
        lines = "\n".join(issue.render() for issue in self.issues)
        where = "deployment files"
        if self.issues and all(issue.file == CMD_NAME for issue in self.issues):  # `--cmd`: a command line
            where = "the --cmd command line"
            hint = _CMD_HINT if hint == _HINT else hint
        super().__init__(f"{count} error{'s' if count != 1 else ''} in {where}:\n{lines}", hint=hint)


class _Skip(Exception):
    pass


def _nothing_found(sources: list[SourceFile], docs: list[Doc]) -> str:
    kinds = []
    for doc in docs:
        data = doc.data
        if isinstance(data, Mapping) and isinstance(data.get("kind"), str):
            kinds.append(f"{data['kind']} ({data.get('apiVersion')}) at {doc.source.name}:{doc.yaml.line}")
    names = ", ".join(s.name for s in sources) or "--cmd"
    if not docs:
        return f"{names}: no YAML document in the input"
    if kinds:
        shown = "; ".join(kinds[:8]) + ("; ..." if len(kinds) > 8 else "")
        pools = pools_in(docs)
        told = "".join(f". {without_servers(p, docs)}" for p in pools[:4])
        if len(pools) > 4:
            told += f". {len(pools) - 4} more InferencePool(s) not shown"
        return f"{names}: no engine server ({engine_labels()}) in a supported kind; the input holds: {shown}{told}"
    for doc in docs:
        explained = FORMATS.explain(doc)
        if explained:
            return explained
    manifest = next((source for source in sources if source.text and FORMATS.is_manifest(source.text, source.name)
                     and _looks_like_a_manifest(source.text, source.name)), None)
    if manifest is not None:
        where = ("on stdin: a manifest is read from a file (`kvcheck import ... -o m.yaml`, then verify m.yaml)"
                 if manifest.name == STDIN_NAME else
                 "among several inputs: verify and plan read one manifest at a time (with several files, each is "
                 "a deployment file); run kvcheck once per manifest")
        return f"{manifest.name}: a kvcheck manifest {where}"
    return f"{names}:{docs[0].yaml.line}: not a deployment file kvcheck reads (no kind/apiVersion, services or recipe)"


def _looks_like_a_manifest(text: str, name: str) -> bool:
    """A YAML mapping with a manifest's own keys (`roles`, or `deployment`)."""
    try:
        first = next(iter(safe_load_all(text, name)), None)
    except (InputError, yaml.YAMLError):
        return False
    return isinstance(first, Mapping) and ("roles" in first or "deployment" in first)


def _catalogue(source: RoleSource, override: str | None, issues: list[InputIssue],
               given_at: str | None = None) -> tuple[Catalogue, Sourced, str | None]:
    """The flag catalogue of the release the role runs: the one given, else the one the files state, else the
    engine's newest (with a note saying so)."""
    engine = get_engine(source.server.engine)
    stated = source.version
    unpinned = stated.origin if stated is not None and stated.value is None else None  # the image pins none
    stated = None if unpinned else stated
    if override is not None and stated is not None and str(stated.value) != override:
        where = stated.location
        issues.append(
            InputIssue(where.file if where else "", where.line if where else None, where.column if where else None, "",
                       f"the deployment runs {engine.label} {stated.value} ({stated.origin}), but {override} was given"
                       + (f" {'by' if given_at.startswith('--') else 'in'} {given_at}; they must agree"
                          if given_at else ""))
        )
    if override is not None:
        version = Sourced(override, None, "given")
    elif stated is not None:
        version = stated
    else:
        newest = engine.catalogue_versions()[-1]
        version = Sourced(newest, None, "not in the files")
    try:
        catalogue, note = engine.catalogue(str(version.value))
    except InputError as exc:
        where = version.location or source.location
        issues.append(InputIssue(where.file, where.line, where.column, "", exc.message))
        raise _Skip() from exc
    if version.origin == "not in the files":
        tag = f" (no {engine.image_repository} image tag)" if engine.image_repository else ""
        tag = f" ({unpinned}; pass {RELEASE_OPTION})" if unpinned else tag
        note = (
            f"{inputs_do(source.location.file if source.location else '').lower()} not name the {engine.label} "
            f"release{tag}; role '{source.name}' "
            f"was read with the flags of {version.value}, the newest release kvcheck knows"
        )
    return catalogue, version, note


def _build_role(source: RoleSource, override: str | None, issues: list[InputIssue],
                given_at: str | None = None) -> ImportedRole:
    catalogue, version, note = _catalogue(source, override, issues, given_at)
    first = len(issues)
    try:
        return _build_role_args(source, catalogue, version, note, issues)
    finally:
        if version.origin == "not in the files":
            _name_the_assumed_release(issues, first, catalogue.label, str(version.value))


def inputs_named(*sources: str) -> str:
    """What a message calls the inputs: `--cmd`'s command line alone, or files."""
    return "the command line" if sources and all(s == CMD_NAME for s in sources) else "the files"


def inputs_do(*sources: str) -> str:
    """The inputs with their verb, to open a sentence: "The command line does", "The files do"."""
    named = inputs_named(*sources)
    return f"{named.capitalize()} {'does' if named == 'the command line' else 'do'}"


def _name_the_assumed_release(issues: list[InputIssue], first: int, label: str, version: str) -> None:
    """A flag refused by a catalogue the files never named: say so, since an older release may accept it."""
    said = f"{label} {version}"
    for i in range(first, len(issues)):
        issue = issues[i]
        if said in issue.message:
            issues[i] = InputIssue(
                issue.file, issue.line, issue.column, issue.path,
                f"{issue.message}. {inputs_do(issue.file)} not name the {label} release, so kvcheck read "
                f"{'it' if issue.file == CMD_NAME else 'them'} with the flags "
                f"of {version}, the newest it knows: if the deployment runs an older release, pass {RELEASE_OPTION}",
            )


def _build_role_args(
    source: RoleSource, catalogue: Catalogue, version: Sourced, note: str | None, issues: list[InputIssue]
) -> ImportedRole:
    findings: list[Finding] = []
    model_path = source.model_path
    if source.config_map is not None:
        doc, path = source.config_map
        args = _mapping_args(doc, path, catalogue, issues)
    else:
        parsed = parse_server(source.server, catalogue, role=source.name)
        issues.extend(parsed.issues)
        findings.extend(parsed.findings)
        args = parsed.args
        if parsed.model_path is not None:
            model_path = parsed.model_path
        if parsed.config is not None:
            args, config_model = _with_config(source, parsed.config, args, catalogue, issues, findings)
            if parsed.model_path is None and config_model is not None:  # the command line wins, as in SGLang
                model_path = config_model
    for name, arg in source.injected.items():
        args.setdefault(name, arg)

    mode = source.mode
    told = wrapper_side(source.server) if source.config_map is None else None  # Dynamo's own side flags
    if told is not None and mode is not None and told.value != mode.value:
        where = told.location
        issues.append(InputIssue(where.file if where else "", where.line if where else None,
                                 where.column if where else None, "",
                                 f"{told.origin} makes this a {told.value} worker, but {mode.origin} says "
                                 f"'{mode.value}' at {mode.location.render() if mode.location else '?'}"))
    mode = mode or told
    side = _with_mode(source, mode, args, catalogue, issues) if mode is not None else None
    for label, worker in source.workers:
        findings.extend(_disagreements(source, args, label, worker, catalogue))
    nnodes = args.get("nnodes")
    if source.nodes is not None and nnodes is not None and nnodes.value != source.nodes.value:
        where = nnodes.location
        issues.append(InputIssue(
            where.file, where.line, where.column, "",
            f"--nnodes {nnodes.value}, but {source.nodes.origin} gives {source.nodes.value} node(s) per instance "
            f"at {source.nodes.location.render() if source.nodes.location else '?'}: the engine would wait for "
            "nodes that never join, or leave pods out",
        ))
    return ImportedRole(
        name=source.name,
        kind=source.kind,
        location=source.location,
        engine=source.server.engine,
        args=args,
        catalogue=catalogue,
        version=version,
        model_path=model_path,
        gpus_per_node=source.gpus_per_node,
        nodes=source.nodes,
        replicas=source.replicas,
        gpu=source.gpu,
        findings=findings,
        catalogue_note=note,
        no_gpus=source.no_gpus,
        image=source.image,
        side=side,
        env={
            **source.env.own(),
            # `export VAR=1` / `VAR=1 exec python -m ...` in the container's script reach the engine too
            **{name: Sourced(value, source.server.location, "the script's environment")
               for name, value in source.server.environment.items()},
        },
    )


def _with_mode(
    source: RoleSource, mode: Sourced, args: dict[str, Arg], catalogue: Catalogue, issues: list[InputIssue]
) -> Sourced | None:
    """The prefill/decode role a format states (Dynamo's subComponentType, llm-d's label): SGLang's
    `--disaggregation-mode` when the release has that flag (added when the command line does not set it),
    else it must agree with the mode the engine reads from the arguments (vLLM's kv_role); where those say no
    side (no kv_role, or kv_both), the side itself is returned, for the role's `side` (the pair rules)."""
    stated_at = mode.location.render() if mode.location else "?"
    if any(flag.name == "--disaggregation-mode" for flag in catalogue.flags):
        stated = args.get("disaggregation-mode")
        if stated is None:
            args["disaggregation-mode"] = Arg("disaggregation-mode", "disaggregation_mode", mode.value,
                                              mode.location or source.location, None, mode.origin)
        elif stated.value != mode.value:
            where = stated.location
            issues.append(InputIssue(where.file, where.line, where.column, "",
                                     f"--disaggregation-mode {stated.value} contradicts {mode.origin} "
                                     f"'{mode.value}' at {stated_at}"))
        return None
    engine = get_engine(source.server.engine)
    found = engine.role_mode({arg.key: arg.value for arg in args.values()})
    if found in ("prefill", "decode"):
        if found != mode.value:
            arg = next((a for a in args.values() if engine.role_mode({a.key: a.value}) is not None), None)
            where = arg.location if arg is not None else source.location
            issues.append(InputIssue(where.file, where.line, where.column, "",
                                     f"the {engine.label} arguments make this a {found} role, but {mode.origin} "
                                     f"says '{mode.value}' at {stated_at}"))
        return None
    return mode if engine.side_flag is None else None


def _pd_role(role: ImportedRole) -> bool:
    """Whether the role is one side of a prefill/decode pair (its engine reads a mode from its arguments)."""
    if "disaggregation-mode" in role.args:
        return True
    return get_engine(role.engine).role_mode({arg.key: arg.value for arg in role.args.values()}) is not None


def _mapping_args(doc: Doc, path: tuple, catalogue: Catalogue, issues: list[InputIssue]) -> dict[str, Arg]:
    """A YAML mapping of SGLang flags (srt-slurm's sglang_config blocks), checked like manifest args."""
    block = doc.data
    for part in path:
        block = block[part]
    args: dict[str, Arg] = {}
    for key, value in block.items():
        where = doc.at((*path, key), key=True)
        bare = str(key).lstrip("-").replace("_", "-")
        if bare in ("model-path", "model", "served-model-name") and bare != "served-model-name":
            continue
        try:
            flag = catalogue.resolve(str(key))
            typed = catalogue.coerce(flag, value)
        except FlagError as exc:
            issues.append(InputIssue(where.file, where.line, where.column, str(key), str(exc)))
            continue
        name = flag.name[2:]
        if name in PLACEMENT_FLAGS or ((flag.store_true or flag.nargs == 0) and typed is False):
            continue
        args[name] = Arg(name, flag.key, typed, doc.at((*path, key)), flag)
    return args


def _with_config(
    source: RoleSource, token: Token, args: dict[str, Arg], catalogue: Catalogue,
    issues: list[InputIssue], findings: list[Finding],
) -> tuple[dict[str, Arg], Sourced | None]:
    """Arguments (and the model path) from `--config FILE`: the ConfigMap entry mounted there in a pod, else
    (a script, a compose file, a command line) the file at that path relative to the deployment file; the
    command line wins over it, as in the engines."""
    origin = f"--config {token.text}"
    found = source.config_source(token) if source.config_source is not None else None
    if found is not None:
        doc, path, text = found
        from_config, config_issues, model = config_args(doc, path, text, catalogue, origin=origin)
    else:
        on_disk = _config_file(source, token) if source.config_source is None else None
        if on_disk is None:
            findings.append(
                file_finding(
                    "KV317",
                    source.name,
                    f"--config {token.text}: the file is not among the inputs, so the flags it sets are unknown",
                    hint="pass the ConfigMap that holds it in the same command (it is matched by the volume "
                    "mounted there), or keep the file beside the deployment file under the relative path given",
                    location=token.location,
                )
            )
            return args, None
        from_config, config_issues, model = config_file_args(
            on_disk[0], on_disk[1], catalogue, origin=origin, at=token.location)
    issues.extend(config_issues)
    return {**from_config, **args}, model


def _config_file(source: RoleSource, token: Token) -> tuple[Path, str] | None:
    """A relative `--config` path as a file beside the deployment file (the folder a batch script is submitted
    from, a compose project's folder; the working folder for --cmd), when it is there; (path, as shown)."""
    name = source.doc.source.name
    if name == STDIN_NAME or not token.text or Path(token.text).is_absolute() or token.unresolved:
        return None  # stdin has no folder; an absolute path is the cluster's, not this checkout's
    folder = Path(".") if name == "--cmd" else Path(name).parent
    candidate = folder / token.text
    if not candidate.is_file():
        return None
    return candidate, os.path.normpath(str(candidate))


_COMPARED_EXCLUDE = PLACEMENT_FLAGS | {"model-path", "config"}
# Leader and workers may differ on these without the pool coming apart: names, credentials and text
# formats (the front end runs on the leader only), metrics, and the RDMA devices, which are named per
# node (a node whose NICs are numbered differently lists its own). A difference is a KV501 warning.
KV501_WARNING_FLAGS = NON_SIZING_FLAGS | {"enable-metrics", "disaggregation-ib-device"}


def _disagreements(
    source: RoleSource, leader: dict[str, Arg], label: str, worker: ServerCommand, catalogue: Catalogue
) -> list[Finding]:
    """KV501 for every engine argument a worker runs differently from its leader, at the leader's line."""
    parsed = parse_server(worker, catalogue, role=source.name)
    theirs = parsed.args
    out = []
    for name in sorted(set(leader) | set(theirs)):
        if name in _COMPARED_EXCLUDE or (name in leader and leader[name].origin and name not in theirs):
            continue
        mine, other = leader.get(name), theirs.get(name)
        if mine is not None and other is not None and mine.value == other.value:
            continue
        shown_mine = _shown(mine)
        shown_other = _shown(other)
        places = [arg.location for arg in (mine, other) if arg is not None]
        if other is None:
            places.append(worker.location)
        # One disagreement, one finding: at the leader's place, naming the worker's (one place when
        # the value came through a variable both share).
        where, *others = dict.fromkeys(places)
        text = f"--{name}: the leader runs {shown_mine}, the {label} runs {shown_other}"
        if others:
            text += f" at {others[0].render()}"
        hint = "every node of one instance must start with the same server arguments"
        severity: Severity | None = None
        if name in KV501_WARNING_FLAGS:
            text += " (a flag that does not size the pool: a warning)"
            severity = "warning"
        out.append(file_finding("KV501", source.name, text, hint=hint, location=where, severity=severity))
    return out


def _shown(arg: Arg | None) -> str:
    if arg is None:
        return "without it"
    return str(arg.value)


def _group(pairs: list[tuple[RoleSource, ImportedRole]], sources: tuple[str, ...]) -> list[ImportedDeployment]:
    """Roles -> deployments: a whole-deployment object is one; loose prefill/decode workloads of one input are one."""
    groups: dict[str, list[ImportedRole]] = {}
    names: dict[str, str] = {}
    for source, role in pairs:
        if source.kind in _LOOSE and _pd_role(role):
            key = f"pd:{source.doc.source.name}"
            names.setdefault(key, _common_name([s.group for s, r in pairs if s.kind in _LOOSE and _pd_role(r)]))
        else:
            key = f"{source.kind}:{source.group}"
            names.setdefault(key, source.group)
        groups.setdefault(key, []).append(role)
    out = []
    for key, roles in groups.items():
        seen: dict[str, int] = {}
        for role in roles:
            count = seen.get(role.name, 0)
            seen[role.name] = count + 1
            if count:
                role.name = f"{role.name}-{count + 1}"
        out.append(ImportedDeployment(names[key], roles, sources))
    return out


def _common_name(names: list[str]) -> str:
    if not names:
        return "deployment"
    prefix = names[0]
    for name in names[1:]:
        while not name.startswith(prefix):
            prefix = prefix[:-1]
    prefix = prefix.rstrip("-_.")
    return prefix or "+".join(names)


def role_args_in_order(role: ImportedRole) -> list[Arg]:
    """The role's arguments in the order the files state them (by file position)."""
    def key(arg: Arg) -> tuple[Any, ...]:
        loc = arg.location
        return (loc.file if loc else "", loc.line or 0 if loc else 0, loc.column or 0 if loc else 0)

    return sorted(role.args.values(), key=key)
