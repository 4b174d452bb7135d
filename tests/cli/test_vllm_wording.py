"""A vLLM manifest's findings speak vLLM: its window flag (--max-model-len), never SGLang's flags or
reservation, at the line that set the value; `auto` is no window of its own (KV102 does not fire on -1)."""

from __future__ import annotations

import json
from pathlib import Path

from tests.conftest import REPO_ROOT, run_kvcheck

CONFIG = REPO_ROOT / "docs" / "examples" / "vllm" / "config.json"


def _pair(tmp_path: Path, prefill_len: str) -> Path:
    manifest = tmp_path / "pd.yaml"
    manifest.write_text(
        "context_length: 32768\n"
        f"model: {{path: meta-llama/Llama-3.1-8B-Instruct, config: {CONFIG}}}\n"
        'engine: {name: vllm, version: "0.32.0"}\n'
        "gpu: H100\n"
        f"args: {{max-model-len: {prefill_len}}}\n"
        "roles:\n"
        "  prefill:\n"
        "    gpus: [0]\n"
        "    args: {kv-transfer-config: {kv_connector: NixlConnector, kv_role: kv_producer}}\n"
        "  decode:\n"
        "    gpus: [1]\n"
        "    args: {kv-transfer-config: {kv_connector: NixlConnector, kv_role: kv_consumer}, max-model-len: 32768}\n"
    )
    return manifest


def _findings(stdout: str) -> dict[str, dict]:
    return {(f["rule"], f["role"]): f for f in json.loads(stdout)["findings"]}


def test_a_vllm_max_model_len_below_the_window_is_kv102_at_its_line(tmp_path: Path) -> None:
    result = run_kvcheck("verify", str(_pair(tmp_path, "16384")), "--mode", "estimate", "--format", "json")
    assert result.exit_code == 1, result.stderr
    found = _findings(result.stdout)
    kv102 = found[("KV102", "prefill")]
    assert kv102["message"] == "--max-model-len 16,384 is below the advertised window 32,768"
    assert kv102["hint"] == "set max-model-len: 32768 (or advertise 16,384)"
    assert (kv102["location"]["line"], kv102["location"]["column"]) == (5, 8)
    assert found[("KV110", None)]["hint"] == "set the same --max-model-len on both roles, at least the advertised window"
    assert found[("KV104", None)]["hint"] == "size both roles' pools and context lengths so their admission bounds match"


def test_the_table_of_a_vllm_pair_names_no_sglang_flag(tmp_path: Path) -> None:
    result = run_kvcheck("verify", str(_pair(tmp_path, "16384")), "--mode", "estimate")
    assert result.exit_code == 1, result.stderr
    for sglang_word in ("SGLang", "context-length", "reservation", "mem-fraction-static"):
        assert sglang_word not in result.stdout


def test_max_model_len_auto_is_no_window_below_the_advertised_one(tmp_path: Path) -> None:
    # auto (-1): vLLM fits the window to the pool; this pool holds the model's 131,072, so no KV102
    result = run_kvcheck("verify", str(_pair(tmp_path, "auto")), "--mode", "estimate", "--format", "json")
    assert result.exit_code == 1, result.stderr  # KV110: prefill serves 131,072, decode 32,768
    found = _findings(result.stdout)
    assert ("KV102", "prefill") not in found
    assert ("KV110", None) in found


def test_max_model_len_32k_is_32000_and_below_a_32768_window(tmp_path: Path) -> None:
    # vLLM reads 32k as 32,000 (32K is 32,768): the role refuses prompts the advertised window promises
    result = run_kvcheck("verify", str(_pair(tmp_path, "32k")), "--mode", "estimate", "--format", "json")
    assert result.exit_code == 1, result.stderr
    kv102 = _findings(result.stdout)[("KV102", "prefill")]
    assert kv102["message"] == "--max-model-len 32,000 is below the advertised window 32,768"


def test_engine_version_states_a_vllm_files_release(tmp_path: Path) -> None:
    # a KServe LLMInferenceService whose image names no vLLM release: --engine-version states it
    deploy = REPO_ROOT / "tests" / "data" / "vllm-deploy" / "kserve-llmisvc-qwen2-7b-nvidia.yaml"
    result = run_kvcheck("import", str(deploy), "--engine-version", "0.9.2", "--format", "json")
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout)["engine"] == {"name": "vllm", "version": "0.9.2"}
    yaml_out = run_kvcheck("import", str(deploy), "--engine-version", "0.9.2")
    assert '  version: "0.9.2"  # --engine-version' in yaml_out.stdout.splitlines()
    # the older name is the same option
    older = run_kvcheck("import", str(deploy), "--sglang-version", "0.9.2", "--format", "json")
    assert json.loads(older.stdout)["engine"] == {"name": "vllm", "version": "0.9.2"}


def test_help_names_both_engines() -> None:
    for command in ("logs", "audit"):
        result = run_kvcheck(command, "--help")
        assert result.exit_code == 0
        assert "SGLang or vLLM" in result.stdout, command
    assert "--engine-version" in run_kvcheck("verify", "--help").stdout
    assert "vllm serve" in run_kvcheck("import", "--help").stdout


def test_logs_of_a_vllm_boot_below_the_window_name_max_model_len_at_its_log_line() -> None:
    log = REPO_ROOT / "tests" / "data" / "vllm" / "0.32.0-cpu-pass.log"  # --max-model-len 4096 on its args line
    result = run_kvcheck("logs", str(log), "--context-length", "8192", "--format", "json")
    assert result.exit_code == 1, result.stderr
    kv102 = _findings(result.stdout)[("KV102", log.name)]
    assert kv102["message"] == "--max-model-len 4,096 is below the advertised window 8,192"
    assert kv102["hint"] == "set max-model-len: 8192 (or advertise 4,096)"
    assert kv102["location"]["line"] == 8


def test_logs_of_a_vllm_pair_give_vllm_fixes() -> None:
    data = REPO_ROOT / "tests" / "data" / "vllm"
    result = run_kvcheck("logs", str(data / "0.32.0-cpu-pd-prefill-4096.log"),
                         str(data / "0.32.0-cpu-pd-decode-2048.log"), "--context-length", "2048")
    assert result.exit_code == 1, result.stderr
    assert "fix: set the same --max-model-len on both roles, at least the advertised window" in result.stdout
    assert "SGLang" not in result.stdout and "reservation" not in result.stdout


def test_an_sglang_prefill_and_a_vllm_decode_get_each_engines_window_flag() -> None:
    prefill = REPO_ROOT / "tests" / "data" / "logs" / "sglang-llama3-8b-H200-tp1-pd-prefill-issue6753.log"
    decode = REPO_ROOT / "tests" / "data" / "vllm" / "0.32.0-cpu-pd-decode-2048.log"
    result = run_kvcheck("logs", str(prefill), str(decode), "--context-length", "2048", "--format", "json")
    assert result.exit_code == 1, result.stderr
    assert _findings(result.stdout)[("KV110", None)]["hint"] == (
        "set the same window (--context-length on SGLang, --max-model-len on vLLM) on both roles, at least the "
        "advertised window")
