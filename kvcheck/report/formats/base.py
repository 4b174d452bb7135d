"""What every report format shares: the Format interface and the figures' spelling."""

from __future__ import annotations

import dataclasses
import re
from abc import ABC, abstractmethod
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kvcheck.escape import one_line, printable  # noqa: F401  (the formats' escapes)
from kvcheck.model import Finding, Report, RoleResult, Suppressed, share_of_window

MODE_TITLES = {
    "measure": "measured pools (engine booted)",
    "estimate": "PREDICTED pools (estimate mode: no engine was booted; figures are predictions)",
    "audit": "pools reported by live servers",
    "logs": "pools read from engine startup logs",
    "probe": "live probe of the deployment's front door",
    "input": "invalid input: nothing was checked (exit 2)",
}
# measure mode where every role was refused before its engine started (a launcher's refusal, the GPUs)
NOTHING_BOOTED_TITLE = "measure mode: no engine was booted, no pool was measured"


def mode_title(report: Report) -> str:
    """The line saying where the report's figures come from. A measure report claims a booted engine only
    when one started: a started role carries its command line (`argv`), a role refused before that none."""
    if report.mode == "measure" and not any(role.argv for role in report.roles):
        return NOTHING_BOOTED_TITLE
    return MODE_TITLES.get(report.mode, report.mode)


class Format(ABC):
    """A report format; `render` returns the whole text and never writes it anywhere itself."""

    name: str

    @abstractmethod
    def render(self, report: Report) -> str: ...


def fmt_tokens(value: int | None) -> str:
    return "-" if value is None else f"{value:,}"


def margin(role: RoleResult) -> str:
    """The pool as a share of what the window requires ("-" when either is unknown)."""
    if role.pool_tokens is None or not role.required_tokens:
        return "-"
    return share_of_window(role.pool_tokens, role.required_tokens)


def strip_trailing(text: str) -> str:
    """rich pads every line to the table width; reports and golden files should not carry that."""
    return "".join(line.rstrip() + "\n" for line in text.splitlines())


def relative_path(file: str, base: Path | None = None) -> str:
    """A file as a path relative to `base` (default: the working directory, the repository in CI).

    Annotations and code-scanning alerts attach to repository-relative paths only; a path outside
    `base` stays as given.
    """
    path = Path(file)
    if not path.is_absolute():
        return file
    root = (base or Path.cwd()).resolve()
    try:
        return path.resolve().relative_to(root).as_posix()
    except ValueError:
        return file


@dataclass(frozen=True)
class Place:
    """Where a finding is shown: a repository-relative path (or a URL) and, when known, the line."""

    target: str
    line: int | None = None
    column: int | None = None
    is_url: bool = False


def finding_place(report: Report, item: Finding, base: Path | None = None) -> Place:
    """Where a finding is, for formats that need a place for every finding (SARIF, GitLab Code Quality).

    In order: the finding's own file and line; the live server its role answered on (audit: the
    role's URL); the first file on disk or server URL the report's source names (a manifest or fleet
    file, the probe's front door); else the input as the command line named it (`<stdin>`).
    """
    if item.location is not None:
        return Place(relative_path(item.location.file, base), item.location.line, item.location.column)
    url = _role_url(report, item.role)
    if url is not None:
        return Place(url, is_url=True)
    named = [part.strip() for part in (report.source or "").split(", ") if part.strip()]
    for part in named:
        if Path(part).is_file():
            return Place(relative_path(part, base))
        if _is_url(part):
            return Place(_display_url(part), is_url=True)
    return Place(named[0] if named else "<stdin>")


def _display_url(url: str) -> str:
    # imported here: httpx costs every command's start-up, and only a report about servers needs it
    from kvcheck.http import display_url

    return display_url(url)


def _is_url(text: str) -> bool:
    return text.startswith(("http://", "https://")) and _display_url(text) != "<invalid URL>"


