"""Report renderers: each turns a Report into text and never writes it anywhere itself."""

from __future__ import annotations

import importlib
import io
import json
from abc import ABC, abstractmethod
from typing import Any
from xml.etree import ElementTree as ET

from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

from kvcheck.model import REPORT_SCHEMA, Finding, Report, RoleResult

_MODE_TITLES = {
    "measure": "measured pools (engine booted)",
    "estimate": "PREDICTED pools (estimate mode: no engine was booted; figures are predictions)",
    "audit": "pools reported by live servers",
    "logs": "pools read from engine startup logs",
    "probe": "live probe of the deployment's front door",
}


def _fmt_tokens(value: int | None) -> str:
    return "-" if value is None else f"{value:,}"


def _margin(role: RoleResult) -> str:
    if role.pool_tokens is None or not role.required_tokens:
        return "-"
    return f"{role.pool_tokens / role.required_tokens:.1%}"


class Format(ABC):
    """A report format; `render` returns the whole text."""

    name: str

    @abstractmethod
    def render(self, report: Report) -> str: ...


class JsonFormat(Format):
    name = "json"

    def render(self, report: Report) -> str:
        return json.dumps(report_to_dict(report), indent=2, sort_keys=False, default=str) + "\n"


def _finding_dict(item: Finding) -> dict[str, Any]:
    location = None
    if item.location is not None:
        location = {"file": item.location.file, "line": item.location.line, "column": item.location.column}
    return {
        "rule": item.rule,
        "severity": item.severity,
        "role": item.role,
        "message": item.message,
        "hint": item.hint,
        "location": location,
    }


def report_to_dict(report: Report) -> dict[str, Any]:
    """The JSON report (schema kvcheck/report/v1): every contract field, null where unknown."""
    return {
        "schema": REPORT_SCHEMA,
        "kvcheck_version": report.kvcheck_version,
        "command": report.command,
        "source": report.source,
        "mode": report.mode,
        "verdict": report.verdict,
        "exit_code": report.exit_code,
        "context_length": report.context_length,
        "roles": [
            {
                "name": role.name,
                "status": role.status,
                "pool_tokens": role.pool_tokens,
                "required_tokens": role.required_tokens,
                "max_input_tokens": role.max_input_tokens,
                "source": role.source,
                "gpus": list(role.gpus) if role.gpus is not None else None,
                "argv": list(role.argv) if role.argv is not None else None,
                "details": dict(role.details),
            }
            for role in report.roles
        ],
        "findings": [_finding_dict(item) for item in report.findings],
    }


# Command-specific sections shown between the roles table and the findings: command ->
# (module, table-section function returning rich renderables, markdown function returning text).
# Imported lazily so rendering a verify report never imports the planner.
SECTIONS: dict[str, tuple[str, str | None, str | None]] = {
    "plan": ("kvcheck.plan.text", "plan_section", "plan_markdown"),
    "probe": ("kvcheck.probe.table", "requests_section", "requests_markdown"),
}


def _section(report: Report, which: int) -> Any:
    spec = SECTIONS.get(report.command)
    if spec is None or spec[which] is None:
        return None
    module = importlib.import_module(spec[0])
    return getattr(module, spec[which])(report)


_STATUS_STYLE = {"pass": "bold green", "fail": "bold red", "error": "bold magenta"}
_SEVERITY_STYLE = {"error": "red", "warning": "yellow", "info": "cyan"}


