"""The rule registry: every rule code, its default severity and its documentation, in one place.

Rules are defined next to the code that raises them (`define_rule`); the catalogue
(`kvcheck/policy/catalogue.py`) imports them all, so `kvcheck rules` and docs/rules.md list them all.
The registry imports nothing above the shared values: the policy package hands it the catalogue
(`use_catalogue`), because the catalogue imports every rule-defining module and each of those
imports this one.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TypeGuard

from kvcheck.model import Finding, Location, Severity

_SEVERITIES = ("error", "warning", "info")


@dataclass(frozen=True)
class Rule:
    """A stable rule code with its default severity; `doc` gives the reason and the fix."""

    code: str
    severity: Severity
    title: str
    doc: str


# Every rule defined so far, by code (a rule's module defines it on import).
RULES: dict[str, Rule] = {}

# Gives every rule kvcheck has (the catalogue); asked only for a code no imported module defined yet.
_catalogue: Callable[[], Iterable[Rule]] | None = None


def _is_severity(text: str) -> TypeGuard[Severity]:
    return text in _SEVERITIES


def define_rule(code: str, severity: str, title: str, doc: str) -> Rule:
    """Register a rule; defining the same code twice with other content is a bug."""
    if not _is_severity(severity):
        raise ValueError(f"rule {code}: severity must be one of {_SEVERITIES}, not {severity!r}")
    rule = Rule(code=code, severity=severity, title=title, doc=" ".join(doc.split()))
    existing = RULES.get(code)
    if existing is not None and existing != rule:
        raise ValueError(f"rule {code} is defined twice with different content")
    RULES[code] = rule
    return rule


def use_catalogue(catalogue: Callable[[], Iterable[Rule]]) -> None:
    """Say where every rule comes from; the policy package calls it, so the registry imports no rule module."""
    global _catalogue
    _catalogue = catalogue


def _every_rule() -> dict[str, Rule]:
    if _catalogue is None:
        raise LookupError("no rule catalogue: kvcheck.policy installs kvcheck.policy.catalogue on import")
    return {rule.code: rule for rule in _catalogue()}


def get_rule(code: str) -> Rule:
    """The rule of `code`: a rule defined by a module imported so far, else the catalogue's."""
    rule = RULES.get(code)
    return rule if rule is not None else _every_rule()[code]


def all_rules() -> dict[str, Rule]:
    """Every rule of the catalogue, sorted by code."""
    return dict(sorted(_every_rule().items()))


def finding(
    code: str,
    role: str | None,
    message: str,
    *,
    hint: str | None = None,
    location: Location | None = None,
    severity: Severity | None = None,
) -> Finding:
    """A Finding of rule `code` with the rule's default severity unless the caller overrides it."""
    rule = get_rule(code)
    return Finding(
        rule=code,
        severity=severity or rule.severity,
        role=role,
        message=message,
        hint=hint,
        location=location,
    )
