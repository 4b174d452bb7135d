"""Orchestration: targets + a backend + the policy -> a Report. The CLI only translates to this."""

from __future__ import annotations

from collections.abc import Sequence

from kvcheck.backends.base import PoolMeasurement, RoleTarget
from kvcheck.policy.rules import PolicyConfig, evaluate_deployment, evaluate_role
from kvcheck.report.model import Finding, Report, RoleResult, role_status


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
                required_tokens=target.required_tokens,
                max_input_tokens=measurement.max_input_tokens,
                source=measurement.source,
                gpus=measurement.gpus if measurement.gpus is not None else (target.gpus or None),
                argv=measurement.argv,
                details=details,
            )
        )
    findings.extend(policy.apply(evaluate_deployment(targets, measurements)))
    windows = {t.context_length for t in targets}
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
