"""`kvcheck probe`: learn the limits, plan, send within the bounds, judge, and report.

The probe's parts (limits, plan, prompts, transport, wire, per-request judge) live in kvcheck/probe/.

The flow is visible here and nowhere else: options -> limits (limits.py) -> plan (plan.py) ->
answers (wire.py, through the guarded transport) -> verdicts and findings (judge.py) -> Report.
"""

from __future__ import annotations

import dataclasses
import threading
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING

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
from kvcheck.probe.limits import (
    DeploymentLimits,
    LimitsUnknown,
    learn_limits,
    limits_from_options,
    probe_engine,
)
from kvcheck.probe.options import ProbeOptions
from kvcheck.probe.plan import (
    COMPLETIONS,
    CONTROL_PROMPT_TOKENS,
    GENERATE,
    GROUPS,
    MAX_HEALTH_CHECKS,
    PlannedRequest,
    ProbePlan,
    build_plan,
    check_budget,
)
from kvcheck.probe.prompts import counted_text_prompt, text_prompt, token_prompt
from kvcheck.probe.transport import GuardedTransport, ProbeGuardError, SentRequest, origin_of
from kvcheck.probe.vocab import MAX_TEXT_OVERHEAD, VocabularyUnknown, learn_vocabulary
from kvcheck.probe.wire import Answer, request_body, send

if TYPE_CHECKING:
    from kvcheck.engines.base import ProbeFrontDoor

LIMITS_ROLE = "limits"
HEALTH_TIMEOUT_S = 30.0  # GET /health after a lost answer: a live server answers at once
Progress = Callable[[RequestResult, int, int], None]


def plan_probe(options: ProbeOptions) -> ProbePlan:
    """The dry run: the plan from --context-length and --pool, with nothing sent."""
    options.validate()
    check_budget(options)
    engine = probe_engine(options)
    return build_plan(options, limits_from_options(options, engine=engine), engine=engine)


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
    prepared = _prepare(options, url, guard, client, progress)
    if isinstance(prepared, Report):
        return prepared
    run, skip_openai = prepared
    plan, limits = run.plan, run.plan.limits

    # The first request (the control, on the native endpoint when the engine has one) goes alone: if the
    # front door is down, nothing else is sent.
    native = run.front.native_endpoint if run.front is not None else GENERATE
    first = next(r for r in plan.requests if r.endpoint == (native or COMPLETIONS))
    first_result = run.execute(first)
    first_answer = first_result.answer
    if run.crash is not None:
        return _crash_report(options, url, limits, run)
    if first_answer.kind in ("no-answer", "not-sent"):  # down, redirecting elsewhere, or not the engine's
        status = f"HTTP {first_answer.status}: " if first_answer.status is not None else ""
        return _unprobed_report(options, url, limits,
                                f"{url}{first.endpoint}: {status}{first_answer.message or 'no answer'}",
                                run.hint("KV320"), guard.sent, plan, run.results, hints=run.hints)
    refused = _control_refused(first, first_answer, plan.engine_label)
    if refused is not None:  # a front door that refuses a short prompt cannot say anything about lengths
        message, hint = refused
        return _unprobed_report(options, url, limits, f"{url}{first.endpoint}: {message}", hint, guard.sent, plan,
                                run.results, hints=run.hints)
    skip_rule = rules.OPENAI_UNAVAILABLE.code
    if native is None:
        skip_openai = None  # the OpenAI API is the front door itself: never skipped
    elif skip_openai is None and any(r.endpoint == COMPLETIONS for r in plan.requests):
        skip_openai, skip_rule = run.first_completion()
    remaining = [run.planned(r) for r in plan.requests if r.index not in run.results]
    if skip_openai is not None:
        remaining = [r for r in remaining if r.endpoint != COMPLETIONS]
    pool = ThreadPoolExecutor(max_workers=options.concurrency, thread_name_prefix="kvcheck-probe")
    try:
        for _ in pool.map(run.execute, remaining):
            pass
    except BaseException:
        # Ctrl-C (or a bug): drop what has not started instead of waiting for every in-flight
        # request's timeout; the caller's client close aborts the ones on the wire.
        pool.shutdown(wait=False, cancel_futures=True)
        raise
    pool.shutdown(wait=True)
    if run.crash is not None:
        return _crash_report(options, url, limits, run)
    return _report(options, url, plan, limits, run.results, guard.sent, skip_openai, skip_rule, run.notes, run.hints)


