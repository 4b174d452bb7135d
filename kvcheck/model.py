"""The values every layer shares: targets in, measurements out, findings, role results, the report.

This module is the bottom of the import graph: it imports nothing else from kvcheck but the version.
Inputs produce `RoleTarget`s, backends turn them into `PoolMeasurement`s, the policy judges them into
`Finding`s and `RoleResult`s, and formats render the `Report`. Dicts appear only at the JSON edge.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import IntEnum
from fractions import Fraction
from pathlib import Path
from typing import Any, Literal

from kvcheck import __version__

Severity = Literal["error", "warning", "info"]
Status = Literal["pass", "fail", "error"]

REPORT_SCHEMA = "kvcheck/report/v1"


@dataclass(frozen=True)
class Location:
    """A place in a user's file (manifest, log); line and column are 1-based."""

    file: str
    line: int | None = None
    column: int | None = None

    def render(self) -> str:
        text = self.file
        if self.line is not None:
            text += f":{self.line}"
            if self.column is not None:
                text += f":{self.column}"
        return text


@dataclass(frozen=True)
class Finding:
    """One rule's verdict on one role (role None: the whole deployment)."""

    rule: str
    severity: Severity
    role: str | None
    message: str
    hint: str | None = None
    location: Location | None = None

    @property
    def blocks(self) -> bool:
        return self.severity == "error"

    @property
    def is_measurement_failure(self) -> bool:
        """KV3xx errors mean the role could not be checked (exit 3), not that it failed."""
        return self.severity == "error" and self.rule.startswith("KV3")

    @property
    def is_input_error(self) -> bool:
        """KV0xx errors mean the input was invalid (exit 2): nothing was checked."""
        return self.severity == "error" and self.rule.startswith("KV0")


@dataclass(frozen=True)
class RoleResult:
    """The figures and status of one checked role (or server, or log rank)."""

    name: str
    status: Status
    pool_tokens: int | None
    required_tokens: int | None
    max_input_tokens: int | None
    source: str
    gpus: tuple[int, ...] | None = None
    argv: tuple[str, ...] | None = None
    # The backend's own evidence (the estimate's arithmetic, a booted engine's ports, a log's ranks):
    # rendered verbatim under the JSON report's `details`, never read by another layer. Anything
    # another layer reads is a typed field below.
    details: Mapping[str, Any] = field(default_factory=dict)
    pool_range: tuple[int, int] | None = None  # (low, high) tokens, for estimates with uncertain inputs
    engine_context_len: int | None = None  # the engine's own context_len, tokens
    engine_version: str | None = None
    fit_hints: tuple[str, ...] | None = None  # settings that would hold the window (KV101's hint)
    plan: RolePlan | None = None  # `kvcheck plan`: what fits this role
    plan_error: str | None = None  # `kvcheck plan`: why the role could not be planned
    probe: ProbeLimitsSection | ProbeGroupSection | None = None  # `kvcheck probe`: what was sent and answered


@dataclass(frozen=True)
class Suppressed:
    """A finding an inline comment, the ignore file or the baseline kept from failing: still reported."""

    finding: Finding
    kind: Literal["inline", "file", "baseline"]
    reason: str
    until: str | None = None  # ISO date the suppression holds through; None: no expiry (the baseline)
    source: Location | None = None  # where the suppression is written (the comment's line, the file)


class ExitCode(IntEnum):
    """The contract's exit codes; the one definition every layer uses."""

    PASS = 0  # every role holds the window
    FAIL = 1  # a finding blocks the rollout
    INPUT = 2  # invalid input: manifest, flags, files, options
    ERROR = 3  # could not check: kvcheck fails closed
    INTERNAL = 4  # a bug in kvcheck


