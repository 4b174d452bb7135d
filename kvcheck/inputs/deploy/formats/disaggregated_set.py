"""DisaggregatedSet: one role per `roles[]` entry, each an LWS-like leader-worker template or a pod template.

Two shapes of `spec.roles[]` are read. The current API (`disaggregatedset.x-k8s.io/v1` of kubernetes-sigs/lws,
`DisaggregatedRoleSpec`) inlines LWS's `LeaderWorkerSetTemplateSpec`: the role's `spec` holds `replicas` and
`leaderWorkerTemplate`, and `spec.slices` copies every role once per slice. The first API (v1alpha1, and the
early v1 drafts) put `replicas` and `leaderWorkerTemplate` (or a pod `template`) on the role itself.
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
from kvcheck.inputs.deploy.formats.lws import leader_worker
from kvcheck.inputs.deploy.formats.pods import pod_role, pod_server
from kvcheck.inputs.deploy.server import Sourced
from kvcheck.inputs.deploy.source import Doc
from kvcheck.io.yamlpos import Path_

KINDS = {"DisaggregatedSet": ("disaggregatedset.x-k8s.io/", "leaderworkerset.x-k8s.io/")}


def read_disaggregated_set(doc: Doc, inputs: Inputs) -> list[RoleSource]:
    """DisaggregatedSet: one role per `roles[]` entry (an LWS-like template each)."""
    group = object_name(doc)
    slices = int_at(doc, doc.data.get("spec") or {}, "slices", ("spec",), "slices")
    out = []
    for i, entry in enumerate(get(doc.data, "spec", "roles") or []):
        if not isinstance(entry, Mapping):
            continue
        name = str(entry.get("name") or f"role{i}")
        path: Path_ = ("spec", "roles", i)
        role = entry
        if isinstance(entry.get("spec"), Mapping):  # the current API: the LWS template spec under `spec`
            role, path = entry["spec"], (*path, "spec")
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
        if slices is not None and slices.value != 1:
            replicas = Sourced(replicas.value * slices.value, replicas.location,
                               f"{replicas.origin} x {slices.value} slices")
        out.append(pod_role(name, "DisaggregatedSet", group, doc, pod, nodes=size, replicas=replicas, workers=workers,
                         standalone=True))
    return out


FORMAT = Format(
    name="DisaggregatedSet",
    reads="DisaggregatedSet (v1, v1alpha1)",
    detect=lambda doc: kubernetes_kind(doc, KINDS),
    read=read_disaggregated_set,
    marks=marks_kubernetes,
    marks_text=marks_kubernetes_text,
)
