"""`kvcheck verify` (measure mode, a CPU role) and `kvcheck logs` on what it kept, against the double
and the real engine alike: a pool that holds the window (exit 0), one capped below it (exit 1, with
SGLang's own warning quoted) and a setting SGLang refuses while its arguments resolve (exit 3, its
message quoted). The figures asserted are the real engine's; the double must produce the same."""

from __future__ import annotations

import json
import re
from datetime import datetime
from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT, run_kvcheck
from tests.engines.real.conftest import WINDOW, Verified, verify

HOLDS = 4096  # --max-total-tokens of the role whose pool holds the window
SHORT = 1024  # --max-total-tokens of the role capped below it
TOO_LONG = 100_000  # above the tiny model's 8,192 positions: refused without SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN
REFUSAL = (f"ValueError: Warning: User-specified context_length ({TOO_LONG}) is greater than the derived "
           "context_length (8192)")
CAPPED_WARNING = (f"KV pool holds {SHORT} tokens, fewer than --context-length {WINDOW}. One full-length request "
                  "cannot fit, so long requests will be refused or truncated at serving time. Lower "
                  "--context-length, raise --mem-fraction-static, or free memory taken before the pool is sized.")


@pytest.fixture(scope="module")
def holds(engine, tmp_path_factory: pytest.TempPathFactory) -> Verified:
    return verify(engine, tmp_path_factory.mktemp("holds"), HOLDS)


@pytest.fixture(scope="module")
def short(engine, tmp_path_factory: pytest.TempPathFactory) -> Verified:
    return verify(engine, tmp_path_factory.mktemp("short"), SHORT)


@pytest.fixture(scope="module")
def refused(engine, tmp_path_factory: pytest.TempPathFactory) -> Verified:
    # the cap is the window, so no static finding (KV103) stands beside the refusal
    return verify(engine, tmp_path_factory.mktemp("refused"), TOO_LONG, window=TOO_LONG)


def rules(report: dict) -> list[tuple[str, str, str | None]]:
    return sorted((f["rule"], f["severity"], f["role"]) for f in report["findings"])


def logs(log: Path) -> tuple[int, dict]:
    done = run_kvcheck("logs", str(log), "--format", "json", cwd=REPO_ROOT)
    assert done.stdout, done.stderr
    return done.exit_code, json.loads(done.stdout)


def _timing(name: str, done: Verified) -> None:
    """Printed for docs/measure.md (-s shows it): never asserted, speed claims are not tested here."""
    boot_s = done.report["roles"][0]["details"]["boot_s"]
    stamps = re.findall(rb"^\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)\] The server is fired up", done.log.read_bytes(), re.M)
    ready = datetime.strptime(stamps[-1].decode(), "%Y-%m-%d %H:%M:%S").timestamp() if stamps else float("nan")
    print(f"verify ({name}) took {done.wall_s:.1f} s, the engine {boot_s:.1f} s from start to stopped; "
          f"its log's last write {done.log.stat().st_mtime - ready:.1f} s after 'ready to roll' (1 s resolution)")


def test_a_pool_that_holds_the_window_is_exit_0(holds: Verified) -> None:
    _timing("holds", holds)
    assert (holds.code, holds.report["verdict"], holds.report["mode"]) == (0, "pass", "measure"), holds.report
    [role] = holds.report["roles"]
    assert (role["name"], role["status"], role["pool_tokens"], role["required_tokens"], role["max_input_tokens"],
            role["source"]) == ("server", "pass", HOLDS, WINDOW, WINDOW - 6, "measure")
    assert role["details"]["engine_version"] == "0.5.23"
    assert "CUDA_VISIBLE_DEVICES" not in role["details"]["engine_env"]
    assert holds.report["findings"] == []


def test_a_pool_capped_below_the_window_is_exit_1_with_sglangs_warning(short: Verified) -> None:
    _timing("short", short)
    assert (short.code, short.report["verdict"]) == (1, "fail"), short.report
    [role] = short.report["roles"]
    assert (role["status"], role["pool_tokens"], role["required_tokens"], role["max_input_tokens"]) == (
        "fail", SHORT, WINDOW, SHORT - 6)
    assert rules(short.report) == [("KV101", "error", "server"), ("KV103", "error", "server"),
                                   ("KV314", "warning", "server")]
    [kv314] = [f for f in short.report["findings"] if f["rule"] == "KV314"]
    assert CAPPED_WARNING in kv314["message"]
    [kv101] = [f for f in short.report["findings"] if f["rule"] == "KV101"]
    assert "--max-total-tokens" in kv101["hint"]


def test_a_context_length_sglang_refuses_is_exit_3_with_its_message(refused: Verified) -> None:
    assert (refused.code, refused.report["verdict"]) == (3, "error"), refused.report
    [role] = refused.report["roles"]
    assert (role["status"], role["pool_tokens"]) == ("error", None)
    assert rules(refused.report) == [("KV301", "error", "server")]
    [kv301] = refused.report["findings"]
    assert kv301["message"].startswith("the engine exited with status 1 before reporting its pool (phase: failed)")
    assert REFUSAL in kv301["message"]


def test_logs_of_the_three_boots(holds: Verified, short: Verified, refused: Verified) -> None:
    code, report = logs(holds.log)
    assert (code, [(r["status"], r["pool_tokens"], r["max_input_tokens"]) for r in report["roles"]]) == (
        0, [("pass", HOLDS, WINDOW - 6)]), report
    assert report["findings"] == []
    code, report = logs(short.log)
    assert (code, [(r["status"], r["pool_tokens"], r["max_input_tokens"]) for r in report["roles"]]) == (
        1, [("fail", SHORT, SHORT - 6)]), report
    assert [f["rule"] for f in report["findings"]] == ["KV101", "KV103"]
    assert [w.split(": ", 1)[1] for w in report["roles"][0]["details"]["engine_warnings"]] == [CAPPED_WARNING]
    code, report = logs(refused.log)
    assert code == 3, report
    assert [f["rule"] for f in report["findings"]] == ["KV309"]
    assert REFUSAL in report["findings"][0]["message"]
