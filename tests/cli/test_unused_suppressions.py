"""A suppression that matches no finding (KV602) and a baseline entry no finding matches (KV603) are
reported, as info, in every format: they never fail, also not with --strict."""

from __future__ import annotations

import json
from pathlib import Path

from tests.cli.test_suppressions import FAR, PAST, manifest
from tests.conftest import REPO_ROOT, run_kvcheck

ARGS = ("  mem-fraction-static: 0.95  # kvcheck: ignore KV205 until=2099-12-31 reason=load-tested\n"
        "  allow-auto-truncate: false  # kvcheck: ignore KV202 reason=clients truncate\n")  # no KV202: unused
UNUSED = "the suppression of KV202 matched no finding in this run (reason given: clients truncate)"
FIX = "remove it if the finding is fixed, or correct the rule, role, file or line it names"


def run(path: Path, fmt: str, *extra: str) -> tuple[int, str]:
    done = run_kvcheck("verify", str(path), "--mode", "estimate", "--strict", "--format", fmt, *extra)
    return done.exit_code, done.stdout


def test_an_unused_inline_suppression_is_kv602_at_its_line_in_every_format(tmp_path: Path) -> None:
    path = manifest(tmp_path, ARGS)
    code, out = run(path, "json")
    report = json.loads(out)
    assert (code, report["verdict"]) == (0, "pass")  # info: passes under --strict
    assert [(f["rule"], f["severity"], f["message"], f["location"]) for f in report["findings"]] == [
        ("KV602", "info", UNUSED, {"file": str(path), "line": 13, "column": None})]
    assert [s["rule"] for s in report["suppressions"]] == ["KV205"]  # the other one was used
    code, out = run(path, "github")
    assert f"::notice file={path},line=13,title=KV602::{UNUSED}%0Afix: {FIX}" in out.splitlines()
    code, out = run(path, "table")
    assert (code, "INFO KV602 the suppression of KV202 matched no finding in this run" in out) == (0, True)
    code, out = run(path, "markdown")
    [row] = [line for line in out.splitlines() if "KV602" in line]
    assert row.startswith(f"| info | KV602 | - | {UNUSED} (") and row.endswith(f"manifest.yaml:13) | {FIX} |")
    code, out = run(path, "sarif")
    [result] = [r for r in json.loads(out)["runs"][0]["results"] if r["ruleId"] == "KV602"]
    assert (result["level"], result["locations"][0]["physicalLocation"]["region"]["startLine"]) == ("note", 13)
    code, out = run(path, "junit")
    assert f"info KV602: {UNUSED}" in out
    code, out = run(path, "gitlab")
    assert [i["severity"] for i in json.loads(out) if i["check_name"] == "KV602"] == ["info"]


def test_an_unused_ignore_file_entry_is_kv602_at_the_entry(tmp_path: Path) -> None:
    path = manifest(tmp_path, "  mem-fraction-static: 0.95\n")
    ignore = tmp_path / "ignore.yaml"
    ignore.write_text(f"suppressions:\n  - rule: KV205\n    reason: measured\n    until: {FAR}\n"
                      "  - rule: KV104\n    role: server\n    reason: old incident\n", encoding="utf-8")
    code, out = run(path, "json", "--ignore-file", str(ignore))
    [unused] = json.loads(out)["findings"]
    assert (code, unused["rule"], unused["role"], unused["location"]["file"], unused["location"]["line"]) == (
        0, "KV602", "server", str(ignore), 5)  # the entry's `- rule: KV104` line


def test_an_expired_suppression_is_kv601_not_kv602(tmp_path: Path) -> None:
    path = manifest(tmp_path, f"  allow-auto-truncate: false  # kvcheck: ignore KV202 until={PAST} reason=old\n")
    code, out = run(path, "json")
    assert (code, [f["rule"] for f in json.loads(out)["findings"]]) == (1, ["KV601"])


def test_a_baseline_entry_no_finding_matches_is_kv603(tmp_path: Path) -> None:
    path = manifest(tmp_path, "  mem-fraction-static: 0.95\n  allow-auto-truncate: true\n")
    baseline = tmp_path / "baseline.json"
    code, _ = run(path, "json", "--write-baseline", str(baseline))
    assert code == 0
    manifest(tmp_path, "  mem-fraction-static: 0.95\n")  # KV202 fixed; its entry stays in the baseline
    code, out = run(path, "json", "--baseline", str(baseline))
    report = json.loads(out)
    [stale] = report["findings"]
    assert (code, stale["rule"], stale["severity"], stale["role"], stale["location"]) == (
        0, "KV603", "info", "server", {"file": str(baseline), "line": None, "column": None})
    assert stale["message"].startswith(f"the baseline {baseline} holds a finding this run did not produce: "
                                       "KV202 [server] in manifest.yaml: ")
    assert [s["rule"] for s in report["suppressions"]] == ["KV205"]


def test_kv602_cannot_be_suppressed(tmp_path: Path) -> None:
    path = manifest(tmp_path, "  mem-fraction-static: 0.95  # kvcheck: ignore KV602 reason=quiet\n")
    done = run_kvcheck("verify", str(path), "--mode", "estimate")
    assert done.exit_code == 2
    assert done.stderr.startswith(f"kvcheck: error: {path}:12: KV602 cannot be suppressed: remove the suppression")


def test_the_documented_example_prints_what_docs_ci_shows() -> None:
    """docs/ci.md's KV602 example, run as written there: its output is the doc's, line for line."""
    import re

    doc = (REPO_ROOT / "docs" / "ci.md").read_text(encoding="utf-8")
    command = "kvcheck verify docs/examples/suppressions/fixed.yaml --mode estimate --strict --format github"
    [shown] = re.findall(r"\$ " + re.escape(command) + r"\n(.*?)```", doc, flags=re.S)
    done = run_kvcheck(*command.split()[1:])
    assert (done.exit_code, done.stdout) == (0, shown)
