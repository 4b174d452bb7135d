"""Invalid input (exit 2) reaches every machine format, as a KV001 finding at its file:line:column.

Before, an invalid manifest, an unknown flag or a bad option value wrote nothing but a message on
stderr: no annotation on the pull request, no SARIF result, no JUnit file, so the gate looked like
it had never run. Each test runs the CLI on a real file and reads what the format carries.
"""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

import jsonschema

from tests.conftest import run_kvcheck
from tests.report.test_sarif import validate

MANIFEST = """\
context_length: 8192
model: {path: x/y}
engine: {version: "0.5.23"}
gpu: H100
roles:
  server: {gpus: [0], argz: 1}
"""
UNKNOWN_KEY = "roles.server.argz: unknown key 'argz' (did you mean 'args'?)"
HINT = "`kvcheck schema` prints every key the manifest accepts"


def write_manifest(tmp_path: Path) -> Path:
    path = tmp_path / "m.yaml"
    path.write_text(MANIFEST, encoding="utf-8")
    return path


def test_github_annotates_the_line_and_stderr_keeps_the_message(tmp_path: Path) -> None:
    write_manifest(tmp_path)
    done = run_kvcheck("verify", "m.yaml", "--mode", "estimate", "--format", "github", cwd=tmp_path)
    assert done.exit_code == 2
    assert done.stdout == (
        f"::error file=m.yaml,line=6,col=23,title=KV001::{UNKNOWN_KEY}%0Afix: {HINT}\n"
        "kvcheck verify: error (exit 2)\n"
    )
    assert done.stderr == f"kvcheck: error: 1 error in manifest:\nm.yaml:6:23: {UNKNOWN_KEY}\nkvcheck: hint: {HINT}\n"


def test_json_is_an_error_report_with_exit_code_2_that_the_schema_accepts(tmp_path: Path) -> None:
    write_manifest(tmp_path)
    done = run_kvcheck("verify", "m.yaml", "--format", "json", cwd=tmp_path)  # run_kvcheck validates it
    assert done.exit_code == 2
    report = json.loads(done.stdout)
    assert (report["verdict"], report["exit_code"], report["mode"], report["roles"]) == ("error", 2, "input", [])
    assert report["source"] == "m.yaml"
    assert report["findings"] == [{
        "rule": "KV001", "severity": "error", "role": None, "message": UNKNOWN_KEY, "hint": HINT,
        "location": {"file": "m.yaml", "line": 6, "column": 23},
    }]


def test_the_schema_refuses_an_exit_2_report_without_its_finding(tmp_path: Path) -> None:
    from kvcheck.report.schema import REPORT_JSON_SCHEMA

    write_manifest(tmp_path)
    report = json.loads(run_kvcheck("verify", "m.yaml", "--format", "json", cwd=tmp_path).stdout)
    for broken in ({**report, "findings": []}, {**report, "verdict": "fail"}, {**report, "exit_code": 3,
                                                                               "verdict": "pass"}):
        try:
            jsonschema.Draft202012Validator(REPORT_JSON_SCHEMA).validate(broken)
        except jsonschema.ValidationError:
            continue
        raise AssertionError(f"the schema accepted {broken}")


def test_every_report_file_is_written_from_one_run(tmp_path: Path) -> None:
    write_manifest(tmp_path)
    done = run_kvcheck("verify", "m.yaml", "--format", "sarif", "--output", "kvcheck.sarif",
                       "--report", "junit=kvcheck.xml", "--report", "gitlab=quality.json",
                       "--report", "markdown=kvcheck.md", cwd=tmp_path)
    assert done.exit_code == 2
    assert done.stdout == ""
    assert done.stderr.endswith("kvcheck: report written to kvcheck.sarif (verdict error, exit 2)\n")
    log = json.loads((tmp_path / "kvcheck.sarif").read_text(encoding="utf-8"))
    validate(log)
    run = log["runs"][0]
    [result] = run["results"]
    assert (result["ruleId"], result["level"]) == ("KV001", "error")
    assert result["locations"] == [{"physicalLocation": {
        "artifactLocation": {"uri": "m.yaml", "uriBaseId": "%SRCROOT%"}, "region": {"startLine": 6, "startColumn": 23},
    }}]
    assert run["invocations"][0]["exitCode"] == 2 and run["invocations"][0]["executionSuccessful"] is False
    suite = ET.fromstring((tmp_path / "kvcheck.xml").read_text(encoding="utf-8"))
    [case] = suite.findall("testcase")
    assert (case.get("name"), suite.get("errors"), suite.get("failures")) == ("input", "1", "0")
    assert case.find("error").get("type") == "KV001"
    [issue] = json.loads((tmp_path / "quality.json").read_text(encoding="utf-8"))
    assert (issue["check_name"], issue["severity"], issue["location"]) == (
        "KV001", "critical", {"path": "m.yaml", "lines": {"begin": 6}})
    markdown = (tmp_path / "kvcheck.md").read_text(encoding="utf-8")
    assert markdown.startswith("## kvcheck verify: ERROR (exit 2)\n\n- mode: invalid input: nothing was checked")
    assert "| role | status |" not in markdown  # no empty roles' table: nothing was read


