"""docs/ci.md's GitLab job, run as written: its kvcheck line writes the JUnit file, the Code Quality
report and the Markdown summary, for a failing manifest (exit 1) and for an invalid one (exit 2)."""

from __future__ import annotations

import json
import re
import shlex
import shutil
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from tests.conftest import EXAMPLES, REPO_ROOT, run_kvcheck


def estimate_line() -> list[str]:
    """The `kvcheck verify ... --mode estimate` line of the GitLab section, split as the shell would."""
    text = (REPO_ROOT / "docs" / "ci.md").read_text(encoding="utf-8")
    section = text[text.index("## GitLab CI"):]
    [line] = re.findall(r"^    - (kvcheck verify deploy/prod\.yaml --mode estimate .*)$", section, re.MULTILINE)
    return shlex.split(line)


@pytest.mark.parametrize("case", ["failing", "invalid"])
def test_the_gitlab_job_writes_junit_code_quality_and_markdown(tmp_path: Path, case: str) -> None:
    deploy = tmp_path / "deploy"
    shutil.copytree(EXAMPLES / "incident", deploy)
    shutil.move(deploy / "manifest.yaml", deploy / "prod.yaml")
    if case == "invalid":
        (deploy / "prod.yaml").write_text("context_lenght: 8192\n", encoding="utf-8")
    argv = estimate_line()
    assert argv[:2] == ["kvcheck", "verify"]
    done = run_kvcheck(*argv[1:], cwd=tmp_path)
    assert done.exit_code == (1 if case == "failing" else 2), done.stderr
    suite = ET.fromstring((tmp_path / "kvcheck.xml").read_text(encoding="utf-8"))
    issues = json.loads((tmp_path / "gl-code-quality-report.json").read_text(encoding="utf-8"))
    summary = (tmp_path / "kvcheck.md").read_text(encoding="utf-8")
    assert all(issue["location"]["path"] == "deploy/prod.yaml" for issue in issues)
    if case == "failing":
        assert suite.find("testcase/failure").get("type") == "KV101"
        assert issues[0]["check_name"] == "KV101" and issues[0]["location"]["lines"]["begin"] == 19
        assert summary.startswith("## kvcheck verify: FAIL (exit 1)")
    else:
        assert suite.find("testcase/error").get("type") == "KV001"
        assert {issue["check_name"] for issue in issues} == {"KV001"}
        assert summary.startswith("## kvcheck verify: ERROR (exit 2)")
