"""Command-specific sections the table and Markdown formats show between the roles and the findings.

Each command that has one names its renderers here; they are imported inside the functions, so
rendering a verify report never imports the planner. The sections read typed fields (RoleResult.plan,
RoleResult.probe).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from kvcheck.model import Report


@dataclass(frozen=True)
class Section:
    """A command's section renderers: `table` returns rich renderables (or preformatted strings),
    `markdown` returns Markdown text."""

    table: Callable[[Report], Sequence[Any]]
    markdown: Callable[[Report], str]


def _plan_table(report: Report) -> Sequence[Any]:
    from kvcheck.plan.text import plan_section

    return plan_section(report)


def _plan_markdown(report: Report) -> str:
    from kvcheck.plan.text import plan_markdown

    return plan_markdown(report)


def _probe_table(report: Report) -> Sequence[Any]:
    from kvcheck.probe.table import requests_section

    return requests_section(report)


def _probe_markdown(report: Report) -> str:
    from kvcheck.probe.table import requests_markdown

    return requests_markdown(report)


SECTIONS: dict[str, Section] = {
    "plan": Section(table=_plan_table, markdown=_plan_markdown),
    "probe": Section(table=_probe_table, markdown=_probe_markdown),
}


def table_section(report: Report) -> Sequence[Any]:
    section = SECTIONS.get(report.command)
    return section.table(report) if section is not None else ()


def markdown_section(report: Report) -> str:
    section = SECTIONS.get(report.command)
    return section.markdown(report) if section is not None else ""
