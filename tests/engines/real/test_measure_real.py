"""`kvcheck verify` (measure mode, local launcher) and `kvcheck logs` against real SGLang 0.5.23 on CPU.

Two boots in all: a pool that holds the window and one capped below it. Each verify keeps the
engine's log (--logs-dir), and the `logs` tests read those real startup logs.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT, run_kvcheck
from tests.engines.real.conftest import SGLANG_VERSION, WINDOW, RealSglang, Verified, verify

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


def test_verify_pool_that_holds_the_window_is_exit_0(holds: Verified) -> None:
    print(f"verify (holds) took {holds.wall_s:.1f} s")
    assert (holds.code, holds.report["verdict"], holds.report["mode"]) == (0, "pass", "measure"), holds.report
    [role] = holds.report["roles"]
    assert logged_pool(holds.log) == HOLDS
    assert (role["name"], role["status"], role["pool_tokens"], role["required_tokens"], role["source"]) == (
        "server", "pass", HOLDS, WINDOW, "measure")
    assert role["details"]["engine_version"] == SGLANG_VERSION
    assert role["details"]["log_file"] == str(holds.log)
    assert rules(holds.report) == []


def test_verify_pool_capped_below_the_window_is_exit_1_kv101(short: Verified) -> None:
    print(f"verify (short) took {short.wall_s:.1f} s")
    assert (short.code, short.report["verdict"]) == (1, "fail"), short.report
    [role] = short.report["roles"]
    assert logged_pool(short.log) == SHORT
    assert (role["status"], role["pool_tokens"], role["required_tokens"]) == ("fail", SHORT, WINDOW)
    assert ("KV101", "error", "server") in rules(short.report), short.report["findings"]


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
    assert [(r["status"], r["pool_tokens"], r["required_tokens"]) for r in report["roles"]] == [
        ("fail", SHORT, WINDOW)]
    assert "KV101" in [f["rule"] for f in report["findings"]], report["findings"]
