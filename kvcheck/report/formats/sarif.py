"""SARIF 2.1.0 (GitHub code scanning, GitLab, IDE viewers): one run with kvcheck's rules and its findings.

Every rule kvcheck knows is listed (short description: its title; full description and help: its
documentation; helpUri: its section of docs/rules.md where the docs' published address is known,
see `docs_url`), and each finding is a result on the line of
the file that causes it, as a path relative to the repository (the working directory), which is what
code scanning needs to attach an alert to a file.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from kvcheck import __version__
from kvcheck.model import Finding, Report
from kvcheck.report.formats.base import Format, finding_place, printable, printable_report, relative_path

SARIF_SCHEMA = "https://docs.oasis-open.org/sarif/sarif/v2.1.0/errata01/os/schemas/sarif-schema-2.1.0.json"
_LEVEL = {"error": "error", "warning": "warning", "info": "note"}
DOCS_URL_ENV = "KVCHECK_DOCS_URL"


def docs_url() -> str | None:
    """Where kvcheck's docs/ folder is published, ending in '/': $KVCHECK_DOCS_URL, else the
    installed package's `Documentation` project URL ([project.urls] in pyproject.toml); None when
    neither is set. No link is better than a made-up one: the rule text is in the SARIF file anyway."""
    url = os.environ.get(DOCS_URL_ENV, "").strip()
    if not url:
        # imported here: importlib.metadata costs every command about 25 ms at start-up
        from importlib.metadata import PackageNotFoundError, metadata

        try:
            entries = metadata("kvcheck").get_all("Project-URL") or []
        except PackageNotFoundError:
            entries = []
        url = next((e.split(",", 1)[1].strip() for e in entries
                    if "," in e and e.split(",", 1)[0].strip().lower() == "documentation"), "")
    if not url.startswith(("https://", "http://")):
        return None
    return url if url.endswith("/") else url + "/"


def rule_help_uri(code: str, base: str) -> str:
    """The rule's section in docs/rules.md (its `## KV101` heading's anchor)."""
    return f"{base}rules.md#{code.lower()}"


class SarifFormat(Format):
    """SARIF 2.1.0: one run; rules with descriptions and help links; results with repository-relative locations."""

    name = "sarif"

    def __init__(self, *, base: Path | None = None) -> None:
        self.base = base  # paths are made relative to this folder (default: the working directory)

    def render(self, report: Report) -> str:
        from kvcheck.policy.registry import all_rules

        rules = all_rules()
        index = {code: i for i, code in enumerate(rules)}
        base = docs_url()
        driver: dict[str, Any] = {
            "name": "kvcheck",
            "version": __version__,
            "semanticVersion": __version__,
            **({"informationUri": base + "index.md"} if base else {}),
            "rules": [
                {
                    "id": rule.code,
                    "name": rule.code,
                    "shortDescription": {"text": rule.title},
                    "fullDescription": {"text": rule.doc},
                    "help": {"text": rule.doc, "markdown": f"**{rule.code}: {rule.title}**\n\n{rule.doc}"},
                    **({"helpUri": rule_help_uri(rule.code, base)} if base else {}),
                    "defaultConfiguration": {"level": _LEVEL[rule.severity]},
                }
                for rule in rules.values()
            ],
        }
        # JSON escapes control characters only for the file: a viewer decodes \u001b and \u202e back into
        # an escape sequence and a bidi override. Texts are shown escaped (printable), as in every format;
        # locations keep the real path, which the URI's percent-encoding carries safely.
        shown = printable_report(report)
        results = [self._result(report, item, index, text_from=view)
                   for item, view in zip(report.findings, shown.findings, strict=True)]
        # a suppressed finding is a result too, carrying its suppression (code scanning shows it as dismissed)
        for held, held_view in zip(report.suppressions, shown.suppressions, strict=True):
            result = self._result(report, held.finding, index, text_from=held_view.finding)
            suppression: dict[str, Any] = {
                "kind": "inSource" if held.kind == "inline" else "external",
                "status": "accepted",
                "justification": held_view.reason,
            }
            if held.source is not None:
                suppression["location"] = {"physicalLocation": {
                    "artifactLocation": _artifact(relative_path(held.source.file, self.base)),
                    **({"region": {"startLine": held.source.line}} if held.source.line is not None else {}),
                }}
            if held.until is not None:
                suppression["properties"] = {"until": held.until}
            result["suppressions"] = [suppression]
            results.append(result)
        run: dict[str, Any] = {
            "tool": {"driver": driver},
            "invocations": [
                {
                    # exit 0 and 1 are verdicts; 3 means kvcheck could not check (fail closed)
                    "executionSuccessful": report.exit_code in (0, 1),
                    "exitCode": report.exit_code,
                    "commandLine": f"kvcheck {report.command}",
                }
            ],
            "automationDetails": {"id": f"kvcheck/{report.command}/"},
            "columnKind": "unicodeCodePoints",
            "results": results,
            "properties": {
                "verdict": report.verdict,
                "mode": report.mode,
                "source": shown.source,
                "contextLength": report.context_length,
                "suppressed": dict(report.suppressed),
            },
        }
        log = {"$schema": SARIF_SCHEMA, "version": "2.1.0", "runs": [run]}
        return json.dumps(log, indent=2) + "\n"

    def _result(self, report: Report, item: Finding, index: dict[str, int], *, text_from: Finding) -> dict[str, Any]:
        text = text_from.message + (f"\nfix: {text_from.hint}" if text_from.hint else "")
        result: dict[str, Any] = {
            "ruleId": item.rule,
            "level": _LEVEL[item.severity],
            "message": {"text": text},
        }
        if item.rule in index:
            result["ruleIndex"] = index[item.rule]
        result["locations"] = [self._location(report, item)]
        if item.role is not None:
            result["properties"] = {"role": printable(item.role)}
        return result

    def _location(self, report: Report, item: Finding) -> dict[str, Any]:
        """Where the result is (`finding_place`): code scanning refuses a result without an artifact URI."""
        place = finding_place(report, item, self.base)
        artifact = {"uri": place.target} if place.is_url else _artifact(place.target)
        physical: dict[str, Any] = {"artifactLocation": artifact}
        if place.line is not None:
            region: dict[str, Any] = {"startLine": place.line}
            if place.column is not None:
                region["startColumn"] = place.column
            physical["region"] = region
        return {"physicalLocation": physical}


def _artifact(path: str) -> dict[str, Any]:
    """A relative path becomes a URI under the repository root; one outside it stays an absolute file URI."""
    if Path(path).is_absolute():
        return {"uri": Path(path).as_uri()}
    return {"uri": "/".join(_uri_segment(part) for part in Path(path).parts), "uriBaseId": "%SRCROOT%"}


def _uri_segment(part: str) -> str:
    from urllib.parse import quote

    return quote(part, safe="!$&'()*+,;=:@-._~")
