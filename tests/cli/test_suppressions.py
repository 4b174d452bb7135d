"""Suppressions (inline comments, --ignore-file) and the baseline (--baseline, --write-baseline), through
the CLI with exact exit codes: a suppressed finding does not fail but is reported in every format; an
expired suppression fails (KV601) naming its line and date; a reason is required; KV3xx never passes."""

from __future__ import annotations

import json
import os
import shutil
import stat
from pathlib import Path

import pytest

from tests.conftest import EXAMPLES, run_kvcheck

SINGLE = EXAMPLES / "single-server"
SUPPRESSIONS = EXAMPLES / "suppressions"
FAR = "2099-12-31"
PAST = "2020-01-31"


def manifest(folder: Path, args: str, name: str = "manifest.yaml") -> Path:
    """The single-server example (pool ~3.7x the window) with these args lines under `args:`."""
    shutil.copy(SINGLE / "llama-3.1-8b-instruct.config.json", folder)
    text = (SINGLE / "manifest.yaml").read_text().replace("gpu: H100\n", "gpu: H100\nargs:\n" + args)
    path = folder / name
    path.write_text(text)
    return path


def verify(path: Path, *extra: str, cwd: Path | None = None, fmt: str = "json") -> tuple[int, dict | str, str]:
    done = run_kvcheck("verify", str(path), "--mode", "estimate", "--strict", "--format", fmt, *extra, cwd=cwd)
    if fmt == "json" and done.stdout:
        return done.exit_code, json.loads(done.stdout), done.stderr
    return done.exit_code, done.stdout, done.stderr


def rules(report: dict, key: str = "findings") -> list[str]:
    return sorted(item["rule"] for item in report[key])


def test_without_a_suppression_the_warning_fails_under_strict(tmp_path: Path) -> None:
    code, report, _ = verify(manifest(tmp_path, "  mem-fraction-static: 0.95\n"))
    assert (code, rules(report)) == (1, ["KV205"])


def test_an_inline_suppression_on_the_line_passes_until_its_date_and_is_reported(tmp_path: Path) -> None:
    path = manifest(tmp_path, f"  mem-fraction-static: 0.95  # kvcheck: ignore KV205 until={FAR} reason=load-tested, INC-7\n")
    code, report, _ = verify(path)
    assert isinstance(report, dict)
    assert (code, report["verdict"], report["findings"], report["roles"][0]["status"]) == (0, "pass", [], "pass")
    assert report["suppressed"] == [{"rule": "KV205", "count": 1}]
    [held] = report["suppressions"]
    assert (held["rule"], held["kind"], held["reason"], held["until"]) == ("KV205", "inline", "load-tested, INC-7", FAR)
    assert held["location"]["line"] == held["source"]["line"] == 12


def test_a_comment_alone_on_the_line_above_covers_the_next_line(tmp_path: Path) -> None:
    path = manifest(tmp_path, f"  # kvcheck: ignore KV205,KV202 until={FAR} reason=accepted by the SRE review\n"
                              "  mem-fraction-static: 0.95\n  allow-auto-truncate: true\n")
    code, report, _ = verify(path)
    assert isinstance(report, dict)
    # the comment covers the line below it only: KV202, two lines down, still fails
    assert (code, rules(report), rules(report, "suppressions")) == (1, ["KV202"], ["KV205"])


def test_a_suppression_inside_a_quoted_value_does_not_switch_the_gate_off(tmp_path: Path) -> None:
    # a string the deployment carries (here a served model name) is data: only comments suppress
    path = manifest(tmp_path, '  mem-fraction-static: 0.95\n'
                              f'  served-model-name: "x # kvcheck: ignore KV205 until={FAR} reason=not a comment"\n')
    code, report, _ = verify(path)
    assert isinstance(report, dict)
    assert (code, rules(report), report["suppressions"]) == (1, ["KV205"], [])


def test_an_expired_inline_suppression_fails_naming_its_line_and_date(tmp_path: Path) -> None:
    path = manifest(tmp_path, f"  mem-fraction-static: 0.95  # kvcheck: ignore KV205 until={PAST} reason=until the load test\n")
    code, report, _ = verify(path)
    assert isinstance(report, dict)
    assert (code, report["verdict"], rules(report), report["suppressions"]) == (1, "fail", ["KV205", "KV601"], [])
    [expired] = [f for f in report["findings"] if f["rule"] == "KV601"]
    assert expired["severity"] == "error"
    assert f"{path}:12 expired on {PAST}" in expired["message"]
    assert expired["location"] == {"file": str(path), "line": 12, "column": None}
    # without --strict too: an expired suppression is an error, not a warning
    done = run_kvcheck("verify", str(path), "--mode", "estimate")
    assert done.exit_code == 1


