"""`kvcheck verify`: load the deployment, obtain every selected role's pool from a backend, judge it."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kvcheck.backends.base import Backend
from kvcheck.errors import InputError
from kvcheck.inputs.deploy.manifest import Overrides
from kvcheck.inputs.roles import select_roles
from kvcheck.model import Finding, PoolMeasurement, Report, RoleTarget
from kvcheck.policy.judge import judge
from kvcheck.policy.rules import left_out_partners
from kvcheck.policy.suppress import Gate, GateOptions

if TYPE_CHECKING:
    from kvcheck.backends.measure import MeasureBackend
    from kvcheck.inputs.load import LoadedManifest


@dataclass(frozen=True)
class VerifyOptions:
    """Everything `kvcheck verify` takes, as the CLI collected it."""

    manifest: Path
    # deployment files or a manifest (kvcheck/inputs/load.py), with what the files lack
    inputs: tuple[str, ...] = ()
    overrides: Overrides | None = None
    cmd: str | None = None  # --cmd: an engine command line, read as deployment input
    mode: str = "measure"
    roles: tuple[str, ...] = ()
    strict: bool = False
    timeout_s: float = 1800.0
    logs_dir: Path | None = None
    gpu_check: bool = True
    dummy_weights: bool = False
    progress: bool | None = None  # None: only when stderr is a terminal
    launcher: str | None = None  # --launcher; None: the manifest's launcher.kind, else local
    gate: GateOptions | None = None  # --ignore-file, --baseline, --write-baseline


def _build_measure(options: VerifyOptions, launcher_spec: Any = None) -> Backend:
    return measure_backend(options, launcher_spec)


def measure_backend(options: VerifyOptions, launcher_spec: Any = None) -> MeasureBackend:
    """The measure backend a run of these options uses (its launcher from --launcher or the manifest)."""
    from kvcheck.backends.estimate import EstimateBackend
    from kvcheck.backends.measure import MeasureBackend
    from kvcheck.backends.measure.launchers import build_launcher

    return MeasureBackend(
        launcher=build_launcher(options.launcher, launcher_spec, gpu_check=options.gpu_check),
        timeout_s=options.timeout_s,
        logs_dir=options.logs_dir,
        gpu_check=options.gpu_check,
        dummy_weights=options.dummy_weights,
        progress=options.progress,
        estimator=EstimateBackend(offline=True),
    )


def _build_estimate(options: VerifyOptions, launcher_spec: Any = None) -> Backend:
    from kvcheck.backends.estimate import EstimateBackend

    return EstimateBackend()


# Each builder gets the options and the manifest's `launcher:` block (None when absent).
BACKENDS: dict[str, Callable[[VerifyOptions, Any], Backend]] = {
    "measure": _build_measure,
    "estimate": _build_estimate,
}


def _with_fit_hints(
    target: RoleTarget, measurement: PoolMeasurement, *, offline: bool | None
) -> PoolMeasurement:
    """A short pool's measurement, with the planner's settings that would hold the window (KV101's hint)."""
    if measurement.pool_tokens is None or measurement.pool_tokens >= target.required_tokens:
        return measurement
    from kvcheck.plan import fit_hints

    hints = fit_hints(target, offline=offline)
    if not hints:
        return measurement
    return replace(measurement, fit_hints=tuple(hints))


def verify(options: VerifyOptions) -> Report:
    """The gate: load the manifest, obtain every selected role's pool, judge it."""
    from kvcheck.inputs.load import load_inputs

    if options.mode not in BACKENDS:
        raise InputError(f"unknown mode '{options.mode}' (choose from {', '.join(sorted(BACKENDS))})")
    if options.cmd is not None:
        loaded = load_inputs(options.inputs, options.overrides, cmd=options.cmd)
    else:
        loaded = load_inputs(options.inputs or (str(options.manifest),), options.overrides)
    targets = select_roles(loaded.targets, options.roles, loaded.display_path)
    gate = Gate.open(options.gate, targets)  # a malformed suppression is exit 2 before any engine boots
    backend = BACKENDS[options.mode](options, getattr(loaded.manifest, "launcher", None))
    backend.check_targets(targets, loaded.display_path)
    measurements = backend.measure(targets)
    return judge_measurements(options, loaded, targets, measurements, backend=backend, gate=gate)


def judge_measurements(
    options: VerifyOptions,
    loaded: LoadedManifest,
    targets: Sequence[RoleTarget],
    measurements: Sequence[PoolMeasurement],
    *,
    backend: Backend,
    gate: Gate,
) -> Report:
    """The report of these roles' measurements, as `verify` judges them (also `verify --dry-run`'s refusals)."""
    from kvcheck.plan import with_safe_fraction

    judged = [
        with_safe_fraction(t, _with_fit_hints(t, m, offline=backend.offline_hints), offline=backend.offline_hints)
        for t, m in zip(targets, measurements, strict=True)
    ]
    extra: list[Finding] = loaded.notes() + left_out_partners(loaded.targets, targets)
    return judge(
        command="verify",
        mode=backend.mode,
        source=loaded.display_path,
        targets=list(targets),
        measurements=judged,
        policy=loaded.policy,
        strict=options.strict,
        extra_findings=extra,
        context_length=loaded.manifest.context_length,
        gate=gate,
    )
