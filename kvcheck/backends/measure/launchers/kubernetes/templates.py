"""The deployment's own pod templates, for roles read from Kubernetes or operator files.

A role read from a deployment file (`kvcheck/inputs/deploy/`) points at the engine's container
(`RoleTarget.location`: file, line, column). When that container sits in a standard pod template
(`{metadata, spec: {containers: [...]}}`: Deployment, StatefulSet, Job, LeaderWorkerSet,
DisaggregatedSet, RoleBasedGroup), the template is taken from the file as written, so the measurement
pod gets the image, volumes, env, node selector, tolerations and resources production gets. A
LeaderWorkerSet's worker template is taken beside its leader template. Containers elsewhere (Dynamo's
`extraPodSpec.mainContainer`, OME runtimes) give no template: the launcher block builds the pod.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from kvcheck.backends.measure.launchers.kubernetes.settings import PodTemplates
from kvcheck.errors import InputError
from kvcheck.inputs.deploy.source import MAX_DEPLOY_BYTES
from kvcheck.io.textfile import read_text_file
from kvcheck.io.yamlpos import YamlDocument, load_yaml_documents
from kvcheck.model import RoleTarget

Key = str | int


def _get(data: Any, path: Sequence[Key]) -> Any:
    for key in path:
        data = data[key]
    return data


def _documents(file: str) -> list[YamlDocument] | None:
    """The file's documents under the same bounds as every other input (size, nesting, aliases);
    None where it cannot be read now (it was read once already, when the roles were loaded)."""
    try:
        text = read_text_file(Path(file), file, kind="deployment file", max_bytes=MAX_DEPLOY_BYTES)
        return load_yaml_documents(text, file)
    except InputError:
        return None


def template_at(file: str, line: int, column: int | None) -> PodTemplates | None:
    """The pod template(s) around the container declared at file:line:column (1-based), if standard."""
    documents = _documents(file)
    if documents is None:
        return None
    where = (line, column or 1)
    for document in documents:
        path = next(
            (p for p, at in document.positions.values.items()
             if at == where and isinstance(_get(document.data, p), dict)),
            None,
        )
        if path is None:
            continue
        if len(path) < 3 or path[-3:-1] != ("spec", "containers") or not isinstance(path[-1], int):
            return None
        return _templates(document.data, path, f"{file}:{line}")
    return None


def _templates(document: Any, path: tuple[Key, ...], source: str) -> PodTemplates | None:
    """The pod template holding the container at `path` (…, spec, containers, i), and for a
    LeaderWorkerSet leader the worker template beside it."""
    template_path = path[:-3]
    template = _get(document, template_path)
    container = _get(document, path)
    if not isinstance(template, dict) or not isinstance(container, dict):
        return None
    worker, worker_container = None, None
    index = path[-1]
    if template_path and template_path[-1] == "leaderTemplate" and isinstance(index, int):
        other = _get(document, template_path[:-1]).get("workerTemplate")
        containers = ((other or {}).get("spec") or {}).get("containers") if isinstance(other, dict) else None
        if isinstance(containers, list) and containers:
            worker = other
            # the engine's container sits where the leader's does (names often differ: -leader/-worker)
            same = containers[index] if index < len(containers) else None
            worker_container = same.get("name") if isinstance(same, dict) else None
    return PodTemplates(
        leader=template,
        worker=worker,
        container=container.get("name"),
        worker_container=worker_container,
        source=source,
    )


def pod_templates(targets: Sequence[RoleTarget]) -> dict[str, PodTemplates]:
    """Each role's pod template from its deployment file, for the roles that have one."""
    found: dict[str, PodTemplates] = {}
    for target in targets:
        where = target.location
        if where is None or where.line is None or not where.file.endswith((".yaml", ".yml", ".json")):
            continue
        templates = template_at(where.file, where.line, where.column)
        if templates is not None:
            found[target.name] = templates
    return found
