"""An engine from outside kvcheck: ToyServe registers through the `kvcheck.engines` entry-point group.

The folder holding it (tests/engines/plugin, with its dist-info) goes on PYTHONPATH, as an installed
package would be; no line under kvcheck/ names it. verify (estimate and measure, booting its server),
logs and audit then work on it end to end, through the real CLI.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from tests.conftest import REPO_ROOT

PLUGIN = Path(__file__).resolve().parent
SERVER = PLUGIN / "toyserve" / "server.py"
MANIFEST = """\
name: toy server
context_length: 8192
model: {{path: toy-model}}
engine: {{name: toyserve, version: "1.0"}}
gpu: H100
args: {{pool-tokens: {pool}, context-length: 8192}}
roles:
  server: {{gpus: [0]}}
"""


def kvcheck(*args: str, plugin: bool = True) -> subprocess.CompletedProcess[str]:
    path = [str(REPO_ROOT), *([str(PLUGIN)] if plugin else [])]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(path)}
    env.pop("KVCHECK_DEBUG", None)
    return subprocess.run([sys.executable, "-m", "kvcheck", *args], cwd=REPO_ROOT, env=env,
                          capture_output=True, text=True, timeout=120)


@pytest.fixture
def manifests(tmp_path: Path) -> dict[str, Path]:
    out = {}
    for name, pool in (("holds", 16384), ("short", 4096)):
        out[name] = tmp_path / f"{name}.yaml"
        out[name].write_text(MANIFEST.format(pool=pool), encoding="utf-8")
    return out


def test_no_line_of_kvcheck_names_the_plugin_engine() -> None:
    for path in (REPO_ROOT / "kvcheck").rglob("*.py"):
        assert "toyserve" not in path.read_text(encoding="utf-8").lower(), path


def test_without_the_plugin_installed_the_engine_is_unknown_input(manifests: dict[str, Path]) -> None:
    done = kvcheck("verify", str(manifests["holds"]), "--mode", "estimate", plugin=False)
    assert done.returncode == 2
    assert "unknown engine 'toyserve'; kvcheck knows: sglang" in done.stderr


@pytest.mark.parametrize(("name", "code", "pool"), [("holds", 0, 16384), ("short", 1, 4096)])
def test_verify_estimates_through_the_plugins_sizing(manifests: dict[str, Path], name: str, code: int,
                                                      pool: int) -> None:
    done = kvcheck("verify", str(manifests[name]), "--mode", "estimate", "--format", "json")
    assert done.returncode == code, done.stderr
    report = json.loads(done.stdout)
    assert [(r["name"], r["pool_tokens"], r["max_input_tokens"], r["source"]) for r in report["roles"]] == [
        ("server", pool, min(pool, 8192) - 1, "estimate")]
    assert [f["rule"] for f in report["findings"]] == ([] if code == 0 else ["KV101"])


@pytest.mark.parametrize(("name", "code", "pool"), [("holds", 0, 16384), ("short", 1, 4096)])
def test_verify_boots_the_plugins_server_and_reads_its_pool(manifests: dict[str, Path], name: str, code: int,
                                                             pool: int) -> None:
    done = kvcheck("verify", str(manifests[name]), "--no-gpu-check", "--format", "json")
    assert done.returncode == code, done.stderr
    (role,) = json.loads(done.stdout)["roles"]
    assert (role["pool_tokens"], role["max_input_tokens"], role["source"]) == (pool, min(pool, 8192) - 1,
                                                                               "measure")
    assert role["argv"][1:6] == [str(SERVER), "--model", "toy-model", "--pool-tokens", str(pool)]
    # a pool below the window is marked as one (it read "✓ pool" before, found by a review)
    assert ("✓ pool" if code == 0 else f"✗ pool {pool:,} tokens, below the 8,192 required") in done.stderr


def test_logs_tells_the_plugins_log_from_an_sglang_log(tmp_path: Path) -> None:
    log = tmp_path / "toy.log"
    log.write_text("toyserve: loading toy-model\ntoyserve: pool_tokens=4096 context_len=8192\ntoyserve: ready\n",
                   encoding="utf-8")
    done = kvcheck("logs", str(log), "--format", "json")
    assert done.returncode == 1, done.stderr  # 4,096 tokens cannot hold the log's own 8,192-token context
    (role,) = json.loads(done.stdout)["roles"]
    assert (role["pool_tokens"], role["required_tokens"], role["max_input_tokens"]) == (4096, 8192, 4095)
    sglang = REPO_ROOT / "tests" / "data" / "logs"
    first = sorted(sglang.glob("*.log"))[0]
    assert kvcheck("logs", str(first), "--context-length", "1", "--format", "json").returncode == 0


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def test_audit_asks_the_plugins_server_through_its_client(manifests: dict[str, Path]) -> None:
    port = _free_port()
    server = subprocess.Popen([sys.executable, str(SERVER), "--model", "toy-model", "--pool-tokens", "4096",
                               "--context-length", "8192", "--port", str(port)], stderr=subprocess.DEVNULL)
    try:
        for _ in range(100):
            try:
                httpx.get(f"http://127.0.0.1:{port}/health", timeout=1)
                break
            except httpx.HTTPError:
                time.sleep(0.05)
        done = kvcheck("audit", "--manifest", str(manifests["holds"]), "--endpoint",
                       f"server=http://127.0.0.1:{port}", "--format", "json")
    finally:
        server.terminate()
        server.wait(10)
    assert done.returncode == 1, done.stderr
    (role,) = json.loads(done.stdout)["roles"]
    assert (role["pool_tokens"], role["source"]) == (4096, "audit")
