"""A run that stops before any role is checked (exit 3) reaches every machine format, as a KV300 finding.

Before, a measure run on a host where it could not start (no GPU visible, the cluster's API server
unreachable, a missing extra) wrote its message on stderr only: `--format json` printed nothing, and
no JUnit or SARIF file existed, so a job reading them saw no gate at all, where an invalid input
(exit 2) already was a report (test_input_error_reports.py). Each test runs the CLI on real files.
"""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

import jsonschema

from tests.conftest import run_kvcheck

MANIFEST = """\
context_length: 8192
model: {path: x/y}
engine: {version: "0.5.23"}
gpu: H100
roles:
  server: {gpus: [0]}
launcher:
  kind: kubernetes
  kubernetes: {image: "lmsysorg/sglang:v0.5.23"}
"""
KUBECONFIG = """\
apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "http://127.0.0.1:9"}}]
contexts: [{name: x, context: {cluster: c, user: u}}]
current-context: x
users: [{name: u, user: {token: t}}]
"""


def _run(tmp_path: Path, *args: str):
    (tmp_path / "m.yaml").write_text(MANIFEST, encoding="utf-8")
    (tmp_path / "kubeconfig").write_text(KUBECONFIG, encoding="utf-8")
    return run_kvcheck("verify", "m.yaml", *args, cwd=tmp_path, env={"KUBECONFIG": str(tmp_path / "kubeconfig")})


def test_json_is_an_error_report_with_exit_3(tmp_path: Path) -> None:
    done = _run(tmp_path, "--format", "json")
    assert done.exit_code == 3, done.stderr
    report = json.loads(done.stdout)
    schema = json.loads(run_kvcheck("schema", "--report").stdout)
    jsonschema.validate(report, schema)
    assert (report["verdict"], report["exit_code"], report["mode"], report["roles"]) == ("error", 3, "measure", [])
    [finding] = report["findings"]
    assert (finding["rule"], finding["severity"], finding["role"]) == ("KV300", "error", None)
    assert finding["message"] == done.stderr.splitlines()[0].removeprefix("kvcheck: error: ")


def test_junit_github_and_sarif_carry_it_and_the_table_stays_on_stderr(tmp_path: Path) -> None:
    done = _run(tmp_path, "--format", "github", "--report", "junit=r.xml", "--report", "sarif=r.sarif")
    assert done.exit_code == 3, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith("::error title=KV300::")
    assert lines[-1] == "kvcheck verify: error (exit 3)"
    suite = ET.parse(tmp_path / "r.xml").getroot()
    assert (suite.get("tests"), suite.get("errors"), suite.get("failures")) == ("1", "1", "0")
    run = json.loads((tmp_path / "r.sarif").read_text())["runs"][0]
    assert (run["invocations"][0]["exitCode"], run["invocations"][0]["executionSuccessful"]) == (3, False)
    assert [r["ruleId"] for r in run["results"]] == ["KV300"]
    table = _run(tmp_path)
    assert (table.exit_code, table.stdout) == (3, "")
