"""GitLab Code Quality (a CodeClimate-style JSON array): one issue per finding, on the line that causes it.

GitLab shows these issues in the merge request's Code Quality widget and in the changes view, and
compares them by `fingerprint` between the source and the target branch ("new", "resolved"). So a
fingerprint is stable: it hashes the command, the rule, the role, the path and the message with
its numbers left out, not the line, so neither an edit above a finding nor a pool that moved by a few
tokens between two measurements makes it new. Two findings that would hash alike get an occurrence
number in the hash, because GitLab needs every fingerprint of a report to be unique.
"""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path
from typing import Any

from kvcheck.model import Finding, Report
from kvcheck.report.formats.base import Format, Place, finding_place, printable_report, suppressed_text

# kvcheck's severities on GitLab's scale (info, minor, major, critical, blocker): an error blocks the
# rollout, so it is critical; a warning does not, so it is minor.
SEVERITY = {"error": "critical", "warning": "minor", "info": "info"}
_NUMBERS = re.compile(r"[0-9][0-9,.]*")


class GitlabFormat(Format):
    """GitLab Code Quality: a JSON array of issues with description, check_name, fingerprint, severity, location."""

    name = "gitlab"

    def __init__(self, *, base: Path | None = None) -> None:
        self.base = base  # paths are relative to this folder (default: the working directory)

    def render(self, report: Report) -> str:
        # texts are shown escaped (printable), as in every format: GitLab decodes \u001b back into an
        # escape sequence; paths keep the real file, which is what GitLab matches against the repository
        shown = printable_report(report)
        seen: dict[str, int] = {}
        issues = [self._issue(report, item, view, seen)
                  for item, view in zip(report.findings, shown.findings, strict=True)]
        suppressed = suppressed_text(shown)
        if suppressed:  # findings the policy dropped are never silent, here an info issue at the input
            note = Finding("kvcheck", "info", None, f"suppressed by policy.ignore: {suppressed}")
            issues.append(self._entry(f"kvcheck {report.command}: suppressed by policy.ignore", note.message,
                                      "info", finding_place(report, note, self.base), seen, check_name="kvcheck"))
        return json.dumps(issues, indent=2) + "\n"

    def _issue(self, report: Report, item: Finding, view: Finding, seen: dict[str, int]) -> dict[str, Any]:
        place = finding_place(report, item, self.base)
        role = f"[{view.role}] " if view.role else ""
        description = f"{item.rule} {role}{view.message}" + (f"\nfix: {view.hint}" if view.hint else "")
        key = "\0".join((report.command, item.rule, item.role or "", place.target, _NUMBERS.sub("#", item.message)))
        return self._entry(key, description, SEVERITY[item.severity], place, seen, check_name=item.rule)

    @staticmethod
    def _entry(key: str, description: str, severity: str, place: Place, seen: dict[str, int], *,
               check_name: str) -> dict[str, Any]:
        occurrence = seen.get(key, 0)
        seen[key] = occurrence + 1
        digest = hashlib.sha256(f"{key}\0{occurrence}".encode("utf-8", "surrogatepass")).hexdigest()
        return {
            "type": "issue",
            "description": description,
            "check_name": check_name,
            "fingerprint": digest,
            "severity": severity,
            "location": {"path": place.target, "lines": {"begin": place.line or 1}},
        }
