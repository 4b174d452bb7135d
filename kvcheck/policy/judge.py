"""The one judge every command uses: targets + measurements + policy -> Report."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import replace

from kvcheck.engines import get_engine
from kvcheck.model import Finding, PoolMeasurement, Report, RoleResult, RoleTarget, Suppressed, role_status
from kvcheck.policy.config import PolicyConfig
from kvcheck.policy.registry import finding
from kvcheck.policy.rules import evaluate_deployment, evaluate_role
from kvcheck.policy.suppress import Gate
from kvcheck.redact import manifest_secrets


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
    gate: Gate | None = None,
    advice: Sequence[Finding] = (),
) -> Report:
    """Apply the policy to every role's measurement and assemble the report.

    `gate` holds the run's suppressions and baseline (kvcheck/policy/suppress.py): a finding they cover
    is reported as suppressed and does not fail; an expired suppression is a KV601 finding that does.
    `advice` (plan's): findings listed after the verdict's, through the same policy and gate, that change
    no role's status.
    """
    if len(targets) != len(measurements):
        raise ValueError("judge() needs exactly one measurement per target")
    roles: list[RoleResult] = []
    dropped: list[Finding] = []
    held: list[Suppressed] = []
    secrets = frozenset().union(*(_secrets(target) for target in targets))
    if gate is None:
        gate = Gate.open(None, targets)
    gate.secrets = secrets

    def keep(items: Sequence[Finding]) -> list[Finding]:
        kept, ignored = policy.split(items)
        dropped.extend(ignored)
        kept, covered = gate.split(kept)
        held.extend(covered)
        return kept

    # an expired suppression fails whatever the policy says: it is not passed through `keep`
    findings: list[Finding] = [*gate.expired(), *keep(extra_findings)]
    for target, measurement in zip(targets, measurements, strict=True):
        role_findings = keep([*measurement.findings, *evaluate_role(target, measurement, policy.min_concurrency)])
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
        # findings about the role's inputs (a deployment file's unresolved value, KV317) count for it too
        about_role = [f for f in findings[: len(findings) - len(role_findings)] if f.role == target.name]
        roles.append(
            RoleResult(
                name=target.name,
                status=role_status([*about_role, *role_findings], strict=strict),
                pool_tokens=measurement.pool_tokens,
                required_tokens=target.required_tokens if target.context_length > 0 else None,
                max_input_tokens=measurement.max_input_tokens,
                source=measurement.source,
                gpus=measurement.gpus if measurement.gpus is not None else (target.gpus or None),
                argv=measurement.argv,
                details=measurement.details,
                pool_range=measurement.pool_range,
                engine_context_len=measurement.context_len,
                engine_version=measurement.engine_version,
                fit_hints=measurement.fit_hints,
            )
        )
    findings.extend(keep(evaluate_deployment(targets, measurements)))
    findings.extend(keep(advice))  # before gate.finish(): --write-baseline holds the advice too
    findings.extend(gate.unused())  # suppressions and baseline entries that covered nothing (KV602, KV603)
    windows = {t.context_length for t in targets if t.context_length > 0}
    if context_length is None and len(windows) == 1:
        context_length = windows.pop()
    gate.finish()
    return Report(
        command=command,
        mode=mode,
        source=source,
        context_length=context_length,
        roles=tuple(roles),
        findings=tuple(findings),
        strict=strict,
        suppressed=suppressed_counts([*dropped, *(item.finding for item in held)]),
        suppressions=tuple(held),
        secrets=secrets,
    )


def suppressed_counts(dropped: Sequence[Finding], already: Sequence[tuple[str, int]] = ()) -> tuple[tuple[str, int], ...]:
    """(rule, count) for findings the policy dropped, by rule code, added to `already`."""
    counts = Counter(dict(already))
    counts.update(item.rule for item in dropped)
    return tuple(sorted(counts.items()))


def with_min_headroom(targets: Sequence[RoleTarget], min_headroom: float) -> list[RoleTarget]:
    """Targets with another headroom factor (audit and logs take it as an option)."""
    return [replace(t, min_headroom=min_headroom) for t in targets]


def _secrets(target: RoleTarget) -> frozenset[str]:
    """The role's values no report may print; a value from a flag's fixed choices is a public word."""
    public = get_engine(target.engine).enumerated_fields(target.args, target.engine_version)
    return manifest_secrets(target.args, target.env, public_fields=public)
