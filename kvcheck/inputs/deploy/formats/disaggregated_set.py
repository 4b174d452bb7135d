"""DisaggregatedSet: one role per `roles[]` entry, each an LWS-like leader-worker template or a pod template."""

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
from kvcheck.inputs.deploy.formats.lws import leader_worker
from kvcheck.inputs.deploy.formats.pods import pod_role, pod_server
from kvcheck.inputs.deploy.server import Sourced
from kvcheck.inputs.deploy.source import Doc
from kvcheck.io.yamlpos import Path_

KINDS = {"DisaggregatedSet": ("disaggregatedset.x-k8s.io/", "leaderworkerset.x-k8s.io/")}


def read_disaggregated_set(doc: Doc, inputs: Inputs) -> list[RoleSource]:
    """DisaggregatedSet: one role per `roles[]` entry (an LWS-like template each)."""
    group = object_name(doc)
    out = []
    for i, role in enumerate(get(doc.data, "spec", "roles") or []):
        if not isinstance(role, Mapping):
            continue
        path: Path_ = ("spec", "roles", i)
        name = str(role.get("name") or f"role{i}")
        lwt = role.get("leaderWorkerTemplate")
        if isinstance(lwt, Mapping):
            pod, workers, size = leader_worker(
                doc, lwt, (*path, "leaderWorkerTemplate"), inputs, name=f"{group}-{name}",
                leader_key="leaderTemplate", worker_key="workerTemplate", extra_env={},
            )
        else:
            pod = pod_server(doc, role.get("template"), (*path, "template"), inputs, injected={})
            workers, size = [], None
        if pod is None:
            continue
        replicas = int_at(doc, role, "replicas", path, "role replicas") or Sourced(1, doc.at(path), "replicas unset: 1")
        out.append(pod_role(name, "DisaggregatedSet", group, doc, pod, nodes=size, replicas=replicas, workers=workers,
                         standalone=True))
    return out


FORMAT = Format(
    name="DisaggregatedSet",
    reads="DisaggregatedSet",
    detect=lambda doc: kubernetes_kind(doc, KINDS),
    read=read_disaggregated_set,
    marks=marks_kubernetes,
    marks_text=marks_kubernetes_text,
)
