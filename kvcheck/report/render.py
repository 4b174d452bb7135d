"""The old import path of the formats (kept for callers); each format lives in kvcheck/report/formats/."""

from __future__ import annotations

from kvcheck.report.formats import (
    FORMATTERS,
    Format,
    GithubFormat,
    JsonFormat,
    JunitFormat,
    MarkdownFormat,
    TableFormat,
)
from kvcheck.report.formats.json import report_to_dict

__all__ = [
    "FORMATTERS",
    "Format",
    "GithubFormat",
    "JsonFormat",
    "JunitFormat",
    "MarkdownFormat",
    "TableFormat",
    "report_to_dict",
]