def _prepare(options: ProbeOptions, url: str, guard: GuardedTransport, client: httpx.Client,
             progress: Progress | None) -> Report | tuple[_Run, str | None]:
    """Limits, model name and the ids proven in range, then the plan; a Report when the probe cannot go on."""
    try:
        limits, engine = learn_limits(options, guard)
    except LimitsUnknown as exc:
        return _unprobed_report(options, url, None, exc.message, exc.hint, guard.sent)
    front = engine.probe_front_door()
    hints = dict(front.hints) if front is not None else {}
    model = limits.model_name
    skip_openai: str | None = None
    if model is None:  # /v1/completions and sglang-router's /v1/tokenize want it
        model, skip_openai = _model_name(client, options.request_timeout_s)
    try:
        vocab, vocab_notes = learn_vocabulary(client, options, model=model, timeout_s=options.request_timeout_s,
                                              front=front)
    except VocabularyUnknown as exc:
        if exc.unreachable:
            return _unprobed_report(options, url, limits, f"{url}: {exc.message}", rules_hint("KV320", hints),
                                    guard.sent, hints=hints)
        return _unprobed_report(options, url, limits, exc.message, exc.hint, guard.sent, rule=rules.UNSAFE_IDS.code,
                                hints=hints)
    if limits.has_tokenizer is None and vocab.tokenizer:  # its tokenizer answered: text prompts are understood
        limits = dataclasses.replace(limits, has_tokenizer=True)
        vocab_notes.append("the front door tokenizes text (it answered the tokenizer's POST): tenants' short "
                           "prompts are text markers")
    plan = build_plan(options, limits, vocabulary=vocab, info_requests=len(guard.sent), engine=engine)
    run = _Run(options, plan, client, guard, model, progress, front)
    how = "named by --engine" if options.engine else "found from its answers"
    run.notes.append(f"front door: {engine.label}'s ({how})")
    run.notes += vocab_notes
    return run, skip_openai


