"""Every report format against golden files, plus the properties CI tools rely on."""

from __future__ import annotations

import json
import os
from dataclasses import replace
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


# SARIF lists every rule's documentation from the live registry: tests/report/test_sarif.py checks it
# against the official schema instead of a golden file that every rule edit would change.
@pytest.mark.parametrize("fmt", sorted(set(FORMATTERS) - {"sarif"}))
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


def test_every_format_lists_the_findings_the_policy_suppressed() -> None:
    report = replace(incident_report(), suppressed=(("KV104", 1), ("KV203", 2)))
    expected = {
        "table": "suppressed by policy.ignore: KV104 (1), KV203 (2)\n",
        "markdown": "\nSuppressed by `policy.ignore`: KV104 (1), KV203 (2).\n",
        "github": "::notice title=kvcheck::suppressed by policy.ignore: KV104 (1), KV203 (2)\n",
        "junit": '<property name="suppressed" value="KV104 (1), KV203 (2)" />',
    }
    for fmt, text in expected.items():
        assert text in render(fmt, report), fmt
    assert json.loads(render("json", report))["suppressed"] == [
        {"rule": "KV104", "count": 1}, {"rule": "KV203", "count": 2},
    ]
    sarif = json.loads(render("sarif", report))
    assert sarif["runs"][0]["properties"]["suppressed"] == {"KV104": 1, "KV203": 2}
    # nothing suppressed: no line at all (the golden files above)
    assert "suppressed" not in render("table", incident_report())


def test_policy_ignore_is_counted_end_to_end(tmp_path: Path) -> None:
    from tests.conftest import EXAMPLES, run_kvcheck

    manifest = tmp_path / "m.yaml"
    source = (EXAMPLES / "incident" / "manifest.yaml").read_text(encoding="utf-8")
    config = EXAMPLES / "incident" / "glm-5.2-fp8.config.json"
    manifest.write_text(source.replace("glm-5.2-fp8.config.json", str(config)) .replace("policy:\n", "policy:\n  ignore: [KV104]\n"),
                        encoding="utf-8")
    done = run_kvcheck("verify", str(manifest), "--mode", "estimate", "--format", "json")
    data = json.loads(done.stdout)
    assert (done.exit_code, data["suppressed"]) == (1, [{"rule": "KV104", "count": 1}])
    assert "KV104" not in [f["rule"] for f in data["findings"]]
    table = run_kvcheck("verify", str(manifest), "--mode", "estimate").stdout
    assert table.splitlines()[-1] == "suppressed by policy.ignore: KV104 (1)"


def test_github_annotations_point_at_repository_relative_paths(tmp_path: Path) -> None:
    from tests.conftest import EXAMPLES, run_kvcheck

    manifest = tmp_path / "deploy" / "prod.yaml"
    report = Report("verify", "measure", str(manifest), 8, (), (
        Finding("KV101", "error", "p", "short", location=Location(str(manifest), 3, 1)),
    ))
    assert GithubFormat(base=tmp_path).render(report).splitlines()[0] == (
        "::error file=deploy/prod.yaml,line=3,col=1,title=KV101 p::short"
    )
    # outside the working directory the path stays as given (it cannot attach to a repository file)
    assert f"file={manifest}".replace(":", "%3A") in GithubFormat(base=tmp_path / "x").render(report)
    # end to end: an absolute manifest path, run from the repository root
    done = run_kvcheck("verify", str(EXAMPLES / "incident" / "manifest.yaml"), "--mode", "estimate",
                       "--format", "github")
    assert done.stdout.startswith("::error file=docs/examples/incident/manifest.yaml,line=19,col=3,title=KV101 prefill::")


def test_the_admission_bound_column_says_it_is_exclusive() -> None:
    """max_input_tokens is SGLang's max_req_input_len: prompts of that many tokens are refused (2,042 of a
    2,048-token context), so the column reads `input <`, not `max input` (which promised 2,042 would pass)."""
    for fmt in ("table", "markdown"):
        text = render(fmt, incident_report())
        assert "input <" in text and "max input" not in text, fmt
