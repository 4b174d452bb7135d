"""`--format sarif`: valid SARIF 2.1.0 (the official schema), kvcheck's rules, results on repository-relative lines."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest

from kvcheck.model import Finding, Location, Report, RoleResult
from kvcheck.policy.registry import all_rules
from kvcheck.report.formats import FORMATTERS
from kvcheck.report.formats.sarif import SarifFormat, docs_url
from tests.conftest import EXAMPLES, run_kvcheck
from tests.report.test_renderers import incident_report, passing_report

SCHEMA = json.loads((Path(__file__).parent / "schemas" / "sarif-schema-2.1.0.json").read_text(encoding="utf-8"))


def validate(log: dict) -> None:
    jsonschema.Draft4Validator(SCHEMA, format_checker=jsonschema.FormatChecker()).validate(log)


@pytest.mark.parametrize("report", [incident_report(), passing_report()], ids=["incident", "passing"])
def test_reports_are_valid_sarif_2_1_0(report: Report) -> None:
    log = json.loads(SarifFormat().render(report))
    validate(log)
    assert log["version"] == "2.1.0" and len(log["runs"]) == 1


def test_the_run_lists_every_rule_with_descriptions_and_its_docs_section(monkeypatch) -> None:
    monkeypatch.delenv("KVCHECK_DOCS_URL", raising=False)
    driver = json.loads(SarifFormat().render(passing_report()))["runs"][0]["tool"]["driver"]
    rules = all_rules()
    assert [r["id"] for r in driver["rules"]] == list(rules)
    kv101 = next(r for r in driver["rules"] if r["id"] == "KV101")
    assert kv101["shortDescription"]["text"] == rules["KV101"].title
    assert kv101["fullDescription"]["text"] == rules["KV101"].doc
    assert "helpUri" not in kv101 and "informationUri" not in driver  # no published docs address known
    assert kv101["defaultConfiguration"] == {"level": "error"}
    # the anchor is the rule's own heading in docs/rules.md
    assert "## KV101" in (Path(__file__).parents[2] / "docs" / "rules.md").read_text(encoding="utf-8")


def test_results_carry_rule_level_message_and_the_line() -> None:
    run = json.loads(SarifFormat().render(incident_report()))["runs"][0]
    first, second, third = run["results"]
    assert (first["ruleId"], first["level"]) == ("KV101", "error")
    assert first["message"]["text"] == (
        "pool holds 681,280 tokens, below the 1,048,576 required\n"
        "fix: the largest context that fits this pool is 681,280 tokens"
    )
    assert first["locations"] == [{"physicalLocation": {
        "artifactLocation": {"uri": "deploy/prod.yaml", "uriBaseId": "%SRCROOT%"},
        "region": {"startLine": 14, "startColumn": 3},
    }}]
    assert run["tool"]["driver"]["rules"][first["ruleIndex"]]["id"] == "KV101"
    assert (second["level"], third["level"]) == ("warning", "warning")
    # deployment-wide, and deploy/prod.yaml is not on disk here: the input as the report names it
    assert third["locations"] == [{"physicalLocation": {
        "artifactLocation": {"uri": "deploy/prod.yaml", "uriBaseId": "%SRCROOT%"}}}]
    assert run["invocations"][0]["exitCode"] == 1 and run["invocations"][0]["executionSuccessful"] is True


def test_info_is_a_note_and_absolute_paths_become_repository_relative(tmp_path: Path) -> None:
    manifest = tmp_path / "deploy" / "prod.yaml"
    report = Report("plan", "estimate", str(manifest), 8, (RoleResult("p", "pass", 9, 8, 2, "estimate"),), (
        Finding("KV106", "info", "p", "largest context", location=Location(str(manifest), 3, 5)),
    ))
    log = json.loads(SarifFormat(base=tmp_path).render(report))
    validate(log)
    result = log["runs"][0]["results"][0]
    assert result["level"] == "note"
    assert result["locations"][0]["physicalLocation"]["artifactLocation"] == {
        "uri": "deploy/prod.yaml", "uriBaseId": "%SRCROOT%",
    }
    outside = json.loads(SarifFormat(base=tmp_path / "deploy" / "x").render(report))
    validate(outside)
    assert outside["runs"][0]["results"][0]["locations"][0]["physicalLocation"]["artifactLocation"] == {
        "uri": manifest.as_uri(),
    }


def test_sarif_is_a_format_choice_end_to_end(tmp_path: Path) -> None:
    assert "sarif" in FORMATTERS
    out = tmp_path / "kvcheck.sarif"
    done = run_kvcheck("verify", str(EXAMPLES / "incident" / "manifest.yaml"), "--mode", "estimate",
                       "--format", "sarif", "--output", str(out))
    assert done.exit_code == 1
    log = json.loads(out.read_text(encoding="utf-8"))
    validate(log)
    results = log["runs"][0]["results"]
    rules = [r["ruleId"] for r in results]
    assert rules[0] == "KV101" and "KV104" in rules
    # run from the repository root: the manifest is a repository-relative URI on its line
    location = results[0]["locations"][0]["physicalLocation"]
    assert location["artifactLocation"] == {"uri": "docs/examples/incident/manifest.yaml", "uriBaseId": "%SRCROOT%"}
    assert location["region"]["startLine"] == 19
    # a deployment-wide finding (KV104) points at the manifest itself
    kv104 = results[rules.index("KV104")]
    assert kv104["locations"][0]["physicalLocation"]["artifactLocation"]["uri"] == (
        "docs/examples/incident/manifest.yaml"
    )


@pytest.mark.parametrize(("value", "expected"), [
    ("https://docs.example.com/kvcheck/docs", "https://docs.example.com/kvcheck/docs/"),
    ("https://git.corp/kvcheck/blob/v1/docs/", "https://git.corp/kvcheck/blob/v1/docs/"),
    ("javascript:alert(1)", None),  # only web addresses become links
])
def test_help_links_follow_the_published_docs_address(monkeypatch, value, expected) -> None:
    monkeypatch.setenv("KVCHECK_DOCS_URL", value)
    assert docs_url() == expected
    log = json.loads(SarifFormat().render(passing_report()))
    validate(log)
    driver = log["runs"][0]["tool"]["driver"]
    kv101 = next(r for r in driver["rules"] if r["id"] == "KV101")
    if expected is None:
        assert "helpUri" not in kv101 and "informationUri" not in driver
    else:
        assert kv101["helpUri"] == expected + "rules.md#kv101"
        assert driver["informationUri"] == expected + "index.md"


def test_the_packages_documentation_url_is_the_default(monkeypatch) -> None:
    import importlib.metadata
    from email.message import Message

    meta = Message()
    meta["Project-URL"] = "Source, https://git.example/kvcheck"
    meta["Project-URL"] = "Documentation, https://kvcheck.example/docs"
    monkeypatch.delenv("KVCHECK_DOCS_URL", raising=False)
    monkeypatch.setattr(importlib.metadata, "metadata", lambda name: meta)
    assert docs_url() == "https://kvcheck.example/docs/"
