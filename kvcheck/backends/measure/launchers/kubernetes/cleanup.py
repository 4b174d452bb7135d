"""Delete what kvcheck runs left in a namespace: every Job and LeaderWorkerSet with kvcheck's labels.

A run deletes its own objects on every way out it can see (`delete_role`, which its stop() calls
too); a kvcheck killed with SIGKILL (or a lost
connection to the API server) leaves them until their deadline and TTL remove them. `kvcheck cleanup`
removes them now, found by label (`app.kubernetes.io/managed-by=kvcheck` and `kvcheck.io/run-id`),
never by name, so it cannot touch objects kvcheck did not create.
"""

from __future__ import annotations

import re
import time
from collections.abc import Sequence
from dataclasses import dataclass

from kvcheck.backends.measure.launchers.base import CleanupReport
from kvcheck.backends.measure.launchers.kubernetes.api import KubeApi, KubeError, default_namespace
from kvcheck.backends.measure.launchers.kubernetes.render import RUN_LABEL, run_selector
from kvcheck.errors import InputError

KINDS = ("LeaderWorkerSet", "Job")  # the owner of a deadline Job's LeaderWorkerSet goes last
STOP_EXTRA_S = 30.0  # past the engine's grace, how long deleted pods may take to go
_LABEL_VALUE = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?")


@dataclass(frozen=True)
class LeftObject:
    kind: str
    name: str
    run_id: str
    created: str | None  # the API server's creationTimestamp

    def render(self, namespace: str) -> str:
        when = f", created {self.created}" if self.created else ""
        return f"{self.kind} {namespace}/{self.name} (run {self.run_id}{when})"


@dataclass(frozen=True)
class CleanupResult:
    namespace: str
    deleted: tuple[LeftObject, ...]
    problem: str | None  # what could not be deleted (None: nothing is left)
    notes: tuple[str, ...] = ()


def delete_role(
    api: KubeApi, namespace: str, created: Sequence[tuple[str, str]], selector: str, grace_s: float
) -> str | None:
    """Delete objects (newest first) and the pods they own; wait for the pods. None when all are gone."""
    failed: list[str] = []
    for kind, name in reversed(created):
        try:
            api.delete(kind, namespace, name)
        except KubeError as exc:
            failed.append(f"{kind}/{name} ({exc.message})")
    deadline = time.monotonic() + grace_s + STOP_EXTRA_S
    asked: set[str] = set()
    while True:
        try:
            pods = api.list_pods(namespace, selector)
        except KubeError as exc:
            failed.append(f"its pods could not be listed ({exc.message})")
            break
        if not pods:
            break
        for pod in pods:  # owners are deleted in the background; the pods get the engine's grace now
            name = pod["metadata"]["name"]
            if name not in asked:
                asked.add(name)
                try:
                    api.delete_pod(namespace, name, grace_s=int(grace_s))
                except KubeError:
                    pass  # still listed below if it stays
        if time.monotonic() >= deadline:
            failed.append(
                "pods " + ", ".join(sorted(p["metadata"]["name"] for p in pods)) + " are still terminating"
            )
            break
        time.sleep(0.2)
    if not failed:
        return None
    return "kvcheck could not remove everything it created in " + namespace + ": " + "; ".join(failed)


def find_left(api: KubeApi, namespace: str, run_id: str | None = None) -> tuple[list[LeftObject], list[str]]:
    """Every object kvcheck created in the namespace (one run's, with `run_id`), and notes.

    A Role without the LeaderWorkerSet rules (clusters where no role spans nodes) may not list them:
    that is a note, not a failure, because every LeaderWorkerSet is owned by a deadline Job, and
    deleting the Job deletes it.
    """
    found = []
    notes = []
    for kind in KINDS:
        try:
            items = api.list_objects(kind, namespace, run_selector(run_id))
        except KubeError as exc:
            if kind != "LeaderWorkerSet" or exc.status != 403:
                raise
            notes.append(
                "LeaderWorkerSets could not be listed (forbidden); deleting their deadline Jobs deletes them"
            )
            continue
        for obj in items:
            metadata = obj.get("metadata") or {}
            found.append(
                LeftObject(
                    kind=kind,
                    name=str(metadata.get("name")),
                    run_id=str((metadata.get("labels") or {}).get(RUN_LABEL, "")),
                    created=metadata.get("creationTimestamp"),
                )
            )
    return found, notes


def cleanup(
    api: KubeApi, namespace: str, *, run_id: str | None = None, grace_s: float = 15.0
) -> CleanupResult:
    """Delete them and wait (up to the grace and 30 s) for their pods to be gone."""
    left, notes = find_left(api, namespace, run_id)
    problem = None
    try:
        problem = delete_role(
            api, namespace, [(o.kind, o.name) for o in reversed(left)], run_selector(run_id), grace_s
        )
    except KubeError as exc:
        problem = exc.message
    return CleanupResult(namespace=namespace, deleted=tuple(left), problem=problem, notes=tuple(notes))


def clean_up(
    *,
    run_id: str | None,
    grace_s: float,
    namespace: str | None,
    context: str | None,
    kubeconfig: str | None,
) -> CleanupReport:
    """`kvcheck cleanup` for Kubernetes: connect, delete kvcheck's objects in one namespace, say what.

    None: the kubeconfig's choice (its context's namespace, its current context, $KUBECONFIG).
    """
    if run_id is not None and not _LABEL_VALUE.fullmatch(run_id):
        raise InputError(f"--run-id {run_id!r} is not a run id (a label value such as 0a1b2c3d)")
    namespace = namespace or default_namespace(kubeconfig=kubeconfig, context=context)
    api = KubeApi.connect(kubeconfig=kubeconfig, context=context)
    try:
        result = cleanup(api, namespace, run_id=run_id, grace_s=grace_s)
    finally:
        api.close()
    scope = f"run {run_id}" if run_id else "kvcheck runs"
    if result.deleted:
        lines = [f"deleted {obj.render(namespace)}" for obj in result.deleted]
    else:
        lines = [f"nothing left by {scope} in namespace {namespace}"]
    lines += [f"note: {note}" for note in result.notes]
    return CleanupReport(lines=tuple(lines), problem=result.problem)
