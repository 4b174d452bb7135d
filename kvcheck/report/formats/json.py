"""The JSON report (schema kvcheck/report/v1): the one place kvcheck's values become dicts.

Every contract field is present, null where unknown. A role's `details` holds the backend's own
evidence followed by the typed fields other layers set (the plan, fit hints, the pool range, the
engine's context length and release, the probe's rows), in the order the contract has always had.
"""

from __future__ import annotations

import json
from typing import Any

from kvcheck.model import (
    REPORT_SCHEMA,
    Finding,
    FractionPlan,
    PlanOption,
    ProbeGroupSection,
    ProbeLimits,
    ProbeLimitsSection,
    ProbeRequest,
    Report,
    RolePlan,
    RoleResult,
    SentRecord,
    Suppressed,
)
from kvcheck.report.formats.base import Format


class JsonFormat(Format):
    name = "json"

    def render(self, report: Report) -> str:
        return json.dumps(report_to_dict(report), indent=2, sort_keys=False, default=str) + "\n"


def report_to_dict(report: Report) -> dict[str, Any]:
    """The JSON report as a dict: every contract field, null where unknown."""
    return {
        "schema": REPORT_SCHEMA,
        "kvcheck_version": report.kvcheck_version,
        "command": report.command,
        "source": report.source,
        "mode": report.mode,
        "verdict": report.verdict,
        "exit_code": report.exit_code,
        "context_length": report.context_length,
        "roles": [role_dict(role, planned=report.command == "plan") for role in report.roles],
        "findings": [finding_dict(item) for item in report.findings],
        "suppressed": [{"rule": rule, "count": count} for rule, count in report.suppressed],
        "suppressions": [suppression_dict(item) for item in report.suppressions],
    }


def suppression_dict(item: Suppressed) -> dict[str, Any]:
    """A finding a comment, the ignore file or the baseline suppressed: the finding, and by what, why, until."""
    source = None
    if item.source is not None:
        source = {"file": item.source.file, "line": item.source.line, "column": item.source.column}
    return {**finding_dict(item.finding), "kind": item.kind, "reason": item.reason, "until": item.until,
            "source": source}


def role_dict(role: RoleResult, *, planned: bool = False) -> dict[str, Any]:
    return {
        "name": role.name,
        "status": role.status,
        "pool_tokens": role.pool_tokens,
        "required_tokens": role.required_tokens,
        "max_input_tokens": role.max_input_tokens,
        "source": role.source,
        "gpus": list(role.gpus) if role.gpus is not None else None,
        "argv": list(role.argv) if role.argv is not None else None,
        "details": details_dict(role, planned=planned),
    }


def details_dict(role: RoleResult, *, planned: bool = False) -> dict[str, Any]:
    """The backend's evidence, then the typed fields; `planned`: every role of a plan report has `plan`."""
    details: dict[str, Any] = dict(role.details)
    if isinstance(role.probe, ProbeLimitsSection):
        details.update(probe_limits_dict(role.probe))
    elif isinstance(role.probe, ProbeGroupSection):
        details["endpoint"] = role.probe.endpoint
        details["requests"] = [request_dict(r) for r in role.probe.requests]
    if planned:
        details["plan"] = plan_dict(role.plan) if role.plan is not None else None
    if role.plan_error is not None:
        details["plan_error"] = role.plan_error
    if role.fit_hints is not None:
        details["fit_hints"] = list(role.fit_hints)
    # the evidence may state these itself (the estimate's arithmetic carries its pool range): it wins
    if role.pool_range is not None:
        details.setdefault("pool_range", list(role.pool_range))
    if role.engine_context_len is not None:
        details.setdefault("engine_context_len", role.engine_context_len)
    if role.engine_version is not None:
        details.setdefault("engine_version", role.engine_version)
    return details


def finding_dict(item: Finding) -> dict[str, Any]:
    location = None
    if item.location is not None:
        location = {"file": item.location.file, "line": item.location.line, "column": item.location.column}
    return {
        "rule": item.rule,
        "severity": item.severity,
        "role": item.role,
        "message": item.message,
        "hint": item.hint,
        "location": location,
    }


