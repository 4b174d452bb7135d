"""LeaderWorkerSet (leaderworkerset.x-k8s.io): the leader template is the role, `size` the nodes per instance.

The leader-worker reading (`leader_worker`, `lws_vars`) is shared with the formats that run a
LeaderWorkerSet underneath (DisaggregatedSet, RBG).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

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
from kvcheck.inputs.deploy.formats.pods import PodServer, pod_role, pod_server
from kvcheck.inputs.deploy.server import ServerCommand, Sourced
from kvcheck.inputs.deploy.source import Doc
from kvcheck.io.yamlpos import Path_

KINDS = {"LeaderWorkerSet": ("leaderworkerset.x-k8s.io/",)}


def lws_vars(doc: Doc, size: Sourced, name: str, *, worker: bool) -> dict[str, Sourced]:
    """What the LeaderWorkerSet controller puts in every pod's environment (leader: worker index 0)."""
    return {
        "LWS_GROUP_SIZE": Sourced(size.value, size.location, size.origin or "LeaderWorkerSet size"),
        "LWS_LEADER_ADDRESS": Sourced(f"{name}-0.{name}", size.location, "LeaderWorkerSet leader address"),
        "LWS_WORKER_INDEX": Sourced(1 if worker else 0, size.location, "LeaderWorkerSet worker index"),
        "LWS_NAME": Sourced(name, size.location, "LeaderWorkerSet name"),
    }


def leader_worker(
    doc: Doc,
    lwt: Any,
    path: Path_,
    inputs: Inputs,
    *,
    name: str,
    leader_key: str,
    worker_key: str,
    extra_env: Mapping[str, Sourced],
    patch: Callable[[Any, str], Any] | None = None,
) -> tuple[PodServer | None, list[tuple[str, ServerCommand]], Sourced]:
    """A leader-worker template's role: the leader's server (else the worker's), the workers' commands to
    compare with it, and the pods per instance (`size`, default 1)."""
    size = int_at(doc, lwt, "size", path, "LeaderWorkerSet size") if isinstance(lwt, Mapping) else None
    size = size or Sourced(1, doc.at(path), "LeaderWorkerSet size (default 1)")
    leader_t = get(lwt, leader_key)
    worker_t = get(lwt, worker_key)
    if patch is not None:
        leader_t, worker_t = patch(leader_t, "leader"), patch(worker_t, "worker")
    leader = None
    if isinstance(leader_t, Mapping):
        leader = pod_server(doc, leader_t, (*path, leader_key), inputs, injected={**extra_env, **lws_vars(doc, size, name, worker=False)})
    worker = None
    if isinstance(worker_t, Mapping):
        worker = pod_server(doc, worker_t, (*path, worker_key), inputs, injected={**extra_env, **lws_vars(doc, size, name, worker=True)})
    workers = [("worker", worker.server)] if worker is not None and leader is not None else []
    return leader or worker, workers, size


def read_lws(doc: Doc, inputs: Inputs) -> list[RoleSource]:
    """LeaderWorkerSet: the leader template (else the worker template) is the role; size = nodes per instance."""
    name = object_name(doc)
    lwt = get(doc.data, "spec", "leaderWorkerTemplate")
    path: Path_ = ("spec", "leaderWorkerTemplate")
    pod, workers, size = leader_worker(
        doc, lwt, path, inputs, name=name, leader_key="leaderTemplate", worker_key="workerTemplate", extra_env={}
    )
    if pod is None:
        return []
    replicas = int_at(doc, doc.data.get("spec") or {}, "replicas", ("spec",), "LeaderWorkerSet replicas")
    return [pod_role(name, "LeaderWorkerSet", name, doc, pod, nodes=size, replicas=replicas, workers=workers)]


FORMAT = Format(
    name="LeaderWorkerSet",
    reads="LeaderWorkerSet",
    detect=lambda doc: kubernetes_kind(doc, KINDS),
    read=read_lws,
    marks=marks_kubernetes,
    marks_text=marks_kubernetes_text,
)
