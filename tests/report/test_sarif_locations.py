"""Every SARIF result has a location with an artifact URI: GitHub code scanning refuses a result
without one (`locations[].physicalLocation.artifactLocation.uri`), and audit and probe used to
write such results. A finding shows at its file and line; else at the server its role answered on;
else at the report's input (a file on disk or the probe's URL); else at the input as named."""

from __future__ import annotations

import json
import socket
from pathlib import Path

from kvcheck.model import Finding, Report, RoleResult
from kvcheck.report.formats.sarif import SarifFormat
from tests.conftest import run_kvcheck
from tests.report.test_renderers import incident_report, passing_report
from tests.report.test_sarif import validate


def code_scanning_locations(log: dict) -> list[dict]:
    """Each result's one physical location, after checking what code scanning requires of it."""
    validate(log)
    found = []
    for result in log["runs"][0]["results"]:
        [location] = result["locations"]
        assert location["physicalLocation"]["artifactLocation"]["uri"], result
        found.append(location["physicalLocation"])
    return found


def closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def test_an_unreachable_server_is_a_result_at_its_url(tmp_path: Path) -> None:
    url = f"http://127.0.0.1:{closed_port()}"
    done = run_kvcheck("audit", url, "--retries", "0", "--timeout", "1", "--format", "sarif", cwd=tmp_path)
    assert done.exit_code == 3
    [where] = code_scanning_locations(json.loads(done.stdout))
    assert where == {"artifactLocation": {"uri": url}}


def test_a_fleet_server_is_a_result_on_its_fleet_file_line(tmp_path: Path) -> None:
    (tmp_path / "fleet.yaml").write_text(f"one: http://127.0.0.1:{closed_port()}\n", encoding="utf-8")
    done = run_kvcheck("audit", "--fleet", "fleet.yaml", "--retries", "0", "--timeout", "1", "--format", "sarif",
                       cwd=tmp_path)
    assert done.exit_code == 3
    [where] = code_scanning_locations(json.loads(done.stdout))
    assert where == {"artifactLocation": {"uri": "fleet.yaml", "uriBaseId": "%SRCROOT%"},
                     "region": {"startLine": 1, "startColumn": 1}}


def test_a_probe_result_is_at_the_front_door_without_its_credentials(tmp_path: Path) -> None:
    port = closed_port()
    done = run_kvcheck("probe", f"http://127.0.0.1:{port}/", "--tenants", "0", "--format", "sarif", cwd=tmp_path)
    assert done.exit_code == 3
    wheres = code_scanning_locations(json.loads(done.stdout))
    assert wheres and all(w == {"artifactLocation": {"uri": f"http://127.0.0.1:{port}"}} for w in wheres)
    secret = run_kvcheck("probe", f"http://user:hunter2@127.0.0.1:{port}/", "--format", "sarif", cwd=tmp_path)
    assert secret.exit_code == 2  # credentials in the URL are refused: an input error, at the server
    assert "hunter2" not in secret.stdout
    assert code_scanning_locations(json.loads(secret.stdout)) == [{"artifactLocation": {"uri": f"http://127.0.0.1:{port}"}}]


def test_a_role_less_audit_finding_is_at_the_first_server() -> None:
    report = Report("audit", "audit", "http://a:1, http://b:2", 8, (
        RoleResult("http://a:1", "pass", 9, 8, 8, "audit", details={"url": "http://a:1"}),
        RoleResult("http://b:2", "pass", 9, 8, 8, "audit", details={"url": "http://b:2"}),
    ), (Finding("KV104", "warning", None, "prefill and decode admit different lengths"),))
    assert code_scanning_locations(json.loads(SarifFormat().render(report))) == [
        {"artifactLocation": {"uri": "http://a:1"}}]


def test_standard_input_is_named_as_the_input(tmp_path: Path) -> None:
    report = Report("logs", "logs", "<stdin>", 8, (RoleResult("rank 0", "error", None, 8, None, "log"),),
                    (Finding("KV309", "error", "rank 0", "no pool figure"),))
    assert code_scanning_locations(json.loads(SarifFormat(base=tmp_path).render(report))) == [
        {"artifactLocation": {"uri": "%3Cstdin%3E", "uriBaseId": "%SRCROOT%"}}]


def test_every_result_of_the_shipped_reports_has_a_location() -> None:
    for report in (incident_report(), passing_report()):
        code_scanning_locations(json.loads(SarifFormat().render(report)))