def fraction_dict(fraction: FractionPlan) -> dict[str, Any]:
    return {
        "current": fraction.current,
        "current_source": fraction.current_source,
        "current_pool_tokens": fraction.current_pool_tokens,
        "min_fitting": fraction.min_fitting,
        "min_fitting_pool_tokens": fraction.min_fitting_pool_tokens,
        "min_fitting_worst_case": fraction.min_fitting_worst_case,
        "max_safe": fraction.max_safe,
        "max_safe_pool_tokens": fraction.max_safe_pool_tokens,
        "safe_reserve_mib": fraction.safe_reserve_mib,
        "note": fraction.note,
    }


def option_dict(option: PlanOption) -> dict[str, Any]:
    out: dict[str, Any] = {option.setting: option.value}
    if option.setting == "tp_size":
        out.update(nnodes=option.nnodes, gpus=option.gpus)
    out.update(
        pool_tokens=option.pool_tokens,
        pool_range=list(option.pool_range) if option.pool_range is not None else None,
        fits=option.fits,
        uncertain=option.uncertain,
        current=option.current,
        note=option.note,
    )
    return out


def plan_dict(plan: RolePlan) -> dict[str, Any]:
    return {
        "required_tokens": plan.required_tokens,
        "min_headroom": plan.min_headroom,
        "largest_context_tokens": plan.largest_context_tokens,
        "binding_limit": plan.binding_limit,
        "pool_context_tokens": plan.pool_context_tokens,
        "model_context_tokens": plan.model_context_tokens,
        "uncertain": plan.uncertain,
        # The engine-neutral name of the memory fraction (SGLang's mem_fraction_static, vLLM's
        # gpu_memory_utilization), with the flag it is; mem_fraction_static stays, the same figures,
        # for the readers the contract promised it to (docs/plan.md, The report).
        "memory_fraction": {"flag": plan.fraction.flag, **fraction_dict(plan.fraction)},
        "mem_fraction_static": fraction_dict(plan.fraction),
        "tp_options": [option_dict(o) for o in plan.tp_options],
        "kv_dtype_options": [option_dict(o) for o in plan.kv_dtype_options],
    }


def limits_dict(limits: ProbeLimits) -> dict[str, Any]:
    """The probe's limits (also the dry run's `limits`)."""
    return {
        "source": limits.source,
        "window_tokens": limits.window_tokens,
        "window_source": limits.window_source,
        "max_req_input_len": limits.max_req_input_len,
        "bound_source": limits.bound_source,
        "pool_tokens": limits.pool_tokens,
        "served_context_len": limits.served_context_len,
        "version": limits.version,
        "has_tokenizer": limits.has_tokenizer,
        "model_name": limits.model_name,
        "allow_auto_truncate": limits.allow_auto_truncate,
        "disaggregation_mode": limits.disaggregation_mode,
        "notes": list(limits.notes),
    }


def sent_dict(sent: SentRecord) -> dict[str, Any]:
    return {"seq": sent.seq, "method": sent.method, "path": sent.path, "body_bytes": sent.body_bytes,
            "status": sent.status, "error": sent.error}


def request_dict(request: ProbeRequest) -> dict[str, Any]:
    return {
        "index": request.index,
        "check": request.check,
        "endpoint": request.endpoint,
        "stream": request.stream,
        "owner": request.owner,
        "prompt": request.prompt,
        "prompt_tokens": request.prompt_tokens,
        "max_new_tokens": request.max_new_tokens,
        "expected": request.expected,
        "status": request.status,
        "outcome": request.outcome,
        "reported_prompt_tokens": request.reported_prompt_tokens,
        "completion_tokens": request.completion_tokens,
        "finish": request.finish,
        "latency_ms": request.latency_ms,
        "verdict": request.verdict,
        "rules": list(request.rules),
        "message": request.message,
        "own_marker_echoed": request.own_marker_echoed,
    }


def probe_limits_dict(section: ProbeLimitsSection) -> dict[str, Any]:
    out: dict[str, Any] = {
        "limits": limits_dict(section.limits) if section.limits is not None else None,
        "requests_sent": len(section.sent),
        "sent": [sent_dict(s) for s in section.sent],  # every request that left this machine, in order
    }
    if section.owners is not None:
        out["owners"] = {o.name: {"marker": o.marker, "pattern": list(o.pattern)} for o in section.owners}
        out["notes"] = list(section.notes or ())
    if section.requests:
        out["requests"] = [request_dict(r) for r in section.requests]
    return out
