"""vLLM manifests through the CLI: strict arguments (exit 2 with file:line), no model config, no estimate (exit 3, never a guess)."""

from __future__ import annotations

import json
from pathlib import Path

from kvcheck.engines import get_engine
from kvcheck.engines.base import NodeLaunch
from kvcheck.inputs.manifest.load import load_manifest
from tests.conftest import run_kvcheck

MANIFEST = """\
name: vllm role
context_length: 32768
model: {{path: /models/llama}}
engine: {{name: vllm, version: "0.32.0"}}
gpu: H100
args:
{args}
roles:
  server: {{gpus: [0]}}
"""


def write(tmp_path: Path, *args: str) -> Path:
    path = tmp_path / "vllm.yaml"
    path.write_text(MANIFEST.format(args="\n".join(f"  {a}" for a in args)), encoding="utf-8")
    return path


def test_estimate_without_a_model_config_is_kv305_never_a_guess(tmp_path: Path) -> None:
    done = run_kvcheck("verify", str(write(tmp_path, "max-model-len: 32K")), "--mode", "estimate", "--format", "json")
    assert done.exit_code == 3, done.stderr
    report = json.loads(done.stdout)
    [role] = report["roles"]
    assert (role["status"], role["pool_tokens"]) == ("error", None)
    [kv305] = report["findings"]
    assert kv305["rule"] == "KV305"
    assert kv305["message"] == (
        "pool could not be estimated: model path '/models/llama' is neither a local checkpoint folder with "
        "config.json nor a Hugging Face repo id")


def test_an_unknown_vllm_flag_is_exit_2_with_its_line_and_a_suggestion(tmp_path: Path) -> None:
    done = run_kvcheck("verify", str(write(tmp_path, "max-model-len: 32k", "gpu-memory-utilisation: 0.9")),
                       "--mode", "estimate")
    assert done.exit_code == 2
    assert f"{tmp_path / 'vllm.yaml'}:8:3" in done.stderr
    assert "unknown vLLM flag 'gpu-memory-utilisation' (vLLM 0.32.0) (did you mean 'gpu-memory-utilization'?)" in (
        done.stderr)


def test_a_bad_max_model_len_is_exit_2(tmp_path: Path) -> None:
    done = run_kvcheck("verify", str(write(tmp_path, "max-model-len: 1.5K")), "--mode", "estimate")
    assert done.exit_code == 2
    assert "decimals are not allowed with binary suffixes like K ('1.5K'); did you mean 1.5k?" in done.stderr


def test_the_launch_line_is_vllm_serve_with_the_exact_arguments(tmp_path: Path) -> None:
    path = write(tmp_path, "max-model-len: auto", "max_num_seqs: 8", "kv-transfer-config: "
                 '{kv_connector: NixlConnector, kv_role: kv_producer}', "enable-prefix-caching: false")
    [target] = load_manifest(path).targets
    engine = get_engine("vllm")
    assert target.args["max_model_len"] == -1
    assert engine.role_mode(target.args) == "prefill"
    assert engine.launch_argv(target, host="127.0.0.1", port=8123, node=NodeLaunch(2, "10.0.0.1:29500", "1")) == [
        "vllm", "serve", "/models/llama", "--max-model-len", "auto", "--max-num-seqs", "8",
        "--kv-transfer-config", '{"kv_connector":"NixlConnector","kv_role":"kv_producer"}',
        "--no-enable-prefix-caching", "--host", "127.0.0.1", "--port", "8123",
        "--nnodes", "2", "--node-rank", "1", "--master-addr", "10.0.0.1", "--master-port", "29500"]


def test_the_model_and_the_listening_address_are_kvchecks(tmp_path: Path) -> None:
    done = run_kvcheck("verify", str(write(tmp_path, "port: 9000")), "--mode", "estimate")
    assert done.exit_code == 2
    assert "'port' cannot be set in args: kvcheck picks where the measured server listens" in done.stderr


BROKEN_MODEL = """\
name: vllm role
context_length: 32768
{model}
engine: {{name: vllm, version: "0.32.0"}}
args:
  max-model-len: 32k
  gpu-memory-utilisation: 0.9
roles:
  server: {{device: cpu}}
"""


def test_a_vllm_manifest_with_a_broken_model_has_its_args_judged_by_vllms_catalogue(tmp_path: Path) -> None:
    """`model: {}` failed validation, and the loader then judged the args by the default engine's (SGLang's)
    catalogue: `max-model-len` was an unknown SGLang flag and the typo got an SGLang suggestion."""
    for model, line, problem in (("model: {}", "3:8: model.path", "missing required key 'path'"),
                                 ("model: 5", "3:8: model", "Input should be a valid dictionary"),
                                 ("", "1:1: model", "missing required key 'model'")):
        path = tmp_path / "vllm.yaml"
        path.write_text(BROKEN_MODEL.format(model=model), encoding="utf-8")
        done = run_kvcheck("verify", str(path), "--mode", "estimate")
        assert done.exit_code == 2, done.stderr
        lines = done.stderr.splitlines()
        assert lines[0] == "kvcheck: error: 2 errors in manifest:"
        assert lines[1].startswith(f"{path}:{line}: {problem}")
        assert lines[2] == (f"{path}:7:3: args.gpu-memory-utilisation: unknown vLLM flag 'gpu-memory-utilisation' "
                            "(vLLM 0.32.0) (did you mean 'gpu-memory-utilization'?)")
        assert "SGLang" not in done.stderr


def test_an_unknown_engine_name_does_not_judge_the_args_by_sglangs_catalogue(tmp_path: Path) -> None:
    path = tmp_path / "vllm.yaml"
    path.write_text(BROKEN_MODEL.format(model="model: {path: /m}").replace("name: vllm", "name: vlm"),
                    encoding="utf-8")
    done = run_kvcheck("verify", str(path), "--mode", "estimate")
    assert done.exit_code == 2
    assert done.stderr.splitlines()[:2] == [
        "kvcheck: error: 1 error in manifest:",
        f"{path}:4:16: engine.name: unknown engine 'vlm' (did you mean 'vllm'?); kvcheck knows: sglang, vllm "
        "(got 'vlm')"]


def test_a_gpu_list_that_does_not_match_vllms_parallel_sizes_names_vllms_flags(tmp_path: Path) -> None:
    """The count is vLLM's (TP x PP x DP); the message used to name SGLang's tp-size and pp-size."""
    done = run_kvcheck("verify", str(write(tmp_path, "tensor-parallel-size: 2", "pipeline-parallel-size: 2")),
                       "--mode", "estimate")
    assert done.exit_code == 2
    assert done.stderr.splitlines()[1] == (
        f"{tmp_path / 'vllm.yaml'}:10:18: roles.server.gpus: 1 GPU(s) x 1 node(s) = 1, but the role's parallel "
        "settings need 4 (the product of its parallel sizes: tensor-parallel-size 2, pipeline-parallel-size 2)")
