"""`kvcheck probe` against real vLLM 0.32.0 on CPU: its OpenAI front door, found by itself from a bare URL.

The install is `bash tests/engines/real/install_vllm.sh DEST` (KVCHECK_REAL_VLLM=DEST; skipped without
it unless KVCHECK_TEST_REAL=required). Two boots, one at a time (50-240 s each on the 2-core machine):
`--max-model-len auto` on a pool of 1,920 usable tokens while the gateway promises 4,096 (vLLM shrinks
the window and says so only in its log: the probe must fail), then a server that holds its 4,096-token
window (passes, and fails once more tokens are promised than max_model_len). The pool is always sized
explicitly (--kv-cache-memory-bytes).
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.conftest import REPO_ROOT, run_kvcheck
from tests.engines.real.conftest import TAG_VAR, free_port, stop_tagged

pytestmark = [pytest.mark.real_engine, pytest.mark.slow]

INSTALL = Path(__file__).resolve().parent / "install_vllm.sh"
BOOT_TIMEOUT_S = 900
WINDOW = 4096
HOLDS_BYTES = 16 * 2**20  # 16,384 tokens = 128 blocks of 128: 127 usable (the tiny model's KV is 1 KiB a token)
SHORT_BYTES = 2 * 2**20  # 16 blocks: 15 usable = 1,920 tokens, below the window
FAST = ("--tenants", "2", "--rounds", "1", "--rate", "20", "--seed", "3", "--format", "json")


@pytest.fixture(scope="module")
def vllm_install() -> Path:
    dest = os.environ.get("KVCHECK_REAL_VLLM")
    how = f"run `bash {INSTALL} DEST` and export KVCHECK_REAL_VLLM=DEST"
    problem = None
    if not dest:
        problem = f"KVCHECK_REAL_VLLM is not set: no real vLLM to test against ({how})"
    elif not (Path(dest) / ".complete").is_file() or not (Path(dest) / "venv" / "bin" / "vllm").is_file():
        problem = f"KVCHECK_REAL_VLLM={dest} holds no complete install ({how})"
    if problem is not None:
        if os.environ.get("KVCHECK_TEST_REAL") == "required":
            pytest.fail(f"KVCHECK_TEST_REAL=required: {problem}", pytrace=False)
        pytest.skip(problem)
    assert dest is not None
    return Path(dest)


@contextlib.contextmanager
def vllm_server(dest: Path, log: Path, *args: str) -> Iterator[str]:
    """`vllm serve` of the tiny model with ARGS on a free loopback port until /health is 200; every process
    it started (API server, engine core) killed on the way out."""
    tag = uuid.uuid4().hex
    port = free_port()
    env = dict(os.environ, VLLM_NO_USAGE_STATS="1", DO_NOT_TRACK="1", HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1",
               **{TAG_VAR: tag})
    argv = [str(dest / "venv" / "bin" / "vllm"), "serve", str(dest / "tiny-llama"), *args,
            "--host", "127.0.0.1", "--port", str(port)]
    url = f"http://127.0.0.1:{port}"
    with open(log, "wb") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    try:
        deadline = time.monotonic() + BOOT_TIMEOUT_S
        while True:
            if proc.poll() is not None:
                raise AssertionError(f"vLLM exited with {proc.returncode} before ready:\n{log.read_text()[-4000:]}")
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"{url}/health", timeout=5).status_code == 200:
                    break
            if time.monotonic() > deadline:
                raise AssertionError(f"vLLM not ready after {BOOT_TIMEOUT_S} s:\n{log.read_text()[-4000:]}")
            time.sleep(1)
        yield url
    finally:
        stop_tagged(proc, tag, "vLLM", within_s=30)


def probe(url: str, *options: str) -> tuple[int, dict, str]:
    done = run_kvcheck("probe", url, *FAST, *options, cwd=REPO_ROOT, timeout=900)
    assert done.stdout, done.stderr
    return done.exit_code, json.loads(done.stdout), done.stderr


def findings(report: dict) -> list[tuple[str, str]]:
    return [(f["rule"], f["role"]) for f in report["findings"]]


def boundary_rows(report: dict) -> list[tuple]:
    requests = [q for role in report["roles"] for q in role["details"].get("requests") or ()]
    return [(q["check"], q["stream"], q["prompt_tokens"], q["status"], q["reported_prompt_tokens"], q["verdict"])
            for q in sorted(requests, key=lambda q: q["index"]) if q["owner"].startswith("boundary")]


def test_auto_fit_shrinking_the_promised_window_fails(vllm_install: Path, tmp_path: Path) -> None:
    with vllm_server(vllm_install, tmp_path / "auto.log", "--max-model-len", "auto",
                     "--kv-cache-memory-bytes", str(SHORT_BYTES)) as url:
        code, report, stderr = probe(url, "--context-length", str(WINDOW))
    assert "Auto-fit max_model_len: reduced from" in (tmp_path / "auto.log").read_text(errors="replace")
    assert code == 1, stderr
    assert findings(report) == [("KV101", "limits"), ("KV404", "/v1/completions")]
    limits = report["roles"][0]
    assert (limits["pool_tokens"], limits["required_tokens"], limits["max_input_tokens"]) == (1920, WINDOW, 1920)
    assert limits["details"]["limits"]["served_context_len"] == 1920  # /v1/models advertises what auto-fit left
    assert boundary_rows(report) == [
        ("control", False, 32, 200, 32, "ok"),
        ("below-bound", False, 1919, 200, 1919, "ok"),
        ("promised", False, 4095, 400, None, "fail"),  # the window promised to clients is refused
        ("at-bound", False, 1920, 400, None, "ok"),
        ("above-bound", False, 1921, 400, None, "ok"),
        ("window", False, 4096, 400, None, "ok"),
        ("beyond-window", False, 4097, 400, None, "ok"),
        ("at-bound", True, 1920, 400, None, "ok"),
        ("window", True, 4096, 400, None, "ok"),
    ]
    kv404 = next(f for f in report["findings"] if f["rule"] == "KV404")
    assert "This model's maximum context length is 1920 tokens" in kv404["message"]
    assert "--max-model-len auto" in kv404["hint"]


@pytest.fixture(scope="module")
def holds(vllm_install: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    log = tmp_path_factory.mktemp("holds") / "server.log"
    with vllm_server(vllm_install, log, "--max-model-len", str(WINDOW), "--kv-cache-memory-bytes",
                     str(HOLDS_BYTES)) as url:
        yield url


def test_probe_of_a_real_vllm_server_is_exit_0_with_exact_lengths(holds: str) -> None:
    code, report, stderr = probe(holds)
    assert (code, report["verdict"], report["findings"]) == (0, "pass", []), stderr
    assert [role["name"] for role in report["roles"]] == ["limits", "/v1/completions", "/v1/completions (stream)",
                                                          "isolation"]
    limits = report["roles"][0]
    assert (limits["pool_tokens"], limits["required_tokens"], limits["max_input_tokens"], limits["source"]) == (
        127 * 128, WINDOW, WINDOW, "server_info")
    details = limits["details"]
    assert details["limits"]["version"] == "0.32.0"
    # found by itself: SGLang's reader got 404s, vLLM's read /metrics, /v1/models, /version
    assert [(s["method"], s["path"], s["status"]) for s in details["sent"][:7]] == [
        ("GET", "/server_info", 404), ("GET", "/get_server_info", 404), ("GET", "/metrics", 200),
        ("GET", "/v1/models", 200), ("GET", "/version", 200), ("GET", "/v1/models", 200), ("POST", "/tokenize", 200)]
    assert boundary_rows(report) == [
        ("control", False, 32, 200, 32, "ok"),
        ("below-bound", False, 4095, 200, 4095, "ok"),  # max_model_len - 1 is served
        ("at-bound", False, 4096, 400, None, "ok"),  # max_model_len is refused, explicitly
        ("above-bound", False, 4097, 400, None, "ok"),
        ("at-bound", True, 4096, 400, None, "ok"),
    ]
    isolation = next(role for role in report["roles"] if role["name"] == "isolation")["details"]["requests"]
    assert sorted((q["check"], q["status"], q["verdict"]) for q in isolation) == [
        ("near-edge", 200, "ok"), ("near-edge", 200, "ok"), ("over-long", 400, "ok"), ("over-long", 400, "ok"),
        ("short", 200, "ok"), ("short", 200, "ok")]
    assert httpx.get(f"{holds}/health", timeout=10).status_code == 200  # the probe left the server serving


def test_a_gateway_promising_more_than_max_model_len_fails_on_the_real_engine(holds: str) -> None:
    code, report, stderr = probe(holds, "--context-length", str(2 * WINDOW), "--engine", "vllm")
    assert code == 1, stderr
    assert findings(report) == [("KV404", "/v1/completions")]
    [kv404] = report["findings"]
    assert kv404["message"].startswith(
        "a prompt within the advertised limits was refused (1 request): #3 /v1/completions promised (8191 tokens)")
    assert "This model's maximum context length is 4096 tokens" in kv404["message"]
