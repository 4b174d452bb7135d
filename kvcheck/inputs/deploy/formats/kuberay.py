"""KubeRay (ray.io/v1) RayCluster and RayService running vLLM: the head pod's container starts the server
(`ray start --head ...; vllm serve ... --distributed-executor-backend ray`, or an api_server module), and the
instance spans the Ray cluster its pods form: the head (when it holds GPUs) and every worker group's replicas.

A RayService's cluster is `spec.rayClusterConfig`. A RayService whose head starts no engine server runs its
model through Ray Serve applications (`serveConfigV2`, Ray Serve LLM's `engine_kwargs`): kvcheck does not
read those, and says so (exit 2) rather than pass a deployment it did not check.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from kvcheck.errors import InputIssue
from kvcheck.inputs.deploy.formats.base import (
    Format,
    Inputs,
    RoleSource,
    get,
    kubernetes_kind,
    marks_kubernetes,
    marks_kubernetes_text,
    object_name,
)
from kvcheck.inputs.deploy.formats.pods import gpu_limit, pod_role, pod_server
from kvcheck.inputs.deploy.server import ScriptError, Sourced
from kvcheck.inputs.deploy.source import Doc
from kvcheck.io.yamlpos import Path_

KINDS = {"RayCluster": ("ray.io/",), "RayService": ("ray.io/",)}


def _fail(doc: Doc, path: Path_, message: str) -> ScriptError:
    where = doc.at(path)
    return ScriptError(InputIssue(where.file, where.line, where.column, "", message))


def read_ray(doc: Doc, inputs: Inputs) -> list[RoleSource]:
    kind = str(doc.data.get("kind"))
    name = object_name(doc)
    cpath: Path_ = ("spec", "rayClusterConfig") if kind == "RayService" else ("spec",)
    cluster = get(doc.data, *cpath)
    if not isinstance(cluster, Mapping):
        raise _fail(doc, ("spec",), f"{kind} '{name}' states no Ray cluster ({'.'.join(map(str, cpath))})")
    hpath: Path_ = (*cpath, "headGroupSpec", "template")
    pod = pod_server(doc, get(doc.data, *hpath), hpath, inputs, injected={})
    if pod is None:
        if kind == "RayService" and get(doc.data, "spec", "serveConfigV2") is not None:
            raise _fail(doc, ("spec", "serveConfigV2"), f"RayService '{name}' serves through Ray Serve applications "
                        "(serveConfigV2), whose engine arguments kvcheck does not read; state the equivalent "
                        "`vllm serve` line with --cmd, or a manifest")
        return []
    gpus, nodes = _placement(doc, cpath, pod.gpus_per_node, kind, name)
    replicas = None if kind == "RayService" else Sourced(1, doc.at(cpath), "one Ray cluster")
    role = pod_role(name, kind, name, doc, pod, nodes=nodes, replicas=replicas, standalone=True)
    # the GPUs per node of the cluster: the head's, or the workers' when the head holds none
    return [replace(role, gpus_per_node=gpus)]


def _placement(doc: Doc, cpath: Path_, head: Sourced | None, kind: str,
               name: str) -> tuple[Sourced | None, Sourced]:
    """(GPUs per node, the nodes of the instance): the head counts when it holds GPUs; every worker replica
    must hold as many as the others (kvcheck counts one GPU count per node)."""
    groups = get(doc.data, *cpath, "workerGroupSpecs")
    counts: list[tuple[Sourced | None, int, Path_]] = []
    for i, group in enumerate(groups if isinstance(groups, list) else []):
        if not isinstance(group, Mapping):
            continue
        gpath: Path_ = (*cpath, "workerGroupSpecs", i)
        replicas = _replicas(group)
        counts.append((_group_gpus(doc, group, gpath), replicas, gpath))
    holders = [(g, n, p) for g, n, p in counts if g is not None and g.value and n]
    head_holds = head is not None and bool(head.value)
    per_node = head if head_holds else (holders[0][0] if holders else None)
    for gpus, _, gpath in holders:
        if per_node is not None and gpus is not None and gpus.value != per_node.value:
            where = gpus.location or doc.at(gpath)
            raise ScriptError(InputIssue(
                where.file, where.line, where.column, "",
                f"{kind} '{name}': a worker group asks for {gpus.value} GPU(s) per pod and "
                f"{'the head' if head_holds else 'another group'} for {per_node.value}: kvcheck counts one GPU count "
                "per node of the instance"))
    nodes = (1 if head_holds else 0) + sum(n for _, n, _ in holders)
    where = doc.at((*cpath, "workerGroupSpecs")) if groups is not None else doc.at(cpath)
    return per_node, Sourced(max(nodes, 1), where, "Ray cluster: the worker replicas, and the head when it holds GPUs")


def _replicas(group: Mapping[str, Any]) -> int:
    for key in ("replicas", "minReplicas"):
        value = group.get(key)
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    return 1  # KubeRay's default


def _group_gpus(doc: Doc, group: Mapping[str, Any], gpath: Path_) -> Sourced | None:
    containers = get(group, "template", "spec", "containers")
    for j, container in enumerate(containers if isinstance(containers, list) else []):
        if isinstance(container, Mapping):
            found = gpu_limit(doc, container.get("resources"), (*gpath, "template", "spec", "containers", j,
                                                                "resources"))
            if found is not None:
                return found
    return None


FORMAT = Format(
    name="KubeRay",
    reads="KubeRay RayCluster, RayService (ray.io/v1; the head's engine command)",
    detect=lambda doc: kubernetes_kind(doc, KINDS),
    read=read_ray,
    marks=marks_kubernetes,
    marks_text=marks_kubernetes_text,
)
