"""Delete what kvcheck runs left in a namespace: every Job and LeaderWorkerSet with kvcheck's labels.

A run deletes its own objects on every way out it can see; a kvcheck killed with SIGKILL (or a lost
connection to the API server) leaves them until their deadline and TTL remove them. `kvcheck cleanup`
removes them now, found by label (`app.kubernetes.io/managed-by=kvcheck` and `kvcheck.io/run-id`),
never by name, so it cannot touch objects kvcheck did not create.
"""

from __future__ import annotations

from dataclasses import dataclass

from kvcheck.backends.measure.launchers.kubernetes.api import KubeApi, KubeError
from kvcheck.backends.measure.launchers.kubernetes.launcher import delete_role
from kvcheck.backends.measure.launchers.kubernetes.render import RUN_LABEL, run_selector

KINDS = ("LeaderWorkerSet", "Job")  # the owner of a deadline Job's LeaderWorkerSet goes last


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
