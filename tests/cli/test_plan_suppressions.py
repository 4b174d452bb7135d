"""`kvcheck plan` takes the suppression options verify takes (--ignore-file, --baseline, --write-baseline,
inline comments), applied the same way: a covered finding does not fail and is listed as suppressed."""

from __future__ import annotations

import json
from pathlib import Path

from tests.cli.test_suppressions import FAR, PAST, manifest
from tests.conftest import run_kvcheck

FRACTION = "  mem-fraction-static: 0.95"  # KV205 (a warning): above SGLang's own value for the GPU


def plan(path: Path, *extra: str) -> tuple[int, dict]:
    done = run_kvcheck("plan", str(path), "--strict", "--format", "json", *extra)
    assert done.stdout, done.stderr
    return done.exit_code, json.loads(done.stdout)


def failing(report: dict) -> list[str]:
    return sorted(f["rule"] for f in report["findings"] if f["severity"] != "info")


def test_plan_fails_on_the_warning_without_a_suppression(tmp_path: Path) -> None:
    code, report = plan(manifest(tmp_path, FRACTION + "\n"))
    assert (code, failing(report), report["suppressions"]) == (1, ["KV205"], [])


def test_plan_honours_an_inline_suppression_and_fails_once_it_expires(tmp_path: Path) -> None:
    path = manifest(tmp_path, f"{FRACTION}  # kvcheck: ignore KV205,KV106 until={FAR} reason=load-tested, INC-7\n")
    code, report = plan(path)
    # the verdict's KV205 and the plan's own advice on that line (KV106, the fraction's) alike
    assert (code, failing(report), sorted(s["rule"] for s in report["suppressions"])) == (0, [], ["KV106", "KV205"])
    assert [f["message"] for f in report["findings"] if "mem-fraction-static" in f["message"]] == []
    path = manifest(tmp_path, f"{FRACTION}  # kvcheck: ignore KV205 until={PAST} reason=load-tested\n")
    code, report = plan(path)
    assert (code, failing(report)) == (1, ["KV205", "KV601"])


def test_plan_takes_an_ignore_file(tmp_path: Path) -> None:
    path = manifest(tmp_path, FRACTION + "\n")
    ignore = tmp_path / ".kvcheck-ignore.yaml"
    ignore.write_text(f"suppressions:\n  - rule: KV205\n    reason: accepted\n    until: {FAR}\n", encoding="utf-8")
    code, report = plan(path, "--ignore-file", str(ignore))
    assert (code, failing(report)) == (0, [])
    [held] = report["suppressions"]
    assert (held["rule"], held["kind"], held["source"]["file"], held["source"]["line"]) == (
        "KV205", "file", str(ignore), 2)
    done = run_kvcheck("plan", str(path), "--ignore-file", str(tmp_path / "missing.yaml"))
    assert done.exit_code == 2


def test_plan_writes_and_reads_a_baseline(tmp_path: Path) -> None:
    path = manifest(tmp_path, FRACTION + "\n")
    baseline = tmp_path / "baseline.json"
    code, _ = plan(path, "--write-baseline", str(baseline))
    assert code == 0
    written = json.loads(baseline.read_text(encoding="utf-8"))
    assert [(f["rule"], f["role"]) for f in written["findings"]] == [("KV205", "server")]
    code, report = plan(path, "--baseline", str(baseline))
    assert (code, failing(report), [s["kind"] for s in report["suppressions"]]) == (0, [], ["baseline"])
