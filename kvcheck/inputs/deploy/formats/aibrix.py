"""AIBrix's `StormService` (orchestration.aibrix.ai/v1alpha1): one role per `spec.template.spec.roles[]` entry.

Each role carries a pod template (`roles[].template`) whose container starts the engine (`vllm serve ...`
in AIBrix's samples, SGLang in others: each role is read with its own engine); `podGroupSize` pods form
one instance when it is set. The roles of one StormService (prefill and decode, or one role) are one
deployment. AIBrix's RayClusterFleet runs vLLM on a KubeRay cluster, which kvcheck does not read.
"""

from __future__ import annotations

from collections.abc import Mapping

from kvcheck.inputs.deploy.formats.base import (
    Format,
    Inputs,
    RoleSource,
    get,
    int_at,
    kubernetes_kind,
    marks_kubernetes,
    marks_kubernetes_text,
    object_name,
)
from kvcheck.inputs.deploy.formats.pods import pod_role, pod_server
from kvcheck.inputs.deploy.source import Doc
from kvcheck.io.yamlpos import Path_

KINDS = {"StormService": ("orchestration.aibrix.ai/",)}


def read_storm_service(doc: Doc, inputs: Inputs) -> list[RoleSource]:
    name = object_name(doc)
    out = []
    for i, role in enumerate(get(doc.data, "spec", "template", "spec", "roles") or []):
        if not isinstance(role, Mapping) or not isinstance(role.get("template"), Mapping):
            continue
        path: Path_ = ("spec", "template", "spec", "roles", i)
        pod = pod_server(doc, role["template"], (*path, "template"), inputs, injected={})
        if pod is None:  # a router or gateway role starts no engine
            continue
        role_name = str(role.get("name") or f"role{i}")
        out.append(pod_role(role_name, "StormService", name, doc, pod, standalone=True,
                            nodes=int_at(doc, role, "podGroupSize", path, "StormService podGroupSize"),
                            replicas=int_at(doc, role, "replicas", path, "StormService role replicas")))
    return out


FORMAT = Format(
    name="StormService",
    reads="AIBrix StormService",
    detect=lambda doc: kubernetes_kind(doc, KINDS),
    read=read_storm_service,
    marks=marks_kubernetes,
    marks_text=marks_kubernetes_text,
)