class TableFormat(Format):
    """Human-readable tables (rich); colour only when the caller says the terminal takes it."""

    name = "table"

    def __init__(self, *, color: bool = False, width: int = 100) -> None:
        self.color = color
        self.width = width

    def render(self, report: Report) -> str:
        buffer = io.StringIO()
        console = Console(
            file=buffer,
            width=self.width,
            force_terminal=self.color,
            no_color=not self.color,
            color_system="standard" if self.color else None,
            highlight=False,
            emoji=False,
        )
        verdict = report.verdict.upper()
        head = Text.assemble(
            ("kvcheck ", "bold"),
            (report.command, "bold"),
            ": ",
            (verdict, _STATUS_STYLE[report.verdict]),
            f" (exit {report.exit_code})",
        )
        if report.source:
            head.append(f"  {report.source}")
        console.print(head)
        console.print(Text(_MODE_TITLES.get(report.mode, report.mode), style="italic"))
        if report.context_length is not None:
            console.print(f"advertised context window: {report.context_length:,} tokens")
        ranged = any(role.details.get("pool_range") for role in report.roles)
        table = Table(box=box.SIMPLE_HEAVY, show_edge=False, pad_edge=False)
        columns = ["role", "status", "pool tokens", "required", "pool/req", "max input", "source"]
        if ranged:
            columns.append("pool range")
        name_width = min(40, max([len(role.name) for role in report.roles] + [4]))
        for column in columns:
            table.add_column(
                column,
                justify="left" if column in ("role", "status", "source") else "right",
                no_wrap=column != "role",
                min_width=name_width if column == "role" else None,
                overflow="fold",
            )
        for role in report.roles:
            row: list[Text | str] = [
                role.name,
                Text(role.status.upper(), style=_STATUS_STYLE[role.status]),
                _fmt_tokens(role.pool_tokens),
                _fmt_tokens(role.required_tokens),
                _margin(role),
                _fmt_tokens(role.max_input_tokens),
                role.source,
            ]
            if ranged:
                low_high = role.details.get("pool_range")
                row.append(f"{low_high[0]:,}-{low_high[1]:,}" if low_high else "-")
            table.add_row(*row)
        console.print(table)
        for renderable in _section(report, 1) or ():
            if isinstance(renderable, str):
                buffer.write(renderable)  # preformatted text: wide tables must not be re-wrapped
            else:
                console.print(renderable)
        if not report.findings:
            console.print("no findings")
            return _strip_trailing(buffer.getvalue())
        console.print(Text("findings", style="bold"))
        grid = Table.grid(padding=(0, 1))
        grid.add_column(no_wrap=True)
        grid.add_column(no_wrap=True)
        grid.add_column(overflow="fold")
        for item in report.findings:
            body = Text(f"[{item.role}] " if item.role else "")
            body.append(item.message)
            if item.location is not None:
                body.append(f"\nat {item.location.render()}", style="dim")
            if item.hint:
                body.append(f"\nfix: {item.hint}", style="dim")
            grid.add_row(
                Text(item.severity.upper(), style=_SEVERITY_STYLE.get(item.severity, "")), item.rule, body
            )
        console.print(grid)
        return _strip_trailing(buffer.getvalue())


def _strip_trailing(text: str) -> str:
    """rich pads every line to the table width; reports and golden files should not carry that."""
    return "".join(line.rstrip() + "\n" for line in text.splitlines())


def _gh_escape_data(text: str) -> str:
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def _gh_escape_property(text: str) -> str:
    return _gh_escape_data(text).replace(":", "%3A").replace(",", "%2C")


class GithubFormat(Format):
    """GitHub Actions workflow commands: one annotation per finding, on the manifest line."""

    name = "github"
    _LEVEL = {"error": "error", "warning": "warning", "info": "notice"}

    def render(self, report: Report) -> str:
        lines = []
        for item in report.findings:
            props = []
            if item.location is not None:
                props.append(f"file={_gh_escape_property(item.location.file)}")
                if item.location.line is not None:
                    props.append(f"line={item.location.line}")
                    if item.location.column is not None:
                        props.append(f"col={item.location.column}")
            title = item.rule + (f" {item.role}" if item.role else "")
            props.append(f"title={_gh_escape_property(title)}")
            message = item.message + (f"\nfix: {item.hint}" if item.hint else "")
            lines.append(f"::{self._LEVEL[item.severity]} {','.join(props)}::{_gh_escape_data(message)}")
        summary = ", ".join(
            f"{role.name}={role.status}({_fmt_tokens(role.pool_tokens)}/{_fmt_tokens(role.required_tokens)})"
            for role in report.roles
        )
        lines.append(f"kvcheck {report.command}: {report.verdict} (exit {report.exit_code}) {summary}".rstrip())
        return "\n".join(lines) + "\n"


def _md_cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", "<br>")


