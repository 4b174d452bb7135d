"""Imported deployments -> the kvcheck manifest they describe (`ImportedManifest`, which `kvcheck import`
prints: render.py), and -> the same loaded value `load_manifest` returns, so verify and plan gate
deployment files directly.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from kvcheck.engines import get_engine
from kvcheck.errors import InputError, InputIssue
from kvcheck.inputs.deploy.accelerator import image_accelerator, vendor_name, visible_devices
from kvcheck.inputs.deploy.build import (
    RELEASE_OPTION,
    DeploymentFileError,
    ImportedDeployment,
    ImportedRole,
    inputs_do,
    read_deployments,
    role_args_in_order,
)
from kvcheck.inputs.deploy.rules import file_finding
from kvcheck.inputs.deploy.server import Sourced
from kvcheck.inputs.manifest.load import LoadedManifest, _parallel_gpus
from kvcheck.inputs.manifest.model import MAX_TOKENS, EngineSpec, LauncherSpec, Manifest
from kvcheck.model import Finding, Location, RoleTarget
from kvcheck.policy.config import PolicyConfig
from kvcheck.redact import is_secret_name


@dataclass(frozen=True)
class Overrides:
    """What the command line (or an overlay manifest) adds to the files; each with where it was stated."""

    gpu: Sourced | None = None
    context_length: Sourced | None = None
    model_config: Sourced | None = None  # value: Path
    sglang_version: Sourced | None = None
    model_path: Sourced | None = None
    policy: PolicyConfig | None = None
    name: str | None = None
    launcher: LauncherSpec | None = None  # an overlay's launcher: block (deployment files state none)


# -- one deployment as manifest values, each with its source -------------------------------------------

DEFAULT_ENGINE = str(EngineSpec.model_fields["name"].default)  # a manifest without engine.name runs it


@dataclass(frozen=True)
class Stated:
    """A manifest value and where it came from (file:line:column and how, for the printer's comment)."""

    value: Any
    where: str | None = None


def _where(sourced: Sourced | None) -> str | None:
    if sourced is None:
        return None
    parts = []
    if sourced.location is not None:
        parts.append(sourced.location.render())
    if sourced.origin:
        parts.append(f"({sourced.origin})" if parts else sourced.origin)
    return " ".join(parts) or None


def _agree(values: list[tuple[str, Sourced | None]], what: str, issues: list[InputIssue]) -> Sourced | None:
    """The one value roles state for `what` (first role's place); disagreeing roles are an input issue."""
    stated = [(role, s) for role, s in values if s is not None and s.value is not None]
    if not stated:
        return None
    first_role, first = stated[0]
    for role, other in stated[1:]:
        if other.value != first.value:
            where = other.location or Location("?")
            issues.append(
                InputIssue(where.file, where.line, where.column, "",
                           f"role '{role}' states {what} {other.value!r}, role '{first_role}' {first.value!r} "
                           f"at {first.location.render() if first.location else '?'}; a manifest holds one {what}")
            )
    return first


def _same_gpu(a: str, b: str) -> bool:
    from kvcheck.gpus import default_profiles

    if a == b:
        return True
    profiles = default_profiles()
    found_a, found_b = profiles.find(a), profiles.find(b)
    return found_a is not None and found_a is found_b


def _override(stated: Sourced | None, given: Sourced | None, what: str, issues: list[InputIssue],
              same: Any = None) -> Sourced | None:
    """The given value where the files say nothing; both stated and different is an input error naming both."""
    if given is None:
        return stated
    if stated is None:
        return given
    equal = same(str(stated.value), str(given.value)) if same else stated.value == given.value
    if not equal:
        where = stated.location or Location("?")
        issues.append(
            InputIssue(where.file, where.line, where.column, "",
                       f"{what} is {stated.value!r} here ({stated.origin or 'the deployment file'}) but "
                       f"{given.value!r} in {_where(given) or 'the command line'}; they must agree")
        )
    return stated


@dataclass
class Resolved:
    """A deployment with the overrides applied: what the manifest and the targets are built from."""

    deployment: ImportedDeployment
    name: str
    context_length: Sourced | None
    model_path: Sourced | None
    model_config: Sourced | None
    version: Sourced
    gpu: Sourced | None  # shared by every role, else per role
    role_gpus: dict[str, Sourced | None]
    notes: list[str] = field(default_factory=list)
    engine: str = DEFAULT_ENGINE  # the engine every role runs (a manifest holds one; verify takes each role's)


def resolve(
    deployment: ImportedDeployment, overrides: Overrides, issues: list[InputIssue], *, one_release: bool = True
) -> Resolved:
    """The deployment with the overrides applied. `one_release`: roles on different SGLang releases are an
    input error (a manifest holds one engine.version); verify checks each role against its own."""
    roles = deployment.roles
    engines = list(dict.fromkeys(r.engine for r in roles))
    if one_release and len(engines) > 1:
        other = next(r for r in roles if r.engine != roles[0].engine)
        issues.append(InputIssue(
            other.location.file, other.location.line, other.location.column, "",
            f"role '{other.name}' runs {get_engine(other.engine).label}, role '{roles[0].name}' "
            f"{get_engine(roles[0].engine).label} at {roles[0].location.render()}; a manifest holds one engine "
            "(kvcheck verify checks the files directly, each role with its own engine)",
        ))
    # each engine's window flag (SGLang's --context-length, vLLM's --max-model-len; vLLM's `auto`, -1, is no
    # window: it fits the window to the pool)
    windows = [(r.name, _window_arg(r)) for r in roles]
    window = _agree(windows, "window", []) if all(w for _, w in windows) else None
    if window is not None and len({w.value for _, w in windows if w}) != 1:
        window = None  # roles serve different windows: the advertised one must be given
    if window is not None:
        window = Sourced(window.value, window.location, f"{_window_flags(roles)} of every role")
    # The files state the engine's --context-length, not the window advertised to clients: a window
    # given on the command line or in an overlay is that window (KV102 checks the engine against it).
    if overrides.context_length is not None:
        window = overrides.context_length
    model = _agree([(r.name, r.model_path) for r in roles], "model path", issues)
    model = _override(model, overrides.model_path, "model.path", issues)
    label = get_engine(roles[0].engine).label
    # releases compare within one engine (a mixed deployment is refused above, or checked role by role)
    version = _agree([(r.name, r.version if r.version.location else None) for r in roles], f"{label} release",
                     issues if one_release and len(engines) == 1 else [])
    version = _override(version, overrides.sglang_version, f"the {label} release", issues)
    if version is None:
        version = roles[0].version
    gpus = [(r.name, r.gpu) for r in roles]
    distinct = {str(g.value) for _, g in gpus if g is not None}
    role_gpus: dict[str, Sourced | None] = {}
    shared_gpu = None
    if len(distinct) <= 1:
        shared_gpu = next((g for _, g in gpus if g is not None), None)
        shared_gpu = _override(shared_gpu, overrides.gpu, "the GPU type", issues, same=_same_gpu)
    else:
        for name, gpu in gpus:
            role_gpus[name] = _override(gpu, overrides.gpu, "the GPU type", issues, same=_same_gpu)
    notes = sorted({r.catalogue_note for r in roles if r.catalogue_note})
    return Resolved(deployment, overrides.name or deployment.name, window, model, overrides.model_config,
                    version, shared_gpu, role_gpus, notes, engines[0])


def _window_flags(roles: Sequence[ImportedRole]) -> str:
    """The window flag of each engine the roles run, as messages name it: "--context-length/--max-model-len"."""
    return "/".join(f"--{flag}" for flag in sorted({get_engine(r.engine).window_flag for r in roles}))


def _window_arg(role: ImportedRole) -> Sourced | None:
    arg = role.args.get(get_engine(role.engine).window_flag)
    if arg is None or isinstance(arg.value, bool) or not isinstance(arg.value, int) or arg.value <= 0:
        return None
    return Sourced(arg.value, arg.location, arg.origin)


@dataclass(frozen=True)
class RoleEntry:
    """One role of an imported manifest: its GPUs and its arguments in the order the files state them."""

    name: str
    where: str  # the role's place and format: "deploy.yaml:12:9 (LeaderWorkerSet)"
    gpus: Stated | None  # value: the GPU indexes of one node, [0, 1, ...]
    gpu: Stated | None  # the role's own GPU type, when the roles run on different ones
    args: tuple[tuple[str, Stated], ...]  # canonical flag name -> value
    env: tuple[tuple[str, Stated], ...] = ()  # the container's own variables (secret-named ones left out)
    nodes: Stated | None = None  # hosts of one instance the engine spans without a flag (vLLM over Ray)
    side: Stated | None = None  # prefill/decode where the engine's arguments do not say (a Dynamo vLLM worker)


@dataclass(frozen=True)
class ImportedManifest:
    """The kvcheck manifest one deployment describes, each value with where it came from.

    `kvcheck import` prints it (render.py); verify and plan gate the same values.
    """

    sources: tuple[str, ...]
    name: Stated
    context_length: Stated | None
    model_path: Stated | None
    model_config: Stated | None  # value: the path as given; import makes it relative to the file written, or absolute
    version: Stated
    gpu: Stated | None  # shared by every role
    roles: tuple[RoleEntry, ...]
    engine: Stated | None = None  # engine.name, when it is not the manifest's default engine

    def plain(self) -> dict[str, Any]:
        """The manifest's values as a kvcheck manifest holds them (what `kvcheck import --format json` prints)."""
        out: dict[str, Any] = {"name": self.name.value}
        if self.context_length is not None:
            out["context_length"] = self.context_length.value
        model: dict[str, Any] = {}
        if self.model_path is not None:
            model["path"] = self.model_path.value
        if self.model_config is not None:
            model["config"] = self.model_config.value
        out["model"] = model
        out["engine"] = {"version": self.version.value}
        if self.engine is not None:
            out["engine"] = {"name": self.engine.value, **out["engine"]}
        if self.gpu is not None:
            out["gpu"] = self.gpu.value
        roles: dict[str, Any] = {}
        for role in self.roles:
            entry: dict[str, Any] = {}
            if role.gpus is not None:
                entry["gpus"] = role.gpus.value
            if role.nodes is not None:
                entry["nodes"] = role.nodes.value
            if role.gpu is not None:
                entry["gpu"] = role.gpu.value
            if role.side is not None:
                entry["side"] = role.side.value
            entry["args"] = {name: stated.value for name, stated in role.args}
            if role.env:
                entry["env"] = {name: stated.value for name, stated in role.env}
            roles[role.name] = entry
        out["roles"] = roles
        return out


def _stated(sourced: Sourced) -> Stated:
    return Stated(sourced.value, _where(sourced))


def _physical(path: Path) -> Path:
    """`path` absolute, its folders' links resolved as the file system resolves `..`, but the file's own name
    kept: a Hugging Face snapshot's config.json is a link to a blob named by its hash."""
    return path.absolute().parent.resolve() / path.name


def config_relative_to(resolved: Resolved, folder: Path) -> Resolved:
    """The deployment with model.config relative to `folder`: a manifest's model.config is read relative
    to the manifest, so a manifest written into `folder` names its config from there."""
    config = resolved.model_config
    if config is None:
        return resolved
    relative = os.path.relpath(_physical(Path(str(config.value))), folder.resolve())
    return replace(resolved, model_config=Sourced(Path(relative), config.location, config.origin))


def config_absolute(resolved: Resolved) -> Resolved:
    """The deployment with model.config absolute, for a manifest printed on stdout: where it will be saved,
    and so what a relative path would be read against, is unknown (a path as given, relative to the working
    folder, names nothing, or another file, once the manifest is saved in another folder)."""
    config = resolved.model_config
    if config is None:
        return resolved
    return replace(resolved, model_config=Sourced(_physical(Path(str(config.value))), config.location, config.origin))


def _group_nodes(role: ImportedRole) -> Sourced | None:
    """The pods of the role's group as its node count, where its engine spans them without a flag (vLLM over
    Ray: LeaderWorkerSet `size`) and the args state none: the manifest's `roles.N.nodes` (SGLang states
    --nnodes, which the args carry)."""
    if role.nodes is None or "nnodes" in role.args or not get_engine(role.engine).nodes_from_group:
        return None
    return role.nodes if int(role.nodes.value) > 1 else None


def imported_manifest(resolved: Resolved) -> ImportedManifest:
    """The manifest a resolved deployment describes."""
    model_path = resolved.model_path
    config = resolved.model_config
    roles = []
    for role in resolved.deployment.roles:
        gpu = resolved.role_gpus.get(role.name)
        per_node = role.gpus_per_node
        roles.append(RoleEntry(
            name=role.name,
            where=f"{role.location.render()} ({role.kind})",
            gpus=Stated(list(range(per_node.value)), _where(per_node)) if per_node is not None else None,
            gpu=_stated(gpu) if gpu is not None else None,
            args=tuple((arg.name, _stated(Sourced(arg.value, arg.location, arg.origin)))
                       for arg in role_args_in_order(role)),
            # a secret's value is never written into a file meant to be committed (verify still passes it on)
            env=tuple((name, _stated(Sourced(str(value.value), value.location, value.origin)))
                      for name, value in role.env.items() if not is_secret_name(name)),
            nodes=_stated(nodes) if (nodes := _group_nodes(role)) is not None else None,
            side=_stated(role.side) if role.side is not None else None,
        ))
    return ImportedManifest(
        sources=resolved.deployment.sources,
        name=Stated(resolved.name, ", ".join(resolved.deployment.sources)),
        context_length=_stated(resolved.context_length) if resolved.context_length is not None else None,
        model_path=_stated(model_path) if model_path is not None and model_path.value is not None else None,
        # `kvcheck import` makes it relative to -o FILE's folder (config_relative_to), or absolute on stdout
        model_config=Stated(str(config.value), _where(config)) if config is not None else None,
        version=Stated(str(resolved.version.value), _where(resolved.version)),
        gpu=_stated(resolved.gpu) if resolved.gpu is not None else None,
        roles=tuple(roles),
        engine=(Stated(resolved.engine, f"the roles run {get_engine(resolved.engine).label}")
                if resolved.engine != DEFAULT_ENGINE else None),
    )


# -- gating deployment files directly ------------------------------------------------------------------


@dataclass(frozen=True)
class LoadedDeployment(LoadedManifest):
    """Deployment files loaded as a manifest would be, plus the findings reading them produced."""

    findings: tuple[Finding, ...] = ()
    notes_text: tuple[str, ...] = ()
    notes_at: Location | None = None  # the overlay's engine.version, when the notes are about the release it gives

    def notes(self) -> list[Finding]:
        out = [
            file_finding("KV204", None, text, hint=f"state the release: {RELEASE_OPTION} or the overlay's engine.version",
                    location=self.notes_at)
            for text in self.notes_text
        ]
        return out + list(self.findings)


def import_deployments(
    paths: Sequence[str],
    overrides: Overrides,
    *,
    cmd: str | None = None,
    one_release: bool = True,
    texts: Mapping[str, str] | None = None,
) -> tuple[list[Resolved], list[Finding]]:
    """Read the files (those in `texts` are read already) and apply the overrides; InputError (exit 2)
    naming every conflict."""
    version = str(overrides.sglang_version.value) if overrides.sglang_version else None
    deployments = read_deployments(paths, cmd=cmd, sglang_version=version, texts=texts,
                                   sglang_version_at=_where(overrides.sglang_version) if overrides.sglang_version else None)
    issues: list[InputIssue] = []
    resolved = [resolve(d, overrides, issues, one_release=one_release) for d in deployments]
    if issues:
        raise DeploymentFileError(issues, hint="state each value once, or make the files, the options and the overlay say the same")
    findings = [f for d in deployments for f in d.findings]
    return resolved, findings


def load_deployment(
    paths: Sequence[str],
    overrides: Overrides,
    *,
    cmd: str | None = None,
    display: str | None = None,
    texts: Mapping[str, str] | None = None,
) -> LoadedDeployment:
    """Deployment files as the value `load_manifest` returns: RoleTargets whose locations are the files' own."""
    resolved, _ = import_deployments(paths, overrides, cmd=cmd, one_release=False, texts=texts)
    issues: list[InputIssue] = []
    targets: list[RoleTarget] = []
    several = len(resolved) > 1
    findings: list[Finding] = []
    for item in resolved:
        for found in item.deployment.findings:
            # roles of several deployments are named deployment/role in the report
            findings.append(replace(found, role=f"{item.name}/{found.role}") if several and found.role else found)
    for item in resolved:
        if item.context_length is None:
            raise InputError(
                f"{', '.join(item.deployment.sources)}: {inputs_do(*item.deployment.sources).lower()} not state the "
                f"context window to check "
                f"({item.deployment.name}: the roles set no common {_window_flags(item.deployment.roles)})",
                hint="pass --context-length N (the window you advertise), or an overlay manifest's context_length",
            )
        window = int(item.context_length.value)
        if not 0 < window <= MAX_TOKENS:
            raise InputError(f"the context window {window} is out of range (1..{MAX_TOKENS})")
        for role in item.deployment.roles:
            targets.append(_target(item, role, window, overrides, several, issues, findings))
    if issues:
        raise DeploymentFileError(issues, hint="fix the deployment file")
    first = resolved[0]
    # Only what the report states of the whole input: its name and window (every role's own is in its target).
    window = first.context_length.value if first.context_length is not None else 1
    manifest = Manifest.model_construct(name=first.name, context_length=window, launcher=overrides.launcher)
    policy = overrides.policy or PolicyConfig()
    source = display or ", ".join(first.deployment.sources)
    notes = tuple(n for item in resolved for n in item.notes)
    return LoadedDeployment(
        path=Path(paths[0]) if paths and paths[0] != "-" else Path("."),
        display_path=source,
        manifest=manifest,
        targets=tuple(targets),
        policy=policy,
        catalogue_note=None,
        findings=tuple(findings),
        notes_text=notes,
        # a release given applies to every role, so every catalogue note is about it
        notes_at=overrides.sglang_version.location if overrides.sglang_version else None,
    )


def _check_gpu_name(gpu: Sourced, role: ImportedRole, issues: list[InputIssue]) -> None:
    """A GPU name (a label, an option) no profile knows is invalid input at the place it was read, with a
    did-you-mean; a platform label (GKE, Karpenter, GPU feature discovery) names its profile's card."""
    from kvcheck.gpus import default_profiles

    profiles = default_profiles()
    name = str(gpu.value)
    if profiles.matches(name):
        return
    close = profiles.suggest(name)
    where = gpu.location or role.location
    origin = f" ({gpu.origin})" if gpu.origin else ""
    issue = InputIssue(where.file, where.line, where.column, "",
                       f"unknown GPU {name!r}{origin}" + (f" (did you mean {close!r}?)" if close else "")
                       + "; pass --gpu with a card kvcheck has a profile for, or add one with --profiles DIR")
    if issue not in issues:
        issues.append(issue)


def _accelerator_findings(role: ImportedRole, gpu: Sourced, name: str) -> list[Finding]:
    """KV318: the container's image is clearly built for another accelerator than the GPU the role is sized on."""
    from kvcheck.gpus import default_profiles

    if role.image is None:
        return []
    built = image_accelerator(str(role.image.value))
    profile = default_profiles().find(str(gpu.value))
    if built is None or profile is None or built[0] == profile.vendor:
        return []
    stated = f" ({gpu.origin} at {gpu.location.render()})" if gpu.location else f" ({gpu.origin})" if gpu.origin else ""
    return [file_finding(
        "KV318", name,
        f"image {role.image.value!r} is built for {built[1]}, but the role is sized for {gpu.value}"
        f"{stated}, {vendor_name(profile.vendor)} GPU: the predicted pool is for a card this image does not run on",
        hint="state the GPU this role runs on (a node selector, or --gpu for its file alone), or run the "
        "engine's image for that GPU",
        location=role.image.location,
    )]


def _target(item: Resolved, role: ImportedRole, window: int, overrides: Overrides, several: bool,
            issues: list[InputIssue], findings: list[Finding]) -> RoleTarget:
    catalogue = role.catalogue
    name = f"{item.name}/{role.name}" if several else role.name
    args: dict[str, Any] = {}
    argv: list[str] = []
    locations: dict[str, Location] = {}
    for arg in role_args_in_order(role):
        flag = arg.flag or catalogue.resolve(arg.name)
        args[flag.key] = arg.value
        argv.extend(catalogue.argv(flag, arg.value))
        locations[flag.key] = arg.location
    gpus: tuple[int, ...] = ()
    engine = get_engine(role.engine)
    needed = engine.gpus_needed(args)
    need = _parallel_gpus(args) if needed is None else needed
    # a sizing value the files leave unknown (KV317: the role is not checked, exit 3) would make the
    # count wrong for a reason the count cannot name: `--nnodes $(NODES)` from a Secret is not 1 node
    unknown = any(f.rule == "KV317" and f.blocks for f in role.findings)
    nnodes = int(args.get("nnodes") or 1)
    if "nnodes" not in args and engine.nodes_from_group and role.nodes is not None:
        nnodes = int(role.nodes.value)  # the pods of the group form the instance (vLLM over Ray)
    if role.gpus_per_node is not None:
        gpus = tuple(range(int(role.gpus_per_node.value)))
        if gpus and len(gpus) * nnodes != need and not unknown:
            where = role.gpus_per_node.location or role.location
            issues.append(
                InputIssue(where.file, where.line, where.column, "",
                           f"role '{role.name}': {len(gpus)} GPU(s) per node x {nnodes} node(s) = {len(gpus) * nnodes}, "
                           f"but its parallel settings need {need} (tensor x pipeline parallel size x "
                           "data-parallel replicas)")
            )
    elif role.no_gpus is not None and need > 1 and not unknown:
        # the scheduler gives the pod no GPU: the engine cannot start its tensor-parallel ranks anywhere
        where = role.no_gpus
        issues.append(
            InputIssue(where.file, where.line, where.column, "",
                       f"role '{role.name}': the container asks for no GPU (no nvidia.com/gpu or amd.com/gpu in "
                       f"resources.limits or requests), but its parallel settings need {need} (tensor x pipeline "
                       "parallel size x data-parallel replicas)"
                       + (f"; state resources.limits nvidia.com/gpu: {need // nnodes}" if need % nnodes == 0 else ""))
        )
    visible = role.env.get("CUDA_VISIBLE_DEVICES")
    per_node = len(gpus) if gpus else -(-need // nnodes)
    if visible is not None and not unknown and visible_devices(str(visible.value)) < per_node:
        # the engine sees only the devices listed: its ranks on this node outnumber them, it does not start
        where = visible.location or role.location
        issues.append(
            InputIssue(where.file, where.line, where.column, "",
                       f"role '{role.name}': CUDA_VISIBLE_DEVICES={str(visible.value)!r} shows the engine "
                       f"{visible_devices(str(visible.value))} GPU(s), but its parallel settings need {per_node} on "
                       "each node (tensor x pipeline parallel size x data-parallel replicas); list that many "
                       "devices, or drop the variable and let the GPU limit choose them")
        )
    gpu = item.role_gpus.get(role.name) or item.gpu
    if gpu is not None:
        _check_gpu_name(gpu, role, issues)
        findings.extend(_accelerator_findings(role, gpu, name))
    model_config = Path(str(item.model_config.value)).resolve() if item.model_config is not None else None
    model_path = item.model_path.value if item.model_path is not None else None
    return RoleTarget(
        name=name,
        context_length=window,
        min_headroom=(overrides.policy or PolicyConfig()).min_headroom,
        engine_version=str(role.version.value),
        args=args,
        argv_args=tuple(argv),
        gpus=gpus,
        gpu=str(gpu.value) if gpu is not None else None,
        model_path=model_path,
        model_config=model_config,
        engine=role.engine,
        nodes=int(role.nodes.value) if "nnodes" not in args and role.nodes is not None else 1,
        # the pod's own environment is part of its production arguments (SGLANG_* switches change sizing)
        env={name: str(value.value) for name, value in role.env.items()},
        location=role.location,
        arg_locations=locations,
        image=str(role.image.value) if role.image is not None else None,
        side=str(role.side.value) if role.side is not None else None,
    )
