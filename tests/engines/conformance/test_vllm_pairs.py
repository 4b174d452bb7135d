"""A vLLM prefill role and decode role side by side, against the vLLM double and real vLLM 0.32.0 on CPU:
`kvcheck verify` boots both (a matching pair passes; a pair that disagrees on max_model_len fails),
`kvcheck logs` reads the two logs verify kept, and `kvcheck audit` judges two running servers.

The pair talks through vLLM's ExampleConnector (`kv_role` kv_producer / kv_consumer, KV blocks through a
shared folder): it ships with vLLM and runs on the CPU backend with nothing else installed.
NixlConnector with `kv_buffer_device: cpu` also runs there, but needs the `nixl` wheels, which the
harness's install does not add (../shared/tools/real-engines/README.md). kvcheck measures each role
alone and judges the pair on vLLM's own bounds: a role refuses prompts of max_model_len tokens or more,
and a request uses at most (num_gpu_blocks - 1) x block_size tokens of its pool. Six boots on the real
side, two at a time (50-240 s each on the 2-core machine).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import time
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from tests.conftest import REPO_ROOT, run_kvcheck
from tests.engines.real.conftest import TAG_VAR, free_port, wait_until_gone
from tests.engines.real.test_vllm_real import (
    BLOCK,
    BOOT_TIMEOUT_S,
    ENV,
    HOLDS_BYTES,
    TOKEN_BYTES,
    VllmLike,
    manifest,
)

WINDOW = 2048
USABLE = (HOLDS_BYTES // TOKEN_BYTES // BLOCK - 1) * BLOCK  # 16,256: every block but the null block
KV110 = ("prefill serves a context length of 4,096 tokens but decode 2,048: requests of 2,048 to 4,095 tokens are "
         "taken by prefill and refused by decode, failing (or hanging) between the two")
KV104 = ("prefill admits prompts below 4,096 tokens but decode below 2,048: prompts of 2,048 to 4,095 tokens pass "
         "prefill and then wait at decode with no error")


def connector(role: str, storage: Path) -> dict:
    return {"kv_connector": "ExampleConnector", "kv_role": role,
            "kv_connector_extra_config": {"shared_storage_path": str(storage)}}


def pair_manifest(engine: VllmLike, folder: Path, tag: str, prefill_len: int, decode_len: int) -> Path:
    storage = folder / "kv"
    storage.mkdir(exist_ok=True)
    roles = {  # vLLM 0.32.0 has no --device flag: each role lists a GPU of its own, verify runs --no-gpu-check
        "prefill": {"gpus": [0], "args": {"max-model-len": prefill_len,
                                          "kv-transfer-config": connector("kv_producer", storage)}},
        "decode": {"gpus": [1], "args": {"max-model-len": decode_len,
                                         "kv-transfer-config": connector("kv_consumer", storage)}},
    }
    path = folder / "deploy.yaml"
    path.write_text(yaml.safe_dump(manifest(engine, tag, WINDOW, roles, {"kv-cache-memory-bytes": HOLDS_BYTES}),
                                   sort_keys=False))
    return path


@dataclass(frozen=True)
class PairRun:
    code: int
    report: dict
    stderr: str
    logs: Path
    wall_s: float


def verify_pair(engine: VllmLike, folder: Path, prefill_len: int, decode_len: int) -> PairRun:
    tag = f"{folder.name}-{uuid.uuid4().hex}"
    path = pair_manifest(engine, folder, tag, prefill_len, decode_len)
    start = time.monotonic()
    done = run_kvcheck("verify", str(path), "--no-gpu-check", "--format", "json", "--timeout", str(BOOT_TIMEOUT_S),
                       "--logs-dir", str(folder / "logs"), cwd=REPO_ROOT, timeout=BOOT_TIMEOUT_S + 120)
    wall_s = time.monotonic() - start
    assert wait_until_gone(tag, within_s=30) == [], "vLLM processes outlived kvcheck verify"
    assert done.stdout, done.stderr
    (folder / "report.json").write_text(done.stdout)
    [run] = (folder / "logs").iterdir()
    return PairRun(done.exit_code, json.loads(done.stdout), done.stderr, run, wall_s)


@pytest.fixture(scope="module")
def matching(vllm_engine: VllmLike, tmp_path_factory: pytest.TempPathFactory) -> PairRun:
    return verify_pair(vllm_engine, tmp_path_factory.mktemp("matching"), WINDOW, WINDOW)


@pytest.fixture(scope="module")
def mismatched(vllm_engine: VllmLike, tmp_path_factory: pytest.TempPathFactory) -> PairRun:
    # prefill takes prompts up to 4,095 tokens, decode up to 2,047: the window (2,048) fits both, so only
    # the pair rules can see it
    return verify_pair(vllm_engine, tmp_path_factory.mktemp("mismatched"), 2 * WINDOW, WINDOW)


def roles(report: dict) -> dict[str, tuple]:
    return {r["name"]: (r["status"], r["pool_tokens"], r["max_input_tokens"], r["details"].get("engine_context_len"))
            for r in report["roles"]}


def rules(report: dict) -> list[tuple[str, str, str | None]]:
    return sorted((f["rule"], f["severity"], f["role"]) for f in report["findings"])


def test_a_matching_prefill_and_decode_pair_passes(matching: PairRun) -> None:
    print(f"matching pair, side by side: {matching.wall_s:.1f} s")
    assert (matching.code, matching.report["verdict"]) == (0, "pass"), (matching.report, matching.stderr[-3000:])
    assert roles(matching.report) == {"prefill": ("pass", USABLE, WINDOW, WINDOW),
                                      "decode": ("pass", USABLE, WINDOW, WINDOW)}
    assert matching.report["findings"] == []
    for name, role in (("prefill", "kv_producer"), ("decode", "kv_consumer")):
        text = (matching.logs / f"{name}.log").read_text(errors="replace")
        assert f"CPU KV cache size: {HOLDS_BYTES // TOKEN_BYTES:,} tokens, Maximum concurrency for {WINDOW:,} tokens " \
               "per request: 8.00x" in text, text[-3000:]
        assert "[example_connector.py:107] KVTransferConfig(kv_connector='ExampleConnector', " in text
        assert f"kv_role='{role}'" in text


def test_a_pair_that_disagrees_on_max_model_len_fails_on_vllms_bounds(mismatched: PairRun) -> None:
    report = mismatched.report
    assert (mismatched.code, report["verdict"]) == (1, "fail"), (report, mismatched.stderr[-3000:])
    assert roles(report) == {"prefill": ("pass", USABLE, 2 * WINDOW, 2 * WINDOW),
                             "decode": ("pass", USABLE, WINDOW, WINDOW)}
    assert rules(report) == [("KV104", "warning", None), ("KV110", "error", None)]
    assert {f["rule"]: f["message"] for f in report["findings"]} == {"KV110": KV110, "KV104": KV104}


def test_logs_of_the_pair_read_each_roles_kv_role(mismatched: PairRun) -> None:
    """`non-default args:` prints --kv-transfer-config as `KVTransferConfig(...)`: the role's mode is read
    from it, so `logs` judges the two logs as a pair."""
    done = run_kvcheck("logs", str(mismatched.logs / "prefill.log"), str(mismatched.logs / "decode.log"),
                       "--context-length", str(WINDOW), "--format", "json", cwd=REPO_ROOT)
    report = json.loads(done.stdout)
    assert done.exit_code == 1, report
    assert [(r["name"], r["status"], r["pool_tokens"], r["max_input_tokens"]) for r in report["roles"]] == [
        ("prefill.log", "pass", USABLE, 2 * WINDOW), ("decode.log", "pass", USABLE, WINDOW)]
    assert rules(report) == [("KV104", "warning", None), ("KV110", "error", None)]
    assert [f["message"] for f in report["findings"] if f["rule"] == "KV110"] == [
        KV110.replace("prefill", "prefill.log").replace("decode", "decode.log")]


@dataclass
class Started:
    url: str
    log: Path
    proc: subprocess.Popen


@contextlib.contextmanager
def started(engine: VllmLike, log: Path, tag: str, *args: str) -> Iterator[Started]:
    """Start one server with ARGS on a free loopback port; stop it and every process of its group on every
    way out."""
    port = free_port()
    env = dict(os.environ, **ENV, **getattr(engine, "env", {}), **{TAG_VAR: tag})
    argv = [*engine.command(), str(engine.model), *args, "--host", "127.0.0.1", "--port", str(port)]
    with open(log, "wb") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    try:
        yield Started(f"http://127.0.0.1:{port}", log, proc)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=15)


def wait_ready(servers: list[Started]) -> None:
    """Poll every server's /health until each answers 200 (booting side by side)."""
    deadline = time.monotonic() + BOOT_TIMEOUT_S
    waiting = list(servers)
    while waiting:
        for server in list(waiting):
            if server.proc.poll() is not None:
                raise AssertionError(f"vLLM exited with {server.proc.returncode} before ready:\n"
                                     f"{server.log.read_text()[-4000:]}")
            with contextlib.suppress(OSError), urllib.request.urlopen(f"{server.url}/health", timeout=2) as answer:
                if answer.status == 200:
                    waiting.remove(server)
        if waiting and time.monotonic() > deadline:
            raise AssertionError(f"vLLM not ready after {BOOT_TIMEOUT_S} s:\n{waiting[0].log.read_text()[-4000:]}")
        time.sleep(0.5)