class MarkdownFormat(Format):
    """A Markdown summary fit for $GITHUB_STEP_SUMMARY or a merge-request comment."""

    name = "markdown"
    _ICON = {"pass": "PASS", "fail": "FAIL", "error": "ERROR"}

    def render(self, report: Report) -> str:
        out = [f"## kvcheck {report.command}: {self._ICON[report.verdict]} (exit {report.exit_code})", ""]
        meta = [f"mode: {_MODE_TITLES.get(report.mode, report.mode)}"]
        if report.source:
            meta.append(f"source: `{report.source}`")
        if report.context_length is not None:
            meta.append(f"advertised window: {report.context_length:,} tokens")
        out.extend(f"- {m}" for m in meta)
        out.append("")
        out.append("| role | status | pool tokens | required | pool/req | max input | source |")
        out.append("| --- | --- | ---: | ---: | ---: | ---: | --- |")
        for role in report.roles:
            out.append(
                "| "
                + " | ".join(
                    [
                        _md_cell(role.name),
                        self._ICON[role.status],
                        _fmt_tokens(role.pool_tokens),
                        _fmt_tokens(role.required_tokens),
                        _margin(role),
                        _fmt_tokens(role.max_input_tokens),
                        role.source,
                    ]
                )
                + " |"
            )
        out.append("")
        extra = _section(report, 2)
        if extra:
            out.append(extra.rstrip("\n"))
            out.append("")
        if report.findings:
            out.append("| severity | rule | role | finding | fix |")
            out.append("| --- | --- | --- | --- | --- |")
            for item in report.findings:
                where = f" ({item.location.render()})" if item.location else ""
                out.append(
                    f"| {item.severity} | {item.rule} | {_md_cell(item.role or '-')} | "
                    f"{_md_cell(item.message + where)} | {_md_cell(item.hint or '')} |"
                )
        else:
            out.append("No findings.")
        return "\n".join(out) + "\n"


class JunitFormat(Format):
    """JUnit XML: one testcase per role; failures and errors carry the findings."""

    name = "junit"

    def render(self, report: Report) -> str:
        suite = ET.Element(
            "testsuite",
            name=f"kvcheck {report.command}",
            tests=str(len(report.roles) + (1 if report.findings_for(None) else 0)),
            failures=str(sum(r.status == "fail" for r in report.roles)),
            errors=str(sum(r.status == "error" for r in report.roles)),
            skipped="0",
        )
        props = ET.SubElement(suite, "properties")
        for key, value in (
            ("mode", report.mode),
            ("source", report.source or ""),
            ("context_length", "" if report.context_length is None else str(report.context_length)),
            ("verdict", report.verdict),
        ):
            ET.SubElement(props, "property", name=key, value=value)
        cases: list[tuple[str, str, tuple[Finding, ...], str]] = []
        for role in report.roles:
            summary = (
                f"pool {_fmt_tokens(role.pool_tokens)} tokens, required {_fmt_tokens(role.required_tokens)}, "
                f"source {role.source}"
            )
            cases.append((role.name, role.status, report.findings_for(role.name), summary))
        deployment = report.findings_for(None)
        if deployment:
            status = "fail" if any(f.blocks and not f.is_measurement_failure for f in deployment) else (
                "error" if any(f.is_measurement_failure for f in deployment) else "pass"
            )
            cases.append(("deployment", status, deployment, "cross-role checks"))
        suite.set("tests", str(len(cases)))
        for name, status, findings, summary in cases:
            case = ET.SubElement(suite, "testcase", classname=f"kvcheck.{report.command}", name=name)
            text = "\n".join(
                f"{f.severity} {f.rule}: {f.message}" + (f" (fix: {f.hint})" if f.hint else "") for f in findings
            )
            if status in ("fail", "error"):
                blocking = [f for f in findings if f.blocks] or list(findings)
                tag = "failure" if status == "fail" else "error"
                first = blocking[0] if blocking else None
                element = ET.SubElement(
                    case,
                    tag,
                    message=(f"{first.rule}: {first.message}" if first else status),
                    type=first.rule if first else status,
                )
                element.text = text
            out = ET.SubElement(case, "system-out")
            out.text = summary + ("\n" + text if text and status == "pass" else "")
        ET.indent(suite)
        return '<?xml version="1.0" encoding="utf-8"?>\n' + ET.tostring(suite, encoding="unicode") + "\n"


FORMATTERS: dict[str, type[Format]] = {
    cls.name: cls for cls in (TableFormat, JsonFormat, JunitFormat, GithubFormat, MarkdownFormat)
}
