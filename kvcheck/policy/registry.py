"""The rule registry: every rule code, its default severity and its documentation, in one place.

Rules are defined next to the code that raises them (`define_rule`), and `all_rules()` imports every
module that defines some, so `kvcheck rules` and docs/rules.md list them all.
"""

from __future__ import annotations

import importlib
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


RULES: dict[str, Rule] = {}

# Modules that define rules; imported lazily by all_rules() so listing rules needs no heavy imports.
RULE_MODULES = (
    "kvcheck.policy.rules",
    "kvcheck.engines.sglang.sizing.rules",
    "kvcheck.backends.measure.rules",
    "kvcheck.backends.audit_rules",
    "kvcheck.engines.sglang.log_rules",
    "kvcheck.probe.rules",
    "kvcheck.plan.rules",
    "kvcheck.inputs.deploy.rules",
)


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


def get_rule(code: str) -> Rule:
    if code not in RULES:
        all_rules()
    return RULES[code]


def all_rules() -> dict[str, Rule]:
    """Every known rule, sorted by code."""
    for module in RULE_MODULES:
        try:
            importlib.import_module(module)
        except ModuleNotFoundError as exc:
            # Only a module of this list that does not exist yet is skipped; a broken import is a bug.
            if exc.name != module and not module.startswith(str(exc.name) + "."):
                raise
    return dict(sorted(RULES.items()))


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
