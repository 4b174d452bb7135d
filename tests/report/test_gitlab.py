"""`--format gitlab`: GitLab Code Quality, a JSON array of issues that the merge request's Code
Quality widget shows; the fields GitLab requires, its severity names, repository-relative paths,
escaped texts and fingerprints that stay the same from one run to the next."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

from kvcheck.model import Finding, Location, Report, RoleResult
from kvcheck.report.formats import FORMATTERS
from kvcheck.report.formats.gitlab import GitlabFormat
from tests.conftest import EXAMPLES, run_kvcheck
from tests.report.test_renderers import incident_report

SEVERITIES = {"info", "minor", "major", "critical", "blocker"}


def issues_of(text: str) -> list[dict]:
    """The issues, after checking each has what GitLab's Code Quality report requires."""
    issues = json.loads(text)
    assert isinstance(issues, list)
    for issue in issues:
        assert isinstance(issue["description"], str) and issue["description"]
        assert isinstance(issue["check_name"], str) and issue["check_name"]
        assert isinstance(issue["fingerprint"], str) and len(issue["fingerprint"]) == 64
        assert issue["severity"] in SEVERITIES
        assert isinstance(issue["location"]["path"], str) and issue["location"]["path"]
        assert not issue["location"]["path"].startswith(("./", "/")) or Path(issue["location"]["path"]).is_absolute()
        assert isinstance(issue["location"]["lines"]["begin"], int) and issue["location"]["lines"]["begin"] >= 1
    fingerprints = [issue["fingerprint"] for issue in issues]
    assert len(set(fingerprints)) == len(fingerprints)  # GitLab needs each to be unique in a report
    return issues


def test_gitlab_is_a_format_choice() -> None:
    assert FORMATTERS["gitlab"] is GitlabFormat


def test_one_issue_per_finding_with_gitlab_severities_and_lines() -> None:
    issues = issues_of(GitlabFormat().render(incident_report()))
    assert [(i["check_name"], i["severity"], i["location"]) for i in issues] == [
        ("KV101", "critical", {"path": "deploy/prod.yaml", "lines": {"begin": 14}}),
        ("KV203", "minor", {"path": "deploy/prod.yaml", "lines": {"begin": 19}}),
        # deployment-wide: at the input the report names (line 1: GitLab needs a line)
        ("KV104", "minor", {"path": "deploy/prod.yaml", "lines": {"begin": 1}}),
    ]
    assert issues[0]["description"] == (
        "KV101 [prefill] pool holds 681,280 tokens, below the 1,048,576 required\n"
        "fix: the largest context that fits this pool is 681,280 tokens"
    )


def test_fingerprints_are_stable_across_runs_line_moves_and_figures(tmp_path: Path) -> None:
    report = incident_report()
    first = [i["fingerprint"] for i in issues_of(GitlabFormat().render(report))]
    assert first == [i["fingerprint"] for i in issues_of(GitlabFormat().render(report))]
    kv101 = report.findings[0]
    moved = replace(kv101, location=Location("deploy/prod.yaml", 40, 3),
                    message="pool holds 681,312 tokens, below the 1,048,576 required")
    again = issues_of(GitlabFormat().render(replace(report, findings=(moved, *report.findings[1:]))))
    assert again[0]["fingerprint"] == first[0]
    other_file = replace(kv101, location=Location("deploy/staging.yaml", 14, 3))
    assert issues_of(GitlabFormat().render(replace(report, findings=(other_file,))))[0]["fingerprint"] != first[0]


def test_identical_findings_still_get_unique_fingerprints() -> None:
    same = Finding("KV001", "error", None, "unknown key", location=Location("m.yaml", 3, 1))
    report = Report("verify", "input", "m.yaml", None, (), (same, replace(same, location=Location("m.yaml", 9, 1))))
    assert len(issues_of(GitlabFormat().render(report))) == 2


def test_untrusted_text_is_shown_escaped_and_paths_are_repository_relative(tmp_path: Path) -> None:
    manifest = tmp_path / "deploy" / "prod.yaml"
    report = Report("audit", "audit", str(manifest), 8, (RoleResult("\x1b[2J\u202esrv", "fail", 1, 8, 1, "audit"),), (
        Finding("KV101", "error", "\x1b[2J\u202esrv", "short\x07 by 7", location=Location(str(manifest), 3, 5)),
    ))
    text = GitlabFormat(base=tmp_path).render(report)
    for raw in ("\x1b", "\u202e", "\x07"):
        assert raw not in json.loads(text)[0]["description"]
    [issue] = issues_of(text)
    assert issue["description"] == "KV101 [\\x1b[2J\\u202esrv] short\\x07 by 7"
    assert issue["location"] == {"path": "deploy/prod.yaml", "lines": {"begin": 3}}


def test_suppressed_findings_are_an_info_issue() -> None:
    report = replace(incident_report(), suppressed=(("KV203", 2),))
    last = issues_of(GitlabFormat().render(report))[-1]
    assert (last["check_name"], last["severity"], last["description"]) == (
        "kvcheck", "info", "suppressed by policy.ignore: KV203 (2)")


def test_no_findings_is_an_empty_array() -> None:
    report = Report("verify", "estimate", "m.yaml", 8, (RoleResult("s", "pass", 9, 8, 8, "estimate"),), ())
    assert GitlabFormat().render(report) == "[]\n"


def test_gitlab_end_to_end_through_the_cli(tmp_path: Path) -> None:
    out = tmp_path / "gl-code-quality-report.json"
    done = run_kvcheck("verify", str(EXAMPLES / "incident" / "manifest.yaml"), "--mode", "estimate",
                       "--format", "gitlab", "--output", str(out))
    assert done.exit_code == 1
    assert done.stderr == f"kvcheck: report written to {out} (verdict fail, exit 1)\n"
    issues = issues_of(out.read_text(encoding="utf-8"))
    assert (issues[0]["check_name"], issues[0]["severity"]) == ("KV101", "critical")
    # run from the repository root: the path GitLab matches against the merge request's files
    assert issues[0]["location"] == {"path": "docs/examples/incident/manifest.yaml", "lines": {"begin": 19}}
    assert issues[0]["description"].startswith("KV101 [prefill] predicted pool holds 559,680 tokens")
