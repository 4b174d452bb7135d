"""The probe's plan: every request it will send, decided before the first one leaves.

A plan is a list of `PlannedRequest`s in sending order. Boundary checks aim at the admission bound B
and the advertised window W; the isolation check interleaves synthetic tenants' short, near-edge and
over-long prompts. `--dry-run` prints exactly this list.
"""

from __future__ import annotations

import json
import random
import secrets
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from kvcheck.errors import InputError
from kvcheck.probe.limits import DeploymentLimits, longest_promised_prompt
from kvcheck.probe.options import ProbeOptions
from kvcheck.probe.prompts import Owner, make_owners
from kvcheck.probe.vocab import Vocabulary, placeholder_vocabulary

if TYPE_CHECKING:
    from kvcheck.engines.base import Engine

Expect = Literal["accept", "refuse"]
PromptKind = Literal["ids", "text", "words"]  # words: a repeated word of counted tokens (vocab.py)

GENERATE = "/generate"
COMPLETIONS = "/v1/completions"

# Report roles, one per check group (the report's "roles").
GROUP_GENERATE = "/generate"
GROUP_STREAM = "/generate (stream)"
GROUP_COMPLETIONS = "/v1/completions"
GROUP_COMPLETIONS_STREAM = "/v1/completions (stream)"  # an engine whose only front door is the OpenAI API
GROUP_ISOLATION = "isolation"
GROUPS = (GROUP_GENERATE, GROUP_STREAM, GROUP_COMPLETIONS, GROUP_COMPLETIONS_STREAM, GROUP_ISOLATION)

CONTROL_PROMPT_TOKENS = 32  # a short prompt every deployment must serve; checks the request format
SHORT_TENANT_PROMPT_TOKENS = 64
# Requests besides the plan's: the limits step's GETs (/server_info, /get_server_info for older releases,
# /v1/models, /metrics), /v1/models once more for the model name, POST /v1/tokenize and GET /model_info,
# /get_model_info for the vocabulary (vocab.py), and GET /health after a lost answer (at most twice).
MAX_INFO_REQUESTS = 10
MAX_HEALTH_CHECKS = 2


@dataclass(frozen=True)
class PlannedRequest:
    """One request of the plan; `prompt_tokens` is None only for text prompts (length set by the tokenizer)."""

    index: int  # 1-based, plan order
    group: str  # report role this request belongs to
    check: str  # control, below-bound, at-bound, above-bound, promised, window, beyond-window, short, near-edge, over-long
    endpoint: str  # GENERATE or COMPLETIONS
    stream: bool
    owner: str  # boundary-N or tenant-N
    prompt_kind: PromptKind
    prompt_tokens: int | None
    expect: Expect
    max_new_tokens: int
    why: str  # what the expectation rests on, for messages

    def describe(self) -> str:
        length = f"{self.prompt_tokens} tokens" if self.prompt_tokens is not None else "text prompt"
        stream = " stream" if self.stream else ""
        return f"#{self.index} {self.endpoint}{stream} {self.check} ({length}, {self.owner})"


