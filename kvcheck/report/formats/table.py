"""Human-readable tables (rich) for a terminal or a log."""

from __future__ import annotations

import io

from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

from kvcheck.model import Report
from kvcheck.report.formats.base import (
    MODE_TITLES,
    Format,
    fmt_tokens,
    margin,
    one_line,
    printable_report,
    strip_trailing,
    suppressed_text,
)
from kvcheck.report.sections import table_section

_STATUS_STYLE = {"pass": "bold green", "fail": "bold red", "error": "bold magenta"}
_SEVERITY_STYLE = {"error": "red", "warning": "yellow", "info": "cyan"}


class TableFormat(Format):
    """Human-readable tables (rich); colour only when the caller says the terminal takes it."""

    name = "table"

    def __init__(self, *, color: bool = False, width: int = 100) -> None:
        self.color = color
        self.width = width

    def render(self, report: Report) -> str:
        report = printable_report(report)  # a terminal must not run a server's or a file's escape sequences
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
        console.print(Text(MODE_TITLES.get(report.mode, report.mode), style="italic"))
        if report.context_length is not None:
            console.print(f"advertised context window: {report.context_length:,} tokens")
        console.print(self._roles_table(report))
        for renderable in table_section(report):
            if isinstance(renderable, str):
                buffer.write(renderable)  # preformatted text: wide tables must not be re-wrapped
            else:
                console.print(renderable)
        suppressed = suppressed_text(report)
        if not report.findings:
            console.print("no findings")
            if suppressed:
                console.print(f"suppressed by policy.ignore: {suppressed}")
            return strip_trailing(buffer.getvalue())
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
        if suppressed:
            console.print(f"suppressed by policy.ignore: {suppressed}")
        return strip_trailing(buffer.getvalue())

    @staticmethod
    def _roles_table(report: Report) -> Table:
        ranged = any(role.pool_range for role in report.roles)
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
                Text(one_line(role.name)),  # Text: a name like "[red]x" is not rich markup
                Text(role.status.upper(), style=_STATUS_STYLE[role.status]),
                fmt_tokens(role.pool_tokens),
                fmt_tokens(role.required_tokens),
                margin(role),
                fmt_tokens(role.max_input_tokens),
                role.source,
            ]
            if ranged:
                low_high = role.pool_range
                row.append(f"{low_high[0]:,}-{low_high[1]:,}" if low_high else "-")
            table.add_row(*row)
        return table