def _role_url(report: Report, role: str | None) -> str | None:
    """The server URL an audited role (for a role-less finding: the first audited role) answered on."""
    for result in report.roles:
        if role is None or result.name == role:
            url = result.details.get("url")
            if isinstance(url, str) and _is_url(url):
                return _display_url(url)
            if role is not None:
                return None
    return None


# What Markdown reads as structure inside a line: HTML (`<img>`, `</table>`), links and images (`[x](u)`,
# `![x](u)`), code spans, emphasis, table cells and entities. Untrusted text gets each one backslash-escaped,
# so a role named `<img src=//evil>` or `[PASS](https://evil)` is shown as written, never rendered.
_MARKDOWN_SPECIAL = re.compile(r"([\\`*_\[\]<>|~&])")


def markdown_text(text: str) -> str:
    """`text` for one Markdown line or table cell: its specials escaped, a newline shown as <br>."""
    return _MARKDOWN_SPECIAL.sub(r"\\\1", text).replace("\r", "").replace("\n", "<br>")


def markdown_code(text: str) -> str:
    """`text` as one inline code span: newlines shown as \\n, fenced by more backticks than it holds."""
    text = one_line(text)
    longest = max((len(run) for run in re.findall(r"`+", text)), default=0)
    fence = "`" * (longest + 1)
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return f"{fence}{pad}{text}{pad}{fence}"


def suppressed_text(report: Report) -> str | None:
    """`KV203 (2), KV104 (1)`: the findings the policy's ignore list dropped, by rule; None when none.

    `report.suppressed` counts every suppressed finding; those a comment, the ignore file or the baseline
    covers are listed one by one (suppression_lines), so they are left out of these counts."""
    counts = Counter(dict(report.suppressed))
    counts.subtract(item.finding.rule for item in report.suppressions)
    policy = [(rule, count) for rule, count in sorted(counts.items()) if count > 0]
    if not policy:
        return None
    return ", ".join(f"{rule} ({count})" for rule, count in policy)


def suppression_line(item: Suppressed) -> str:
    """`KV205 [server] at m.yaml:13:3, suppressed by m.yaml:13 until 2027-01-31: why`: one suppressed finding."""
    found = item.finding
    text = found.rule + (f" [{found.role}]" if found.role else "")
    if found.location is not None:
        text += f" at {found.location.render()}"
    if item.kind == "baseline":
        by = f"the baseline {item.source.file}" if item.source else "the baseline"
    else:
        by = item.source.render() if item.source else item.kind
    return f"{text}, suppressed by {by}" + (f" until {item.until}" if item.until else "") + f": {item.reason}"


def suppression_lines(report: Report) -> list[str]:
    """One line per finding a comment, the ignore file or the baseline suppressed (empty when none)."""
    return [suppression_line(item) for item in report.suppressions]


def role_notes(report: Report) -> list[tuple[str, str]]:
    """(role, note) for every role whose figures carry a note the reader must see (a log that holds two
    engine starts is judged on the last one): JSON has it in the role's `details.note`."""
    return [(role.name, note) for role in report.roles
            if isinstance(note := role.details.get("note"), str) and note]


# Control characters (C0 but tab and newline, DEL, C1), lone surrogates and the XML non-characters: what
# a role name, a server's version string or a quoted log line may carry to forge terminal escapes,
# GitHub workflow commands or invalid JUnit XML. Each becomes a visible escape such as \x1b.
def printable_report(report: Report) -> Report:
    """The report with printable() applied to every string it holds (untrusted text reaches every field:
    role names from files, versions and messages from servers, quoted engine lines)."""
    printed: Report = _printable(report)
    return printed


def _printable(value: Any) -> Any:
    if isinstance(value, str):
        return printable(value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        changes = {f.name: _printable(getattr(value, f.name)) for f in dataclasses.fields(value) if f.init}
        return dataclasses.replace(value, **changes)
    if isinstance(value, Mapping):
        return {_printable(key): _printable(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return type(value)(_printable(item) for item in value) if not hasattr(value, "_fields") else value
    return value
