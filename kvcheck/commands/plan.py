"""`kvcheck plan`: for each role, what fits (estimate model), next to the verdict on the manifest as written."""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

from kvcheck.errors import EstimateError, InputError
from kvcheck.inputs.deploy.manifest import Overrides
from kvcheck.inputs.roles import select_roles
from kvcheck.model import Finding, PoolMeasurement, Report, RolePlan
from kvcheck.policy.judge import judge
from kvcheck.policy.suppress import Gate, GateOptions


@dataclass(frozen=True)
class PlanOptions:
    """Everything `kvcheck plan` takes, as the CLI collected it."""

    manifest: Path
    # deployment files or a manifest (kvcheck/inputs/load.py), with what the files lack
    inputs: tuple[str, ...] = ()
    overrides: Overrides | None = None
    roles: tuple[str, ...] = ()
    strict: bool = False
    gate: GateOptions | None = None  # --ignore-file, --baseline, --write-baseline, as verify takes them


def run_plan(options: PlanOptions) -> Report:
    """Judge the manifest as written on predicted pools, then add each role's plan and its advice."""
    from kvcheck.backends.estimate import EstimateBackend
    from kvcheck.gpus import default_profiles
    from kvcheck.inputs.load import load_inputs
    from kvcheck.plan import plan_role
    from kvcheck.plan.advice import hint_sentences, plan_findings

    loaded = load_inputs(options.inputs or (str(options.manifest),), options.overrides)
    targets = select_roles(loaded.targets, options.roles, loaded.display_path)
    gate = Gate.open(options.gate, targets)  # a malformed suppression is exit 2 before anything is estimated
    profiles = default_profiles()
    measurements = EstimateBackend(gpu_profiles=profiles).measure(targets)
    planned: list[PoolMeasurement] = []
    plans: dict[str, tuple[RolePlan | None, str | None]] = {}
    advice: list[Finding] = []
    for target, measurement in zip(targets, measurements, strict=True):
        plan, error = None, None
        if measurement.pool_tokens is not None:
            try:
                plan = plan_role(target, profiles=profiles)
            except (EstimateError, InputError) as exc:
                error = exc.message
            else:
                if not plan.fits:
                    measurement = replace(measurement, fit_hints=tuple(hint_sentences(plan)))  # KV101's hint
                # SGLang's own fraction for the role, as verify obtains it: the same KV205 verdict
                measurement = replace(measurement, safe_fraction=plan.fraction.max_safe,
                                      safe_reserve_mib=plan.fraction.safe_reserve_mib)
                advice.extend(plan_findings(target, plan))
        plans[target.name] = (plan, error)
        planned.append(measurement)
    extra: list[Finding] = loaded.notes()
    report = judge(
        command="plan",
        mode="estimate",
        source=loaded.display_path,
        targets=targets,
        measurements=planned,
        policy=loaded.policy,
        strict=options.strict,
        extra_findings=extra,
        context_length=loaded.manifest.context_length,
        gate=gate,
        advice=advice,  # the verdict on the manifest as written first, then the advice, role by role
    )
    roles = tuple(
        replace(role, plan=plans[role.name][0], plan_error=plans[role.name][1]) for role in report.roles
    )
    return replace(report, roles=roles)
