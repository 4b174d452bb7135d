"""`kvcheck cleanup`: delete the Kubernetes objects that killed `verify --launcher kubernetes` runs left."""

from __future__ import annotations

import re
from dataclasses import dataclass

from kvcheck.errors import InputError
from kvcheck.model import ExitCode

_LABEL_VALUE = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?")


@dataclass(frozen=True)
class CleanupOptions:
    """Everything `kvcheck cleanup` takes; None: the kubeconfig's choice."""

    namespace: str | None = None
    context: str | None = None
    kubeconfig: str | None = None
    run_id: str | None = None
    grace_s: float = 15.0


@dataclass(frozen=True)
class CleanupOutcome:
    text: str  # what was deleted, for stdout
    exit_code: int  # 0: nothing of kvcheck's is left; 3: something could not be deleted


def run_cleanup(options: CleanupOptions) -> CleanupOutcome:
    """Find kvcheck's objects by label in one namespace, delete them, wait for their pods."""
    from kvcheck.backends.measure.launchers.kubernetes.api import KubeApi, default_namespace
    from kvcheck.backends.measure.launchers.kubernetes.cleanup import cleanup

    if options.run_id is not None and not _LABEL_VALUE.fullmatch(options.run_id):
        raise InputError(f"--run-id {options.run_id!r} is not a run id (a label value such as 0a1b2c3d)")
    namespace = options.namespace or default_namespace(kubeconfig=options.kubeconfig, context=options.context)
    api = KubeApi.connect(kubeconfig=options.kubeconfig, context=options.context)
    try:
        result = cleanup(api, namespace, run_id=options.run_id, grace_s=options.grace_s)
    finally:
        api.close()
    scope = f"run {options.run_id}" if options.run_id else "kvcheck runs"
    if result.deleted:
        lines = [f"deleted {obj.render(namespace)}" for obj in result.deleted]
    else:
        lines = [f"nothing left by {scope} in namespace {namespace}"]
    lines += [f"note: {note}" for note in result.notes]
    if result.problem:
        lines.append(f"error: {result.problem}")
    return CleanupOutcome(
        text="\n".join(lines) + "\n", exit_code=int(ExitCode.ERROR if result.problem else ExitCode.PASS)
    )
