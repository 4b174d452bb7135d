"""`kvcheck verify` (measure mode, a vLLM role on CPU) and `kvcheck logs` on the logs it kept, against the
vLLM double and real vLLM 0.32.0 alike. Four boots a side:

- a pool that holds the window (exit 0);
- a pool capped below the window: vLLM refuses to start, a measured verdict (exit 1, KV109 quoting
  vLLM's own refusal, KV101 at its estimated maximum model length);
- `--max-model-len auto` shrinking the window below the advertised one (exit 1, KV102 and KV101, vLLM's
  auto-fit line first among the engine's warnings);
- `--num-gpu-blocks-override`: vLLM sizes the pool from the override, not from the KV memory (exit 0
  at the override's usable pool).

The figures asserted are the real engine's (tests/data/vllm/ holds the logs of the same boots); the
double must produce the same.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT, run_kvcheck
from tests.engines.real.test_vllm_real import (
    BLOCK,
    HOLDS_BYTES,
    SHORT_BYTES,
    TOKEN_BYTES,
    VLLM_VERSION,
    WINDOW,
    Verified,
    verify,
)

HOLDS = (HOLDS_BYTES // TOKEN_BYTES // BLOCK - 1) * BLOCK  # 16,256: 128 blocks less the null block
SHORT = (SHORT_BYTES // TOKEN_BYTES // BLOCK - 1) * BLOCK  # 1,920: 16 blocks less the null block
OVERRIDE = 40  # blocks: 39 usable = 4,992 tokens, though 16 MiB would give 128
REFUSAL = (f"ValueError: To serve at least one request with the model's max seq len ({WINDOW}), (0.0 GiB KV cache "
           "is needed, which is larger than the available KV cache memory (0.0 GiB). Based on the available "
           f"memory, the estimated maximum model length is {SHORT}.")


@pytest.fixture(scope="module")
def holds(vllm_engine, tmp_path_factory: pytest.TempPathFactory) -> Verified:
    return verify(vllm_engine, tmp_path_factory.mktemp("holds"), max_model_len=WINDOW,
                  kv_cache_memory_bytes=HOLDS_BYTES)


@pytest.fixture(scope="module")
def refused(vllm_engine, tmp_path_factory: pytest.TempPathFactory) -> Verified:
    return verify(vllm_engine, tmp_path_factory.mktemp("refused"), max_model_len=WINDOW,
                  kv_cache_memory_bytes=SHORT_BYTES)


@pytest.fixture(scope="module")
def auto(vllm_engine, tmp_path_factory: pytest.TempPathFactory) -> Verified:
    return verify(vllm_engine, tmp_path_factory.mktemp("auto"), max_model_len="auto", kv_cache_memory_bytes=SHORT_BYTES)


@pytest.fixture(scope="module")
def override(vllm_engine, tmp_path_factory: pytest.TempPathFactory) -> Verified:
    return verify(vllm_engine, tmp_path_factory.mktemp("override"), max_model_len=WINDOW,
                  kv_cache_memory_bytes=HOLDS_BYTES, num_gpu_blocks_override=OVERRIDE)


def rules(report: dict) -> list[tuple[str, str]]:
    return sorted((f["rule"], f["severity"]) for f in report["findings"])


def logged(log: Path, pattern: str) -> str:
    match = re.search(pattern, log.read_text(errors="replace"))
    assert match, log.read_text(errors="replace")[-3000:]
    return match[1]


def logs(log: Path, *args: str) -> tuple[int, dict]:
    done = run_kvcheck("logs", str(log), *args, "--format", "json", cwd=REPO_ROOT)
    assert done.stdout, done.stderr
    return done.exit_code, json.loads(done.stdout)


def test_a_pool_that_holds_the_window_is_exit_0(holds: Verified) -> None:
    assert (holds.code, holds.report["verdict"], holds.report["mode"]) == (0, "pass", "measure"), holds.report
    # vLLM's own line, and what one request can use: every block but the null block
    assert logged(holds.log, r"(CPU KV cache size: [\d,]+ tokens, Maximum concurrency for [\d,]+ tokens per "
                             r"request: [\d.]+x)") == (
        f"CPU KV cache size: {HOLDS_BYTES // TOKEN_BYTES:,} tokens, Maximum concurrency for {WINDOW:,} tokens per "
        "request: 4.00x")
    [role] = holds.report["roles"]
    assert (role["status"], role["pool_tokens"], role["required_tokens"], role["max_input_tokens"],
            role["source"]) == ("pass", HOLDS, WINDOW, WINDOW, "measure")
    assert role["details"]["server_info"] == {
        "endpoint": "/metrics (vllm:cache_config_info)", "max_total_num_tokens": HOLDS, "dp_token_capacities": [],
        "max_req_input_len": WINDOW, "version": VLLM_VERSION}
    assert role["details"]["engine_version"] == VLLM_VERSION
    # the CPU backend never profiles, so --kv-cache-memory-bytes is its normal sizing: no KV211
    assert rules(holds.report) == []


def test_a_pool_capped_below_the_window_is_a_measured_refusal_exit_1_with_vllms_words(refused: Verified) -> None:
    assert (refused.code, refused.report["verdict"]) == (1, "fail"), refused.report
    assert int(logged(refused.log, r"the estimated maximum model length is (\d+)")) == SHORT == 1920
    [role] = refused.report["roles"]
    assert (role["status"], role["pool_tokens"], role["required_tokens"], role["max_input_tokens"]) == (
        "fail", SHORT, WINDOW, SHORT)
    assert rules(refused.report) == [("KV101", "error"), ("KV109", "error")]
    [kv109] = [f for f in refused.report["findings"] if f["rule"] == "KV109"]
    assert kv109["message"].startswith(
        f"vLLM refused to start: one request of its context length ({WINDOW:,} tokens) does not fit the KV cache "
        f"it allocated, which holds {SHORT:,}; it said:\n    | {REFUSAL}")


def test_an_auto_fit_below_the_advertised_window_is_exit_1(auto: Verified) -> None:
    assert (auto.code, auto.report["verdict"]) == (1, "fail"), auto.report
    assert logged(auto.log, r"Auto-fit max_model_len: (reduced from \d+ to \d+ .*)") == (
        "reduced from 8192 to 1920 to fit in available KV cache memory (0.0 GiB CPU)")
    assert logged(auto.log, r"(CPU KV cache size: .*)") == (
        "CPU KV cache size: 2,048 tokens, Maximum concurrency for 1,920 tokens per request: 1.07x")
    [role] = auto.report["roles"]
    assert (role["pool_tokens"], role["max_input_tokens"], role["details"]["engine_context_len"]) == (
        SHORT, SHORT, SHORT)
    assert rules(auto.report) == [("KV101", "error"), ("KV102", "error")]
    [kv102] = [f for f in auto.report["findings"] if f["rule"] == "KV102"]
    assert kv102["message"] == f"the engine's context length is 1,920 tokens, below the advertised window {WINDOW:,}"


def test_num_gpu_blocks_override_sizes_the_pool(override: Verified) -> None:
    assert (override.code, override.report["verdict"]) == (0, "pass"), override.report
    assert logged(override.log, r"(Overriding num_gpu_blocks=\d+ with num_gpu_blocks_override=\d+)") == (
        f"Overriding num_gpu_blocks={HOLDS_BYTES // TOKEN_BYTES // BLOCK} with num_gpu_blocks_override={OVERRIDE}")
    [role] = override.report["roles"]
    assert (role["status"], role["pool_tokens"], role["max_input_tokens"]) == (
        "pass", (OVERRIDE - 1) * BLOCK, WINDOW)
    assert role["details"]["server_info"]["max_total_num_tokens"] == (OVERRIDE - 1) * BLOCK


def test_logs_of_the_boots(holds: Verified, refused: Verified, auto: Verified, override: Verified) -> None:
    code, report = logs(holds.log)
    assert (code, [(r["status"], r["pool_tokens"], r["max_input_tokens"]) for r in report["roles"]]) == (
        0, [("pass", HOLDS, WINDOW)]), report
    assert report["findings"] == []
    code, report = logs(refused.log)
    assert (code, [(r["status"], r["pool_tokens"], r["required_tokens"]) for r in report["roles"]]) == (
        1, [("fail", SHORT, WINDOW)]), report
    assert rules(report) == [("KV101", "error"), ("KV109", "error"), ("KV312", "warning")]
    assert report["roles"][0]["details"]["engine_warnings"][0].split(": ", 1)[1].startswith(REFUSAL)
    code, report = logs(auto.log, "--context-length", str(WINDOW))
    assert code == 1, report
    assert rules(report) == [("KV101", "error"), ("KV102", "error")]
    assert report["roles"][0]["details"]["engine_warnings"][0].split(": ", 1)[1].startswith(
        "Auto-fit max_model_len: reduced from 8192 to 1920")
    code, report = logs(override.log)
    assert (code, [(r["status"], r["pool_tokens"]) for r in report["roles"]]) == (
        0, [("pass", (OVERRIDE - 1) * BLOCK)]), report
    assert report["roles"][0]["details"]["engine_warnings"][0].split(": ", 1)[1] == (
        f"Overriding num_gpu_blocks={HOLDS_BYTES // TOKEN_BYTES // BLOCK} with num_gpu_blocks_override={OVERRIDE}")