@dataclass(frozen=True)
class Report:
    """What a checking command found; renderers only read it."""

    command: str  # verify, audit, logs, probe, plan
    mode: str  # measure, estimate, audit, logs, probe
    source: str | None
    context_length: int | None
    roles: tuple[RoleResult, ...]
    findings: tuple[Finding, ...]
    strict: bool = False
    kvcheck_version: str = __version__
    # findings the policy's `ignore` dropped: (rule, count), by rule code; every format lists them
    suppressed: tuple[tuple[str, int], ...] = ()
    # the findings of `suppressed` that a comment, the ignore file or the baseline covers, each with why
    suppressions: tuple[Suppressed, ...] = ()
    # secret values the inputs carry (manifest args and env, a --token-env token); never rendered:
    # the redactor replaces them wherever they appear (kvcheck/redact.py)
    secrets: frozenset[str] = field(default=frozenset(), repr=False, compare=False)

    @property
    def verdict(self) -> Status:
        """fail beats error: a role known to fall short blocks the rollout whatever else happened.

        Every finding counts, not only the role statuses, so an error finding can never sit in a
        report whose exit code is 0.
        """
        if any(f.is_input_error for f in self.findings):
            return "error"  # an invalid input stops the run before any role is checked
        statuses = {role.status for role in self.roles}
        if "fail" in statuses or any(f.blocks and not f.is_measurement_failure for f in self.findings):
            return "fail"
        if self.strict and any(f.severity == "warning" for f in self.findings):
            return "fail"
        if "error" in statuses or any(f.is_measurement_failure for f in self.findings) or not self.roles:
            return "error"
        return "pass"

    @property
    def exit_code(self) -> int:
        """The contract's code: an error verdict is 2 when the input was invalid, else 3."""
        if any(f.is_input_error for f in self.findings):
            return int(ExitCode.INPUT)
        return int({"pass": ExitCode.PASS, "fail": ExitCode.FAIL, "error": ExitCode.ERROR}[self.verdict])

    def findings_for(self, role: str | None) -> tuple[Finding, ...]:
        return tuple(f for f in self.findings if f.role == role)


def share_of_window(pool_tokens: int, required_tokens: int) -> str:
    """The pool as a percentage of what the window requires, to 0.1 %; a pool short of it is rounded down
    where rounding would reach 100.0% (2,048 of 2,049 reads 99.9%), so a failing pool never reads as a full one."""
    if 0 <= pool_tokens < required_tokens and pool_tokens * 1000 >= required_tokens * 999:
        return f"{pool_tokens * 1000 // required_tokens / 10:.1f}%"
    return f"{pool_tokens / required_tokens:.1%}"


def role_status(findings: tuple[Finding, ...] | list[Finding], *, strict: bool) -> Status:
    """A role is `error` when it could not be checked, `fail` on any blocking finding."""
    if any(f.is_measurement_failure for f in findings):
        return "error"
    if any(f.blocks for f in findings):
        return "fail"
    if strict and any(f.severity == "warning" for f in findings):
        return "fail"
    return "pass"


@dataclass(frozen=True)
class EstimateInputs:
    """Optional overrides for estimate mode; None means "derive it" (config, profile)."""

    weights_gib_per_gpu: float | None = None
    gpu_memory_mib: int | None = None
    pre_baseline_mib: float | None = None


@dataclass(frozen=True)
class RoleTarget:
    """One role to check, as the manifest declares it (args already merged and validated)."""

    name: str
    context_length: int  # the window promised to clients, tokens
    min_headroom: float
    engine_version: str | None
    args: Mapping[str, Any]  # merged engine args keyed by SGLang field name (underscores), typed
    argv_args: tuple[str, ...]  # the same args rendered as SGLang flags (no --model-path, host, port)
    gpus: tuple[int, ...] = ()
    gpu: str | None = None  # GPU type the manifest names for this role
    model_path: str | None = None
    model_config: Path | None = None  # config.json for estimate mode
    draft_config: Path | None = None  # a separate speculative draft model's config.json (estimate mode)
    engine_command: tuple[str, ...] = ()  # empty: the engine's own default launch command
    engine: str = "sglang"  # the registry name of the serving engine (kvcheck.engines.ENGINES)
    device: str | None = None  # the manifest's `device` ("cuda" or "cpu"); None: not stated (Engine.device)
    # hosts one instance spans without an engine flag (`roles.N.nodes`: vLLM over a Ray cluster of its
    # group's pods); 1 when the args state the node count (--nnodes) or the role runs on one host
    nodes: int = 1
    env: Mapping[str, str] = field(default_factory=dict)
    estimate: EstimateInputs = field(default_factory=EstimateInputs)
    location: Location | None = None  # where the role is declared
    arg_locations: Mapping[str, Location] = field(default_factory=dict)  # field name -> where set
    image: str | None = None  # the container image the role's deployment file names (None: a manifest's role)
    # the side of a prefill/decode pair the role plays where its engine's arguments do not say (`roles.N.side`;
    # NVIDIA Dynamo's vLLM workers, whose side is Dynamo's own flag): the pair rules read it
    side: str | None = None

    @property
    def required_tokens(self) -> int:
        """ceil(min_headroom x context_length), in exact decimal arithmetic (1.1 x 100000 is 110000)."""
        return math.ceil(Fraction(str(self.min_headroom)) * self.context_length)

    def arg_location(self, *fields: str) -> Location | None:
        """Where the first of `fields` was set, else where the role is declared."""
        for name in fields:
            if name in self.arg_locations:
                return self.arg_locations[name]
        return self.location