@dataclass(frozen=True)
class ProbePlan:
    """The limits the plan aims at, the synthetic owners and the requests, in sending order."""

    url: str
    limits: DeploymentLimits
    owners: dict[str, Owner]
    requests: tuple[PlannedRequest, ...]
    info_requests: int  # GETs spent learning the limits (0 in a dry run: none are sent)
    filler_token_id: int
    notes: tuple[str, ...] = field(default_factory=tuple)
    vocabulary: Vocabulary | None = None  # the ids proven in range (None only for plans built by hand)
    engine_label: str = "SGLang"  # the front door's engine, as messages name it

    def to_dict(self) -> dict[str, Any]:
        from kvcheck.report.formats.json import limits_dict

        return {
            "url": self.url,
            "limits": limits_dict(self.limits),
            "owners": {name: {"marker": o.marker, "pattern": list(o.pattern)} for name, o in self.owners.items()},
            "requests": [
                {
                    "index": r.index,
                    "group": r.group,
                    "check": r.check,
                    "endpoint": r.endpoint,
                    "stream": r.stream,
                    "owner": r.owner,
                    "prompt": r.prompt_kind,
                    "prompt_tokens": r.prompt_tokens,
                    "expect": r.expect,
                    "max_new_tokens": r.max_new_tokens,
                }
                for r in self.requests
            ],
            "notes": list(self.notes),
        }

    def render_text(self) -> str:
        """The dry-run listing: one line per request, with the limits it aims at."""
        lim = self.limits
        lines = [
            f"kvcheck probe plan for {self.url} (dry run: nothing is sent)",
            f"  advertised window W = {lim.window_tokens} tokens ({lim.window_source})",
            f"  admission bound   B = {lim.max_req_input_len} tokens ({lim.bound_source})",
            f"  front door: {self.engine_label}'s; a live run first asks the server for its limits and recomputes "
            "the lengths from the answer,",
            "  and takes its token ids from the deployment's tokenizer: the ids below are placeholders",
        ]
        lines += [f"  note: {note}" for note in self.notes]
        header = ("#", "endpoint", "stream", "check", "prompt tokens", "expect", "owner")
        rows = [
            (
                str(r.index),
                r.endpoint,
                "yes" if r.stream else "no",
                r.check,
                str(r.prompt_tokens) if r.prompt_tokens is not None else "text",
                r.expect,
                r.owner,
            )
            for r in self.requests
        ]
        lines.append("")
        lines += _table(header, rows)
        lines.append("")
        lines.append(f"{len(self.requests)} requests planned (plus up to {MAX_INFO_REQUESTS} GETs for the limits)")
        return "\n".join(lines) + "\n"

    def render_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2) + "\n"


def max_planned_requests(options: ProbeOptions) -> int:
    """An upper bound of what a run sends, from the options alone (checked before anything is sent)."""
    # /v1/completions: 4 checks, and the control once more as text when token-id prompts get a 422
    boundary = 7 + (2 if options.stream else 0) + (5 if options.openai else 0)
    isolation = options.tenants * (2 * options.rounds + 1)
    return (0 if options.dry_run else MAX_INFO_REQUESTS) + boundary + isolation


def check_budget(options: ProbeOptions) -> None:
    """Refuse (exit 2) a run whose plan cannot fit --max-requests, rather than run part of it."""
    needed = max_planned_requests(options)
    if needed > options.max_requests:
        raise InputError(
            f"the probe may send up to {needed} requests with these options, more than "
            f"--max-requests {options.max_requests}",
            hint="raise --max-requests, or lower --tenants/--rounds, or drop --openai/--stream checks",
        )


def build_plan(options: ProbeOptions, limits: DeploymentLimits, *, vocabulary: Vocabulary | None = None,
               info_requests: int = 0, engine: Engine | None = None) -> ProbePlan:
    """Every request of the run, in sending order; lengths come from the limits, never guessed.

    Token ids come from `vocabulary` (proven in range); without one (a dry run) they are placeholders.
    `engine` is the front door's (None: --engine's, else the registry's default): it says which
    endpoints there are and which prompt is the longest a window admits.
    """
    from kvcheck.probe.limits import probe_engine

    engine = engine or probe_engine(options)
    front = engine.probe_front_door()
    native = front.native_endpoint if front is not None else GENERATE
    rng = random.Random(options.seed if options.seed is not None else secrets.randbits(64))
    vocab = vocabulary or placeholder_vocabulary(options)
    builder = _PlanBuilder(options, limits, native)
    builder.boundary_checks(_boundary_points(limits, engine))
    builder.isolation_rounds()
    owners = make_owners(builder.owner_names, candidates=vocab.candidates, rng=rng)
    notes = _plan_notes(options, limits, engine, native)
    if vocabulary is not None:
        notes.append(vocabulary.describe())
    return ProbePlan(
        url=options.url,
        limits=limits,
        owners=owners,
        requests=tuple(builder.requests),
        info_requests=info_requests,
        filler_token_id=vocab.filler,
        notes=tuple(notes),
        vocabulary=vocabulary,
        engine_label=engine.label,
    )


