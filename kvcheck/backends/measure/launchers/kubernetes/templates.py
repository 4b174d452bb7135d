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

import yaml

from kvcheck.backends.measure.launchers.kubernetes.settings import PodTemplates
from kvcheck.model import RoleTarget

Key = str | int


def _find(node: yaml.Node, line: int, column: int, path: tuple[Key, ...]) -> tuple[Key, ...] | None:
    """The key path to the mapping that starts at (line, column), 0-based as PyYAML counts."""
    if isinstance(node, yaml.MappingNode):
        if (node.start_mark.line, node.start_mark.column) == (line, column):
            return path
        for key, value in node.value:
            found = _find(value, line, column, (*path, str(key.value)))
            if found is not None:
                return found
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            if (item.start_mark.line, item.start_mark.column) == (line, column) and isinstance(
                item, yaml.MappingNode
            ):
                return (*path, i)
            found = _find(item, line, column, (*path, i))
            if found is not None:
                return found
    return None


def _get(data: Any, path: Sequence[Key]) -> Any:
    for key in path:
        data = data[key]
    return data


def template_at(file: str, line: int, column: int | None) -> PodTemplates | None:
    """The pod template(s) around the container declared at file:line:column (1-based), if standard."""
    try:
        text = Path(file).read_text(encoding="utf-8")
        nodes = list(yaml.compose_all(text, Loader=yaml.SafeLoader))
        documents = list(yaml.safe_load_all(text))
    except (OSError, UnicodeDecodeError, yaml.YAMLError):
        return None
    for node, document in zip(nodes, documents, strict=False):
        if node is None:
            continue
        path = _find(node, line - 1, (column or 1) - 1, ())
        if path is None:
            continue
        if len(path) < 3 or path[-3:-1] != ("spec", "containers") or not isinstance(path[-1], int):
            return None
        template_path = path[:-3]
        template = _get(document, template_path)
        container = _get(document, path)
        if not isinstance(template, dict) or not isinstance(container, dict):
            return None
        worker, worker_container = None, None
        if template_path and template_path[-1] == "leaderTemplate":
            other = _get(document, template_path[:-1]).get("workerTemplate")
            containers = (
                ((other or {}).get("spec") or {}).get("containers") if isinstance(other, dict) else None
            )
            if isinstance(containers, list) and containers:
                worker = other
                # the engine's container sits where the leader's does (names often differ: -leader/-worker)
                same = containers[path[-1]] if path[-1] < len(containers) else None
                worker_container = same.get("name") if isinstance(same, dict) else None
        return PodTemplates(
            leader=template,
            worker=worker,
            container=container.get("name"),
            worker_container=worker_container,
            source=f"{file}:{line}",
        )
    return None


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
