"""`kvcheck verify` (measure mode, local launcher) and `kvcheck logs` against real SGLang 0.5.23 on CPU.

Two boots in all: a pool that holds the window and one capped below it. Each verify keeps the
engine's log (--logs-dir), and the `logs` tests read those real startup logs.
"""

from __future__ import annotations

import json
import re
import uuid
from datetime import datetime
from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT, run_kvcheck
from tests.engines.real.conftest import (
    BOOT_TIMEOUT_S,
    SGLANG_VERSION,
    WINDOW,
    RealSglang,
    Verified,
    verify,
    wait_until_gone,
    write_manifest,
)

pytestmark = [pytest.mark.real_engine, pytest.mark.slow]

HOLDS = 4096  # --max-total-tokens of the role whose pool holds the window
SHORT = 1024  # --max-total-tokens of the role capped below it


def logged_pool(log: Path) -> int:
    """The pool SGLang itself logged: the last `max_total_num_tokens=N` of its startup log."""
    figures = re.findall(r"max_total_num_tokens=(\d+)", log.read_text())
    assert figures, log.read_text()[-3000:]
    return int(figures[-1])


@pytest.fixture(scope="module")
def holds(real_sglang: RealSglang, tmp_path_factory: pytest.TempPathFactory) -> Verified:
    return verify(real_sglang, tmp_path_factory.mktemp("holds"), HOLDS)


@pytest.fixture(scope="module")
def short(real_sglang: RealSglang, tmp_path_factory: pytest.TempPathFactory) -> Verified:
    return verify(real_sglang, tmp_path_factory.mktemp("short"), SHORT)


def rules(report: dict) -> list[tuple[str, str, str]]:
    return [(f["rule"], f["severity"], f["role"]) for f in report["findings"]]


def _timing(name: str, done: Verified) -> None:
    """Printed for docs/measure.md (-s shows it): never asserted, speed claims are not tested here."""
    boot_s = done.report["roles"][0]["details"]["boot_s"]
    stamps = re.findall(rb"^\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)\] The server is fired up", done.log.read_bytes(), re.M)
    ready = datetime.strptime(stamps[-1].decode(), "%Y-%m-%d %H:%M:%S").timestamp() if stamps else float("nan")
    print(f"verify ({name}) took {done.wall_s:.1f} s, the engine {boot_s:.1f} s from start to stopped; "
          f"its log's last write {done.log.stat().st_mtime - ready:.1f} s after 'ready to roll' (1 s resolution)")


def test_verify_pool_that_holds_the_window_is_exit_0(holds: Verified) -> None:
    _timing("holds", holds)
    assert (holds.code, holds.report["verdict"], holds.report["mode"]) == (0, "pass", "measure"), holds.report
    [role] = holds.report["roles"]
    assert logged_pool(holds.log) == HOLDS
    # SGLang's max_req_input_len: the window less its 6 reserved tokens
    assert (role["name"], role["status"], role["pool_tokens"], role["required_tokens"], role["max_input_tokens"],
            role["source"]) == ("server", "pass", HOLDS, WINDOW, WINDOW - 6, "measure")
    assert role["details"]["engine_version"] == SGLANG_VERSION
    assert role["details"]["log_file"] == str(holds.log)
    assert rules(holds.report) == []


def test_verify_pool_capped_below_the_window_is_exit_1_kv101(short: Verified) -> None:
    _timing("short", short)
    assert (short.code, short.report["verdict"]) == (1, "fail"), short.report
    [role] = short.report["roles"]
    assert logged_pool(short.log) == SHORT
    assert (role["status"], role["pool_tokens"], role["required_tokens"], role["max_input_tokens"]) == (
        "fail", SHORT, WINDOW, SHORT - 6)
    assert sorted(rules(short.report)) == [
        ("KV101", "error", "server"), ("KV103", "error", "server"), ("KV314", "warning", "server")]
    [kv101] = [f for f in short.report["findings"] if f["rule"] == "KV101"]
    assert kv101["message"].startswith(f"pool holds {SHORT:,} tokens, below the {WINDOW:,} required")
    [kv314] = [f for f in short.report["findings"] if f["rule"] == "KV314"]
    assert f"KV pool holds {SHORT} tokens, fewer than --context-length {WINDOW}" in kv314["message"]  # SGLang's own


def logs(log: Path) -> tuple[int, dict]:
    done = run_kvcheck("logs", str(log), "--format", "json", cwd=REPO_ROOT)
    assert done.stdout, done.stderr
    return done.exit_code, json.loads(done.stdout)


def test_logs_on_the_real_startup_log_that_holds_the_window_is_exit_0(holds: Verified) -> None:
    code, report = logs(holds.log)
    assert code == 0, report
    assert [(r["status"], r["pool_tokens"], r["required_tokens"]) for r in report["roles"]] == [
        ("pass", HOLDS, WINDOW)]
    assert rules(report) == []


def test_logs_on_the_real_startup_log_capped_below_the_window_is_exit_1_kv101(short: Verified) -> None:
    code, report = logs(short.log)
    assert code == 1, report
    assert [(r["status"], r["pool_tokens"], r["required_tokens"], r["max_input_tokens"]) for r in report["roles"]] == [
        ("fail", SHORT, WINDOW, SHORT - 6)]
    assert sorted(f["rule"] for f in report["findings"]) == ["KV101", "KV103"]
    [role] = report["roles"]
    assert role["details"]["engine_warnings"] == [
        f"line {_line_of(short.log, 'fewer than --context-length')}: KV pool holds {SHORT} tokens, fewer than "
        f"--context-length {WINDOW}. One full-length request cannot fit, so long requests will be refused or "
        "truncated at serving time. Lower --context-length, raise --mem-fraction-static, or free memory taken "
        "before the pool is sized."]


def _line_of(log: Path, text: str) -> int:
    # Lines as kvcheck and grep -n count them: tqdm's \r is not a line break (read_text would make it one).
    return next(n for n, line in enumerate(log.read_bytes().split(b"\n"), 1) if text.encode() in line)


def test_kv101_hint_names_max_total_tokens_when_that_cap_is_why_the_pool_is_short(short: Verified) -> None:
    for report in (short.report, logs(short.log)[1]):
        [kv101] = [f for f in report["findings"] if f["rule"] == "KV101"]
        assert "--max-total-tokens" in kv101["hint"], kv101["hint"]


def test_a_cpu_manifest_verifies_without_gpus_or_no_gpu_check(real_sglang: RealSglang, tmp_path: Path) -> None:
    tag = f"cpu-{uuid.uuid4().hex}"
    path = write_manifest(real_sglang, tmp_path / "deploy.yaml", tag, HOLDS)
    done = run_kvcheck("verify", str(path), "--format", "json", "--timeout", str(BOOT_TIMEOUT_S),
                       cwd=REPO_ROOT, timeout=BOOT_TIMEOUT_S + 120)
    assert wait_until_gone(tag, within_s=10) == []
    assert done.exit_code == 0, (done.stdout, done.stderr)
    [role] = json.loads(done.stdout)["roles"]
    assert role["pool_tokens"] == HOLDS
    assert "CUDA_VISIBLE_DEVICES" not in role["details"]["engine_env"]
