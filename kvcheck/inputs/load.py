"""The one input step of verify and plan: a kvcheck manifest, deployment files, or an overlay manifest
whose `deployment:` key names deployment files and adds only what they lack.

Detected by content, by the deployment formats' registry (`FORMATS.is_manifest`): a file no format
claims (no Kubernetes `kind`/`apiVersion`, compose `services`, recipe `backend`, batch script) is a
kvcheck manifest; anything else is read as deployment files. A single file is read once and its text
handed on. Every path returns the value `load_manifest` returns (`LoadedManifest`), so the commands do
not care which it was.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from kvcheck.errors import InputError, InputIssue, ManifestError
from kvcheck.inputs.deploy.formats import FORMATS
from kvcheck.inputs.deploy.manifest import LoadedDeployment, Overrides, load_deployment
from kvcheck.inputs.deploy.server import Sourced
from kvcheck.inputs.deploy.source import MAX_DEPLOY_BYTES, STDIN
from kvcheck.inputs.manifest.load import (
    MAX_MANIFEST_BYTES,
    LoadedManifest,
    _check_rule_codes,
    _pydantic_issues,
    load_manifest,
)
from kvcheck.inputs.manifest.model import Overlay, OverlayModel
from kvcheck.io.textfile import read_text_file
from kvcheck.io.yamlpos import load_yaml_with_positions, safe_load_all
from kvcheck.model import Location
from kvcheck.policy.config import PolicyConfig

MAX_OVERLAY_BYTES = 4 * 1024 * 1024


@dataclass(frozen=True)
class _OneFile:
    """A single input file, read once: its text (None when it cannot be read), and what it is."""

    text: str | None
    error: InputError | None  # why it cannot be read, worded as the manifest loader words it
    manifest: bool
    overlay: bool  # a manifest whose first document has a `deployment:` key


def _one_file(name: str) -> _OneFile:
    """Read one input and tell a kvcheck manifest (or an overlay) from deployment files.

    A file that cannot be read (missing, binary) goes to the manifest loader, whose message names the
    problem, as it always has. What it is does not depend on its size: the file is read up to the
    larger cap (deployment files'), told apart by content, and only then held to its kind's cap; a
    5 MiB `helm template` stream given as a file was taken for a manifest (and refused as one), while
    the same bytes on stdin were read as deployment files.
    """
    display = str(Path(name))
    try:
        text = read_text_file(Path(name), display, kind="manifest file", max_bytes=max(MAX_DEPLOY_BYTES,
                                                                                          MAX_MANIFEST_BYTES))
    except InputError as exc:
        return _OneFile(None, exc, manifest=True, overlay=False)
    if not FORMATS.is_manifest(text, name):
        return _OneFile(text, None, manifest=False, overlay=False)
    size = len(text.encode("utf-8"))
    if size > MAX_MANIFEST_BYTES:  # a manifest, but larger than a manifest may be: refused as the loader words it
        error = InputError(f"{display}: {size:,} bytes is too large for a manifest file")
        return _OneFile(None, error, manifest=True, overlay=False)
    try:
        first = next(iter(safe_load_all(text, name)), None)
    except (InputError, yaml.YAMLError):
        first = None
    return _OneFile(text, None, manifest=True, overlay=isinstance(first, Mapping) and "deployment" in first)


def is_kvcheck_manifest(path: str) -> bool:
    """Whether one file is read as a kvcheck manifest: anything that is not positively deployment files."""
    return path != STDIN and _one_file(path).manifest


def load_inputs(
    paths: Sequence[str | Path], overrides: Overrides | None = None, *, cmd: str | None = None
) -> LoadedManifest:
    """A manifest, an overlay manifest with `deployment:`, or deployment files (and `--cmd`, an engine
    command line), as one LoadedManifest."""
    names = [str(p) for p in paths]
    given = overrides or Overrides()
    if cmd is not None:  # the command line is deployment input: with it, every file is a deployment file
        return load_deployment(names, given, cmd=cmd)
    if not names:
        raise InputError("no manifest or deployment file given")
    texts: dict[str, str] = {}
    if len(names) == 1 and names[0] != STDIN:
        one = _one_file(names[0])
        if one.overlay and one.text is not None:
            return load_overlay(names[0], given, text=one.text)
        if one.manifest:
            if any((given.gpu, given.context_length, given.model_config, given.sglang_version)):
                raise InputError(
                    f"{names[0]} is a kvcheck manifest: --gpu, --context-length, --model-config and --engine-version "
                    "apply to deployment files (the manifest states these itself)"
                )
            if one.error is not None:
                raise one.error
            return load_manifest(Path(names[0]), text=one.text)
        if one.text is not None:
            texts[names[0]] = one.text
    return load_deployment(names, given, texts=texts)


def _read_overlay(path: str) -> str:
    return read_text_file(Path(path), path, kind="manifest file", max_bytes=MAX_OVERLAY_BYTES)


def load_overlay(path: str, given: Overrides, *, text: str | None = None) -> LoadedDeployment:
    """An overlay manifest: its deployment files, with the overlay's values where the files say nothing.

    `text`: the overlay's text when it was already read (it is not read again).
    """
    data, positions, issues = load_yaml_with_positions(text if text is not None else _read_overlay(path), path)
    if not isinstance(data, dict):
        raise InputError(f"{path}:1:1: the manifest must be a YAML mapping")
    overlay: Overlay | None = None
    try:
        overlay = Overlay.model_validate(data)
    except ValidationError as exc:
        issues.extend(_pydantic_issues(exc, path, positions, root=Overlay))
    issues.extend(_check_rule_codes(data.get("policy"), path, positions))
    if issues or overlay is None:
        raise ManifestError(issues, hint="an overlay manifest takes: deployment, name, context_length, model, "
                                         "engine.version, gpu, policy, launcher")
    folder = Path(path).parent

    def at(*keys: Any) -> Location:
        where = positions.of_value(tuple(keys))
        return Location(path, *(where or (None, None)))

    files = [overlay.deployment] if isinstance(overlay.deployment, str) else list(overlay.deployment)
    if not files:
        raise InputError(f"{at('deployment').render()}: deployment: name at least one file")
    resolved_files = [str(folder / f) if not Path(f).is_absolute() else f for f in files]
    for i, (written, full) in enumerate(zip(files, resolved_files, strict=True)):
        if not Path(full).is_file():
            where = at("deployment", i) if isinstance(overlay.deployment, list) else at("deployment")
            raise InputError(f"{where.render()}: deployment: no such file {written} (relative to the manifest)")

    def merged(option: Sourced | None, value: Any, *keys: Any) -> Sourced | None:
        where = at(*keys)
        stated = Sourced(value, where, "overlay") if value is not None else None
        if option is not None and stated is not None and str(option.value) != str(stated.value):
            raise InputError(
                f"{where.render()}: {'.'.join(map(str, keys))} is {stated.value!r} but {option.origin} "
                f"gives {option.value!r}; they must agree"
            )
        return stated or option

    model = overlay.model or OverlayModel()
    config = None
    if model.config is not None:
        config_path = (folder / model.config).resolve()
        if not config_path.is_file():
            raise InputError(f"{at('model', 'config').render()}: model.config: no such file {config_path}")
        config = Sourced(config_path, at("model", "config"), "overlay")
    overrides = Overrides(
        gpu=merged(given.gpu, overlay.gpu, "gpu"),
        context_length=merged(given.context_length, overlay.context_length, "context_length"),
        model_config=config or given.model_config,
        sglang_version=merged(given.sglang_version, overlay.engine.version if overlay.engine else None,
                              "engine", "version"),
        model_path=Sourced(model.path, at("model", "path"), "overlay") if model.path else None,
        policy=PolicyConfig(
            min_headroom=overlay.policy.min_headroom,
            min_concurrency=overlay.policy.min_concurrency,
            ignore=frozenset(overlay.policy.ignore),
            severity=dict(overlay.policy.severity),
        ),
        name=overlay.name,
        launcher=overlay.launcher,
    )
    return load_deployment(resolved_files, overrides, display=path)


__all__ = ["InputIssue", "load_inputs", "load_overlay", "is_kvcheck_manifest"]
