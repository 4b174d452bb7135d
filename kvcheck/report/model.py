"""Immutable report values shared by every command: findings, per-role results, the report."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
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


EXIT_PASS = 0
EXIT_FAIL = 1
EXIT_INPUT = 2
EXIT_ERROR = 3
EXIT_INTERNAL = 4


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
        return {"pass": EXIT_PASS, "fail": EXIT_FAIL, "error": EXIT_ERROR}[self.verdict]

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