def test_an_unknown_flag_is_a_finding_too(tmp_path: Path) -> None:
    write_manifest(tmp_path)
    done = run_kvcheck("verify", "m.yaml", "--bogus", "--format", "json", "--report", "github=annotations.txt",
                       cwd=tmp_path)
    assert done.exit_code == 2
    assert "Error: No such option '--bogus'" in done.stderr  # click's usage message, as before
    report = json.loads(done.stdout)
    assert (report["exit_code"], report["source"]) == (2, "m.yaml")
    [found] = report["findings"]
    assert (found["rule"], found["message"], found["location"]) == (
        "KV001", "No such option '--bogus'. Did you mean '--gpu'?", None)
    assert found["hint"] == "kvcheck verify --help lists the options and their values"
    assert (tmp_path / "annotations.txt").read_text(encoding="utf-8").startswith(
        "::error title=KV001::No such option '--bogus'.")


def test_a_bad_option_value_is_a_finding_and_sarif_points_at_the_input(tmp_path: Path) -> None:
    write_manifest(tmp_path)
    done = run_kvcheck("verify", "m.yaml", "--timeout", "0", "--format", "sarif", cwd=tmp_path)
    assert done.exit_code == 2
    log = json.loads(done.stdout)
    validate(log)
    [result] = log["runs"][0]["results"]
    assert result["message"]["text"].startswith("Invalid value for '--timeout': 0.0 is not in the range")
    # no line to point at: the manifest the command line named (code scanning needs a location)
    assert result["locations"] == [{"physicalLocation": {"artifactLocation": {"uri": "m.yaml", "uriBaseId": "%SRCROOT%"}}}]


def test_the_table_stays_on_stderr(tmp_path: Path) -> None:
    write_manifest(tmp_path)
    done = run_kvcheck("verify", "m.yaml", cwd=tmp_path)
    assert (done.exit_code, done.stdout) == (2, "")
    assert UNKNOWN_KEY in done.stderr


def test_an_input_file_is_never_overwritten_by_the_error_report(tmp_path: Path) -> None:
    manifest = write_manifest(tmp_path)
    done = run_kvcheck("verify", "m.yaml", "--bogus", "--format", "json", "--output", "m.yaml", cwd=tmp_path)
    assert done.exit_code == 2
    assert manifest.read_text(encoding="utf-8") == MANIFEST
    assert "kvcheck: --output m.yaml: no report written: m.yaml is one of this run's input files" in done.stderr


def test_other_commands_report_their_input_errors(tmp_path: Path) -> None:
    logs = run_kvcheck("logs", "missing.log", "--format", "json", cwd=tmp_path)
    assert logs.exit_code == 2
    report = json.loads(logs.stdout)
    assert (report["command"], report["findings"][0]["message"]) == ("logs", "missing.log: no such file")
    fleet = tmp_path / "fleet.yaml"
    fleet.write_text("a: http://127.0.0.1:1\na: http://127.0.0.1:2\n", encoding="utf-8")
    audit = run_kvcheck("audit", "--fleet", "fleet.yaml", "--format", "json", cwd=tmp_path)
    assert audit.exit_code == 2
    # "1 error in fleet file:" and its file:line:column lines: one finding per line, at its place
    [found] = json.loads(audit.stdout)["findings"]
    assert (found["message"], found["location"]) == ("a: duplicate key", {"file": "fleet.yaml", "line": 2, "column": 1})


def test_a_wrong_format_writes_no_guessed_report_but_the_other_files(tmp_path: Path) -> None:
    write_manifest(tmp_path)
    done = run_kvcheck("verify", "m.yaml", "--format", "sarf", "--output", "out.txt", "--report", "json=r.json",
                       cwd=tmp_path)
    assert done.exit_code == 2
    assert "Invalid value for '--format': 'sarf' is not one of" in done.stderr
    assert not (tmp_path / "out.txt").exists()
    [found] = json.loads((tmp_path / "r.json").read_text(encoding="utf-8"))["findings"]
    assert found["message"].startswith("Invalid value for '--format': 'sarf' is not one of")
