"""Every report format against golden files, plus the properties CI tools rely on."""

from __future__ import annotations

import json
import os
from pathlib import Path
from xml.etree import ElementTree as ET

import pytest

from kvcheck.model import Finding, Location, Report, RoleResult
from kvcheck.report.formats import FORMATTERS, GithubFormat, JsonFormat, JunitFormat, TableFormat

GOLDEN = Path(__file__).parent / "golden"
UPDATE = os.environ.get("KVCHECK_UPDATE_GOLDEN") == "1"


def incident_report() -> Report:
    """The incident's shape: prefill short of a 1M window, decode fine, cross-role warning."""
    return Report(
        command="verify",
        mode="measure",
        source="deploy/prod.yaml",
        context_length=1048576,
        roles=(
            RoleResult(
                name="prefill",
                status="fail",
                pool_tokens=681280,
                required_tokens=1048576,
                max_input_tokens=681274,
                source="measure",
                gpus=(0, 1, 2, 3, 4, 5, 6, 7),
                argv=("python3", "-m", "sglang.launch_server", "--model-path", "zai-org/GLM-5.2-FP8"),
                engine_version="0.5.23",
            ),
            RoleResult(
                name="decode",
                status="pass",
                pool_tokens=1272704,
                required_tokens=1048576,
                max_input_tokens=1048570,
                source="measure",
                gpus=(0, 1, 2, 3, 4, 5, 6, 7),
                argv=None,
                details={},
            ),
        ),
        findings=(
            Finding(
                "KV101",
                "error",
                "prefill",
                "pool holds 681,280 tokens, below the 1,048,576 required",
                hint="the largest context that fits this pool is 681,280 tokens",
                location=Location("deploy/prod.yaml", 14, 3),
            ),
            Finding(
                "KV203",
                "warning",
                "decode",
                "disaggregated decode role runs without --disaggregation-enable-kv-checksum",
                hint="add disaggregation-enable-kv-checksum: true",
                location=Location("deploy/prod.yaml", 19, 5),
            ),
            Finding("KV104", "warning", None, "prefill admits 681,274 tokens but decode 1,048,570, 100%"),
        ),
    )


def passing_report() -> Report:
    return Report(
        command="verify",
        mode="estimate",
        source="single.yaml",
        context_length=131072,
        roles=(
            RoleResult("server", "pass", 414428, 131072, 131066, "estimate", (0,), None,
                       pool_range=(401000, 421000)),
        ),
        findings=(),
    )


def render(name: str, report: Report) -> str:
    if name == "table":
        return TableFormat(color=False, width=100).render(report)
    return FORMATTERS[name]().render(report)


@pytest.mark.parametrize("fmt", sorted(FORMATTERS))
@pytest.mark.parametrize("case", ["incident", "passing"])
def test_golden(fmt: str, case: str) -> None:
    report = incident_report() if case == "incident" else passing_report()
    text = render(fmt, report)
    path = GOLDEN / f"{case}.{fmt}.txt"
    if UPDATE:
        path.write_text(text, encoding="utf-8")
    assert text == path.read_text(encoding="utf-8")


def test_json_has_every_contract_field() -> None:
    data = json.loads(JsonFormat().render(incident_report()))
    assert data["schema"] == "kvcheck/report/v1"
    assert (data["verdict"], data["exit_code"], data["mode"]) == ("fail", 1, "measure")
    for key in ("kvcheck_version", "source", "context_length", "roles", "findings"):
        assert key in data
    role = data["roles"][0]
    assert set(role) >= {"name", "status", "pool_tokens", "required_tokens", "max_input_tokens",
                         "source", "gpus", "argv", "details"}
    assert data["roles"][1]["argv"] is None
    assert data["findings"][0]["location"] == {"file": "deploy/prod.yaml", "line": 14, "column": 3}
    assert data["findings"][2]["location"] is None


def test_junit_is_valid_xml_with_one_case_per_role() -> None:
    root = ET.fromstring(JunitFormat().render(incident_report()))
    cases = root.findall("testcase")
    assert [c.get("name") for c in cases] == ["prefill", "decode", "deployment"]
    assert cases[0].find("failure").get("type") == "KV101"
    assert cases[1].find("failure") is None
    assert root.get("failures") == "1" and root.get("errors") == "0"


def test_junit_error_role_is_an_error_element() -> None:
    report = Report("verify", "measure", "m.yaml", 8, (RoleResult("p", "error", None, 8, None, "measure"),),
                    (Finding("KV301", "error", "p", "engine exited with status 137"),))
    case = ET.fromstring(JunitFormat().render(report)).find("testcase")
    assert case.find("error").get("type") == "KV301"
    assert report.exit_code == 3


def test_github_escapes_workflow_command_syntax() -> None:
    report = Report("verify", "measure", "a,b:c.yaml", 8, (), (
        Finding("KV101", "error", "p", "100% short\nsecond line", location=Location("a,b:c.yaml", 3, 1)),
    ))
    first = GithubFormat().render(report).splitlines()[0]
    assert first == "::error file=a%2Cb%3Ac.yaml,line=3,col=1,title=KV101 p::100%25 short%0Asecond line"


def test_table_marks_predictions() -> None:
    assert "PREDICTED" in render("table", passing_report())
    assert "PREDICTED" not in render("table", incident_report())