@dataclass(frozen=True)
class PoolMeasurement:
    """A role's pool as one backend obtained it; pool_tokens None means it could not (see findings)."""

    role: str
    source: str  # measure, estimate, audit, log
    pool_tokens: int | None
    max_input_tokens: int | None = None
    context_len: int | None = None  # the engine's own context_len (derived or --context-length)
    engine_version: str | None = None
    # the most requests the engine runs at once (per data-parallel rank), where the measurement states it
    # (SGLang's max_running_requests, vLLM's max_num_seqs); KV111 counts no more requests than this
    max_running_requests: int | None = None
    resolved_args: Mapping[str, Any] = field(default_factory=dict)  # engine's resolved args, when known
    argv: tuple[str, ...] | None = None
    gpus: tuple[int, ...] | None = None
    pool_range: tuple[int, int] | None = None  # (low, high) for estimates with uncertain inputs
    details: Mapping[str, Any] = field(default_factory=dict)  # the backend's own evidence (see RoleResult)
    findings: tuple[Finding, ...] = ()
    fit_hints: tuple[str, ...] | None = None  # settings that would hold the window, for KV101's hint
    # SGLang's own mem_fraction_static for the role (the flag value giving it) and the reserve it keeps
    # (MiB), from the estimate model; None when unknown. KV205 compares the manifest's flag with it.
    safe_fraction: float | None = None
    safe_reserve_mib: float | None = None


@dataclass(frozen=True)
class Endpoint:
    """One live server to audit; `context_length` (tokens) overrides the command-line window."""

    name: str
    url: str
    role: str | None = None
    context_length: int | None = None
    location: Location | None = None  # where a fleet file declares it


# The planner's answer (`kvcheck plan`), as RoleResult.plan carries it to the formats.


@dataclass(frozen=True)
class FractionPlan:
    """The mem_fraction_static range that holds the window; fractions in [0, 1], pools in tokens."""

    current: float  # the manifest's flag, or the flag value equal to SGLang's own default when unset
    current_source: str  # "manifest" | "sglang default"
    current_pool_tokens: int
    min_fitting: float | None  # smallest value (0.001 steps) whose predicted pool holds the window
    min_fitting_pool_tokens: int | None
    min_fitting_worst_case: float | None  # smallest value whose LOW-end prediction holds it
    max_safe: float | None  # SGLang's own default for the role: it keeps the activation/graph reserve
    max_safe_pool_tokens: int | None
    safe_reserve_mib: float | None  # the reserve SGLang's default keeps free
    note: str | None = None
    flag: str = "mem-fraction-static"  # the engine's flag for the fraction (vLLM: gpu-memory-utilization)
    engine_label: str = "SGLang"  # how advice names the engine whose default or ceiling it quotes
    # (message, fix) when no value can help because the engine refuses the role for another reason first
    # (vLLM: a --max-model-len above the model's own length); the advice says that instead of a sweep result
    blocked: tuple[str, str] | None = None


@dataclass(frozen=True)
class PlanOption:
    """One alternative setting (a TP degree or a KV dtype) and the pool it would give."""

    setting: str  # SGLang field name: tp_size | kv_cache_dtype
    value: int | str
    pool_tokens: int | None  # None: the setting is impossible or cannot be predicted (see note)
    pool_range: tuple[int, int] | None
    fits: bool  # the predicted pool holds min_headroom x context_length
    uncertain: bool  # the window lies inside the prediction's range: might not fit, measure
    current: bool
    nnodes: int | None = None  # TP options: nodes the TP x PP group needs
    gpus: int | None = None  # TP options: GPUs the role needs (TP x PP)
    note: str | None = None


