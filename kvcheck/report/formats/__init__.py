"""The report formats, one module each, behind one registry that also feeds `--format`'s choices."""

from __future__ import annotations

from kvcheck.report.formats.base import Format
from kvcheck.report.formats.github import GithubFormat
from kvcheck.report.formats.gitlab import GitlabFormat
from kvcheck.report.formats.json import JsonFormat
from kvcheck.report.formats.junit import JunitFormat
from kvcheck.report.formats.markdown import MarkdownFormat
from kvcheck.report.formats.sarif import SarifFormat
from kvcheck.report.formats.table import TableFormat

FORMATTERS: dict[str, type[Format]] = {
    cls.name: cls
    for cls in (TableFormat, JsonFormat, JunitFormat, GithubFormat, GitlabFormat, MarkdownFormat, SarifFormat)
}

__all__ = ["FORMATTERS", "Format", "GithubFormat", "GitlabFormat", "JsonFormat", "JunitFormat", "MarkdownFormat", "SarifFormat", "TableFormat"]