def test_audit_of_a_running_pair_that_disagrees_on_max_model_len(vllm_engine: VllmLike, tmp_path: Path) -> None:
    tag = uuid.uuid4().hex
    path = pair_manifest(vllm_engine, tmp_path, tag, 2 * WINDOW, WINDOW)
    doc = yaml.safe_load(path.read_text())
    common = ["--kv-cache-memory-bytes", str(HOLDS_BYTES)]
    flags = {name: [*common, "--max-model-len", str(role["args"]["max-model-len"]), "--kv-transfer-config",
                    json.dumps(role["args"]["kv-transfer-config"])] for name, role in doc["roles"].items()}
    try:
        with started(vllm_engine, tmp_path / "prefill.log", tag, *flags["prefill"]) as prefill, \
                started(vllm_engine, tmp_path / "decode.log", tag, *flags["decode"]) as decode:
            wait_ready([prefill, decode])
            done = run_kvcheck("audit", "--manifest", str(path), "--endpoint", f"prefill={prefill.url}",
                               "--endpoint", f"decode={decode.url}", "--format", "json", cwd=REPO_ROOT)
    finally:
        survivors = wait_until_gone(tag, within_s=30)
        for pid in survivors:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
    assert survivors == [], f"vLLM processes outlived the test: {survivors}"
    report = json.loads(done.stdout)
    assert done.exit_code == 1, report
    assert [(r["name"], r["status"], r["pool_tokens"], r["max_input_tokens"], r["source"]) for r in report["roles"]] \
        == [("prefill", "pass", USABLE, 2 * WINDOW, "audit"), ("decode", "pass", USABLE, WINDOW, "audit")]
    # a running vLLM 0.32.0 server states neither its args nor its device, and its manifest cannot say CPU
    # (no --device flag): kvcheck warns that --kv-cache-memory-bytes skipped the GPU profiling (KV211)
    assert rules(report) == [("KV104", "warning", None), ("KV110", "error", None), ("KV211", "warning", "decode"),
                             ("KV211", "warning", "prefill")]
    assert {f["rule"]: f["message"] for f in report["findings"] if f["role"] is None} == {"KV110": KV110,
                                                                                          "KV104": KV104}
