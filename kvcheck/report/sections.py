"""Command-specific sections the table and Markdown formats show between the roles and the findings.

Each command that has one names its renderers here; they are imported lazily, so rendering a verify
report never imports the planner. The sections read typed fields (RoleResult.plan, RoleResult.probe).
"""

from __future__ import annotations

import importlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from kvcheck.model import Report


@dataclass(frozen=True)
class Section:
    """Where a command's section renderers live: `table` returns rich renderables (or preformatted
    strings), `markdown` returns Markdown text."""

    module: str
    table: str
    markdown: str

    def table_renderables(self, report: Report) -> Sequence[Any]:
        return getattr(importlib.import_module(self.module), self.table)(report)

    def markdown_text(self, report: Report) -> str:
        return getattr(importlib.import_module(self.module), self.markdown)(report)


SECTIONS: dict[str, Section] = {
    "plan": Section("kvcheck.plan.text", table="plan_section", markdown="plan_markdown"),
    "probe": Section("kvcheck.probe.table", table="requests_section", markdown="requests_markdown"),
}


def table_section(report: Report) -> Sequence[Any]:
    section = SECTIONS.get(report.command)
    return section.table_renderables(report) if section is not None else ()


def markdown_section(report: Report) -> str:
    section = SECTIONS.get(report.command)
    return section.markdown_text(report) if section is not None else ""
