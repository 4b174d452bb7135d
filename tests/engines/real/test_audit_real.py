"""`kvcheck audit` of a real SGLang 0.5.23 server on CPU and of a real sglang-router in front of it (issue 19
item 8, issue 20 classes 3 and 7): one server boot and one router for the module."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from kvcheck.engines.sglang.client import MAX_INFO_KEYS
from kvcheck.io.jsontext import MAX_JSON_VALUES
from tests.conftest import REPO_ROOT, run_kvcheck
from tests.engines.real.conftest import (
    TAG_VAR,
    RealSglang,
    Server,
    free_port,
    running_server,
    tagged_pids,
    wait_until_gone,
)

pytestmark = [pytest.mark.real_engine, pytest.mark.slow]

WINDOW = 2048
POOL = 4096
ROUTER_READY_S = 120


@pytest.fixture(scope="module")
def server(real_sglang: RealSglang, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    log = tmp_path_factory.mktemp("server") / "server.log"
    with running_server(real_sglang, log, "--context-length", str(WINDOW), "--max-total-tokens", str(POOL)) as srv:
        yield srv


def _workers(url: str) -> list[dict]:
    with urllib.request.urlopen(f"{url}/workers", timeout=5) as answer:
        return list(json.loads(answer.read())["workers"])


@pytest.fixture(scope="module")
def router(real_sglang: RealSglang, server: Server, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """sglang-router (installed beside SGLang) with the server as its one worker, until it lists it healthy."""
    if subprocess.run([str(real_sglang.python), "-c", "import sglang_router"], capture_output=True).returncode:
        pytest.skip("sglang-router is not installed in the real SGLang venv (pip install sglang-router)")
    tag = uuid.uuid4().hex
    port = free_port()
    log = tmp_path_factory.mktemp("router") / "router.log"
    argv = [str(real_sglang.python), "-m", "sglang_router.launch_router", "--worker-urls", server.url,
            "--host", "127.0.0.1", "--port", str(port), "--log-level", "warn",
            # its metrics exporter listens on 29000 by default: taken when another router runs here
            "--prometheus-host", "127.0.0.1", "--prometheus-port", str(free_port())]
    with open(log, "wb") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
                                env=dict(os.environ, **{TAG_VAR: tag}))
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + ROUTER_READY_S
        while True:
            with contextlib.suppress(OSError, ValueError, KeyError):
                if any(w.get("is_healthy") for w in _workers(url)):
                    break
            assert proc.poll() is None, f"the router exited with {proc.returncode}:\n{log.read_text()[-4000:]}"
            assert time.monotonic() < deadline, f"the router listed no healthy worker:\n{log.read_text()[-4000:]}"
            time.sleep(0.5)
        yield url
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
        for pid in tagged_pids(tag):
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        assert wait_until_gone(tag, within_s=10) == []


def cli_json(*args: str) -> tuple[int, dict, str]:
    done = run_kvcheck(*args, "--format", "json", cwd=REPO_ROOT, timeout=600)
    assert done.stdout, done.stderr
    return done.exit_code, json.loads(done.stdout), done.stderr


def test_a_real_servers_answer_is_far_inside_the_wide_answer_bounds(server: Server) -> None:
    with urllib.request.urlopen(f"{server.url}/server_info", timeout=30) as answer:
        body = answer.read()
    info = json.loads(body)
    assert len(info) * 2 < MAX_INFO_KEYS  # the cap leaves more than twice a real server's keys
    assert (body.count(b",") + body.count(b"[") + body.count(b"{")) * 20 < MAX_JSON_VALUES


def test_audit_of_a_real_server_is_exit_0_with_its_figures(server: Server) -> None:
    code, report, stderr = cli_json("audit", server.url, "--timeout", "30")
    assert code == 0, stderr
    [role] = report["roles"]
    assert (role["name"], role["status"], role["pool_tokens"], role["required_tokens"]) == (
        server.url, "pass", POOL, WINDOW)


def test_real_router_answers_as_kvcheck_expects(router: str) -> None:
    """What the audit relies on, read from the real router: no /server_info, router_manager, /workers."""
    with pytest.raises(urllib.error.HTTPError) as missing:
        urllib.request.urlopen(f"{router}/server_info", timeout=5)
    assert missing.value.code == 404
    with urllib.request.urlopen(f"{router}/get_server_info", timeout=5) as answer:
        assert json.loads(answer.read())["router_manager"] is True


def test_audit_of_a_real_router_follows_it_to_its_worker_and_passes(router: str, server: Server) -> None:
    code, report, stderr = cli_json("audit", router, "--timeout", "30")
    assert code == 0, stderr
    [role] = report["roles"]
    assert (role["name"], role["status"], role["pool_tokens"]) == (f"{router} worker {server.url}", "pass", POOL)


def test_audit_of_a_real_router_against_a_larger_window_fails_on_its_worker(router: str, server: Server) -> None:
    code, report, _ = cli_json("audit", router, "--timeout", "30", "--context-length", str(2 * POOL))
    assert code == 1
    errors = [(f["rule"], f["role"]) for f in report["findings"] if f["severity"] == "error"]
    assert ("KV101", f"{router} worker {server.url}") in errors  # with KV102: started with a smaller window
    assert {role for _, role in errors} == {f"{router} worker {server.url}"}


def test_a_manifest_role_pointed_at_a_real_router_is_exit_3(router: str, server: Server, tmp_path: Path,
                                                            real_sglang: RealSglang) -> None:
    manifest = tmp_path / "m.yaml"
    manifest.write_text(
        f"name: t\ncontext_length: {WINDOW}\nmodel: {{path: {real_sglang.model}}}\nengine: {{version: '0.5.23'}}\n"
        "args: {device: cpu}\nroles:\n  server: {}\n"
    )
    code, report, stderr = cli_json("audit", "--manifest", str(manifest), "--endpoint", f"server={router}",
                                    "--timeout", "30")
    assert code == 3, stderr
    [finding] = [f for f in report["findings"] if f["rule"] == "KV306"]
    assert finding["message"].endswith(f"its workers: {server.url} (a manifest role is one server)")
