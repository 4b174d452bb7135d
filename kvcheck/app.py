"""Orchestration: targets + a backend + the policy -> a Report. The CLI only translates to this."""

from __future__ import annotations

import difflib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from kvcheck.backends.base import Backend
from kvcheck.errors import InputError, InputIssue, ManifestError
from kvcheck.model import Finding, PoolMeasurement, Report, RoleResult, RoleTarget, role_status
from kvcheck.policy.registry import finding
from kvcheck.policy.rules import PolicyConfig, evaluate_deployment, evaluate_role


def judge(
    *,
    command: str,
    mode: str,
    source: str | None,
    targets: Sequence[RoleTarget],
    measurements: Sequence[PoolMeasurement],
    policy: PolicyConfig,
    strict: bool = False,
    extra_findings: Sequence[Finding] = (),
    context_length: int | None = None,
) -> Report:
    """Apply the policy to every role's measurement and assemble the report."""
    if len(targets) != len(measurements):
        raise ValueError("judge() needs exactly one measurement per target")
    roles: list[RoleResult] = []
    findings: list[Finding] = list(policy.apply(extra_findings))
    for target, measurement in zip(targets, measurements, strict=True):
        role_findings = policy.apply([*measurement.findings, *evaluate_role(target, measurement)])
        unjudgeable = measurement.pool_tokens is None or target.context_length <= 0
        if unjudgeable and not any(f.is_measurement_failure for f in role_findings):
            # Fail closed: a role without a pool figure (or a window) is never a pass, whatever
            # the backend or the policy left in its findings.
            role_findings.append(
                finding(
                    "KV301",
                    target.name,
                    "no pool figure was obtained for this role" if measurement.pool_tokens is None
                    else "no context window is known to check this role against",
                    location=target.location,
                )
            )
        findings.extend(role_findings)
        details = dict(measurement.details)
        if measurement.pool_range is not None:
            details.setdefault("pool_range", list(measurement.pool_range))
        if measurement.context_len is not None:
            details.setdefault("engine_context_len", measurement.context_len)
        if measurement.engine_version is not None:
            details.setdefault("engine_version", measurement.engine_version)
        roles.append(
            RoleResult(
                name=target.name,
                status=role_status(role_findings, strict=strict),
                pool_tokens=measurement.pool_tokens,
                required_tokens=target.required_tokens if target.context_length > 0 else None,
                max_input_tokens=measurement.max_input_tokens,
                source=measurement.source,
                gpus=measurement.gpus if measurement.gpus is not None else (target.gpus or None),
                argv=measurement.argv,
                details=details,
            )
        )
    findings.extend(policy.apply(evaluate_deployment(targets, measurements)))
    windows = {t.context_length for t in targets if t.context_length > 0}
    if context_length is None and len(windows) == 1:
        context_length = windows.pop()
    return Report(
        command=command,
        mode=mode,
        source=source,
        context_length=context_length,
        roles=tuple(roles),
        findings=tuple(findings),
        strict=strict,
    )


@dataclass(frozen=True)
class VerifyOptions:
    """Everything `kvcheck verify` takes, as the CLI collected it."""

    manifest: Path
    mode: str = "measure"
    roles: tuple[str, ...] = ()
    strict: bool = False
    timeout_s: float = 1800.0
    logs_dir: Path | None = None
    gpu_check: bool = True
    dummy_weights: bool = False
    progress: bool | None = None  # None: only when stderr is a terminal


def _build_measure(options: VerifyOptions) -> Backend:
    from kvcheck.backends.estimate import EstimateBackend
    from kvcheck.backends.measure import MeasureBackend

    return MeasureBackend(
        timeout_s=options.timeout_s,
        logs_dir=options.logs_dir,
        gpu_check=options.gpu_check,
        dummy_weights=options.dummy_weights,
        progress=options.progress,
        estimator=EstimateBackend(offline=True),
    )


