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
    details: Mapping[str, Any] = field(default_factory=dict)


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

    @property
    def verdict(self) -> Status:
        """fail beats error: a role known to fall short blocks the rollout whatever else happened.

        Every finding counts, not only the role statuses, so an error finding can never sit in a
        report whose exit code is 0.
        """
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
        return int({"pass": ExitCode.PASS, "fail": ExitCode.FAIL, "error": ExitCode.ERROR}[self.verdict])

    def findings_for(self, role: str | None) -> tuple[Finding, ...]:
        return tuple(f for f in self.findings if f.role == role)


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
    engine_command: tuple[str, ...] = ()  # empty: the engine's own default launch command
    env: Mapping[str, str] = field(default_factory=dict)
    estimate: EstimateInputs = field(default_factory=EstimateInputs)
    location: Location | None = None  # where the role is declared
    arg_locations: Mapping[str, Location] = field(default_factory=dict)  # field name -> where set

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
    resolved_args: Mapping[str, Any] = field(default_factory=dict)  # engine's resolved args, when known
    argv: tuple[str, ...] | None = None
    gpus: tuple[int, ...] | None = None
    pool_range: tuple[int, int] | None = None  # (low, high) for estimates with uncertain inputs
    details: Mapping[str, Any] = field(default_factory=dict)
    findings: tuple[Finding, ...] = ()
