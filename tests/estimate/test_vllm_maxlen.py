"""vLLM's own maximum model length (sizing/maxlen.py): a --max-model-len above what the model's config
derives is refused at start (KV220, vLLM's words), unless VLLM_ALLOW_LONG_MAX_MODEL_LEN=1; a refused start
is never an engine context of 0 (KV102)."""

from __future__ import annotations

import json
from pathlib import Path

from kvcheck.engines.vllm.sizing import maxlen
from tests.conftest import run_kvcheck

ROOT = Path(__file__).resolve().parents[2]
MODELS = ROOT / "tests" / "data" / "models"

MANIFEST = """\
name: vllm max len
context_length: {window}
model: {{path: {path}, config: {config}}}
engine: {{name: vllm, version: "{version}"}}
gpu: H100
roles:
  main:
    gpus: [{gpus}]
{env}    args:
{args}
"""


def _manifest(tmp_path: Path, *, window: int, model: str, args: dict[str, object], gpus: str = "0",
              version: str = "0.32.0", env: str = "") -> Path:
    path = tmp_path / "vllm.yaml"
    path.write_text(MANIFEST.format(window=window, path=model, config=MODELS / f"{model.replace('/', '--')}.json",
                                    version=version, gpus=gpus, env=env,
                                    args="\n".join(f"      {k}: {v}" for k, v in args.items())), encoding="utf-8")
    return path


QWEN_REFUSAL = (
    "vLLM would refuse to start (predicted): User-specified max_model_len (1048576) is greater than the derived "
    "max_model_len (max_position_embeddings=262144.0 or model_max_length=None in model's config.json). To allow "
    "overriding this maximum, set the env var VLLM_ALLOW_LONG_MAX_MODEL_LEN=1. VLLM_ALLOW_LONG_MAX_MODEL_LEN must "
    "be used with extreme caution. If the model uses relative position encoding (RoPE), positions exceeding "
    "derived_max_model_len lead to nan. If the model uses absolute position encoding, positions exceeding "
    "derived_max_model_len will cause a CUDA array out-of-bounds error.")


def test_a_max_model_len_above_the_models_own_is_kv220_with_vllms_words(tmp_path: Path) -> None:
    path = _manifest(tmp_path, window=1048576, model="Qwen/Qwen3.5-35B-A3B", gpus="0, 1",
                     args={"max-model-len": 1048576, "tensor-parallel-size": 2})
    done = run_kvcheck("verify", str(path), "--mode", "estimate", "--format", "json")
    assert done.exit_code == 1, done.stderr
    report = json.loads(done.stdout)
    [kv220] = report["findings"]
    assert kv220["rule"] == "KV220"
    assert kv220["message"] == QWEN_REFUSAL
    assert kv220["hint"] == ("set --max-model-len to at most 262,144 (the model's own length), or set "
                             "VLLM_ALLOW_LONG_MAX_MODEL_LEN=1 in the role's env where the model is known to serve longer")
    assert kv220["location"] == {"file": str(path), "line": 10, "column": 7}


def test_vllm_allow_long_max_model_len_in_the_role_env_lets_it_start(tmp_path: Path) -> None:
    path = _manifest(tmp_path, window=1048576, model="Qwen/Qwen3.5-35B-A3B", gpus="0, 1",
                     args={"max-model-len": 1048576, "tensor-parallel-size": 2},
                     env="    env: {VLLM_ALLOW_LONG_MAX_MODEL_LEN: 'true'}\n")
    done = run_kvcheck("verify", str(path), "--mode", "estimate", "--format", "json")
    assert done.exit_code == 0, done.stderr
    assert json.loads(done.stdout)["findings"] == []


def test_llama3_rope_does_not_scale_and_the_old_release_words_it_its_way(tmp_path: Path) -> None:
    # Llama-3.1's llama3 rope (factor 8) already states the scaled 131,072: vLLM applies no factor
    path = _manifest(tmp_path, window=600000, model="meta-llama/Meta-Llama-3.1-8B", gpus="0, 1", version="0.10.1",
                     args={"max-model-len": 600000, "tensor-parallel-size": 2})
    done = run_kvcheck("verify", str(path), "--mode", "estimate", "--format", "json")
    assert done.exit_code == 1, done.stderr
    [kv220] = [f for f in json.loads(done.stdout)["findings"] if f["rule"] == "KV220"]
    assert kv220["message"] == (
        "vLLM would refuse to start (predicted): User-specified max_model_len (600000) is greater than the derived "
        "max_model_len (max_position_embeddings=131072 or model_max_length=None in model's config.json). This may "
        "lead to incorrect model outputs or CUDA errors. To allow overriding this maximum, set the env var "
        "VLLM_ALLOW_LONG_MAX_MODEL_LEN=1")


def test_kv102_does_not_advise_a_length_above_the_models_own(tmp_path: Path) -> None:
    path = _manifest(tmp_path, window=600000, model="meta-llama/Meta-Llama-3.1-8B", gpus="0, 1",
                     args={"tensor-parallel-size": 2})
    done = run_kvcheck("verify", str(path), "--mode", "estimate", "--format", "json")
    assert done.exit_code == 1, done.stderr
    [kv102] = [f for f in json.loads(done.stdout)["findings"] if f["rule"] == "KV102"]
    assert kv102["message"] == "the engine's context length is 131,072 tokens, below the advertised window 600,000"
    assert kv102["hint"] == ("advertise at most 131,072: the engine derives it from the model's config, and refuses "
                             "a longer max-model-len unless its long-context override is set")


def test_yarn_scales_before_0_30_and_not_from_it() -> None:
    text = {"max_position_embeddings": 131072,
            "rope_scaling": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768}}
    assert maxlen.derive(text, (0, 29, 0)).length == 131072  # 32,768 x 4
    assert maxlen.derive({**text, "max_position_embeddings": 40960}, (0, 29, 0)).length == 131072
    assert maxlen.derive({**text, "max_position_embeddings": 40960}, (0, 30, 0)).length == 40960
    dynamic = {"max_position_embeddings": 4096, "rope_scaling": {"type": "dynamic", "factor": 2.0}}
    assert (maxlen.derive(dynamic, (0, 32, 0)).length, maxlen.derive(dynamic, (0, 32, 0)).shown) == (8192, "8192.0")
    assert maxlen.derive({"n_positions": 1024}, (0, 8, 0)).shown == "1024"
    assert maxlen.derive({"max_position_embeddings": 8192, "sliding_window": 4096}, None,
                         disable_sliding_window=True).key == "sliding_window"
    assert maxlen.refusal(5000, maxlen.derive({}, None), None, {}) is None  # no key: vLLM takes it as given
    assert maxlen.refusal(9000, maxlen.derive({"max_position_embeddings": 8192}, None), None,
                          {"VLLM_ALLOW_LONG_MAX_MODEL_LEN": "1"}) is None


def test_longrope_states_its_scaled_length_and_an_unset_length_takes_the_original() -> None:
    text = {"max_position_embeddings": 131072, "original_max_position_embeddings": 4096,
            "rope_scaling": {"type": "longrope", "long_factor": [1.0], "short_factor": [1.0]}}
    derived = maxlen.derive(text, (0, 32, 0))
    assert (derived.length, derived.longrope_default, derived.shown) == (131072, 4096, "131072.0")
    assert maxlen.derive(text, (0, 11, 0)).shown == "131072"  # before 0.12.0 an unscaled type multiplies nothing
