"""Judge each answer against what the plan expected, and fold the verdicts into findings per check group.

The judge reads content, not status codes alone: a 200 for an over-long prompt fails (KV401) even
when its body looks fine, an admitted prompt must come back with the exact token count that was
sent (KV402), and any answer carrying another owner's marker or pattern is a cross-tenant leak
(KV405), whatever its status.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from kvcheck.model import Finding, ProbeRequest
from kvcheck.policy.registry import get_rule
from kvcheck.probe import rules as _rules  # noqa: F401  (defines the codes get_rule looks up)
from kvcheck.probe.plan import PlannedRequest
from kvcheck.probe.prompts import Owner, contains_run
from kvcheck.probe.wire import Answer

Verdict = Literal["ok", "fail", "warn", "error", "not-sent"]

HINTS = {
    "KV401": "upgrade every role to SGLang >= 0.5.22, keep --allow-auto-truncate off, and make the router "
    "pass the engine's HTTP 400 through",
    "KV402": "turn --allow-auto-truncate off and upgrade disaggregated roles to a release that retires "
    "refused prompts at intake",
    "KV403": "advertise a window the pool holds with room to generate",
    "KV404": "compare pool and window with `kvcheck audit`; enlarge the pool or advertise the context that "
    "fits; lift proxy body-size limits",
    "KV405": "stop the rollout: one tenant received another's data; enable --disaggregation-enable-kv-checksum "
    "and the KV canary while investigating",
    "KV406": "let the engine's 400 (or the streaming abort with status_code 400) reach clients unchanged",
    "KV407": "a 413 means a proxy limit kept the prompt from the engine: raise it and probe again",
    "KV320": "check the URL, network path and --token-env; give --context-length and --pool for a router",
    "KV321": "raise --max-duration/--request-timeout for slow long prefills, or --max-requests; probe the "
    "front door itself, not a URL that redirects; an HTTP 422 refused the request's shape, not its length",
    "KV322": "give --vocab-size N (the model's vocab_size), or probe a front door that serves POST /v1/tokenize",
    "KV323": "read the server's log for that request (a scheduler exception, out of memory), fix it, restart the "
    "server and probe again",
}


@dataclass(frozen=True)
class Hit:
    """One rule one request broke, with what happened."""

    rule: str
    message: str


@dataclass(frozen=True)
class RequestResult:
    """A planned request, the answer it got (None: not sent) and the verdict."""

    planned: PlannedRequest
    answer: Answer
    hits: tuple[Hit, ...]
    outcome: str  # accepted, refused (HTTP 400), ...
    own_marker_echoed: bool | None = None

    @property
    def verdict(self) -> Verdict:
        if self.answer.kind == "not-sent":
            return "not-sent"
        severities = {(hit.rule, get_rule(hit.rule).severity) for hit in self.hits}
        if any(sev == "error" and not rule.startswith("KV3") for rule, sev in severities):
            return "fail"
        if any(sev == "error" for _, sev in severities):
            return "error"
        if any(sev == "warning" for _, sev in severities):
            return "warn"
        return "ok"

    def to_row(self) -> ProbeRequest:
        """This request as a row of the report's requests table."""
        p, a = self.planned, self.answer
        return ProbeRequest(
            index=p.index,
            check=p.check,
            endpoint=p.endpoint,
            stream=p.stream,
            owner=p.owner,
            prompt=p.prompt_kind,
            prompt_tokens=p.prompt_tokens,
            max_new_tokens=p.max_new_tokens,
            expected=p.expect,
            status=a.status,
            outcome=self.outcome,
            reported_prompt_tokens=a.prompt_tokens,
            completion_tokens=a.completion_tokens,
            finish=a.finish_type,
            latency_ms=a.latency_ms,
            verdict=self.verdict,
            rules=tuple(sorted({hit.rule for hit in self.hits})),
            message=a.message,
            own_marker_echoed=self.own_marker_echoed,
        )


