"""Human-readable tables (rich) for a terminal or a log."""

from __future__ import annotations

import io

from rich import box
from rich.console import Console
from rich.measure import Measurement
from rich.table import Table
from rich.text import Text

from kvcheck.escape import no_workflow_commands
from kvcheck.model import Report, RoleResult
from kvcheck.report.formats.base import (
    Format,
    fmt_tokens,
    margin,
    mode_title,
    one_line,
    printable_report,
    role_notes,
    strip_trailing,
    suppressed_text,
    suppression_lines,
)
from kvcheck.report.sections import table_section

_STATUS_STYLE = {"pass": "bold green", "fail": "bold red", "error": "bold magenta"}
def _natural_width(console: Console, table: Table) -> int:
    """The width a table takes when nothing limits it (console.measure caps it at the console's width)."""
    return Measurement.get(console, console.options.update_width(1 << 16), table).maximum


# The columns the roles' table leaves out first when a terminal is too narrow for every figure.
_DROPPABLE = ("pool range", "source", "pool/req", "input <")
_NAME_MIN = 12  # the narrowest a role name folds to before a column is left out
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
            head.append(f"  {one_line(report.source)}")
        console.print(head)
        console.print(Text(mode_title(report), style="italic"))
        if report.context_length is not None:
            console.print(f"advertised context window: {report.context_length:,} tokens")
        table, dropped = self._roles_table(report, console)
        console.print(table)
        if dropped:
            console.print(f"(left out to fit {console.width} columns: {', '.join(dropped)}; --format json has "
                          "every figure)")
        self._notes(report, console)
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
            self._suppressions(report, console)
            return no_workflow_commands(strip_trailing(buffer.getvalue()))
        console.print(Text("findings", style="bold"))
        grid = Table.grid(padding=(0, 1))
        grid.add_column(no_wrap=True)
        grid.add_column(no_wrap=True)
        grid.add_column(overflow="fold")
        for item in report.findings:
            # the role name and the path on one line each (a newline they carry must not start a line); a message
            # keeps its own lines (quoted engine lines), and render() keeps any line from starting a `::` command
            body = Text(f"[{one_line(item.role)}] " if item.role else "")
            body.append(item.message)
            if item.location is not None:
                body.append(f"\nat {one_line(item.location.render())}", style="dim")
            if item.hint:
                body.append(f"\nfix: {item.hint}", style="dim")
            grid.add_row(
                Text(item.severity.upper(), style=_SEVERITY_STYLE.get(item.severity, "")), item.rule, body
            )
        console.print(grid)
        if suppressed:
            console.print(f"suppressed by policy.ignore: {suppressed}")
        self._suppressions(report, console)
        return no_workflow_commands(strip_trailing(buffer.getvalue()))

    @staticmethod
    def _notes(report: Report, console: Console) -> None:
        """A role's note under the roles' table (a restarted log: which start was judged)."""
        for name, note in role_notes(report):
            console.print(Text(f"note [{one_line(name)}]: {note}"), overflow="fold")

    @staticmethod
    def _suppressions(report: Report, console: Console) -> None:
        """The findings a comment, the ignore file or the baseline suppressed, one a line, with why."""
        lines = suppression_lines(report)
        if lines:
            console.print(Text(f"suppressed ({len(lines)})", style="bold"))
            for line in lines:
                console.print(Text(f"  {line}"), overflow="fold")

    def _roles_table(self, report: Report, console: Console) -> tuple[Table, list[str]]:
        """The roles' table, and the columns left out so that no figure is cut at this width.

        A number is never cropped: when the table is wider than the console, the least needed columns
        go first (pool range, source, pool/req, input <), the role names wrap, and the caller says
        which columns were left out.
        """
        ranged = any(role.pool_range for role in report.roles)
        columns = ["role", "status", "pool tokens", "required", "pool/req", "input <", "source"]
        if ranged:
            columns.append("pool range")
        rows = [self._role_row(role, ranged) for role in report.roles]
        dropped: list[str] = []
        for column in (*_DROPPABLE, None):
            table = self._table(columns, rows, report)
            natural = _natural_width(console, table)
            name_width = max([len("role"), *(len(str(row[0])) for row in rows)])
            others = natural - name_width  # every column but the names, which may fold down to _NAME_MIN
            if natural <= console.width or column is None:
                break
            if others + _NAME_MIN <= console.width:
                table = self._table(columns, rows, report, name_max=console.width - others)
                break
            if column in columns:
                dropped.append(column)
                keep = [i for i, name in enumerate(columns) if name != column]
                columns = [columns[i] for i in keep]
                rows = [[row[i] for i in keep] for row in rows]
        return table, dropped

    @staticmethod
    def _role_row(role: RoleResult, ranged: bool) -> list[Text | str]:
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
        return row

    @staticmethod
    def _table(columns: list[str], rows: list[list[Text | str]], report: Report, *,
               name_max: int | None = None) -> Table:
        table = Table(box=box.SIMPLE_HEAVY, show_edge=False, pad_edge=False)
        name_width = min(40, max([len(role.name) for role in report.roles] + [4]))
        for i, column in enumerate(columns):
            cells = [len(str(row[i])) for row in rows]
            table.add_column(
                column,
                justify="left" if column in ("role", "status", "source") else "right",
                no_wrap=column != "role",
                # the role's name folds; every other cell keeps its whole width (a figure is never cut)
                min_width=min(name_width, _NAME_MIN) if column == "role" else max([len(column), *cells]),
                max_width=name_max if column == "role" else None,
                overflow="fold",
            )
        for row in rows:
            table.add_row(*row)
        return table
