"""`kvcheck verify` (measure mode, local launcher) and `kvcheck logs` against real vLLM 0.32.0 on CPU.

The install is `bash tests/engines/real/install_vllm.sh DEST` (README.md beside this file); the tests
read DEST from KVCHECK_REAL_VLLM and skip without it, unless KVCHECK_TEST_REAL=required (CI), where a
missing install fails them. Three boots in all (50-240 s each on the 2-core machine), one per module
fixture: a pool that holds the window, a pool vLLM refuses at boot, and `--max-model-len auto`
shrinking the window below the advertised one. The pool is always sized explicitly
(--kv-cache-memory-bytes): left to itself vLLM takes 92% of the host's RAM. Each verify keeps the
engine's log (--logs-dir) and the `logs` tests read those real startup logs.
"""

from __future__ import annotations

import json
import re
import subprocess
import uuid
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT, run_kvcheck
from tests.engines.real.conftest import VLLM_VERSION, RealVllm, wait_until_gone, write_vllm_manifest

pytestmark = [pytest.mark.real_engine, pytest.mark.slow]

BOOT_TIMEOUT_S = 900
WINDOW = 4096
BLOCK = 128  # vLLM's KV block on its CPU backend
TOKEN_BYTES = 1024  # the tiny model's KV per token: 2 layers x (K + V) x 2 KV heads x 64 x 2 bytes
HOLDS_BYTES = 16 * 2**20  # 16,384 tokens = 128 blocks: 127 usable
SHORT_BYTES = 2 * 2**20  # 2,048 tokens = 16 blocks: 15 usable = 1,920 < the window


@dataclass(frozen=True)
class Verified:
    code: int
    report: dict
    stderr: str
    log: Path


def verify(real: RealVllm, folder: Path, *, window: int = WINDOW, **args: object) -> Verified:
    """`kvcheck verify M --format json --logs-dir folder/logs` on a one-role vLLM manifest; every engine
    process (API server, engine core, worker) gone after."""
    tag = f"{folder.name}-{uuid.uuid4().hex}"
    path = write_vllm_manifest(real, folder / "deploy.yaml", tag, window, **args)  # device: cpu, no --no-gpu-check
    done = run_kvcheck("verify", str(path), "--format", "json", "--timeout", str(BOOT_TIMEOUT_S),
                       "--logs-dir", str(folder / "logs"), cwd=REPO_ROOT, timeout=BOOT_TIMEOUT_S + 120)
    assert wait_until_gone(tag, within_s=30) == [], "vLLM processes outlived kvcheck verify"
    assert done.stdout, done.stderr
    (folder / "report.json").write_text(done.stdout)
    [run] = (folder / "logs").iterdir()
    return Verified(done.exit_code, json.loads(done.stdout), done.stderr, run / "server.log")


@pytest.fixture(scope="module")
def holds(real_vllm: RealVllm, tmp_path_factory: pytest.TempPathFactory) -> Verified:
    return verify(real_vllm, tmp_path_factory.mktemp("holds"), max_model_len=WINDOW, kv_cache_memory_bytes=HOLDS_BYTES)


@pytest.fixture(scope="module")
def refused(real_vllm: RealVllm, tmp_path_factory: pytest.TempPathFactory) -> Verified:
    return verify(real_vllm, tmp_path_factory.mktemp("refused"), max_model_len=WINDOW,
                  kv_cache_memory_bytes=SHORT_BYTES)


@pytest.fixture(scope="module")
def auto(real_vllm: RealVllm, tmp_path_factory: pytest.TempPathFactory) -> Verified:
    return verify(real_vllm, tmp_path_factory.mktemp("auto"), max_model_len="auto", kv_cache_memory_bytes=SHORT_BYTES)


def rules(report: dict) -> list[tuple[str, str]]:
    return sorted((f["rule"], f["severity"]) for f in report["findings"])


def logged(log: Path, pattern: str) -> str:
    match = re.search(pattern, log.read_text(errors="replace"))
    assert match, log.read_text(errors="replace")[-3000:]
    return match[1]