def judge(planned: PlannedRequest, answer: Answer, owners: Mapping[str, Owner]) -> RequestResult:
    """The verdict on one answer; every rule it breaks becomes a Hit."""
    hits: list[Hit] = []
    where = f"#{planned.index} {planned.endpoint}{' stream' if planned.stream else ''} {planned.check}"
    length = f"{planned.prompt_tokens} tokens" if planned.prompt_tokens is not None else "text prompt"
    head = f"{where} ({length})"
    own = owners[planned.owner]
    leak = _foreign_content_hit(planned, answer, owners, head)
    if leak is not None:
        hits.append(leak)
    echoed = own.marker in answer.raw_text if planned.prompt_kind == "text" else None

    if answer.kind == "not-sent":
        return RequestResult(planned, answer, (Hit("KV321", f"{head}: not sent ({answer.message})"),),
                             "not sent", echoed)
    if answer.status is None or answer.kind == "no-answer":
        hits.append(Hit("KV321", f"{head}: {answer.short()}" + ("" if answer.status is None else f": {answer.message}")))
        return RequestResult(planned, answer, tuple(hits), "no answer", echoed)
    status = answer.status
    if status in (401, 403):
        hits.append(Hit("KV320", f"{head}: HTTP {status}: the front door wants credentials (--token-env)"))
        return RequestResult(planned, answer, tuple(hits), f"HTTP {status}", echoed)
    if status == 429:
        hits.append(Hit("KV321", f"{head}: HTTP 429: the front door throttled the probe (lower --rate)"))
        return RequestResult(planned, answer, tuple(hits), "throttled", echoed)
    if status == 422:  # the request's format was refused (a schema check), not its length: no verdict
        detail = f": {answer.message}" if answer.message else ""
        hits.append(Hit("KV321", f"{head}: HTTP 422: the front door refused the request's format, not its "
                                 f"length; no verdict{detail}"))
        return RequestResult(planned, answer, tuple(hits), "format refused (HTTP 422)", echoed)

    served = status == 200 and answer.kind == "success"
    if served:
        hits += _content_hits(planned, answer, head)
    if planned.expect == "accept":
        outcome = "accepted" if served else _refusal_text(answer)
        if not served:
            if status == 200 and answer.kind == "unparseable":
                hits.append(Hit("KV321", f"{head}: HTTP 200 with an answer that is not the engine's: {answer.message}"))
            else:
                detail = f": {answer.message}" if answer.message else ""
                hits.append(Hit("KV404", f"{head}: {planned.why}, yet it was not served: {answer.short()}{detail}"))
        return RequestResult(planned, answer, tuple(hits), outcome, echoed)

    # expected: refused, explicitly
    if served:
        hits.append(Hit("KV401", f"{head}: {planned.why}, yet it was answered {answer.short()}, "
                                 f"{_usage_text(answer)}"))
        return RequestResult(planned, answer, tuple(hits), "accepted", echoed)
    outcome = _refusal_text(answer)
    hits += _refusal_hits(planned, answer, head)
    return RequestResult(planned, answer, tuple(hits), outcome, echoed)


def _foreign_content_hit(planned: PlannedRequest, answer: Answer, owners: Mapping[str, Owner], head: str) -> Hit | None:
    """KV405 when the answer carries another client's marker or token pattern."""
    foreign = foreign_owners(planned.owner, answer, owners)
    if not foreign:
        return None
    names = ", ".join(f"{o.name} ({o.marker})" for o in foreign[:3])
    more = f" and {len(foreign) - 3} more" if len(foreign) > 3 else ""
    return Hit("KV405", f"{head}: the answer ({answer.short()}) carries content of "
                        f"{len(foreign)} other client{'s' if len(foreign) != 1 else ''}: {names}{more}")


def _refusal_hits(planned: PlannedRequest, answer: Answer, head: str) -> list[Hit]:
    """A refusal must be explicit (KV406) and a 400 (KV407)."""
    explicit = _explicit_status(planned, answer)
    if explicit is None:
        return [Hit("KV406", f"{head}: refused without an explicit error: {answer.short()}"
                             + (f" ({answer.message})" if answer.message else ""))]
    if explicit >= 500 and not _PD_REFUSAL.search(answer.message or ""):
        # a server error: a worker that crashed on the prompt, a router's failure. The engine's length check
        # was not seen to answer, so the request has no verdict (the run cannot pass on it)
        return [Hit("KV321", f"{head}: HTTP {explicit}: the server failed on the request, so its length check "
                             "was not seen to refuse it; no verdict" + (f": {answer.message}" if answer.message else ""))]
    if explicit != 400:
        return [Hit("KV407", f"{head}: refused with status {explicit}, not 400"
                             + (f": {answer.message}" if answer.message else ""))]
    return []


