"""Deployment, StatefulSet (apps/v1) and a bare Pod (v1): one role per object, from its pod template."""

from __future__ import annotations

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
from kvcheck.inputs.deploy.server import Sourced
from kvcheck.inputs.deploy.source import Doc
from kvcheck.io.yamlpos import Path_

KINDS = {"Deployment": ("apps/v1",), "StatefulSet": ("apps/v1",), "Pod": ("v1",)}


def read_workload(doc: Doc, inputs: Inputs) -> list[RoleSource]:
    """Deployment, StatefulSet (apps/v1) and a bare Pod: one role per object."""
    data = doc.data
    kind = data["kind"]
    name = object_name(doc)
    tpath: Path_
    if kind == "Pod":
        template, tpath = data, ()
    else:
        template, tpath = get(data, "spec", "template"), ("spec", "template")
    pod = pod_server(doc, template, tpath, inputs, injected={})
    if pod is None:
        return []
    replicas = int_at(doc, data.get("spec") or {}, "replicas", ("spec",), f"{kind} replicas")
    mode = None
    for where in (("metadata", "labels"), (*tpath, "metadata", "labels")):
        label = get(data, *where, "llm-d.ai/role")
        if label in ("prefill", "decode"):  # llm-d marks its prefill and decode Deployments so
            mode = Sourced(label, doc.at((*where, "llm-d.ai/role")), "label llm-d.ai/role")
    return [pod_role(name, kind, name, doc, pod, replicas=replicas, mode=mode)]


FORMAT = Format(
    name="workload",
    reads="Deployment, StatefulSet, Pod (apps/v1, v1)",
    detect=lambda doc: kubernetes_kind(doc, KINDS),
    read=read_workload,
    marks=marks_kubernetes,
    marks_text=marks_kubernetes_text,
)
