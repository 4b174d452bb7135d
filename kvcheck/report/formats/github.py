"""GitHub Actions workflow commands: one annotation per finding, on the line that causes it."""

from __future__ import annotations

from pathlib import Path

from kvcheck.model import Report
from kvcheck.report.formats.base import (
    Format,
    fmt_tokens,
    one_line,
    printable_report,
    relative_path,
    role_notes,
    suppressed_text,
    suppression_lines,
)


def _escape_data(text: str) -> str:
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def _escape_property(text: str) -> str:
    return _escape_data(text).replace(":", "%3A").replace(",", "%2C")


class GithubFormat(Format):
    """GitHub Actions workflow commands: one annotation per finding, on the manifest line."""

    name = "github"
    _LEVEL = {"error": "error", "warning": "warning", "info": "notice"}

    def __init__(self, *, base: Path | None = None) -> None:
        self.base = base  # annotation paths are relative to this folder (default: the working directory)

    def render(self, report: Report) -> str:
        report = printable_report(report)  # no control character reaches the runner's log
        lines = []
        for item in report.findings:
            props = []
            if item.location is not None:
                props.append(f"file={_escape_property(relative_path(item.location.file, self.base))}")
                if item.location.line is not None:
                    props.append(f"line={item.location.line}")
                    if item.location.column is not None:
                        props.append(f"col={item.location.column}")
            title = item.rule + (f" {item.role}" if item.role else "")
            props.append(f"title={_escape_property(title)}")
            message = item.message + (f"\nfix: {item.hint}" if item.hint else "")
            lines.append(f"::{self._LEVEL[item.severity]} {','.join(props)}::{_escape_data(message)}")
        for name, note in role_notes(report):
            lines.append(f"::notice title={_escape_property('kvcheck ' + name)}::{_escape_data(note)}")
        suppressed = suppressed_text(report)
        if suppressed:
            lines.append(f"::notice title=kvcheck::{_escape_data('suppressed by policy.ignore: ' + suppressed)}")
        for line in suppression_lines(report):
            lines.append(f"::notice title=kvcheck suppressed::{_escape_data(line)}")
        summary = ", ".join(
            f"{one_line(role.name)}={role.status}({fmt_tokens(role.pool_tokens)}/{fmt_tokens(role.required_tokens)})"
            for role in report.roles
        )
        # a plain line: a role name with a newline must not start a `::command` line of its own
        lines.append(f"kvcheck {report.command}: {report.verdict} (exit {report.exit_code}) {summary}".rstrip())
        return "\n".join(lines) + "\n"