# SGLang's own 500 aborts in PD disaggregation (disaggregation/decode.py): the decode side detected a bad
# transfer and refused the request, which is a refusal (KV407), not a server failure
_PD_REFUSAL = re.compile(r"KV checksum mismatch|bootstrap_room mismatch|Decode transfer failed|Metadata "
                         r"unexpectedly not ready|page count mismatch|live-token count mismatch", re.I)


def foreign_owners(owner: str, answer: Answer, owners: Mapping[str, Owner]) -> list[Owner]:
    """Other owners whose text marker or token pattern appears anywhere in the answer."""
    found: list[Owner] = []
    for other in owners.values():
        if other.name == owner:
            continue
        if other.marker in answer.raw_text or any(contains_run(run, other.pattern) for run in answer.id_runs):
            found.append(other)
    return found


def _content_hits(planned: PlannedRequest, answer: Answer, head: str) -> list[Hit]:
    """KV402/KV403 on an answer that claims success (the usage figures must match what was sent)."""
    hits: list[Hit] = []
    if planned.prompt_tokens is not None:
        if answer.prompt_tokens is None:
            hits.append(Hit("KV321", f"{head}: the answer states no prompt token count; cannot confirm "
                                     "the prompt arrived whole"))
        elif answer.prompt_tokens != planned.prompt_tokens:
            hits.append(Hit("KV402", f"{head}: sent {planned.prompt_tokens} prompt tokens, the answer "
                                     f"reports {answer.prompt_tokens}"))
    if answer.finish_type == "length" and answer.completion_tokens == 0:
        hits.append(Hit("KV403", f"{head}: finish 'length' with 0 tokens generated"))
    return hits


def _explicit_status(planned: PlannedRequest, answer: Answer) -> int | None:
    """The error status a client sees, or None when the refusal looks like a success."""
    status = answer.status or 0
    if status >= 400:
        return status
    if planned.stream and answer.kind in ("abort", "error"):
        return answer.abort_status  # SSE on a 200: the status lives in the chunk
    return None


def _refusal_text(answer: Answer) -> str:
    if answer.kind in ("abort", "error") and answer.status == 200:
        return f"{answer.kind} in a 200 (status_code {answer.abort_status})"
    if (answer.status or 0) >= 400:
        return f"refused (HTTP {answer.status})"
    return answer.short()


def _usage_text(answer: Answer) -> str:
    return f"prompt_tokens {answer.prompt_tokens}, {answer.completion_tokens} tokens generated"


def findings_for_group(group: str, results: Sequence[RequestResult],
                       hints: Mapping[str, str] | None = None) -> list[Finding]:
    """One finding per rule for the group: how many requests broke it, the first few in words.

    `hints`: the front door's engine's own fixes by rule code, over the probe's (HINTS).
    """
    by_rule: dict[str, list[Hit]] = {}
    for result in results:
        for hit in result.hits:
            by_rule.setdefault(hit.rule, []).append(hit)
    findings: list[Finding] = []
    for rule_code in sorted(by_rule):
        hits = by_rule[rule_code]
        rule = get_rule(rule_code)
        shown = "; ".join(hit.message for hit in hits[:3])
        more = f"; and {len(hits) - 3} more" if len(hits) > 3 else ""
        count = f"{len(hits)} request{'s' if len(hits) != 1 else ''}"
        findings.append(
            Finding(
                rule=rule_code,
                severity=rule.severity,
                role=group,
                message=f"{rule.title} ({count}): {shown}{more}",
                hint=(hints or {}).get(rule_code) or HINTS.get(rule_code),
            )
        )
    return findings
