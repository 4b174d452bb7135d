"""`kvcheck logs` on logs real vLLM 0.32.0 wrote in the conformance boots, kept in tests/data/vllm/ so that
these cases run without the real install (tests/data/README.md says how each was made): a role sized by
--num-gpu-blocks-override, and the two logs of a prefill/decode pair that disagrees on max_model_len."""

from __future__ import annotations

import json

from tests.conftest import REPO_ROOT, run_kvcheck
from tests.datapaths import TEST_DATA

VLLM_DATA = TEST_DATA / "vllm"


def logs(*args: str) -> tuple[int, dict]:
    done = run_kvcheck("logs", *args, "--format", "json", cwd=REPO_ROOT)
    assert done.stdout, done.stderr
    return done.exit_code, json.loads(done.stdout)


def test_the_blocks_override_log_gives_the_overrides_usable_pool() -> None:
    code, report = logs(str(VLLM_DATA / "0.32.0-cpu-blocks-override.log"))
    assert code == 0, report
    # 40 blocks of 128 less the null block; the log's 5,120 is 40 / 32 blocks a request x 4,096
    assert [(r["status"], r["pool_tokens"], r["required_tokens"], r["max_input_tokens"]) for r in report["roles"]] == [
        ("pass", 39 * 128, 4096, 4096)]
    assert report["roles"][0]["details"]["engine_warnings"][0].split(": ", 1)[1] == (
        "Overriding num_gpu_blocks=128 with num_gpu_blocks_override=40")


def test_the_real_pairs_logs_fail_together_on_kv110() -> None:
    prefill, decode = VLLM_DATA / "0.32.0-cpu-pd-prefill-4096.log", VLLM_DATA / "0.32.0-cpu-pd-decode-2048.log"
    code, report = logs(str(prefill), str(decode), "--context-length", "2048")
    assert code == 1, report
    assert [(r["status"], r["pool_tokens"], r["max_input_tokens"]) for r in report["roles"]] == [
        ("pass", 127 * 128, 4096), ("pass", 127 * 128, 2048)]
    assert sorted((f["rule"], f["severity"]) for f in report["findings"]) == [("KV104", "warning"), ("KV110", "error")]
    [kv110] = [f for f in report["findings"] if f["rule"] == "KV110"]
    assert kv110["message"].startswith(f"{prefill.name} serves a context length of 4,096 tokens but {decode.name} "
                                       "2,048")


def test_each_of_the_pairs_logs_alone_passes() -> None:
    for name in ("0.32.0-cpu-pd-prefill-4096.log", "0.32.0-cpu-pd-decode-2048.log"):
        code, report = logs(str(VLLM_DATA / name), "--context-length", "2048")
        assert (code, report["findings"]) == (0, []), report