class _PlanBuilder:
    """The plan's requests in sending order, and the owners (boundary checks, tenants) they belong to."""

    def __init__(self, options: ProbeOptions, limits: DeploymentLimits, native: str | None) -> None:
        self.options = options
        self.limits = limits
        self.native = native  # the engine's token-id endpoint; None: /v1/completions is the only one
        self.requests: list[PlannedRequest] = []
        self.owner_names: list[str] = []

    def add(self, group: str, check: str, endpoint: str, stream: bool, owner: str, kind: PromptKind,
            tokens: int | None, expect: Expect, why: str) -> None:
        if owner not in self.owner_names:
            self.owner_names.append(owner)
        self.requests.append(
            PlannedRequest(
                index=len(self.requests) + 1,
                group=group,
                check=check,
                endpoint=endpoint,
                stream=stream,
                owner=owner,
                prompt_kind=kind,
                prompt_tokens=tokens,
                expect=expect,
                max_new_tokens=_max_new_tokens(self.options, self.limits, tokens, expect),
                why=why,
            )
        )

    def _boundary_owner(self) -> str:
        return f"boundary-{sum(1 for name in self.owner_names if name.startswith('boundary-')) + 1}"

    def boundary_checks(self, points: list[tuple[str, int, Expect, str]]) -> None:
        """The lengths around B and W on the native endpoint, then streamed and on /v1/completions when asked.

        Without a native endpoint (vLLM) every length goes to /v1/completions, and the stream checks too.
        """
        if self.native is None:
            self._completions_only(points)
            return
        for check, tokens, expect, why in points:
            self.add(GROUP_GENERATE, check, self.native, False, self._boundary_owner(), "ids", tokens, expect, why)
        if self.options.stream:
            for check, tokens, expect, why in points:
                if check in ("at-bound", "window"):
                    self.add(GROUP_STREAM, check, self.native, True, self._boundary_owner(), "ids", tokens, expect,
                             why)
        if self.options.openai:
            for check, tokens, expect, why in points:
                if check in ("control", "below-bound", "at-bound", "window"):
                    self.add(GROUP_COMPLETIONS, check, COMPLETIONS, False, self._boundary_owner(), "ids", tokens,
                             expect, why)

    def _completions_only(self, points: list[tuple[str, int, Expect, str]]) -> None:
        """Every length on /v1/completions, then streamed at the bound and the window (vLLM's front door)."""
        for check, tokens, expect, why in points:
            self.add(GROUP_COMPLETIONS, check, COMPLETIONS, False, self._boundary_owner(), "ids", tokens, expect, why)
        if self.options.stream:
            for check, tokens, expect, why in points:
                if check in ("at-bound", "window"):
                    self.add(GROUP_COMPLETIONS_STREAM, check, COMPLETIONS, True, self._boundary_owner(), "ids",
                             tokens, expect, why)

    def isolation_rounds(self) -> None:
        """Each round: every tenant's short prompt, (first round) its near-edge one, its over-long one."""
        bound = self.limits.max_req_input_len
        tenants = [f"tenant-{n + 1}" for n in range(self.options.tenants)]
        text_short = bool(self.limits.has_tokenizer)
        short_tokens = min(SHORT_TENANT_PROMPT_TOKENS, bound - 1)
        endpoint = self.native or COMPLETIONS
        for round_number in range(1, self.options.rounds + 1):
            for tenant in tenants:
                if text_short:
                    self.add(GROUP_ISOLATION, "short", endpoint, False, tenant, "text", None, "accept",
                             "a short text prompt asking for the tenant's own marker")
                else:
                    self.add(GROUP_ISOLATION, "short", endpoint, False, tenant, "ids", short_tokens, "accept",
                             f"{short_tokens} tokens, far below B = {bound}")
            if round_number == 1:
                for tenant in tenants:
                    self.add(GROUP_ISOLATION, "near-edge", endpoint, False, tenant, "ids", bound - 1, "accept",
                             f"B - 1 = {bound - 1} tokens fills the pool's edge and is admitted")
            for tenant in tenants:
                self.add(GROUP_ISOLATION, "over-long", endpoint, False, tenant, "ids", bound, "refuse",
                         f"B = {bound} tokens must be refused (prompts of B tokens or more are)")