@pytest.mark.parametrize(
    ("comment", "message"),
    [
        (f"# kvcheck: ignore KV205 until={FAR}", ":12: a kvcheck suppression needs a reason"),
        ("# kvcheck: ignore KV205 reason=", ":12: a kvcheck suppression needs a reason"),
        ("# kvcheck: ignore KV205 until=2099-13-01 reason=x", ":12: until='2099-13-01' is not a date"),
        ("# kvcheck: ignore KV205 untill=2099-01-01 reason=x", ":12: unknown key 'untill' in a kvcheck suppression "
                                                               "(did you mean 'until'?)"),
        ("# kvcheck: ignroe KV205 reason=x", ":12: unknown kvcheck directive 'ignroe' (did you mean 'ignore'?)"),
        ("# kvcheck: ignore KV2O5 reason=x", ":12: unknown rule code 'KV2O5' (did you mean 'KV205'?)"),
        ("# kvcheck: ignore KV301 reason=the GPU is busy", ":12: KV301 cannot be suppressed: a KV3xx finding means "
                                                          "a role could not be checked"),
    ],
)
def test_a_malformed_inline_suppression_is_bad_input_with_file_and_line(tmp_path: Path, comment: str,
                                                                        message: str) -> None:
    path = manifest(tmp_path, f"  mem-fraction-static: 0.95  {comment}\n")
    code, report, stderr = verify(path)
    assert code == 2
    assert f"{path}{message}" in stderr


def test_an_ignore_file_suppresses_by_rule_role_and_file(tmp_path: Path) -> None:
    path = manifest(tmp_path, "  mem-fraction-static: 0.95\n  allow-auto-truncate: true\n")
    ignore = tmp_path / ".kvcheck-ignore.yaml"
    ignore.write_text("suppressions:\n"
                      f"  - rule: KV205\n    role: server\n    file: manifest.yaml\n    reason: measured\n    until: {FAR}\n"
                      "  - rule: [KV202]\n    role: another-role\n    reason: not this role\n")
    code, report, _ = verify(path, "--ignore-file", str(ignore))
    assert isinstance(report, dict)
    # the entry for another role covered nothing: KV602 (info) says so, at its line
    assert (code, rules(report), rules(report, "suppressions")) == (1, ["KV202", "KV602"], ["KV205"])
    [held] = report["suppressions"]
    assert (held["kind"], held["source"], held["until"]) == ("file", {"file": str(ignore), "line": 2, "column": None}, FAR)


def test_an_expired_ignore_file_entry_fails_at_its_line(tmp_path: Path) -> None:
    path = manifest(tmp_path, "  mem-fraction-static: 0.95\n")
    ignore = tmp_path / "ignore.yaml"
    ignore.write_text(f"suppressions:\n  - rule: KV205\n    reason: until the load test\n    until: {PAST}\n")
    code, report, _ = verify(path, "--ignore-file", str(ignore))
    assert isinstance(report, dict)
    assert (code, rules(report)) == (1, ["KV205", "KV601"])
    assert f"{ignore}:2 expired on {PAST}" in next(f["message"] for f in report["findings"] if f["rule"] == "KV601")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("suppressions:\n  - rule: KV205\n", ":2:5: a suppression needs a reason"),
        ("suppressions:\n  - rule: KV205\n    reason: x\n    rol: server\n", ":4:5: unknown key 'rol' in a suppression "
                                                                           "(did you mean 'role'?)"),
        ("suppresions: []\n", ":1:1: unknown key 'suppresions' in an ignore file (did you mean 'suppressions'?)"),
        ("suppressions:\n  - rule: KV304\n    reason: x\n", ":2:5: KV304 cannot be suppressed"),
        ("suppressions:\n  - rule: KV205\n    reason: x\n    line: 3\n", ":4:5: line must be a line number (1 or more) "
                                                                        "and needs `file`"),
    ],
)
def test_a_malformed_ignore_file_is_bad_input_with_file_and_line(tmp_path: Path, text: str, message: str) -> None:
    path = manifest(tmp_path, "  mem-fraction-static: 0.95\n")
    ignore = tmp_path / "ignore.yaml"
    ignore.write_text(text)
    code, _, stderr = verify(path, "--ignore-file", str(ignore))
    assert code == 2
    assert f"{ignore}{message}" in stderr


