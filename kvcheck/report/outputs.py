"""`--report FORMAT=FILE`: one run writes its report in more formats (a CI job's summary, SARIF, JUnit).

A measure run boots engines for minutes; running it once per format would multiply that. The option
is repeatable and checked before the command runs (a known format, an existing folder), like
`--output`. Files get the same redacted report as stdout.

Every report file (`--output`, `--report`) is written by `write_output`: opened without following a
symbolic link (O_NOFOLLOW), never a FIFO or a device, and never one of the run's own input files (the
same file, by device and inode, so a hard link or another spelling of the path is caught too):
`--output deploy.yaml` once overwrote the manifest it checked, and a link planted where the report
goes was written through. `check_outputs` says so before the command runs, `write_output` again
when it writes.
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import click

from kvcheck.errors import CheckError, KvcheckError
from kvcheck.io.textfile import files_read
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
        write_output(path, render(report, fmt), f"--report {fmt}={path}")
    return [path for _, path in files]


# -- creating report files ------------------------------------------------------------------------------

_OUTPUT_PARAMS = frozenset({"output"})


def _input_paths(ctx: click.Context | None) -> Iterator[str]:
    """Every path-like value the command was given (FILES, --fleet, --manifest, --model-config, ...),
    other than the report files themselves: whatever names an existing file is an input."""
    while ctx is not None:
        for name, value in ctx.params.items():
            if name in _OUTPUT_PARAMS:
                continue
            for item in value if isinstance(value, tuple | list) else (value,):
                if isinstance(item, str | Path) and str(item) not in ("", "-"):
                    yield str(item)
                elif hasattr(item, "name") and isinstance(item.name, str):  # an open click.File
                    yield item.name
        ctx = ctx.parent


def _identity(path: str) -> tuple[int, int] | None:
    try:
        found = os.stat(path)
    except (OSError, ValueError):
        return None
    return (found.st_dev, found.st_ino) if stat.S_ISREG(found.st_mode) else None


def _inputs(ctx: click.Context | None) -> dict[tuple[int, int], str]:
    """The run's inputs by (device, inode): the files it was given and every file it has read since
    (a manifest's model.config, an overlay's deployment files, a fleet file)."""
    # a file read and since removed (an engine's temporary log) is no input: its inode may be reused
    out = {identity: name for identity, name in files_read().items() if _identity(name) == identity}
    for path in _input_paths(ctx):
        identity = _identity(path)
        if identity is not None:
            out.setdefault(identity, path)
    return out


def output_problem(path: Path, inputs: dict[tuple[int, int], str]) -> str | None:
    """Why kvcheck will not write a report to `path` (None: it will)."""
    try:
        found = os.lstat(path)
    except FileNotFoundError:
        return None
    except OSError as exc:
        return exc.strerror or str(exc)
    if stat.S_ISLNK(found.st_mode):
        return "is a symbolic link: kvcheck does not write a report through one (give the path it points to)"
    if not _writable_kind(found.st_mode):
        return "exists and is not a regular file"
    same = inputs.get((found.st_dev, found.st_ino))
    if same is not None:
        return f"is one of this run's input files ({same}): the report would overwrite it"
    return None


def _writable_kind(mode: int) -> bool:
    """A regular file, or a character device (`--output /dev/null` beside `--report sarif=...`); never a
    FIFO, a socket or a folder."""
    return stat.S_ISREG(mode) or stat.S_ISCHR(mode)


def check_outputs(output: Path | None) -> None:
    """Before the command runs: every report file (--output, each --report) can be written, none is
    an input, and no two are the same file. click.UsageError (exit 2) otherwise."""
    ctx = click.get_current_context(silent=True)
    files: list[tuple[str, Path]] = [(f"--output {output}", output)] if output is not None else []
    files += [(f"--report {fmt}={path}", path) for fmt, path in (ctx.meta.get(_META_KEY, ()) if ctx else ())]
    inputs = _inputs(ctx)
    seen: dict[str, str] = {}
    for label, path in files:
        problem = output_problem(path, inputs)
        if problem is not None:
            raise click.UsageError(f"{label}: {path} {problem}")
        key = os.path.realpath(path)
        if key in seen:
            raise click.UsageError(f"{label}: {seen[key]} writes the same file")
        seen[key] = label


def write_output(path: Path, text: str, label: str) -> None:
    """Write a report file: created or replaced in place, never through a symbolic link, never over an
    input of the run (checked on the open file, so a link or a swap after check_outputs is caught)."""
    ctx = click.get_current_context(silent=True)
    flags = os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags, 0o666)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise click.UsageError(f"cannot write {label}: {path} is a symbolic link: kvcheck does not write "
                                   "a report through one (give the path it points to)") from exc
        raise click.UsageError(f"cannot write {label}: {exc.strerror}") from exc
    try:
        found = os.fstat(fd)
        problem = None
        if not _writable_kind(found.st_mode):
            problem = "exists and is not a regular file"
        elif (found.st_dev, found.st_ino) in (inputs := _inputs(ctx)):
            problem = f"is one of this run's input files ({inputs[(found.st_dev, found.st_ino)]}): " \
                      "the report would overwrite it"
        if problem is not None:
            raise click.UsageError(f"cannot write {label}: {path} {problem}")
        os.set_blocking(fd, True)
        if stat.S_ISREG(found.st_mode):
            os.ftruncate(fd, 0)
        with os.fdopen(fd, "w", encoding="utf-8", closefd=False) as stream:
            stream.write(text)
    except OSError as exc:
        # the path was good and the run done: the report did not reach its reader (a full disk), as for stdout
        raise CheckError(f"cannot write {label}: {exc.strerror or exc}",
                         hint="free space where the report goes, or write it elsewhere") from exc
    finally:
        os.close(fd)



# -- the report of invalid input ------------------------------------------------------------------------


def _known_destinations(fmt: str | None, output: str | Path | None,
                        report_files: tuple[str, ...] | list[str] | tuple[tuple[str, Path], ...]
                        ) -> list[tuple[str, Path, str]]:
    """(format, path, label) of every report file asked for whose format is known and folder exists;
    None as path: stdout. A value the command line got wrong is left out, never guessed."""
    out: list[tuple[str, Path, str]] = []
    shown = "table" if fmt is None else fmt  # no --format: the default; an unknown one: no guess
    if output is not None and str(output) not in ("", "-") and Path(output).absolute().parent.is_dir() \
            and shown in FORMATTERS:
        out.append((shown, Path(output), f"--output {output}"))
    for item in report_files:
        if isinstance(item, tuple):
            name, path = item
        else:
            name, _, file = str(item).partition("=")
            if name not in FORMATTERS or not file or not Path(file).absolute().parent.is_dir():
                continue
            path = Path(file)
        out.append((name, path, f"--report {name}={path}"))
    return out


def write_input_error_reports(report: Report, *, fmt: str | None, output: str | Path | None,
                              report_files: tuple[str, ...] | list[str] | tuple[tuple[str, Path], ...] | None = None,
                              inputs: dict[tuple[int, int], str] | None = None,
                              notice: Callable[[str], None], echo: Callable[[str], None]) -> None:
    """Write an input error's report wherever the command line asked for one (stdout, --output, each
    --report), so CI formats show it; the table on stdout is left out: stderr already says it.

    `report_files`: the --report values (raw FORMAT=FILE strings when the command line failed to
    parse, else the checked pairs); `inputs`: the run's input files by identity (default: the running
    command's), never overwritten. A file that cannot be written is said on stderr; the exit code
    (2, or 3 for a run stopped before checking) stays whatever happens here.
    """
    ctx = click.get_current_context(silent=True)
    if report_files is None:
        report_files = ctx.meta.get(_META_KEY, ()) if ctx is not None else ()
    known = {**_inputs(ctx), **(inputs or {})}
    for name, path, label in _known_destinations(fmt, output, report_files):
        problem = output_problem(path, known)
        if problem is not None:
            notice(f"kvcheck: {label}: no report written: {path} {problem}")
            continue
        try:
            write_output(path, render(report, name), label)
        except click.UsageError as exc:
            notice(f"kvcheck: {exc.format_message()}")
            continue
        except KvcheckError as exc:
            notice(f"kvcheck: {exc.message}")
            continue
        if label.startswith("--output"):
            notice(f"kvcheck: report written to {path} (verdict {report.verdict}, exit {report.exit_code})")
    if output is None and fmt in FORMATTERS and fmt != "table":
        echo(render(report, fmt))


def parsed_destinations(command: click.Command, args: list[str]) -> tuple[
        str | None, str | None, list[str], dict[tuple[int, int], str], dict[str, Any]]:
    """--format, --output and --report of a command line click refused, read without converting a value
    (an unknown option is passed over), and every file the line names otherwise: the run's inputs."""
    probe = click.Context(command, info_name=command.name, ignore_unknown_options=True, allow_extra_args=True,
                          resilient_parsing=True)
    try:
        opts, extra, _ = command.make_parser(probe).parse_args(args=list(args))
    except click.UsageError:  # an option without its value: nothing can be read reliably
        return None, None, [], {}, {}
    inputs: dict[tuple[int, int], str] = {}
    for key, value in opts.items():
        if key in ("fmt", "output", "report_files"):
            continue
        for item in (*(value if isinstance(value, list | tuple) else (value,)), *extra):
            identity = _identity(str(item)) if isinstance(item, str) else None
            if identity is not None:
                inputs.setdefault(identity, str(item))
    fmt = opts.get("fmt")
    output = opts.get("output")
    reports = opts.get("report_files") or []
    return (fmt if isinstance(fmt, str) else None, output if isinstance(output, str) else None,
            [str(r) for r in (reports if isinstance(reports, list | tuple) else [reports])], inputs, opts)