class _Run:
    """One run's sending state: the results so far, prompt rewrites, and whether a request crashed the server."""

    def __init__(self, options: ProbeOptions, plan: ProbePlan, client: httpx.Client, guard: GuardedTransport,
                 model: str | None, progress: Progress | None, front: ProbeFrontDoor | None = None) -> None:
        self.options = options
        self.front = front
        self.hints: dict[str, str] = dict(front.hints) if front is not None else {}
        self.plan = plan
        self.client = client
        self.guard = guard
        self.model = model
        self.progress = progress
        self.run_id = uuid.uuid4().hex[:8]
        self.results: dict[int, RequestResult] = {}
        self.rewritten: dict[int, PlannedRequest] = {}  # /v1/completions as counted text (after a 422)
        self.text_overhead = 0  # tokens the server adds to a text prompt (learned from the text control)
        self.notes: list[str] = []
        self.crash: tuple[PlannedRequest, Answer, str] | None = None
        self._health_checks = 0
        self._lock = threading.Lock()

    def hint(self, code: str) -> str | None:
        return rules_hint(code, self.hints)

    def planned(self, request: PlannedRequest) -> PlannedRequest:
        return self.rewritten.get(request.index, request)

    def execute(self, planned: PlannedRequest) -> RequestResult:
        if self.crash is not None:
            culprit = self.crash[0]
            answer = Answer(status=None, kind="not-sent", latency_ms=None,
                            message=f"the server died after request #{culprit.index}")
            return self._record(planned, answer)
        # built per request: a million-token prompt is ~8 MB as a list, so the plan's 30-odd are never all held
        body = request_body(planned, self._prompt(planned), rid=f"kvcheck-probe-{self.run_id}-{planned.index}",
                            model=self.model,
                            request_id_field=self.front.request_id_field if self.front is not None else None)
        answer = send(self.client, planned.endpoint, body, timeout_s=self.options.request_timeout_s,
                      deadline_s=self.guard.deadline_s)
        if answer.kind == "no-answer" and answer.status is None:
            self._check_health(planned, answer)
        return self._record(planned, answer)

    def _record(self, planned: PlannedRequest, answer: Answer) -> RequestResult:
        result = judge(planned, answer, self.plan.owners)
        # judged: the body (up to 32 MiB an answer) is not needed again; kept, a run held every answer at once
        result = dataclasses.replace(result, answer=dataclasses.replace(answer, raw_text="", id_runs=()))
        with self._lock:
            self.results[planned.index] = result
            done = len(self.results)
        if self.progress is not None:
            self.progress(result, done, len(self.plan.requests))
        return result

    def _check_health(self, planned: PlannedRequest, answer: Answer) -> None:
        """After a lost answer: a server that answered before and now fails /health was crashed by the probe."""
        with self._lock:
            if self.crash is not None or self._health_checks >= MAX_HEALTH_CHECKS:
                return
            if not any(s.status is not None for s in self.guard.sent):
                return  # it never answered: unreachable (KV320), not crashed
            self._health_checks += 1
            problem = _health_problem(self.client, min(self.options.request_timeout_s, HEALTH_TIMEOUT_S))
            if problem is not None:
                self.crash = (planned, answer, problem)

    def _prompt(self, planned: PlannedRequest) -> list[int] | str:
        owner = self.plan.owners[planned.owner]
        if planned.prompt_kind == "text":
            return text_prompt(owner)
        vocab = self.plan.vocabulary
        if planned.prompt_kind == "words":
            assert vocab is not None and vocab.unit is not None
            units = CONTROL_PROMPT_TOKENS if planned.prompt_tokens is None else planned.prompt_tokens - self.text_overhead
            return counted_text_prompt(vocab.unit, units)
        assert planned.prompt_tokens is not None
        return token_prompt(owner, planned.prompt_tokens, token_id=self.plan.filler_token_id)

    def first_completion(self) -> tuple[str | None, str]:
        """Send the first /v1/completions request alone; (why the rest is skipped, rule) or (None, _).

        A 404: the API is absent (KV408). A 422 to a token-id prompt is a request-format refusal
        (sglang-router takes text only): the requests go again as text prompts of counted tokens, the
        control first, whose answer states what the server adds to a text prompt (BOS).
        """
        first = next(r for r in self.plan.requests if r.endpoint == COMPLETIONS)
        answer = self.execute(first).answer
        if answer.status == 404:
            self.results.pop(first.index)
            return "the front door answered 404 to /v1/completions", rules.OPENAI_UNAVAILABLE.code
        if answer.status != 422 or first.prompt_kind != "ids":
            return None, rules.OPENAI_UNAVAILABLE.code
        self.results.pop(first.index)
        refusal = f"HTTP 422 to a token-id prompt: {answer.message}" if answer.message else "HTTP 422 to a token-id prompt"
        vocab = self.plan.vocabulary
        if vocab is None or vocab.unit is None:
            return (f"/v1/completions refused the request format: {refusal}; no tokenizer-counted text prompt is "
                    "available (no POST /v1/tokenize)"), rules.FORMAT_REFUSED.code
        control = dataclasses.replace(first, prompt_kind="words", prompt_tokens=None,
                                      why=f"a text prompt of {CONTROL_PROMPT_TOKENS} repetitions of {vocab.unit!r}")
        served = self.execute(control).answer
        reported = served.prompt_tokens
        if served.status != 200 or served.kind != "success" or reported is None:
            return (f"/v1/completions refused the request format ({refusal}), and the text control was not served "
                    f"with a prompt token count: {served.short()}"), rules.FORMAT_REFUSED.code
        overhead = reported - CONTROL_PROMPT_TOKENS
        if not 0 <= overhead <= MAX_TEXT_OVERHEAD:
            return (f"/v1/completions refused the request format ({refusal}); the text control of "
                    f"{CONTROL_PROMPT_TOKENS} counted tokens was reported as {reported} tokens, so text lengths "
                    "cannot be aimed"), rules.FORMAT_REFUSED.code
        self.text_overhead = overhead
        for request in self.plan.requests:
            if request.endpoint == COMPLETIONS and request.index != first.index:
                self.rewritten[request.index] = dataclasses.replace(request, prompt_kind="words")
        self.notes.append(
            f"/v1/completions refused token-id prompts ({refusal}): a request-format refusal, not a length "
            f"verdict; probed with text prompts of {vocab.unit!r} repeated (one token each, counted by the "
            f"deployment's /v1/tokenize; the server adds {overhead} token{'s' if overhead != 1 else ''})")
        return None, rules.OPENAI_UNAVAILABLE.code


def _health_problem(client: httpx.Client, timeout_s: float) -> str | None:
    """None when GET /health answers 200; else what it did (the server is dead or unhealthy)."""
    from kvcheck.http import HttpLimitError
    from kvcheck.http import request as http_request

    try:
        response = http_request(client, "GET", "/health", timeout_s=timeout_s, max_redirects=0)
    except ProbeGuardError:
        return None  # not asked (budget): nothing is claimed
    except httpx.TransportError as exc:
        return f"GET /health: {exc or type(exc).__name__}"
    except HttpLimitError as exc:
        return f"GET /health: {exc.message}"
    return None if response.status == 200 else f"GET /health answered HTTP {response.status}"