def _plan_notes(options: ProbeOptions, limits: DeploymentLimits, engine: Engine, native: str | None) -> list[str]:
    bound, window = limits.max_req_input_len, limits.window_tokens
    promised = longest_promised_prompt(window, engine)
    notes: list[str] = []
    if limits.has_tokenizer is None and options.tenants:
        notes.append("tokenizer unknown: tenants' short prompts use token ids, not text markers")
    if native is None:
        notes.append(f"{engine.label}'s front door is its OpenAI API: every check is sent to {COMPLETIONS}"
                     + ("" if options.openai else " (--no-openai does not apply)"))
    if promised > bound - 1:
        notes.append(
            f"W = {window} exceeds what the bound B = {bound} admits: prompts of {bound} to "
            f"{promised} tokens fit the window but not the bound (checked as 'promised')"
        )
    return notes


def _boundary_points(limits: DeploymentLimits, engine: Engine) -> list[tuple[str, int, Expect, str]]:
    """The lengths around B and W, each once (the first label wins when two coincide)."""
    bound, window = limits.max_req_input_len, limits.window_tokens
    promised = longest_promised_prompt(window, engine)
    points: list[tuple[str, int, Expect, str]] = []
    if CONTROL_PROMPT_TOKENS < bound - 1:
        points.append(("control", CONTROL_PROMPT_TOKENS, "accept", f"{CONTROL_PROMPT_TOKENS} tokens, far below B"))
    points.append(("below-bound", bound - 1, "accept", f"B - 1 = {bound - 1} tokens is below the bound B = {bound}"))
    if promised > bound - 1:
        points.append(
            ("promised", promised, "accept",
             f"W - {window - promised} = {promised} tokens is the longest prompt {engine.label} admits under the "
             f"advertised window W = {window} (the bound it states is only B = {bound})")
        )
    points.append(("at-bound", bound, "refuse", f"B = {bound} tokens: prompts of B tokens or more are refused"))
    points.append(("above-bound", bound + 1, "refuse", f"B + 1 = {bound + 1} tokens is above the bound B = {bound}"))
    points.append(("window", window, "refuse", f"W = {window} tokens leaves no room in the advertised window"))
    points.append(("beyond-window", window + 1, "refuse", f"W + 1 = {window + 1} tokens is beyond the window"))
    seen: set[int] = set()
    unique: list[tuple[str, int, Expect, str]] = []
    for point in points:
        if point[1] in seen:
            continue
        seen.add(point[1])
        unique.append(point)
    return unique


def _max_new_tokens(options: ProbeOptions, limits: DeploymentLimits, tokens: int | None, expect: Expect) -> int:
    """Ask for no more than the context leaves, so that the check under test is the one that answers.

    SGLang's tokenizer refuses when input + max_new_tokens reaches context_len (some releases:
    context_len - 1), and the scheduler clips max_new_tokens to max_req_len - input - 1 anyway. An
    admitted prompt must not be refused for asking too much, and a prompt at the bound must meet the
    admission check (max_req_input_len), not the total-length check. Prompts at or past the context
    ask for the full amount, as a client would.
    """
    if tokens is None:
        return options.max_new_tokens
    room = limits.context_limit - 2 - tokens
    return min(options.max_new_tokens, room) if room >= 1 else options.max_new_tokens


def _table(header: tuple[str, ...], rows: Iterable[tuple[str, ...]]) -> list[str]:
    rows = list(rows)
    widths = [max(len(header[i]), *(len(row[i]) for row in rows)) if rows else len(header[i]) for i in range(len(header))]
    out = ["  ".join(h.ljust(w) for h, w in zip(header, widths, strict=True)).rstrip()]
    out.append("  ".join("-" * w for w in widths))
    out += ["  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in rows]
    return out