def test_verify_pool_that_holds_the_window_is_exit_0(holds: Verified) -> None:
    assert (holds.code, holds.report["verdict"], holds.report["mode"]) == (0, "pass", "measure"), holds.report
    [role] = holds.report["roles"]
    # vLLM's own line, and what one request can use: every block but the null block
    assert logged(holds.log, r"CPU KV cache size: ([\d,]+) tokens") == f"{HOLDS_BYTES // TOKEN_BYTES:,}"
    usable = (HOLDS_BYTES // TOKEN_BYTES // BLOCK - 1) * BLOCK
    assert (role["status"], role["pool_tokens"], role["required_tokens"], role["max_input_tokens"],
            role["source"]) == ("pass", usable, WINDOW, WINDOW - 1, "measure")
    assert role["details"]["server_info"] == {
        "endpoint": "/metrics (vllm:cache_config_info)", "max_total_num_tokens": usable, "dp_token_capacities": [],
        "max_req_input_len": WINDOW - 1, "version": VLLM_VERSION}
    assert role["details"]["engine_version"] == VLLM_VERSION
    assert rules(holds.report) == []


def test_verify_pool_vllm_refuses_is_a_measured_exit_1_with_its_estimated_length(refused: Verified) -> None:
    assert (refused.code, refused.report["verdict"]) == (1, "fail"), refused.report
    estimated = int(logged(refused.log, r"the estimated maximum model length is (\d+)"))
    assert estimated == (SHORT_BYTES // TOKEN_BYTES // BLOCK - 1) * BLOCK == 1920
    [role] = refused.report["roles"]
    assert (role["status"], role["pool_tokens"], role["required_tokens"], role["max_input_tokens"]) == (
        "fail", estimated, WINDOW, estimated - 1)
    assert rules(refused.report) == [("KV101", "error"), ("KV109", "error")]
    [kv109] = [f for f in refused.report["findings"] if f["rule"] == "KV109"]
    assert kv109["message"].startswith(
        f"vLLM refused to start: one request of its context length ({WINDOW:,} tokens) does not fit the KV cache "
        f"it allocated, which holds {estimated:,}; it said:\n    | ValueError: To serve at least one request with "
        f"the model's max seq len ({WINDOW})")
    assert f"the estimated maximum model length is {estimated}" in kv109["message"]


def test_verify_auto_max_model_len_below_the_advertised_window_is_exit_1(auto: Verified) -> None:
    assert (auto.code, auto.report["verdict"]) == (1, "fail"), auto.report
    assert logged(auto.log, r"Auto-fit max_model_len: reduced from (\d+ to \d+)") == "8192 to 1920"
    [role] = auto.report["roles"]
    assert (role["pool_tokens"], role["max_input_tokens"], role["details"]["engine_context_len"]) == (1920, 1919, 1920)
    assert rules(auto.report) == [("KV101", "error"), ("KV102", "error")]
    [kv102] = [f for f in auto.report["findings"] if f["rule"] == "KV102"]
    assert kv102["message"] == f"the engine's context length is 1,920 tokens, below the advertised window {WINDOW:,}"


def logs(log: Path, *args: str) -> tuple[int, dict]:
    done = run_kvcheck("logs", str(log), *args, "--format", "json", cwd=REPO_ROOT)
    assert done.stdout, done.stderr
    return done.exit_code, json.loads(done.stdout)


def test_logs_tells_the_real_vllm_log_by_itself_and_passes_it(holds: Verified) -> None:
    code, report = logs(holds.log)
    assert code == 0, report
    assert [(r["status"], r["pool_tokens"], r["required_tokens"], r["max_input_tokens"]) for r in report["roles"]] == [
        ("pass", 16256, WINDOW, WINDOW - 1)]
    assert report["findings"] == []


def test_logs_on_the_real_refused_start_is_kv101_at_vllms_estimate(refused: Verified) -> None:
    code, report = logs(refused.log)
    assert code == 1, report
    [role] = report["roles"]
    assert (role["pool_tokens"], role["required_tokens"]) == (1920, WINDOW)
    assert rules(report) == [("KV101", "error"), ("KV312", "warning")]


def test_logs_on_the_real_auto_fit_against_the_advertised_window_is_exit_1(auto: Verified) -> None:
    code, report = logs(auto.log, "--context-length", str(WINDOW))
    assert code == 1, report
    assert rules(report) == [("KV101", "error"), ("KV102", "error")]
    assert report["roles"][0]["details"]["engine_warnings"][0].split(": ", 1)[1].startswith(
        "Auto-fit max_model_len: reduced from 8192 to 1920")



def test_the_committed_catalogue_is_the_installed_releases_parser_and_help(real_vllm: RealVllm) -> None:
    """tools/gen_vllm_catalogue.py --check: regenerated from vllm serve's argparse, equal to the committed
    file, and every option of the real `vllm serve --help=all` in it (and none more)."""
    python = real_vllm.dest / "venv" / "bin" / "python"
    done = subprocess.run([str(python), "tools/gen_vllm_catalogue.py", "--check", "profiles/vllm/"], cwd=REPO_ROOT,
                          capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip() == (
        "profiles/vllm/flags-0.32.0.json: matches vllm serve's parser and --help=all (316 flags)")