def test_a_baseline_lets_an_existing_deployment_adopt_the_gate_and_a_new_finding_fails(tmp_path: Path) -> None:
    path = manifest(tmp_path, "  mem-fraction-static: 0.95\n")
    baseline = tmp_path / "kvcheck-baseline.json"
    # writing the baseline accepts what is there: the run passes, and reports what it baselined
    code, report, _ = verify(path, "--write-baseline", str(baseline))
    assert isinstance(report, dict)
    assert (code, report["findings"], rules(report, "suppressions")) == (0, [], ["KV205"])
    written = json.loads(baseline.read_text())
    assert written["schema"] == "kvcheck/baseline/v1"
    assert [(e["rule"], e["role"], e["file"]) for e in written["findings"]] == [("KV205", "server", "manifest.yaml")]
    # the same findings pass, from another working folder too (paths are relative to the baseline)
    for cwd in (None, tmp_path):
        code, report, _ = verify(path.resolve(), "--baseline", str(baseline.resolve()), cwd=cwd)
        assert isinstance(report, dict)
        assert (code, report["findings"], report["suppressed"]) == (0, [], [{"rule": "KV205", "count": 1}])
        assert report["suppressions"][0]["kind"] == "baseline"
    # the line moved and the fraction changed: the same finding (no line, no figures in its identity)
    manifest(tmp_path, "  # a comment that shifts the lines\n  mem-fraction-static: 0.96\n")
    assert verify(path, "--baseline", str(baseline))[0] == 0
    # a new finding fails; the baselined one still passes
    manifest(tmp_path, "  mem-fraction-static: 0.95\n  allow-auto-truncate: true\n")
    code, report, _ = verify(path, "--baseline", str(baseline))
    assert isinstance(report, dict)
    assert (code, rules(report), rules(report, "suppressions")) == (1, ["KV202"], ["KV205"])


def test_a_baseline_never_covers_kv3xx(tmp_path: Path) -> None:
    path = manifest(tmp_path, "  mem-fraction-static: 0.95\n")
    baseline = tmp_path / "baseline.json"
    baseline.write_text(json.dumps({"schema": "kvcheck/baseline/v1", "findings": [
        {"rule": "KV305", "role": "server", "file": "manifest.yaml", "message": "the pool could not be estimated"}]}))
    code, _, stderr = verify(path, "--baseline", str(baseline))
    assert code == 2
    assert f"{baseline}: findings[0]: KV305 cannot be suppressed" in stderr


def test_a_malformed_baseline_is_bad_input(tmp_path: Path) -> None:
    path = manifest(tmp_path, "  mem-fraction-static: 0.95\n")
    baseline = tmp_path / "baseline.json"
    baseline.write_text(json.dumps({"schema": "kvcheck/baseline/v1", "findings": [{"rule": "KV205", "mesage": "x"}]}))
    code, _, stderr = verify(path, "--baseline", str(baseline))
    assert code == 2
    assert "findings[0]: unknown key 'mesage' in a baseline entry (did you mean 'message'?)" in stderr
    assert verify(path, "--baseline", str(tmp_path / "missing.json"))[0] == 2
    code, _, stderr = verify(path, "--baseline", str(baseline), "--write-baseline", str(tmp_path / "b.json"))
    assert code == 2
    assert "--baseline and --write-baseline are one or the other" in stderr


def test_write_baseline_never_replaces_an_input(tmp_path: Path) -> None:
    path = manifest(tmp_path, "  mem-fraction-static: 0.95\n")
    before = path.read_text()
    code, _, stderr = verify(path, "--write-baseline", str(path))
    assert code == 2
    assert "--write-baseline would replace an input of this run" in stderr
    assert path.read_text() == before


def test_suppressed_findings_are_shown_in_every_format(tmp_path: Path) -> None:
    path = manifest(tmp_path, f"  mem-fraction-static: 0.95  # kvcheck: ignore KV205 until={FAR} reason=load-tested\n")
    line = f"KV205 [server] at {path}:12:3, suppressed by {path}:12 until {FAR}: load-tested"
    for fmt in ("table", "github", "junit"):
        code, text, _ = verify(path, fmt=fmt)
        assert isinstance(text, str)
        assert (code, line in " ".join(text.split())) == (0, True), (fmt, text)
    code, text, _ = verify(path, fmt="markdown")
    assert isinstance(text, str)
    assert code == 0
    assert "- KV205 \\[server\\] at " in text
    assert f"manifest.yaml:12 until {FAR}: load-tested" in text
    code, text, _ = verify(path, fmt="sarif")
    assert isinstance(text, str)
    [result] = json.loads(text)["runs"][0]["results"]
    assert result["ruleId"] == "KV205"
    assert result["suppressions"][0]["kind"] == "inSource"
    assert result["suppressions"][0]["justification"] == "load-tested"
    assert result["suppressions"][0]["properties"] == {"until": FAR}