@dataclass(frozen=True)
class RolePlan:
    """What fits one role, by the estimate model; the structured answer behind `kvcheck plan`."""

    role: str
    context_length: int  # the advertised window, tokens
    min_headroom: float
    required_tokens: int  # ceil(min_headroom x context_length)
    pool_tokens: int  # predicted pool at the manifest's settings
    pool_range: tuple[int, int]
    largest_context_tokens: int
    binding_limit: str  # pool | max_total_tokens | model_context_length | num_reserved_decode_tokens
    pool_context_tokens: int  # the largest window the pool holds with the headroom
    model_context_tokens: int  # SGLang's context_len derived from the model's config
    model_context_overridable: bool  # SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN lifts the model bound
    uncertain: bool
    fraction: FractionPlan
    tp_options: tuple[PlanOption, ...]
    kv_dtype_options: tuple[PlanOption, ...]
    gpu: str
    kv_dtype: str  # resolved KV dtype at the manifest's settings
    tp_size: int
    estimates: int  # estimate_role evaluations this plan took (the bench reports it)

    @property
    def fits(self) -> bool:
        return self.pool_tokens >= self.required_tokens


# What `kvcheck probe` sent and got, as RoleResult.probe carries it to the formats.


@dataclass(frozen=True)
class ProbeLimits:
    """What the probe aims at, in tokens, with the origin of each figure (for the report)."""

    window_tokens: int  # W: the window promised to clients
    window_source: str
    max_req_input_len: int  # B: the admission bound; prompts of B tokens or more must be refused
    bound_source: str
    pool_tokens: int | None
    served_context_len: int | None  # the engine's own context_len, when stated
    source: str  # "server_info" or "options"
    version: str | None = None
    has_tokenizer: bool | None = None
    model_name: str | None = None
    allow_auto_truncate: bool | None = None
    disaggregation_mode: str | None = None
    notes: tuple[str, ...] = ()

    @property
    def context_limit(self) -> int:
        """The context the engine enforces (its own context_len, else the window)."""
        return self.served_context_len or self.window_tokens


@dataclass(frozen=True)
class ProbeOwner:
    """One synthetic client: `marker` goes into its text prompts, `pattern` into its token prompts."""

    name: str
    marker: str  # e.g. TENANT-1f2e3d4c
    pattern: tuple[int, ...]


@dataclass(frozen=True)
class SentRecord:
    """One request that left this machine, as it ended (status None: no HTTP answer, see error)."""

    seq: int  # 1-based, in sending order
    method: str
    path: str
    body_bytes: int
    status: int | None
    error: str | None


@dataclass(frozen=True)
class ProbeRequest:
    """One probe request with its answer and verdict (a row of the requests table); lengths in tokens."""

    index: int
    check: str
    endpoint: str
    stream: bool
    owner: str
    prompt: str  # "tokens" | "text"
    prompt_tokens: int | None
    max_new_tokens: int
    expected: str
    status: int | None
    outcome: str
    reported_prompt_tokens: int | None
    completion_tokens: int | None
    finish: str | None
    latency_ms: float | None
    verdict: str
    rules: tuple[str, ...]
    message: str | None
    own_marker_echoed: bool | None


@dataclass(frozen=True)
class ProbeLimitsSection:
    """The probe's `limits` row: the limits it aimed at and every request that left this machine."""

    limits: ProbeLimits | None  # None: they could not be learned
    sent: tuple[SentRecord, ...]
    owners: tuple[ProbeOwner, ...] | None = None  # None: no plan was made
    notes: tuple[str, ...] | None = None
    requests: tuple[ProbeRequest, ...] | None = None  # answered before the probe stopped early


@dataclass(frozen=True)
class ProbeGroupSection:
    """One check group's row: the endpoint it used and its requests, in plan order."""

    endpoint: str
    requests: tuple[ProbeRequest, ...]
