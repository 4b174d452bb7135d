"""vLLM cases the CPU install cannot show on demand, against the double alone (its lines are real vLLM
0.32.0's, read in its source where no CPU boot prints them): a crash while loading, a hang, the kernel's
OOM kill, a CUDA out-of-memory while profiling, the GPU pool lines, a crash once ready, data-parallel engines, and the pair and
safety rules (kv_both on NIXL, kv_load_failure_policy recompute, --kv-cache-memory-bytes on a GPU,
policy.min_concurrency). docs/measure.md lists which paths ran against real vLLM and which only here.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT, run_kvcheck
from tests.engines.conformance.conftest import FAKE_VLLM, TINY_VLLM_CONFIG, DoubleVllm
from tests.engines.real.test_vllm_real import HOLDS_BYTES, WINDOW, verify

pytestmark = pytest.mark.slow
HOLDS = 127 * 128  # 16 MiB of the tiny model's KV: 128 blocks of 128, less the null block


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("tiny-llama")
    (folder / "config.json").write_text(json.dumps(TINY_VLLM_CONFIG))
    return folder


def rules(report: dict) -> list[tuple[str, str, str | None]]:
    return sorted((f["rule"], f["severity"], f["role"]) for f in report["findings"])


def test_a_crash_while_loading_is_exit_3_with_the_root_cause(model: Path, tmp_path: Path) -> None:
    done = verify(DoubleVllm(model, {"FAKE_VLLM_MODE": "crash"}), tmp_path, max_model_len=WINDOW,
                  kv_cache_memory_bytes=HOLDS_BYTES)
    assert (done.code, done.report["verdict"]) == (3, "error"), done.report
    [kv301] = [f for f in done.report["findings"] if f["rule"] == "KV301"]
    assert kv301["message"].startswith("the engine exited with status 1 before reporting its pool (phase: failed)")
    code, report = logs(done.log)
    assert code == 3
    assert [f["message"] for f in report["findings"]] == [
        "the log holds no KV pool figure; the engine failed: RuntimeError: Error in model execution: could not "
        "read the checkpoint of REDACTED"]


def test_a_hang_is_exit_3_at_the_timeout(model: Path, tmp_path: Path) -> None:
    done = verify(DoubleVllm(model, {"FAKE_VLLM_MODE": "hang"}), tmp_path, timeout_s=3, max_model_len=WINDOW,
                  kv_cache_memory_bytes=HOLDS_BYTES)
    assert done.code == 3, done.report
    [kv301] = [f for f in done.report["findings"] if f["rule"] == "KV301"]
    assert kv301["message"].startswith("the engine did not report its pool within 3 s")


def test_the_kernels_oom_kill_is_exit_3_with_status_137(model: Path, tmp_path: Path) -> None:
    done = verify(DoubleVllm(model, {"FAKE_VLLM_MODE": "oom_kill"}), tmp_path, max_model_len=WINDOW,
                  kv_cache_memory_bytes=HOLDS_BYTES)
    assert done.code == 3, done.report
    [kv301] = [f for f in done.report["findings"] if f["rule"] == "KV301"]
    assert kv301["message"].startswith("the engine exited with status 137 (killed by SIGKILL) before reporting its pool")


def test_a_gpu_role_reads_vllms_gpu_lines(model: Path, tmp_path: Path) -> None:
    """CUDA: block 16, `Available KV cache memory: X GiB` from the profiling, `GPU KV cache size`."""
    engine = DoubleVllm(model, {"FAKE_VLLM_DEVICE": "cuda", "FAKE_VLLM_KV_BYTES": str(HOLDS_BYTES)})
    done = verify(engine, tmp_path, max_model_len=WINDOW, gpu_memory_utilization=0.9)
    assert (done.code, done.report["findings"]) == (0, []), done.report
    text = done.log.read_text()
    assert "[gpu_worker.py:760] Available KV cache memory: 0.02 GiB" in text
    assert "GPU KV cache size: 16,384 tokens, Maximum concurrency for 4,096 tokens per request: 4.00x" in text
    [role] = done.report["roles"]
    assert (role["pool_tokens"], role["max_input_tokens"]) == (1023 * 16, WINDOW)  # 1,024 blocks of 16


def test_kv_cache_memory_bytes_on_a_gpu_warns_kv211(model: Path, tmp_path: Path) -> None:
    done = verify(DoubleVllm(model, {"FAKE_VLLM_DEVICE": "cuda"}), tmp_path, max_model_len=WINDOW,
                  kv_cache_memory_bytes=HOLDS_BYTES)
    assert done.code == 0, done.report
    assert "skipped memory profiling" in done.log.read_text()
    assert rules(done.report) == [("KV211", "warning", "server")]


def test_a_cuda_oom_while_profiling_is_exit_3(model: Path, tmp_path: Path) -> None:
    done = verify(DoubleVllm(model, {"FAKE_VLLM_DEVICE": "cuda", "FAKE_VLLM_MODE": "oom"}), tmp_path,
                  max_model_len=WINDOW)
    assert done.code == 3, done.report
    code, report = logs(done.log)
    assert code == 3
    assert report["findings"][0]["message"].endswith("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate "
                                                     "2.00 GiB. GPU 0 has a total capacity of 79.19 GiB of which "
                                                     "1.02 GiB is free.")


def test_kv_both_on_nixl_and_recompute_warn(model: Path, tmp_path: Path) -> None:
    config = {"kv_connector": "NixlConnector", "kv_role": "kv_both", "kv_load_failure_policy": "recompute"}
    done = verify(DoubleVllm(model), tmp_path, max_model_len=WINDOW, kv_cache_memory_bytes=HOLDS_BYTES,
                  kv_transfer_config=config)
    assert done.code == 0, done.report
    assert "Using kv_role='kv_both' with NixlConnector is deprecated" in done.log.read_text()
    assert rules(done.report) == [("KV210", "warning", "server"), ("KV212", "warning", "server")]
    assert done.report["roles"][0]["status"] == "pass"  # warnings: only --strict fails on them


def test_policy_min_concurrency_fails_a_pool_that_holds_one_window(model: Path, tmp_path: Path) -> None:
    # 127 usable blocks, 32 a request of 4,096 tokens: 3.97 requests at once
    done = verify(DoubleVllm(model), tmp_path, policy={"min_concurrency": 4}, max_model_len=WINDOW,
                  kv_cache_memory_bytes=HOLDS_BYTES)
    assert (done.code, rules(done.report)) == (1, [("KV111", "error", "server")]), done.report
    [kv111] = done.report["findings"]
    assert kv111["message"] == (f"the pool of {HOLDS:,} tokens holds 3.97 requests of the 4,096-token window at "
                                "once, below the policy's min_concurrency 4: the pool binds, so long requests queue "
                                "behind each other")


def test_policy_min_concurrency_counts_max_num_seqs(model: Path, tmp_path: Path) -> None:
    """The pool holds 3.97 requests, but --max-num-seqs 2 runs two at once: KV111 names max_num_seqs (it passed)."""
    done = verify(DoubleVllm(model), tmp_path, policy={"min_concurrency": 3}, max_model_len=WINDOW,
                  kv_cache_memory_bytes=HOLDS_BYTES, max_num_seqs=2)
    assert (done.code, rules(done.report)) == (1, [("KV111", "error", "server")]), done.report
    [kv111] = done.report["findings"]
    assert kv111["message"] == (f"the engine runs at most 2 requests at once (max_num_seqs=2), below the policy's "
                                f"min_concurrency 3: its pool of {HOLDS:,} tokens would hold 3.97 requests of the "
                                "4,096-token window, but max_num_seqs binds, so long requests queue behind each other")
    assert kv111["hint"] == "raise --max-num-seqs to at least 3, or lower policy.min_concurrency"


def test_a_crash_once_ready_keeps_the_pool_in_logs(tmp_path: Path, model: Path) -> None:
    log = tmp_path / "server.log"
    with open(log, "wb") as out:
        subprocess.run([sys.executable, str(FAKE_VLLM), "serve", str(model), "--max-model-len", str(WINDOW),
                        "--kv-cache-memory-bytes", str(HOLDS_BYTES), "--host", "127.0.0.1", "--port", "0"],
                       stdout=out, stderr=subprocess.STDOUT, env={"FAKE_VLLM_MODE": "crash_after_ready",
                                                                  "PATH": "/usr/bin:/bin"}, timeout=60, check=False)
    code, report = logs(log)
    assert code == 0, report
    assert [(r["status"], r["pool_tokens"]) for r in report["roles"]] == [("pass", HOLDS)]
    assert [f["rule"] for f in report["findings"]] == ["KV316"]
    assert "EngineDeadError" in report["findings"][0]["message"]


def logs(log: Path) -> tuple[int, dict]:
    done = run_kvcheck("logs", str(log), "--format", "json", cwd=REPO_ROOT)
    assert done.stdout, done.stderr
    return done.exit_code, json.loads(done.stdout)


def test_data_parallel_engines_each_state_their_pool(model: Path, tmp_path: Path) -> None:
    """`--data-parallel-size 2`: one engine core per rank (`EngineCore_DP0`, `EngineCore_DP1`, vLLM's names
    under data parallelism), each with its pool line and its own `vllm:cache_config_info` series."""
    done = verify(DoubleVllm(model), tmp_path, max_model_len=WINDOW, kv_cache_memory_bytes=HOLDS_BYTES,
                  data_parallel_size=2)
    assert (done.code, done.report["findings"]) == (0, []), done.report
    text = done.log.read_text()
    assert "(EngineCore_DP1 pid=" in text and "(EngineCore pid=" not in text
    [role] = done.report["roles"]
    assert role["details"]["server_info"]["dp_token_capacities"] == [HOLDS, HOLDS]
