"""`kvcheck probe`: learn the limits, plan, send within the bounds, judge, and report.

The probe's parts (limits, plan, prompts, transport, wire, per-request judge) live in kvcheck/probe/.

The flow is visible here and nowhere else: options -> limits (limits.py) -> plan (plan.py) ->
answers (wire.py, through the guarded transport) -> verdicts and findings (judge.py) -> Report.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor

import httpx

from kvcheck import __version__
from kvcheck.http import display_url, make_ssl_context, validate_base_url
from kvcheck.model import (
    Finding,
    ProbeGroupSection,
    ProbeLimitsSection,
    ProbeRequest,
    Report,
    RoleResult,
    SentRecord,
    role_status,
)
from kvcheck.policy.registry import finding
from kvcheck.probe import rules
from kvcheck.probe.judge import RequestResult, findings_for_group, judge
from kvcheck.probe.limits import DeploymentLimits, LimitsUnknown, learn_limits, limits_from_options
from kvcheck.probe.options import ProbeOptions
from kvcheck.probe.plan import (
    COMPLETIONS,
    GENERATE,
    GROUPS,
    PlannedRequest,
    ProbePlan,
    build_plan,
    check_budget,
)
from kvcheck.probe.prompts import text_prompt, token_prompt
from kvcheck.probe.transport import GuardedTransport, ProbeGuardError, SentRequest, origin_of
from kvcheck.probe.wire import Answer, request_body, send

LIMITS_ROLE = "limits"
Progress = Callable[[RequestResult, int, int], None]


def plan_probe(options: ProbeOptions) -> ProbePlan:
    """The dry run: the plan from --context-length and --pool, with nothing sent."""
    options.validate()
    check_budget(options)
    return build_plan(options, limits_from_options(options))


def run_probe(options: ProbeOptions, *, progress: Progress | None = None) -> Report:
    """Probe the deployment at `options.url` and return the report (never raises for what it finds)."""
    if options.dry_run:
        raise ValueError("run_probe sends requests; use plan_probe for --dry-run")
    options.validate()
    check_budget(options)
    base = validate_base_url(options.url)
    started = time.monotonic()
    guard = GuardedTransport(
        httpx.HTTPTransport(verify=make_ssl_context(options.verify), trust_env=True),
        origin=origin_of(base),
        max_requests=options.max_requests,
        max_bytes=options.max_upload_mib * 2**20,
        rate_per_s=options.rate_per_s,
        deadline_s=started + options.max_duration_s,
    )
    headers = {"User-Agent": f"kvcheck/{__version__} (probe)", "Accept": "application/json, text/event-stream"}
    if options.token:
        headers["Authorization"] = f"Bearer {options.token}"
    client = httpx.Client(base_url=base, transport=guard, headers=headers, follow_redirects=False)
    try:
        return _run(options, display_url(base), guard, client, progress)
    finally:
        client.close()


def _run(options: ProbeOptions, url: str, guard: GuardedTransport, client: httpx.Client,
         progress: Progress | None) -> Report:
    try:
        limits = learn_limits(options, guard)
    except LimitsUnknown as exc:
        return _unprobed_report(options, url, None, exc.message, exc.hint, guard.sent)
    plan = build_plan(options, limits, info_requests=len(guard.sent))
    run_id = uuid.uuid4().hex[:8]
    model = limits.model_name
    skip_openai: str | None = None
    if any(r.endpoint == COMPLETIONS for r in plan.requests) and model is None:
        model, skip_openai = _model_name(client, options.request_timeout_s)
    total = len(plan.requests)
    results: dict[int, RequestResult] = {}

    def execute(planned: PlannedRequest) -> RequestResult:
        # built per request: a million-token prompt is ~8 MB as a list, so the plan's 30-odd are never all held
        body = request_body(planned, _prompt(planned, plan), rid=f"kvcheck-probe-{run_id}-{planned.index}", model=model)
        answer = send(client, planned.endpoint, body, timeout_s=options.request_timeout_s, deadline_s=guard.deadline_s)
        result = judge(planned, answer, plan.owners)
        if progress is not None:
            progress(result, len(results) + 1, total)
        return result

    # The first /generate request goes alone: if the front door is down, nothing else is sent.
    first = next(r for r in plan.requests if r.endpoint == GENERATE)
    results[first.index] = execute(first)
    first_answer = results[first.index].answer
    if first_answer.kind in ("no-answer", "not-sent"):  # down, redirecting elsewhere, or not SGLang
        status = f"HTTP {first_answer.status}: " if first_answer.status is not None else ""
        return _unprobed_report(options, url, limits, f"{url}{GENERATE}: {status}{first_answer.message or 'no answer'}",
                                rules_hint("KV320"), guard.sent, plan, results)
    refused = _control_refused(first, first_answer)
    if refused is not None:  # a front door that refuses a short prompt cannot say anything about lengths
        message, hint = refused
        return _unprobed_report(options, url, limits, f"{url}{GENERATE}: {message}", hint, guard.sent, plan, results)
    remaining = [r for r in plan.requests if r.index not in results]
    first_v1 = next((r for r in remaining if r.endpoint == COMPLETIONS), None)
    if first_v1 is not None and skip_openai is None:
        results[first_v1.index] = execute(first_v1)
        if results[first_v1.index].answer.status == 404:
            skip_openai = "the front door answered 404 to /v1/completions"
            results.pop(first_v1.index)
    if skip_openai is not None:
        remaining = [r for r in remaining if r.endpoint != COMPLETIONS]
    remaining = [r for r in remaining if r.index not in results]
    pool = ThreadPoolExecutor(max_workers=options.concurrency, thread_name_prefix="kvcheck-probe")
    try:
        for result in pool.map(execute, remaining):
            results[result.planned.index] = result
    except BaseException:
        # Ctrl-C (or a bug): drop what has not started instead of waiting for every in-flight
        # request's timeout; the caller's client close aborts the ones on the wire.
        pool.shutdown(wait=False, cancel_futures=True)
        raise
    pool.shutdown(wait=True)
    return _report(options, url, plan, limits, results, guard.sent, skip_openai)


def _limits_findings(limits: DeploymentLimits) -> list[Finding]:
    """The limits row fails when the pool is below the window, as audit judges a server (KV101)."""
    if limits.pool_tokens is None or limits.pool_tokens >= limits.window_tokens:
        return []
    short = limits.window_tokens - limits.pool_tokens
    return [finding(
        "KV101",
        LIMITS_ROLE,
        f"pool holds {limits.pool_tokens:,} tokens, below the {limits.window_tokens:,}-token window "
        f"({limits.window_source}); short by {short:,} tokens: prompts the window promises cannot all be served",
        hint=f"enlarge the pool (`kvcheck plan` names settings that hold the window) or advertise at most "
        f"{limits.pool_tokens:,} tokens",
    )]


def _control_refused(planned: PlannedRequest, answer: Answer) -> tuple[str, str] | None:
    """(message, hint) when the control request (a short prompt every server must serve) got an error.

    Every later verdict compares answers with the limits; a front door that refuses a prompt far
    below them (maintenance, overload, no healthy backend, credentials) would make every check look
    like a short pool. The probe stops there: exit 3, with advice about the server.
    """
    if planned.check != "control" or answer.status is None or answer.status < 400:
        return None
    length = f"{planned.prompt_tokens} tokens" if planned.prompt_tokens is not None else "a short text prompt"
    detail = f": {answer.message}" if answer.message else ""
    message = (f"the control request ({length}, far below every limit) was refused with HTTP {answer.status}"
               f"{detail}; nothing else was sent: no length can be judged while the front door refuses what it "
               "must serve")
    if answer.status in (401, 403):
        hint = "the front door wants credentials: pass --token-env NAME with the variable that holds the token"
    elif answer.status in (429, 502, 503, 504):
        hint = ("the server is overloaded, draining or has no healthy backend behind the router: check its health "
                "(GET /health, the router's backends) and probe again when it serves")
    else:
        hint = ("check that the URL is the deployment's SGLang front door (/generate), and --model for a router "
                "that needs one; the answer above is what it said")
    return message, hint


def rules_hint(code: str) -> str | None:
    from kvcheck.probe.judge import HINTS

    return HINTS.get(code)


def _model_name(client: httpx.Client, timeout_s: float) -> tuple[str | None, str | None]:
    """The model name /v1/completions wants, from /v1/models; (None, reason) when the API is absent."""
    from kvcheck.http import HttpLimitError, JsonRejected, parse_json
    from kvcheck.http import request as http_request

    try:  # kvcheck.http: one deadline, a capped body, no redirect followed
        response = http_request(client, "GET", "/v1/models", timeout_s=timeout_s, max_redirects=0)
    except ProbeGuardError as exc:
        return None, f"/v1/models not asked: {exc}"
    except httpx.TransportError as exc:
        return None, f"/v1/models: {exc}"
    except HttpLimitError as exc:
        return None, f"/v1/models: {exc.message}"
    if response.status == 404:
        return None, "the front door answered 404 to /v1/models"
    try:
        data = parse_json(response.body).get("data")
        name = data[0]["id"]
    except (JsonRejected, AttributeError, LookupError, TypeError):
        return None, f"/v1/models answered HTTP {response.status} without a model list"
    return (name, None) if isinstance(name, str) and name else (None, "/v1/models lists no model id")


def _prompt(planned: PlannedRequest, plan: ProbePlan) -> list[int] | str:
    owner = plan.owners[planned.owner]
    if planned.prompt_kind == "text":
        return text_prompt(owner)
    assert planned.prompt_tokens is not None
    return token_prompt(owner, planned.prompt_tokens, token_id=plan.filler_token_id)


def _sent_records(sent: Sequence[SentRequest]) -> tuple[SentRecord, ...]:
    return tuple(
        SentRecord(seq=s.seq, method=s.method, path=s.path, body_bytes=s.body_bytes, status=s.status, error=s.error)
        for s in sent
    )


def _limits_role(limits: DeploymentLimits | None, sent: Sequence[SentRequest], findings: list[Finding],
                 strict: bool, plan: ProbePlan | None,
                 requests: tuple[ProbeRequest, ...] | None = None) -> RoleResult:
    section = ProbeLimitsSection(
        limits=limits,
        sent=_sent_records(sent),  # every request that left this machine, in order
        owners=tuple(plan.owners.values()) if plan is not None else None,
        notes=tuple(plan.notes) if plan is not None else None,
        requests=requests,
    )
    return RoleResult(
        name=LIMITS_ROLE,
        status=role_status(findings, strict=strict),
        pool_tokens=limits.pool_tokens if limits else None,
        required_tokens=limits.window_tokens if limits else None,
        max_input_tokens=limits.max_req_input_len if limits else None,
        source=limits.source if limits else "probe",
        probe=section,
    )


def _unprobed_report(options: ProbeOptions, url: str, limits: DeploymentLimits | None, message: str,
                     hint: str | None, sent: Sequence[SentRequest], plan: ProbePlan | None = None,
                     results: dict[int, RequestResult] | None = None) -> Report:
    finding = Finding(rule=rules.UNREACHABLE.code, severity="error", role=LIMITS_ROLE, message=message,
                      hint=hint or rules_hint("KV320"))
    requests = tuple(r.to_row() for r in results.values()) if results else None
    role = _limits_role(limits, sent, [finding], options.strict, plan, requests)
    return Report(command="probe", mode="probe", source=url,
                  context_length=limits.window_tokens if limits else options.context_length,
                  roles=(role,), findings=(finding,), strict=options.strict, secrets=_secrets(options))


def _report(options: ProbeOptions, url: str, plan: ProbePlan, limits: DeploymentLimits,
            results: dict[int, RequestResult], sent: Sequence[SentRequest], skip_openai: str | None) -> Report:
    limit_findings = _limits_findings(limits)
    findings: list[Finding] = list(limit_findings)
    roles = [_limits_role(limits, sent, limit_findings, options.strict, plan)]
    for group in GROUPS:
        planned = [r for r in plan.requests if r.group == group]
        if not planned:
            continue
        done = [results[r.index] for r in planned if r.index in results]
        if not done and skip_openai is not None and all(r.endpoint == COMPLETIONS for r in planned):
            findings.append(Finding(rule=rules.OPENAI_UNAVAILABLE.code, severity="info", role=None,
                                    message=f"/v1/completions not probed: {skip_openai}"))
            continue
        group_findings = findings_for_group(group, done)
        findings += group_findings
        roles.append(
            RoleResult(
                name=group,
                status=role_status(group_findings, strict=options.strict),
                pool_tokens=None,  # the pool is the limits row's; a check group only aims at the bound
                required_tokens=None,
                max_input_tokens=limits.max_req_input_len,
                source="probe",
                probe=ProbeGroupSection(endpoint=planned[0].endpoint, requests=tuple(r.to_row() for r in done)),
            )
        )
    return Report(command="probe", mode="probe", source=url, context_length=limits.window_tokens,
                  roles=tuple(roles), findings=tuple(findings), strict=options.strict, secrets=_secrets(options))


def _secrets(options: ProbeOptions) -> frozenset[str]:
    """The bearer token is a secret wherever an answer or an error might quote it."""
    return frozenset({options.token}) if options.token else frozenset()


__all__ = ["plan_probe", "run_probe", "Answer"]
