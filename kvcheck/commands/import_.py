"""`kvcheck import`: the kvcheck manifest that deployment files (or an SGLang or vLLM command line) describe."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from kvcheck.inputs.deploy.manifest import Overrides, config_absolute, config_relative_to, import_deployments
from kvcheck.inputs.deploy.render import render_json, render_yaml
from kvcheck.inputs.deploy.server import Sourced
from kvcheck.model import Finding

FORMATS = ("yaml", "json")


@dataclass(frozen=True)
class ImportOptions:
    """Everything `kvcheck import` takes."""

    files: tuple[str, ...] = ()
    cmd: str | None = None
    fmt: str = "yaml"
    gpu: str | None = None
    context_length: int | None = None
    model_config: Path | None = None
    sglang_version: str | None = None
    output: Path | None = None  # the file the manifest is written to: model.config relative to it
    # the regular file stdout was redirected to (`> gate/m.yaml`), where the system says: the same; on a pipe or a
    # terminal, where the manifest will be saved is unknown and model.config is absolute
    stdout_file: Path | None = None


@dataclass(frozen=True)
class Imported:
    """The manifest text for stdout and the findings reading the files produced (for stderr)."""

    text: str
    findings: tuple[Finding, ...]


def overrides_from_options(
    *, gpu: str | None, context_length: int | None, model_config: Path | None, sglang_version: str | None
) -> Overrides:
    """Command-line values for what deployment files lack, each named after its option."""
    return Overrides(
        gpu=Sourced(gpu, None, "--gpu") if gpu else None,
        context_length=Sourced(context_length, None, "--context-length") if context_length else None,
        model_config=Sourced(model_config, None, "--model-config") if model_config else None,
        sglang_version=Sourced(sglang_version, None, "--engine-version") if sglang_version else None,
    )


def run_import(options: ImportOptions) -> Imported:
    """Read the files, apply the command-line values, render the manifest(s)."""
    overrides = overrides_from_options(
        gpu=options.gpu,
        context_length=options.context_length,
        model_config=options.model_config,
        sglang_version=options.sglang_version,
    )
    resolved, findings = import_deployments(options.files, overrides, cmd=options.cmd)
    target = options.output or options.stdout_file
    if target is not None:
        resolved = [config_relative_to(item, target.absolute().parent) for item in resolved]
    else:  # saved who knows where: only an absolute path is read right from the manifest's folder
        resolved = [config_absolute(item) for item in resolved]
    text = render_json(resolved) if options.fmt == "json" else render_yaml(resolved, findings)
    return Imported(text, tuple(findings))
