"""JUnit XML: one testcase per role; failures and errors carry the findings."""

from __future__ import annotations

from xml.etree import ElementTree as ET

from kvcheck.escape import no_workflow_commands
from kvcheck.model import Finding, Report
from kvcheck.report.formats.base import (
    Format,
    fmt_tokens,
    one_line,
    printable_report,
    suppressed_text,
    suppression_lines,
)


class JunitFormat(Format):
    """JUnit XML: one testcase per role; failures and errors carry the findings."""

    name = "junit"

    def render(self, report: Report) -> str:
        report = printable_report(report)  # XML 1.0 cannot carry control characters: the file would not parse
        suite = ET.Element(
            "testsuite",
            name=f"kvcheck {report.command}",
            tests="0",
            failures="0",
            errors="0",
            skipped="0",
        )
        props = ET.SubElement(suite, "properties")
        for key, value in (
            ("mode", report.mode),
            ("source", report.source or ""),
            ("context_length", "" if report.context_length is None else str(report.context_length)),
            ("verdict", report.verdict),
        ):
            ET.SubElement(props, "property", name=key, value=value)
        suppressed = suppressed_text(report)
        if suppressed:
            ET.SubElement(props, "property", name="suppressed", value=suppressed)
        for line in suppression_lines(report):
            ET.SubElement(props, "property", name="suppression", value=line)
        cases = _cases(report)
        # counted from the cases, so the suite's totals always match what it holds
        suite.set("tests", str(len(cases)))
        suite.set("failures", str(sum(status == "fail" for _, status, _, _ in cases)))
        suite.set("errors", str(sum(status == "error" for _, status, _, _ in cases)))
        for name, status, findings, summary in cases:
            case = ET.SubElement(suite, "testcase", classname=f"kvcheck.{report.command}", name=one_line(name))
            text = "\n".join(
                f"{f.severity} {f.rule}: {f.message}" + (f" (fix: {f.hint})" if f.hint else "") for f in findings
            )
            if status in ("fail", "error"):
                blocking = [f for f in findings if f.blocks] or list(findings)
                tag = "failure" if status == "fail" else "error"
                first = blocking[0] if blocking else None
                element = ET.SubElement(
                    case,
                    tag,
                    message=(f"{first.rule}: {first.message}" if first else status),
                    type=first.rule if first else status,
                )
                element.text = text
            out = ET.SubElement(case, "system-out")
            out.text = summary + ("\n" + text if text and status == "pass" else "")
        ET.indent(suite)
        # a message's newline stays a line of the element's text, and a runner reads a stdout line that starts
        # with `::` as a workflow command; tags start with `<`, so only such text lines change
        xml = ET.tostring(suite, encoding="unicode")
        return '<?xml version="1.0" encoding="utf-8"?>\n' + no_workflow_commands(xml) + "\n"


def _cases(report: Report) -> list[tuple[str, str, tuple[Finding, ...], str]]:
    """(name, status, findings, summary) per role, plus a `deployment` case for cross-role findings."""
    cases: list[tuple[str, str, tuple[Finding, ...], str]] = []
    for role in report.roles:
        summary = (
            f"pool {fmt_tokens(role.pool_tokens)} tokens, required {fmt_tokens(role.required_tokens)}, "
            f"source {role.source}"
        )
        cases.append((role.name, role.status, report.findings_for(role.name), summary))
    invalid = tuple(f for f in report.findings if f.is_input_error)
    if invalid:  # the run stopped on invalid input: one errored case says so (exit 2)
        cases.append(("input", "error", invalid, "invalid input: nothing was checked"))
    deployment = tuple(f for f in report.findings_for(None) if not f.is_input_error)
    if deployment:
        # fail beats error, as in the verdict; under --strict a warning fails too (KV104 has no role)
        failing = any(f.blocks and not f.is_measurement_failure for f in deployment) or (
            report.strict and any(f.severity == "warning" for f in deployment))
        status = "fail" if failing else ("error" if any(f.is_measurement_failure for f in deployment) else "pass")
        cases.append(("deployment", status, deployment, "cross-role checks"))
    return cases
