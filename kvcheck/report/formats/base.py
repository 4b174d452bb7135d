"""What every report format shares: the Format interface and the figures' spelling."""

from __future__ import annotations

from abc import ABC, abstractmethod
from pathlib import Path

from kvcheck.model import Report, RoleResult

MODE_TITLES = {
    "measure": "measured pools (engine booted)",
    "estimate": "PREDICTED pools (estimate mode: no engine was booted; figures are predictions)",
    "audit": "pools reported by live servers",
    "logs": "pools read from engine startup logs",
    "probe": "live probe of the deployment's front door",
}


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
    return f"{role.pool_tokens / role.required_tokens:.1%}"


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


def suppressed_text(report: Report) -> str | None:
    """`KV203 (2), KV104 (1)`: the findings the policy's ignore list dropped, by rule; None when none."""
    if not report.suppressed:
        return None
    return ", ".join(f"{rule} ({count})" for rule, count in report.suppressed)