def _crash_report(options: ProbeOptions, url: str, limits: DeploymentLimits, run: _Run) -> Report:
    assert run.crash is not None
    planned, answer, health = run.crash
    not_sent = sum(1 for r in run.plan.requests if r.index not in run.results or
                   run.results[r.index].answer.kind == "not-sent")
    message = (f"request {planned.describe()} lost its answer ({answer.message or 'no answer'}) and the server "
               f"then failed its health check ({health}): the probe's request crashed the server; "
               f"{not_sent} planned request{'s were' if not_sent != 1 else ' was'} not sent")
    return _unprobed_report(options, url, limits, message, run.hint("KV323"), run.guard.sent, run.plan,
                            run.results, rule=rules.SERVER_CRASHED.code, notes=run.notes, hints=run.hints)


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


def _control_refused(planned: PlannedRequest, answer: Answer, label: str = "SGLang") -> tuple[str, str] | None:
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
        hint = (f"check that the URL is the deployment's {label} front door ({planned.endpoint}), --model for a "
                "router that needs one, and --engine when the front door does not say which engine serves it; the "
                "answer above is what it said")
    return message, hint


def rules_hint(code: str, hints: Mapping[str, str] | None = None) -> str | None:
    """The fix for a probe rule: the front door's engine's own (`hints`), else the probe's."""
    from kvcheck.probe.judge import HINTS

    return (hints or {}).get(code) or HINTS.get(code)


def _model_name(client: httpx.Client, timeout_s: float) -> tuple[str | None, str | None]:
    """The model name /v1/completions wants, from /v1/models; (None, reason) when the API is absent."""
    from kvcheck.http import HttpLimitError
    from kvcheck.http import request as http_request
    from kvcheck.io.jsontext import JsonRejected, parse_json

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


def _sent_records(sent: Sequence[SentRequest]) -> tuple[SentRecord, ...]:
    return tuple(
        SentRecord(seq=s.seq, method=s.method, path=s.path, body_bytes=s.body_bytes, status=s.status, error=s.error)
        for s in sent
    )


def _limits_role(limits: DeploymentLimits | None, sent: Sequence[SentRequest], findings: list[Finding],
                 strict: bool, plan: ProbePlan | None,
                 requests: tuple[ProbeRequest, ...] | None = None, notes: Sequence[str] = ()) -> RoleResult:
    section = ProbeLimitsSection(
        limits=limits,
        sent=_sent_records(sent),  # every request that left this machine, in order
        owners=tuple(plan.owners.values()) if plan is not None else None,
        notes=(*plan.notes, *notes) if plan is not None else (tuple(notes) or None),
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
                     results: dict[int, RequestResult] | None = None, *, rule: str = rules.UNREACHABLE.code,
                     notes: Sequence[str] = (), hints: Mapping[str, str] | None = None) -> Report:
    """A report without verdicts: the probe could not reach, could not probe safely, or crashed the server."""
    finding = Finding(rule=rule, severity="error", role=LIMITS_ROLE, message=message,
                      hint=hint or rules_hint(rule, hints))
    requests = tuple(r.to_row() for _, r in sorted(results.items())) if results else None
    role = _limits_role(limits, sent, [finding], options.strict, plan, requests, notes)
    return Report(command="probe", mode="probe", source=url,
                  context_length=limits.window_tokens if limits else options.context_length,
                  roles=(role,), findings=(finding,), strict=options.strict, secrets=_secrets(options))


def _report(options: ProbeOptions, url: str, plan: ProbePlan, limits: DeploymentLimits,
            results: dict[int, RequestResult], sent: Sequence[SentRequest], skip_openai: str | None,
            skip_rule: str, notes: Sequence[str], hints: Mapping[str, str] | None = None) -> Report:
    limit_findings = _limits_findings(limits)
    findings: list[Finding] = list(limit_findings)
    roles = [_limits_role(limits, sent, limit_findings, options.strict, plan, notes=notes)]
    for group in GROUPS:
        planned = [r for r in plan.requests if r.group == group]
        if not planned:
            continue
        done = [results[r.index] for r in planned if r.index in results]
        if not done and skip_openai is not None and all(r.endpoint == COMPLETIONS for r in planned):
            findings.append(Finding(rule=skip_rule, severity="info", role=None,
                                    message=f"/v1/completions not probed: {skip_openai}"))
            continue
        group_findings = findings_for_group(group, done, hints)
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
