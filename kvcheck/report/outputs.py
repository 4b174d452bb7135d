"""`--report FORMAT=FILE`: one run writes its report in more formats (a CI job's summary, SARIF, JUnit).

A measure run boots engines for minutes; running it once per format would multiply that. The option
is repeatable and checked before the command runs (a known format, an existing folder), like
`--output`. Files get the same redacted report as stdout.
"""

from __future__ import annotations

from pathlib import Path

import click

from kvcheck.model import Report
from kvcheck.report.formats import FORMATTERS, TableFormat

_META_KEY = "kvcheck.report_files"


def _collect(ctx: click.Context, param: click.Parameter, values: tuple[str, ...]) -> None:
    files: list[tuple[str, Path]] = []
    for value in values:
        fmt, sep, name = value.partition("=")
        if not sep or not name:
            raise click.BadParameter(f"'{value}': give FORMAT=FILE, e.g. sarif=kvcheck.sarif", ctx, param)
        if fmt not in FORMATTERS:
            raise click.BadParameter(
                f"'{value}': unknown format '{fmt}' (choose from {', '.join(sorted(FORMATTERS))})", ctx, param
            )
        path = Path(name)
        if not path.absolute().parent.is_dir():
            raise click.BadParameter(f"folder {path.absolute().parent} does not exist; create it first", ctx, param)
        files.append((fmt, path))
    ctx.meta[_META_KEY] = tuple(files)


report_files_option = click.option(
    "--report",
    "report_files",
    multiple=True,
    metavar="FORMAT=FILE",
    expose_value=False,
    callback=_collect,
    help="Also write the report in FORMAT to FILE (repeatable), e.g. --report sarif=kvcheck.sarif.",
)


def render(report: Report, fmt: str) -> str:
    """The report in one format, as a file holds it (a table without colour, 100 columns wide)."""
    formatter = TableFormat(color=False, width=100) if fmt == "table" else FORMATTERS[fmt]()
    return formatter.render(report)


def write_report_files(report: Report) -> list[Path]:
    """Write every --report FORMAT=FILE of the running command; the paths written."""
    ctx = click.get_current_context(silent=True)
    files: tuple[tuple[str, Path], ...] = ctx.meta.get(_META_KEY, ()) if ctx is not None else ()
    for fmt, path in files:
        try:
            path.write_text(render(report, fmt), encoding="utf-8")
        except OSError as exc:
            raise click.UsageError(f"cannot write --report {fmt}={path}: {exc.strerror}") from exc
    return [path for _, path in files]
