"""`kvcheck audit` takes the ignore file and the baseline too: a live server whose pool is short (KV101)
adopts the gate with --write-baseline, and an ignore-file entry for its role passes until its date."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.audit.servers import FakeServer, sglang_routes
from tests.conftest import run_kvcheck

FAST = ("--timeout", "2", "--retries", "0", "--format", "json")


@pytest.fixture
def short_server() -> Iterator[FakeServer]:
    server = FakeServer(sglang_routes())  # pool 681,280 tokens for a 1,048,576 window: KV101
    yield server
    server.close()


def audit(server: FakeServer, *extra: str) -> tuple[int, dict]:
    done = run_kvcheck("audit", server.url, *FAST, *extra)
    assert done.stdout, done.stderr
    return done.exit_code, json.loads(done.stdout)


def test_audit_adopts_a_baseline(short_server: FakeServer, tmp_path: Path) -> None:
    assert audit(short_server)[0] == 1
    baseline = tmp_path / "baseline.json"
    code, report = audit(short_server, "--write-baseline", str(baseline))
    assert (code, report["findings"], report["suppressed"]) == (0, [], [{"rule": "KV101", "count": 1}])
    code, report = audit(short_server, "--baseline", str(baseline))
    assert (code, report["roles"][0]["status"], report["suppressions"][0]["kind"]) == (0, "pass", "baseline")


@pytest.mark.parametrize(("until", "code", "rules"), [("2099-12-31", 0, []), ("2020-01-31", 1, ["KV101", "KV601"])])
def test_audit_takes_an_ignore_file(short_server: FakeServer, tmp_path: Path, until: str, code: int,
                                    rules: list[str]) -> None:
    ignore = tmp_path / "ignore.yaml"
    ignore.write_text(f"suppressions:\n  - rule: KV101\n    role: {short_server.url}\n"
                      f"    reason: the window shrinks next release\n    until: {until}\n")
    got, report = audit(short_server, "--ignore-file", str(ignore))
    assert (got, sorted(f["rule"] for f in report["findings"])) == (code, rules)