def _build_estimate(options: VerifyOptions) -> Backend:
    from kvcheck.backends.estimate import EstimateBackend

    return EstimateBackend()


BACKENDS: dict[str, Callable[[VerifyOptions], Backend]] = {
    "measure": _build_measure,
    "estimate": _build_estimate,
}


def select_roles(targets: Sequence[RoleTarget], names: Sequence[str], source: str) -> list[RoleTarget]:
    """The roles named with --role (all when none), in manifest order; unknown names are input errors."""
    if not names:
        return list(targets)
    known = [t.name for t in targets]
    unknown = [n for n in names if n not in known]
    if unknown:
        parts = []
        for name in unknown:
            close = difflib.get_close_matches(name, known, n=1)
            parts.append(f"'{name}'" + (f" (did you mean '{close[0]}'?)" if close else ""))
        raise InputError(
            f"{source}: no role {', '.join(parts)}; the manifest's roles are: {', '.join(known)}"
        )
    return [t for t in targets if t.name in names]


def _check_measurable(targets: Sequence[RoleTarget], source: str) -> None:
    """Measure mode boots engines on listed GPUs: a role without them is an input error up front."""
    issues = []
    for target in targets:
        if not target.gpus:
            where = target.location
            issues.append(
                InputIssue(
                    source,
                    where.line if where else None,
                    where.column if where else None,
                    f"roles.{target.name}.gpus",
                    "measure mode needs the GPU indices the role boots on (or use --mode estimate)",
                )
            )
        if not target.model_path:
            issues.append(InputIssue(source, None, None, "model.path", "measure mode needs model.path"))
    if issues:
        raise ManifestError(issues)


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
    return replace(measurement, details={**measurement.details, "fit_hints": hints})


def verify(options: VerifyOptions) -> Report:
    """The gate: load the manifest, obtain every selected role's pool, judge it."""
    from kvcheck.inputs.manifest.load import load_manifest

    if options.mode not in BACKENDS:
        raise InputError(f"unknown mode '{options.mode}' (choose from {', '.join(sorted(BACKENDS))})")
    loaded = load_manifest(options.manifest)
    targets = select_roles(loaded.targets, options.roles, loaded.display_path)
    if options.mode == "measure":
        _check_measurable(targets, loaded.display_path)
    backend = BACKENDS[options.mode](options)
    # Estimate mode may read configs from the Hub; a measured role's hints stay on local files.
    offline = None if options.mode == "estimate" else True
    measurements = [
        _with_fit_hints(t, m, offline=offline) for t, m in zip(targets, backend.measure(targets), strict=True)
    ]
    extra: list[Finding] = loaded.notes()
    return judge(
        command="verify",
        mode=backend.mode,
        source=loaded.display_path,
        targets=targets,
        measurements=measurements,
        policy=loaded.policy,
        strict=options.strict,
        extra_findings=extra,
        context_length=loaded.manifest.context_length,
    )


def with_min_headroom(targets: Sequence[RoleTarget], min_headroom: float) -> list[RoleTarget]:
    """Targets with another headroom factor (audit and logs take it as an option)."""
    return [replace(t, min_headroom=min_headroom) for t in targets]


@dataclass(frozen=True)
class LogsOptions:
    """Everything `kvcheck logs` takes."""

    files: tuple[str, ...]
    context_length: int | None = None
    min_headroom: float = 1.0
    strict: bool = False


def logs(options: LogsOptions) -> Report:
    """Judge every rank's pool in SGLang startup logs, as verify judges a booted role."""
    from kvcheck.backends.logs import read_logs

    targets, measurements = read_logs(
        options.files, context_length=options.context_length, min_headroom=options.min_headroom
    )
    return judge(
        command="logs",
        mode="logs",
        source=", ".join(options.files),
        targets=targets,
        measurements=measurements,
        policy=PolicyConfig(min_headroom=options.min_headroom),
        strict=options.strict,
        context_length=options.context_length,
    )