def test_logs_take_a_baseline_that_never_holds_kv3xx(tmp_path: Path) -> None:
    """Suppressions are the judge's, so every checking command has them: `logs` here. The log warns
    KV203 and KV312 (a provisional pool figure); the baseline takes KV203 only, so --strict still fails."""
    from tests.datapaths import LOGS

    log = str(LOGS / "sglang-llama3-8b-H200-tp1-pd-prefill-issue6753.log")
    baseline = tmp_path / "baseline.json"
    written = run_kvcheck("logs", log, "--strict", "--format", "json", "--write-baseline", str(baseline))
    report = json.loads(written.stdout)
    assert (written.exit_code, rules(report), rules(report, "suppressions")) == (1, ["KV312"], ["KV203"])
    assert [e["rule"] for e in json.loads(baseline.read_text())["findings"]] == ["KV203"]
    again = run_kvcheck("logs", log, "--format", "json", "--baseline", str(baseline))
    report = json.loads(again.stdout)
    assert (again.exit_code, rules(report), rules(report, "suppressions")) == (0, ["KV312"], ["KV203"])


def test_the_documented_examples_hold(tmp_path: Path) -> None:
    """docs/examples/suppressions: the inline comment and the ignore file pass; the baseline there is
    what --write-baseline writes for adopt.yaml."""
    code, report, _ = verify(SUPPRESSIONS / "manifest.yaml", "--ignore-file", str(SUPPRESSIONS / "kvcheck-ignore.yaml"))
    assert isinstance(report, dict)
    assert (code, report["findings"], rules(report, "suppressions")) == (0, [], ["KV202", "KV205"])
    work = tmp_path / "suppressions"
    work.mkdir()
    shutil.copy(SUPPRESSIONS / "adopt.yaml", work)
    (tmp_path / "single-server").mkdir()
    shutil.copy(SINGLE / "llama-3.1-8b-instruct.config.json", tmp_path / "single-server")
    assert verify(work / "adopt.yaml", "--write-baseline", str(work / "baseline.json"))[0] == 0
    assert (work / "baseline.json").read_text() == (SUPPRESSIONS / "baseline.json").read_text()


def test_a_comment_inside_a_log_never_suppresses(tmp_path: Path) -> None:
    """A log's text is the engine's, not the user's: a `# kvcheck: ignore` line in it is not read."""
    from tests.datapaths import LOGS

    log = tmp_path / "prefill.log"
    text = (LOGS / "sglang-llama3-8b-H200-tp1-pd-prefill-issue6753.log").read_text()
    log.write_text("\n".join(f"{line}  # kvcheck: ignore KV203 reason=forged" for line in text.splitlines()) + "\n")
    done = run_kvcheck("logs", str(log), "--format", "json")
    report = json.loads(done.stdout)
    assert "KV203" in rules(report)
    assert report["suppressions"] == []


def test_write_baseline_never_replaces_a_device_a_fifo_or_a_link(tmp_path: Path) -> None:
    # the baseline was renamed over whatever was at the path: `--write-baseline /dev/full` as root replaced
    # the device with a JSON file, exit 0 and no word (a FIFO stands in for the device here)
    path = manifest(tmp_path, "  mem-fraction-static: 0.95\n")
    fifo = tmp_path / "fifo.json"
    os.mkfifo(fifo)
    victim = tmp_path / "victim.txt"
    victim.write_text("keep\n")
    link = tmp_path / "link.json"
    link.symlink_to(victim)
    for target, problem in ((fifo, "is a FIFO (named pipe), not a regular file"),
                            (link, "is a symbolic link: the baseline replaces the file at this path")):
        code, _, stderr = verify(path, "--write-baseline", str(target))
        assert code == 2, stderr
        assert f"kvcheck: error: --write-baseline {target}: {problem}" in stderr
    assert stat.S_ISFIFO(fifo.lstat().st_mode) and link.is_symlink() and victim.read_text() == "keep\n"


def test_write_baseline_never_writes_through_a_planted_temporary_link(tmp_path: Path) -> None:
    # the temporary file had a fixed name beside the baseline and was opened following links: a link planted
    # there (a repository's file) had its target overwritten with the baseline
    path = manifest(tmp_path, "  mem-fraction-static: 0.95\n")
    victim = tmp_path / "victim.txt"
    victim.write_text("keep\n")
    (tmp_path / ".b.json.kvcheck-tmp").symlink_to(victim)
    code, _, stderr = verify(path, "--write-baseline", str(tmp_path / "b.json"))
    assert code == 0, stderr
    assert victim.read_text() == "keep\n"
    assert json.loads((tmp_path / "b.json").read_text())["findings"][0]["rule"] == "KV205"
