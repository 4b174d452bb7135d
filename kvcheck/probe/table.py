"""The per-request summary table (every request the probe sent, with its verdict), as plain text."""

from __future__ import annotations

from kvcheck.model import Report


def render_requests(report: Report) -> str:
    """One line per probe request, in plan order; empty when the report holds none (dry run, unreachable)."""
    rows = [row for role in report.roles if role.probe is not None for row in role.probe.requests or ()]
    if not rows:
        return ""
    rows.sort(key=lambda row: row.index)
    header = ("#", "endpoint", "check", "owner", "prompt tokens", "expected", "status", "outcome", "latency ms",
              "verdict", "rules")
    table = [
        (
            str(row.index),
            row.endpoint + (" (stream)" if row.stream else ""),
            row.check,
            row.owner,
            "text" if row.prompt_tokens is None else str(row.prompt_tokens),
            row.expected,
            "-" if row.status is None else str(row.status),
            row.outcome,
            "-" if row.latency_ms is None else f"{row.latency_ms:.0f}",
            row.verdict,
            ",".join(row.rules) or "-",
        )
        for row in rows
    ]
    widths = [max(len(header[i]), *(len(r[i]) for r in table)) for i in range(len(header))]
    lines = ["requests sent", "  " + "  ".join(h.ljust(w) for h, w in zip(header, widths, strict=True)).rstrip()]
    lines += ["  " + "  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in table]
    return "\n".join(lines) + "\n"


def _rows_markdown(text: str) -> str:
    """A fenced block longer than any backtick run inside: a row cannot close it and go on as Markdown."""
    import re

    fence = "`" * max(3, 1 + max((len(run) for run in re.findall(r"`+", text)), default=0))
    return f"{fence}\n{text}{fence}\n" if text else ""


def requests_section(report: Report) -> list[str]:
    """The per-request table for the table report, preformatted (nothing when no request was sent)."""
    text = render_requests(report)
    return [text] if text else []


def requests_markdown(report: Report) -> str:
    """The per-request table for the Markdown report, as a preformatted block."""
    return _rows_markdown(render_requests(report))
