"""`kvcheck cleanup`: delete the Kubernetes objects that killed `verify --launcher kubernetes` runs left."""

from __future__ import annotations

from dataclasses import dataclass

from kvcheck.model import ExitCode

# The launcher whose killed runs leave objects behind (the cluster's API objects, until their deadline);
# a local run's processes and a Slurm job's allocation end with kvcheck's watchdog and the job's limit.
CLEANUP_LAUNCHER = "kubernetes"


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
    """Ask the launcher to find kvcheck's objects by label, delete them, and wait for their pods."""
    from kvcheck.backends.measure.launchers import launcher_class

    report = launcher_class(CLEANUP_LAUNCHER).cleanup(
        run_id=options.run_id,
        grace_s=options.grace_s,
        where={"namespace": options.namespace, "context": options.context, "kubeconfig": options.kubeconfig},
    )
    lines = list(report.lines)
    if report.problem:
        lines.append(f"error: {report.problem}")
    return CleanupOutcome(
        text="\n".join(lines) + "\n", exit_code=int(ExitCode.ERROR if report.problem else ExitCode.PASS)
    )
