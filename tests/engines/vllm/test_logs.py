"""vLLM's boot-log reader on real vLLM 0.32.0 logs (tests/data/vllm) and on the lines they are made of,
and `kvcheck logs` telling a vLLM log from an SGLang log by itself."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from kvcheck.engines import get_engine
from kvcheck.engines.base import LogSummary
from tests.conftest import run_kvcheck
from tests.datapaths import LOGS, TEST_DATA

VLLM_DATA = TEST_DATA / "vllm"
PASS_LOG = VLLM_DATA / "0.32.0-cpu-pass.log"
REFUSED_LOG = VLLM_DATA / "0.32.0-cpu-refused.log"
AUTO_LOG = VLLM_DATA / "0.32.0-cpu-auto.log"


def summary_of(path: Path) -> LogSummary:
    reader = get_engine("vllm").log_reader()
    with path.open("rb") as stream:
        reader.read_stream(stream)
    return reader.summary()


def summary_of_lines(*lines: str) -> LogSummary:
    reader = get_engine("vllm").log_reader()
    reader.feed_many(lines)
    return reader.summary()


def test_the_pool_is_the_logged_size_less_the_null_block() -> None:
    summary = summary_of(PASS_LOG)
    # `CPU KV cache size: 16,384 tokens` for 128 blocks of 128 (metrics: num_gpu_blocks="128"): one is the null block
    [rank] = summary.ranks
    assert (rank.final_tokens, rank.context_len, rank.figure_line) == (16384 - 128, 4096, 51)
    assert (summary.version, summary.ready, summary.phase, summary.failure) == ("0.32.0", True, "ready", None)
    assert summary.server_args is not None
    assert (summary.server_args["max_model_len"], summary.server_args["kv_cache_memory_bytes"]) == (4096, 16777216)
    assert summary.server_args["model_path"] == "/tmp/kvcheck-real-vllm/tiny-llama"


def test_a_refusal_is_vllms_own_measured_bound() -> None:
    summary = summary_of(REFUSED_LOG)
    [rank] = summary.ranks
    assert (rank.final_tokens, rank.context_len) == (1920, 4096)  # "the estimated maximum model length is 1920"
    assert (summary.failure, summary.phase, summary.ready) == (None, "failed", False)
    [refusal] = [w for w in summary.warnings if w.kind == "pool_refusal"]
    assert refusal.values == {"pool_tokens": 1920, "context_len": 4096}
    assert refusal.text.startswith("ValueError: To serve at least one request with the model's max seq len (4096)")


def test_auto_fit_is_read_and_put_first() -> None:
    summary = summary_of(AUTO_LOG)
    [rank] = summary.ranks
    assert (rank.final_tokens, rank.context_len) == (2048 - 128, 1920)
    assert summary.warnings[0].kind == "auto_fit"
    assert summary.warnings[0].values == {"advertised_tokens": 8192, "context_len": 1920}


def test_data_parallel_engines_are_ranks_of_their_own() -> None:
    summary = summary_of_lines(
        "(EngineCore_DP0 pid=10) INFO 12-01 23:46:05 [kv_cache_utils.py:2327] GPU KV cache size: 160,000 tokens, "
        "Maximum concurrency for 32,000 tokens per request: 5.00x",
        "(EngineCore_DP1 pid=11) INFO 12-01 23:46:05 [kv_cache_utils.py:2327] GPU KV cache size: 96,000 tokens, "
        "Maximum concurrency for 32,000 tokens per request: 3.00x",
    )
    assert [(str(r.rank), r.final_tokens, r.context_len) for r in summary.ranks] == [
        ("DP0", 160000 - 16, 32000), ("DP1", 96000 - 16, 32000)]
    assert summary.pool_tokens() == 96000 - 16


def test_a_stated_block_size_is_the_null_blocks_size() -> None:
    summary = summary_of_lines(
        "(APIServer pid=1) INFO 12-01 23:43:10 [api_utils.py:286] non-default args: {'model_tag': 'm', 'block_size': 32}",
        "(EngineCore pid=2) INFO 12-01 23:46:05 [kv_cache_utils.py:2327] GPU KV cache size: 8,192 tokens, "
        "Maximum concurrency for 4,096 tokens per request: 2.00x",
    )
    assert [r.final_tokens for r in summary.ranks] == [8192 - 32]


def test_a_crash_before_the_pool_is_a_failure_with_its_root_cause() -> None:
    summary = summary_of_lines(
        "(APIServer pid=1) INFO 12-01 23:43:10 [api_utils.py:286] non-default args: {'model_tag': 'm'}",
        "(EngineCore pid=2) ERROR 12-01 23:48:58 [core.py:1510] EngineCore failed to start.",
        "(EngineCore pid=2) ERROR 12-01 23:48:58 [core.py:1510] Traceback (most recent call last):",
        "(EngineCore pid=2) ERROR 12-01 23:48:58 [core.py:1510] torch.OutOfMemoryError: CUDA out of memory.",
        "RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {}",
    )
    assert (summary.ranks, summary.phase, summary.failure) == ((), "failed", "torch.OutOfMemoryError: CUDA out of memory.")


def test_a_figure_no_server_holds_is_damage() -> None:
    summary = summary_of_lines("(EngineCore pid=2) INFO 12-01 23:46:05 [kv_cache_utils.py:2327] GPU KV cache size: "
                               "99,999,999,999 tokens, Maximum concurrency for 4,096 tokens per request: 2.00x")
    assert summary.ranks == ()
    assert summary.damaged[0].startswith("line 1: GPU KV cache size: 99,999,999,999 tokens")


def test_an_sglang_log_is_not_a_vllm_log() -> None:
    first = sorted(LOGS.glob("sglang-*.log"))[0]
    assert summary_of(first).recognised is False


def logs(*args: str) -> tuple[int, dict]:
    done = run_kvcheck("logs", *args, "--format", "json")
    assert done.stdout, done.stderr
    return done.exit_code, json.loads(done.stdout)


def test_cli_reads_a_real_vllm_log_by_itself_and_passes_its_window() -> None:
    code, report = logs(str(PASS_LOG))
    assert code == 0, report
    [role] = report["roles"]
    assert (role["status"], role["pool_tokens"], role["required_tokens"], role["max_input_tokens"]) == (
        "pass", 16256, 4096, 4096)
    assert report["findings"] == []


def test_cli_on_a_real_refusal_is_kv101_with_vllms_estimated_length() -> None:
    code, report = logs(str(REFUSED_LOG))
    assert code == 1, report
    [role] = report["roles"]
    assert (role["status"], role["pool_tokens"], role["required_tokens"], role["max_input_tokens"]) == (
        "fail", 1920, 4096, 1920)
    assert sorted((f["rule"], f["severity"]) for f in report["findings"]) == [
        ("KV101", "error"), ("KV109", "error"), ("KV312", "warning")]
    assert role["details"]["engine_warnings"][0].startswith(
        "line 74: ValueError: To serve at least one request with the model's max seq len (4096)")
    assert "the estimated maximum model length is 1920" in role["details"]["engine_warnings"][0]


def test_cli_on_a_real_auto_fit_fails_the_advertised_window() -> None:
    code, report = logs(str(AUTO_LOG), "--context-length", "4096")
    assert code == 1, report
    assert sorted(f["rule"] for f in report["findings"]) == ["KV101", "KV102"]
    [kv102] = [f for f in report["findings"] if f["rule"] == "KV102"]
    assert kv102["message"] == "the engine's context length is 1,920 tokens, below the advertised window 4,096"
    [role] = report["roles"]
    assert role["details"]["engine_warnings"][0] == (
        "line 51: Auto-fit max_model_len: reduced from 8192 to 1920 to fit in available KV cache memory (0.0 GiB CPU)")


def test_cli_reads_an_sglang_and_a_vllm_log_side_by_side() -> None:
    sglang = LOGS / "sglang-deepseek-r1-2x8xH20-tp16-k8s-doc.log"
    code, report = logs(str(sglang), str(PASS_LOG))
    assert code == 0, report
    assert [(r["name"], r["pool_tokens"], r["max_input_tokens"]) for r in report["roles"]] == [
        ("sglang-deepseek-r1-2x8xH20-tp16-k8s-doc.log[TP0]", 712400, 163834), ("0.32.0-cpu-pass.log", 16256, 4096)]


@pytest.mark.parametrize("name", ["vllm-qwen3-1.7b-24gb-vllm33263.log", "vllm-qwen3-235b-fp8-4xH100-vllm21348.log"])
def test_public_v1_logs_without_a_window_are_read_and_not_judged(name: str) -> None:
    code, report = logs(str(LOGS / name))
    assert code == 3, report  # KV313: the excerpt states no max_model_len
    assert sorted(f["rule"] for f in report["findings"]) == ["KV312", "KV313"]  # an excerpt: no ready line
    [role] = report["roles"]
    logged = {"vllm-qwen3-1.7b-24gb-vllm33263.log": 175856, "vllm-qwen3-235b-fp8-4xH100-vllm21348.log": 178880}[name]
    assert role["pool_tokens"] == logged - 16  # CUDA's default block of 16 is the null block


def test_an_endless_line_is_read_up_to_its_cap_and_the_next_line_is_still_read() -> None:
    endless = b"(APIServer pid=1) INFO 12-01 23:43:10 [x.py:1] " + b"x" * (5 * 2**20)
    pool = (b"(EngineCore pid=2) INFO 12-01 23:46:05 [kv_cache_utils.py:2327] CPU KV cache size: 16,384 tokens, "
            b"Maximum concurrency for 4,096 tokens per request: 4.00x")
    reader = get_engine("vllm").log_reader()
    reader.read_stream(io.BytesIO(endless + b"\n" + pool + b"\n"))
    summary = reader.summary()
    assert summary.lines == 2
    assert [(r.final_tokens, r.figure_line) for r in summary.ranks] == [(16384 - 128, 2)]


READY_LINES = (
    "(APIServer pid=1) INFO 12-01 23:43:10 [api_utils.py:286] non-default args: {'model_tag': 'm'}",
    "(EngineCore pid=2) INFO 12-01 23:46:05 [kv_cache_utils.py:2327] CPU KV cache size: 16,384 tokens, "
    "Maximum concurrency for 4,096 tokens per request: 4.00x",
    "INFO:     Application startup complete.",
)
DEAD = ("(APIServer pid=1) ERROR 12-02 00:00:14 [async_llm.py:906] vllm.v1.engine.exceptions.EngineDeadError: "
        "EngineCore encountered an issue. See stack trace (above) for the root cause.")


def test_what_fails_while_vllm_stops_is_not_a_crash() -> None:
    # seen on real vLLM 0.32.0 stopped by kvcheck's SIGTERM once its figures were in (a race: not every stop)
    summary = summary_of_lines(
        *READY_LINES,
        "(APIServer pid=1) INFO 12-02 00:00:14 [launcher.py:254] [shutdown] API server: shutdown triggered",
        DEAD,
    )
    assert (summary.ready, summary.failure, summary.failed_after_ready) == (True, None, False)


def test_a_crash_after_ready_without_a_stop_is_one() -> None:
    summary = summary_of_lines(*READY_LINES, DEAD)
    assert (summary.ready, summary.failed_after_ready) == (True, True)
    assert summary.failure == DEAD.split("] ", 1)[1]


def test_cli_on_the_real_log_of_a_measured_boot_whose_stop_logged_an_engine_dead_error() -> None:
    log = VLLM_DATA / "0.32.0-cpu-measured-stop.log"
    assert "EngineDeadError" in log.read_text()
    code, report = logs(str(log), "--context-length", "4096")
    assert code == 0, report
    assert [(r["pool_tokens"], r["max_input_tokens"]) for r in report["roles"]] == [(16256, 4096)]
    assert report["findings"] == []


# -- older releases: public logs (tests/data/vllm_logs_public, sources in its README) and their lines ----------

PUBLIC = TEST_DATA / "vllm_logs_public"


@pytest.mark.parametrize(("name", "code", "pool", "window", "rules"), [
    # V0: (blocks - int(0.01 x blocks)) x 16, the watermark V0 keeps free; window from the concurrency line
    ("v0-llama31-8b-3090-20k-issue10517.log", 0, (1952 - 19) * 16, 20000, ["KV312"]),
    # V0's refusal: vLLM's own bound, 1478 x 16 = 23,648 tokens, below the 29,000 window
    ("v0-llama31-8b-3090-29k-refused-issue10517.log", 1, 23648, 29000, ["KV101", "KV109", "KV312"]),
    # 0.2.x: no version, no concurrency line; the window is the config line's max_seq_len
    ("v0-0.2-alpaca2-issue2418.log", 1, (229 - 2) * 16, 4096, ["KV101", "KV312"]),
    # 0.8's V0 engine: `# cuda blocks: 7191`; the excerpt ends before the window
    ("v0-0.8-llama-8b-H100-gaie-pr550.log", 3, (7191 - 71) * 16, None, ["KV312", "KV313"]),
    # V1 of 0.7: `# GPU blocks: N` alone, one null block
    ("v1-0.7-gpu-blocks-pr12569.log", 0, (1381 - 1) * 16, 2048, ["KV312"]),
    # the same pool logged both ways around PR 13596: in blocks and in tokens
    ("v1-0.7-gpu-blocks-before-pr13596.log", 0, 2042016 - 16, 2048, ["KV312"]),
    ("v1-0.7-kv-cache-size-after-pr13596.log", 0, 2042016 - 16, 2048, ["KV312"]),
    ("v1-0.2x-lmcache-issue3326.log", 0, 229344 - 16, 16384, ["KV312"]),
    # refusals with vLLM's estimate: "models's" (0.8-0.21) and "model's" wrapped over three lines
    ("v1-models-s-refusal-tpu-inference-pr223.log", 1, 5632, 131072, ["KV101", "KV109", "KV312"]),
    ("v1-refusal-wrapped-kaito-issue2132.log", 1, 810208, 1048576, ["KV101", "KV109", "KV312"]),
])
def test_cli_on_public_logs_of_older_releases(name: str, code: int, pool: int, window: int | None,
                                              rules: list[str]) -> None:
    exit_code, report = logs(str(PUBLIC / name))
    assert exit_code == code, report
    [role] = report["roles"]
    assert (role["pool_tokens"], role["required_tokens"]) == (pool, window)
    assert sorted(f["rule"] for f in report["findings"]) == rules


def test_a_v0_log_is_told_from_an_sglang_log_by_itself() -> None:
    # read side by side with an SGLang log, each by its own engine's reader
    sglang = LOGS / "sglang-deepseek-r1-2x8xH20-tp16-k8s-doc.log"
    code, report = logs(str(sglang), str(PUBLIC / "v0-llama31-8b-3090-20k-issue10517.log"))
    assert code == 0, report
    assert [(r["name"], r["pool_tokens"]) for r in report["roles"]] == [
        ("sglang-deepseek-r1-2x8xH20-tp16-k8s-doc.log[TP0]", 712400),
        ("v0-llama31-8b-3090-20k-issue10517.log", (1952 - 19) * 16)]


def test_the_v0_refusal_is_a_measured_pool_and_quoted_first() -> None:
    summary = summary_of(PUBLIC / "v0-llama31-8b-3090-29k-refused-issue10517.log")
    [rank] = summary.ranks
    assert (rank.final_tokens, rank.context_len, rank.kv_gib, rank.weights_gib) == (23648, 29000, 2.89, 14.9888)
    assert (summary.failure, summary.phase) == (None, "failed")
    assert summary.warnings[0].kind == "pool_refusal"
    assert summary.warnings[0].values == {"pool_tokens": 23648, "context_len": 29000}


def test_the_0_8_v0_lines_give_the_kv_memory_and_the_weights() -> None:
    summary = summary_of(PUBLIC / "v0-0.8-llama-8b-H100-gaie-pr550.log")
    [rank] = summary.ranks
    assert (rank.kv_gib, rank.weights_gib, rank.figure_line) == (56.18, 12.55, 5)


def test_a_0_8_data_parallel_engine_is_engine_core_n() -> None:
    summary = summary_of(PUBLIC / "v1-0.8.3-dp-enginecore-n-trl-pr3310.log")
    assert (summary.version, summary.recognised, summary.ranks) == ("0.8.3", True, ())
    summary = summary_of_lines(
        "(EngineCore_0 pid=10) INFO 04-17 23:05:40 [kv_cache_utils.py:634] GPU KV cache size: 160,000 tokens",
        "(EngineCore_0 pid=10) INFO 04-17 23:05:40 [kv_cache_utils.py:637] Maximum concurrency for 32,000 tokens "
        "per request: 5.00x",
        "(EngineCore_1 pid=11) INFO 04-17 23:05:40 [kv_cache_utils.py:634] GPU KV cache size: 96,000 tokens",
        "(EngineCore_1 pid=11) INFO 04-17 23:05:40 [kv_cache_utils.py:637] Maximum concurrency for 32,000 tokens "
        "per request: 3.00x",
    )
    assert [(str(r.rank), r.final_tokens, r.context_len) for r in summary.ranks] == [
        ("DP0", 160000 - 16, 32000), ("DP1", 96000 - 16, 32000)]


@pytest.mark.parametrize("prefix", [
    "(VllmWorker rank=1 pid=213949) ",  # 0.8-0.10 multiprocessing workers
    "(VllmWorkerProcess pid=106022) ",  # V0 workers
    "(RayWorkerWrapper pid=5120, ip=10.0.0.2) ",  # Ray
    "(Worker pid=41) ",
    "(Worker_DP1_PCP0_TP1 pid=41) ",  # PCP and DCP ranks (0.11+) in the name
    "2025-10-14T23:59:26.998006749Z (APIServer pid=1) ",  # kubectl logs --timestamps
])
def test_worker_and_launcher_prefixes_are_stripped(prefix: str) -> None:
    summary = summary_of_lines(
        prefix + "INFO 07-18 06:32:49 [gpu_worker.py:244] Available KV cache memory: 8.11 GiB",
        prefix + "INFO 07-18 06:32:49 [kv_cache_utils.py:716] GPU KV cache size: 178,880 tokens",
    )
    [rank] = summary.ranks
    assert (rank.final_tokens, rank.kv_gib) == (178880 - 16, 8.11)


def test_a_v0_engine_line_of_0_8_names_its_release() -> None:
    summary = summary_of_lines(
        "INFO 04-30 10:00:00 [llm_engine.py:240] Initializing a V0 LLM engine (v0.8.5) with config: model='m', "
        "max_seq_len=8192, tensor_parallel_size=1",
        "INFO 04-30 10:00:30 [executor_base.py:112] # cuda blocks: 1000, # CPU blocks: 2048",
    )
    [rank] = summary.ranks
    assert (summary.version, rank.final_tokens, rank.context_len) == ("0.8.5", (1000 - 10) * 16, 8192)


def test_a_0_8_refusal_without_vllms_estimate_is_a_quoted_failure_not_a_figure() -> None:
    # 0.8.x built "Based on the available memory," and dropped the estimate (an f-string on its own line)
    text = ("ValueError: To serve at least one request with the models's max seq len (131072), (16.00 GiB KV cache "
            "is needed, which is larger than the available KV cache memory (9.50 GiB). Based on the available memory, "
            "Try increasing `gpu_memory_utilization` or decreasing `max_model_len` when initializing the engine.")
    summary = summary_of_lines("(EngineCore_0 pid=2) ERROR 04-30 10:00:30 [core.py:396] " + text)
    assert (summary.ranks, summary.phase, summary.failure) == ((), "failed", text)


def test_cli_on_a_0_8_refusal_without_an_estimate_is_exit_3(tmp_path: Path) -> None:
    log = tmp_path / "refused.log"
    log.write_text(
        "(EngineCore_0 pid=2) ERROR 04-30 10:00:30 [core.py:396] ValueError: To serve at least one request with the "
        "models's max seq len (131072), (16.00 GiB KV cache is needed, which is larger than the available KV cache "
        "memory (9.50 GiB). Based on the available memory, Try increasing `gpu_memory_utilization` or decreasing "
        "`max_model_len` when initializing the engine.\n", encoding="utf-8")
    code, report = logs(str(log))
    assert code == 3, report
    [role] = report["roles"]
    assert role["pool_tokens"] is None


def test_cli_a_refused_start_fails_though_its_pool_holds_the_window_asked_for() -> None:
    """vLLM refused to start (it serves nothing), yet `--context-length 1024`, below the 1,920 tokens its
    refusal names, passed the log with a KV312 warning alone (exit 0); verify fails the same boot with KV109."""
    code, report = logs(str(REFUSED_LOG), "--context-length", "1024")
    assert code == 1, report
    [role] = report["roles"]
    assert (role["status"], role["pool_tokens"], role["required_tokens"]) == ("fail", 1920, 1024)
    [kv109] = [f for f in report["findings"] if f["severity"] == "error"]
    assert kv109["rule"] == "KV109"
    assert kv109["message"].startswith("vLLM refused to start: one request of its context length (4,096 tokens) "
                                       "does not fit the KV cache it allocated, which holds 1,920")
    assert "the estimated maximum model length is 1920" in kv109["message"]
    assert kv109["location"]["line"] == 74


def test_the_hint_of_a_provisional_vllm_pool_quotes_vllms_ready_line() -> None:
    """KV312 on a vLLM log used to ask for a log "up to 'The server is fired up and ready to roll!'" (SGLang's)."""
    done = run_kvcheck("logs", str(TEST_DATA / "vllm" / "0.32.0-cpu-refused.log"), "--format", "json")
    [kv312] = [f for f in json.loads(done.stdout)["findings"] if f["rule"] == "KV312"]
    assert kv312["hint"] == "pass the complete startup log, up to 'Application startup complete.'"


# -- review: wrapped logs, restarts before 0.9, request-log text, DP engines without a figure, detection ---------

CRASH_LINES = (
    "(EngineCore pid=21695) ERROR 12-01 23:46:06 [core.py:1510] EngineCore failed to start.",
    "(EngineCore pid=21695) ERROR 12-01 23:46:06 [core.py:1510] RuntimeError: NCCL error: unhandled system error",
    "RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {}",
)


def _pass_lines(upto: str) -> list[str]:
    """0.32.0-cpu-pass.log up to and including the first line holding `upto`."""
    lines = PASS_LOG.read_text(encoding="utf-8").splitlines()
    return lines[: next(i for i, line in enumerate(lines) if upto in line) + 1]


def _cri(line: str) -> str:
    return "2026-01-05T11:00:00.123456789Z stderr F " + line


def _docker_json(line: str) -> str:
    return json.dumps({"log": line + "\n", "stream": "stderr", "time": "2026-01-05T11:00:00.123456789Z"})


@pytest.mark.parametrize("wrap", [lambda line: line, _cri, _docker_json, lambda line: "[pod/vllm-0/vllm] " + line],
                         ids=["plain", "cri", "docker-json", "kubectl-prefix"])
def test_cli_a_crash_after_sizing_is_exit_3_in_every_wrapping(tmp_path: Path, wrap) -> None:  # type: ignore[no-untyped-def]
    """CRI and Docker json-file lines hid `EngineCore failed to start.` from the anchored patterns: exit 0."""
    log = tmp_path / "crash.log"
    log.write_text("".join(wrap(line) + "\n" for line in [*_pass_lines("KV cache size"), *CRASH_LINES]),
                   encoding="utf-8")
    code, report = logs(str(log))
    assert code == 3, report
    [role] = report["roles"]
    assert (role["status"], role["pool_tokens"]) == ("error", None)
    assert [f["rule"] for f in report["findings"] if f["severity"] == "error"] == ["KV316"]
    assert role["details"]["failure"] == "RuntimeError: NCCL error: unhandled system error"
    assert role["details"]["args_source"] == "server_args"  # `non-default args:` read inside the wrapper


@pytest.mark.parametrize("order", [("b", "a"), ("a", "b")])
def test_cli_kubectl_prefix_of_two_pods_judges_each_pod(tmp_path: Path, order: tuple[str, str]) -> None:
    """Pod b refused to start, pod a passed: the stream passed (exit 0) when pod a's start came last."""
    logs_of = {"a": PASS_LOG, "b": REFUSED_LOG}
    log = tmp_path / "pods.log"
    log.write_text("".join(f"[pod/vllm-{pod}/vllm] {line}\n" for pod in order
                           for line in logs_of[pod].read_text(encoding="utf-8").splitlines()), encoding="utf-8")
    code, report = logs(str(log))
    assert code == 1, report
    [role] = report["roles"]
    assert (role["status"], role["pool_tokens"], role["required_tokens"]) == ("fail", 1920, 4096)
    assert "KV101" in [f["rule"] for f in report["findings"]]
    assert role["details"].get("boots") is None  # two pods, not a restart


def test_cli_kubectl_prefix_a_pod_that_crashed_is_exit_3(tmp_path: Path) -> None:
    crashed = [*_pass_lines("KV cache size"), *CRASH_LINES]
    log = tmp_path / "pods.log"
    log.write_text("".join(f"[pod/vllm-b/vllm] {line}\n" for line in crashed)
                   + "".join(f"[pod/vllm-a/vllm] {line}\n" for line in PASS_LOG.read_text(encoding="utf-8").splitlines()),
                   encoding="utf-8")
    code, report = logs(str(log))
    assert code == 3, report
    [role] = report["roles"]
    assert role["details"]["failure"] == "[pod/vllm-b/vllm] RuntimeError: NCCL error: unhandled system error"


def test_cli_kubectl_prefix_a_pod_that_died_before_any_vllm_line_is_exit_3(tmp_path: Path) -> None:
    """A pod of the same container that died before vLLM's first line (a bare traceback: no GPU) was dropped from
    the stream, and the ready pod beside it passed (exit 0); a sidecar's stream is another container's."""
    died = ["Traceback (most recent call last):", '  File "/usr/bin/vllm", line 8, in <module>', "    sys.exit(main())",
            "RuntimeError: No CUDA GPUs are available"]
    ready = "".join(f"[pod/vllm-a/vllm] {line}\n" for line in PASS_LOG.read_text(encoding="utf-8").splitlines())
    log = tmp_path / "pods.log"
    log.write_text(ready + "".join(f"[pod/vllm-b/vllm] {line}\n" for line in died), encoding="utf-8")
    code, report = logs(str(log))
    assert code == 3, report
    [role] = report["roles"]
    assert role["details"]["failure"] == (
        "[pod/vllm-b/vllm] the pod printed none of vLLM's startup lines: RuntimeError: No CUDA GPUs are available")
    sidecar = tmp_path / "sidecar.log"
    sidecar.write_text(ready + "".join(f"[pod/vllm-a/istio-proxy] {line}\n" for line in died), encoding="utf-8")
    code, report = logs(str(sidecar))
    assert code == 0, report


V085_BOOT = (
    "INFO 04-01 10:00:00 [api_server.py:1043] vLLM API server version 0.8.5",
    "INFO 04-01 10:00:01 [core.py:58] Initializing a V1 LLM engine (v0.8.5) with config: model='m', "
    "max_seq_len={window}, tensor_parallel_size=1, device_config=cuda",
    "INFO 04-01 10:00:20 [gpu_model_runner.py:1329] Model loading took 14.9889 GiB and 5.1 seconds",
)


def test_cli_a_restart_before_0_9_is_judged_on_its_last_boot(tmp_path: Path) -> None:
    """0.8.5 prints no `non-default args:`; the first boot's uvicorn shutdown hid the second boot's crash: exit 0."""
    log = tmp_path / "restart.log"
    log.write_text("\n".join([
        *(line.format(window=32768) for line in V085_BOOT),
        "INFO 04-01 10:00:40 [kv_cache_utils.py:634] GPU KV cache size: 400,000 tokens",
        "INFO 04-01 10:00:40 [kv_cache_utils.py:637] Maximum concurrency for 32,768 tokens per request: 12.21x",
        "INFO:     Application startup complete.",
        "INFO:     Shutting down",
        "INFO:     Application shutdown complete.",
        *(line.format(window=131072) for line in V085_BOOT),
        "ERROR 04-01 11:00:30 [core.py:387] RuntimeError: NCCL error: unhandled system error",
        "ERROR 04-01 11:00:30 [core.py:387] EngineCore failed to start.",
        "RuntimeError: Engine core initialization failed. See root cause above",
    ]) + "\n", encoding="utf-8")
    code, report = logs(str(log))
    assert code == 3, report
    [role] = report["roles"]
    assert (role["status"], role["pool_tokens"]) == ("error", None)
    assert [f["rule"] for f in report["findings"]] == ["KV309"]
    assert role["details"]["failure"] == "RuntimeError: NCCL error: unhandled system error"
    assert role["details"]["boots"] == 2


def test_a_data_parallel_engines_config_line_is_no_restart() -> None:
    args = "{'model': 'm', 'data_parallel_size': 2}"
    summary = summary_of_lines(
        f"(APIServer pid=1) INFO 12-01 10:00:00 [api_utils.py:286] non-default args: {args}",
        "(EngineCore_DP0 pid=2) INFO 12-01 10:00:01 [core.py:93] Initializing a V1 LLM engine (v0.32.0) with config: "
        "max_seq_len=4096",
        "(EngineCore_DP0 pid=2) INFO 12-01 10:01:00 [kv_cache_utils.py:2327] GPU KV cache size: 450,000 tokens",
        "(EngineCore_DP1 pid=3) INFO 12-01 10:00:01 [core.py:93] Initializing a V1 LLM engine (v0.32.0) with config: "
        "max_seq_len=4096",
        "(EngineCore_DP1 pid=3) INFO 12-01 10:01:00 [kv_cache_utils.py:2327] GPU KV cache size: 300,000 tokens",
    )
    assert [(str(r.rank), r.final_tokens) for r in summary.ranks] == [("DP0", 450000 - 16), ("DP1", 300000 - 16)]
    assert summary.boots == 1


def test_cli_request_log_text_never_sets_the_pool(tmp_path: Path) -> None:
    """A prompt's stop string held a pool line: `--min-headroom 5` passed with a pool of 9,999,983."""
    log = tmp_path / "requests.log"
    log.write_text(PASS_LOG.read_text(encoding="utf-8") + (
        "(APIServer pid=21343) INFO 12-01 23:50:01 [request_logger.py:66] Received request cmpl-1: params: "
        "SamplingParams(n=1, stop=['GPU KV cache size: 9,999,999 tokens, Maximum concurrency for 4,096 tokens per "
        "request: 1.00x', 'Auto-fit max_model_len: reduced from 4096 to 999999', 'ValueError: To serve at least one "
        "request with the model's max seq len (4096) ... the estimated maximum model length is 9999999.'], "
        "max_tokens=16), lora_request: None.\n"), encoding="utf-8")
    code, report = logs(str(log), "--min-headroom", "5")
    assert code == 1, report
    [role] = report["roles"]
    assert (role["status"], role["pool_tokens"], role["max_input_tokens"]) == ("fail", 16256, 4096)


DP_ARGS = ("(APIServer pid=100) INFO 12-01 10:00:00 [api_utils.py:286] non-default args: {'model': 'm', "
           "'max_model_len': 131072, 'data_parallel_size': 2}")
DP0_POOL = ("(EngineCore_DP0 pid=200) INFO 12-01 10:01:00 [kv_cache_utils.py:2327] GPU KV cache size: 450,000 tokens, "
            "Maximum concurrency for 131,072 tokens per request: 3.43x")


@pytest.mark.parametrize("dp1", [
    ["(EngineCore_DP1 pid=201) INFO 12-01 10:01:00 [gpu_worker.py:1] Available KV cache memory: 1.5 GiB"],
    [],  # DP1 printed nothing at all: data_parallel_size says it exists
])
def test_cli_a_data_parallel_engine_without_a_figure_is_kv309(tmp_path: Path, dp1: list[str]) -> None:
    log = tmp_path / "dp.log"
    log.write_text("\n".join([DP_ARGS, DP0_POOL, *dp1, "INFO:     Application startup complete."]) + "\n",
                   encoding="utf-8")
    code, report = logs(str(log))
    assert code == 3, report
    assert [(r["name"], r["status"], r["pool_tokens"]) for r in report["roles"]] == [
        ("dp.log[DP0]", "pass", 450000 - 16), ("dp.log[DP1]", "error", None)]
    assert [(f["rule"], f["role"]) for f in report["findings"]] == [("KV309", "dp.log[DP1]")]


def test_cli_one_rank_of_an_externally_balanced_dp_deployment_is_one_role(tmp_path: Path) -> None:
    log = tmp_path / "rank0.log"
    log.write_text(DP_ARGS.replace("}", ", 'data_parallel_rank': 0}") + "\n" + DP0_POOL + "\n"
                   + "INFO:     Application startup complete.\n", encoding="utf-8")
    code, report = logs(str(log))
    assert code == 0, report
    assert [r["name"] for r in report["roles"]] == ["rank0.log[DP0]"]


def test_cli_an_oom_line_does_not_make_a_vllm_log_an_sglang_log(tmp_path: Path) -> None:
    """An unprefixed `torch.OutOfMemoryError` in the head made the SGLang reader claim the log: KV309, no pool."""
    log = tmp_path / "oom.log"
    log.write_text("\n".join([
        *_pass_lines("Application startup complete."),
        "(EngineCore pid=21695) ERROR 12-01 23:50:00 [core.py:1000] EngineCore encountered a fatal error.",
        "Traceback (most recent call last):",
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.",
    ]) + "\n", encoding="utf-8")
    code, report = logs(str(log))
    [role] = report["roles"]
    assert (role["pool_tokens"], role["details"]["failure"]) == (
        16256, "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.")
    assert [f["rule"] for f in report["findings"]] == ["KV316"]
    assert code == 0, report  # a crash after ready is a warning: the pool it sized at boot is judged
