"""The manifest's policy block as a value: what the inputs build and the judge applies.

Kept apart from the rules (kvcheck/policy/rules.py) so that the input stage can build it without
importing the policy's rules (tools/import_graph.py's contracts).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from kvcheck.model import Finding, Severity


@dataclass(frozen=True)
class PolicyConfig:
    """The manifest's policy block: headroom factor, minimum concurrency, ignored rules, severity overrides."""

    min_headroom: float = 1.0
    # requests of the window each role's pool must hold at once (KV111); 1: one, which KV101 checks
    min_concurrency: float = 1.0
    ignore: frozenset[str] = frozenset()
    severity: Mapping[str, Severity] = field(default_factory=dict)

    def apply(self, findings: Sequence[Finding]) -> list[Finding]:
        """Drop ignored rules and apply severity overrides."""
        return self.split(findings)[0]

    def split(self, findings: Sequence[Finding]) -> tuple[list[Finding], list[Finding]]:
        """(kept with severity overrides applied, dropped by `ignore`): reports count what they drop."""
        out = []
        dropped = []
        for item in findings:
            if item.rule in self.ignore:
                dropped.append(item)
                continue
            override = self.severity.get(item.rule)
            if override and override != item.severity:
                item = Finding(item.rule, override, item.role, item.message, item.hint, item.location)
            out.append(item)
        return out, dropped
