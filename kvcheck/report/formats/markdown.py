"""A Markdown summary fit for $GITHUB_STEP_SUMMARY or a merge-request comment."""

from __future__ import annotations

from kvcheck.model import Report
from kvcheck.report.formats.base import (
    Format,
    fmt_tokens,
    margin,
    markdown_code,
    markdown_text,
    mode_title,
    printable_report,
    role_notes,
    suppressed_text,
    suppression_lines,
)
from kvcheck.report.sections import markdown_section

_cell = markdown_text  # every cell and line of untrusted text: Markdown's specials escaped


class MarkdownFormat(Format):
    """A Markdown summary fit for $GITHUB_STEP_SUMMARY or a merge-request comment."""

    name = "markdown"
    _ICON = {"pass": "PASS", "fail": "FAIL", "error": "ERROR"}

    def render(self, report: Report) -> str:
        report = printable_report(report)  # escape sequences shown, not run, wherever the summary is viewed
        out = [f"## kvcheck {report.command}: {self._ICON[report.verdict]} (exit {report.exit_code})", ""]
        meta = [f"mode: {mode_title(report)}"]
        if report.source:
            meta.append(f"source: {markdown_code(report.source)}")
        if report.context_length is not None:
            meta.append(f"advertised window: {report.context_length:,} tokens")
        out.extend(f"- {m}" for m in meta)
        out.append("")
        if report.roles or report.exit_code != 2:  # invalid input: no role was read, no empty table
            out.append("| role | status | pool tokens | required | pool/req | input < | source |")
            out.append("| --- | --- | ---: | ---: | ---: | ---: | --- |")
            out.append("")
        for role in report.roles:
            cells = [
                _cell(role.name),
                self._ICON[role.status],
                fmt_tokens(role.pool_tokens),
                fmt_tokens(role.required_tokens),
                margin(role),
                fmt_tokens(role.max_input_tokens),
                _cell(role.source),
            ]
            out.insert(len(out) - 1, "| " + " | ".join(cells) + " |")
        notes = role_notes(report)
        if notes:
            out.extend(f"- note ({_cell(name)}): {_cell(note)}" for name, note in notes)
            out.append("")
        extra = markdown_section(report)
        if extra:
            out.append(extra.rstrip("\n"))
            out.append("")
        if report.findings:
            out.append("| severity | rule | role | finding | fix |")
            out.append("| --- | --- | --- | --- | --- |")
            for item in report.findings:
                where = f" ({item.location.render()})" if item.location else ""
                out.append(
                    f"| {item.severity} | {item.rule} | {_cell(item.role or '-')} | "
                    f"{_cell(item.message + where)} | {_cell(item.hint or '')} |"
                )
        else:
            out.append("No findings.")
        suppressed = suppressed_text(report)
        if suppressed:
            out.append("")
            out.append(f"Suppressed by `policy.ignore`: {_cell(suppressed)}.")
        lines = suppression_lines(report)
        if lines:
            out.append("")
            out.append(f"Suppressed ({len(lines)}):")
            out.extend(f"- {_cell(line)}" for line in lines)
        return "\n".join(out) + "\n"
