"""`kvcheck audit` and `kvcheck probe` of a real SGLang 0.5.23 server on CPU: one boot for the module."""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT, run_kvcheck
from tests.engines.real.conftest import RealSglang, Server, running_server

pytestmark = [pytest.mark.real_engine, pytest.mark.slow]

WINDOW = 2048
POOL = 4096


@pytest.fixture(scope="module")
def server(real_sglang: RealSglang, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    log = tmp_path_factory.mktemp("server") / "server.log"
    with running_server(real_sglang, log, "--context-length", str(WINDOW), "--max-total-tokens", str(POOL)) as srv:
        print(f"server ready after {srv.boot_s:.1f} s")
        yield srv


def cli_json(*args: str) -> tuple[int, dict, str]:
    done = run_kvcheck(*args, "--format", "json", cwd=REPO_ROOT, timeout=600)
    assert done.stdout, done.stderr
    return done.exit_code, json.loads(done.stdout), done.stderr


def test_audit_of_a_real_server_whose_pool_holds_its_window_is_exit_0(server: Server) -> None:
    code, report, stderr = cli_json("audit", server.url)
    assert code == 0, (report, stderr)
    [role] = report["roles"]
    assert (role["status"], role["pool_tokens"], role["required_tokens"], role["max_input_tokens"]) == (
        "pass", POOL, WINDOW, WINDOW - 6), role
    assert report["findings"] == []


def test_audit_of_a_real_server_against_a_larger_window_is_exit_1_kv101(server: Server) -> None:
    code, report, stderr = cli_json("audit", server.url, "--context-length", str(2 * POOL))
    assert code == 1, (report, stderr)
    [role] = report["roles"]
    assert (role["status"], role["pool_tokens"], role["required_tokens"]) == ("fail", POOL, 2 * POOL), role
    assert "KV101" in [f["rule"] for f in report["findings"]], report["findings"]


def test_probe_of_a_real_server_is_exit_0(server: Server, tmp_path: Path) -> None:
    code, report, stderr = cli_json("probe", server.url, "--tenants", "2", "--rounds", "1", "--seed", "1")
    (tmp_path / "probe.json").write_text(json.dumps(report, indent=1))
    assert code == 0, (json.dumps(report, indent=1)[:6000], stderr)
    limits = report["roles"][0]["details"]["limits"]
    assert (limits["window_tokens"], limits["max_req_input_len"], limits["pool_tokens"], limits["version"]) == (
        WINDOW, WINDOW - 6, POOL, "0.5.23")
    assert report["findings"] == []
    with urllib.request.urlopen(server.url + "/health", timeout=10) as answer:  # the probe left it serving
        assert answer.status == 200
