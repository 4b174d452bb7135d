"""A damaged model config stops the estimate (KV305, exit 3), never becomes a figure or a traceback."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import EXAMPLES, run_kvcheck

LLAMA = EXAMPLES / "single-server" / "llama-3.1-8b-instruct.config.json"

MANIFEST = """\
context_length: 131072
model: {path: meta-llama/Llama-3.1-8B-Instruct, config: config.json}
engine: {version: "0.5.23"}
gpu: H100
roles:
  server: {gpus: [0]}
"""


def estimate_with(tmp_path: Path, config_text: str | bytes) -> tuple[int, dict, str]:
    """Run `verify --mode estimate` on the single-server manifest with this config.json."""
    config = tmp_path / "config.json"
    if isinstance(config_text, bytes):
        config.write_bytes(config_text)
    else:
        config.write_text(config_text)
    (tmp_path / "deploy.yaml").write_text(MANIFEST)
    result = run_kvcheck("verify", str(tmp_path / "deploy.yaml"), "--mode", "estimate", "--format", "json")
    return result.exit_code, json.loads(result.stdout), result.stderr


def llama_with(**changes: object) -> str:
    config = json.loads(LLAMA.read_text())
    config.update(changes)
    return json.dumps(config)


@pytest.mark.parametrize(
    ("changes", "why"),
    [
        # each of these used to price KV at (almost) nothing and pass any window
        ({"num_hidden_layers": 0}, "num_hidden_layers is 0, not a whole number from 1 to 10,000"),
        ({"num_hidden_layers": -5}, "num_hidden_layers is -5, not a whole number from 1 to 10,000"),
        ({"num_hidden_layers": True}, "num_hidden_layers is True, not a whole number from 1 to 10,000"),
        ({"num_key_value_heads": 0}, "num_key_value_heads is 0, not a whole number from 1 to 1,099,511,627,776"),
        ({"head_dim": 0}, "head_dim is 0, not a whole number from 1 to 1,099,511,627,776"),
        # each of these used to be exit 4 (ValueError, ZeroDivisionError, OverflowError)
        ({"hidden_size": "abc"}, "hidden_size is 'abc', not a whole number from 1 to 1,099,511,627,776"),
        ({"num_attention_heads": 0}, "num_attention_heads is 0, not a whole number from 1 to 1,099,511,627,776"),
        ({"num_hidden_layers": 1e30}, "num_hidden_layers is 1e+30, not a whole number from 1 to 10,000"),
        ({"num_hidden_layers": 32.5}, "num_hidden_layers is 32.5, not a whole number from 1 to 10,000"),
        ({"intermediate_size": float("nan")}, "intermediate_size is nan, not a whole number from 0 to 1,099,511,627,776"),
        ({"text_config": {"hidden_size": -1}}, "hidden_size is -1, not a whole number from 1 to 1,099,511,627,776"),
    ],
)  # fmt: skip
def test_garbage_count_in_config_is_kv305_exit_3(tmp_path: Path, changes: dict, why: str) -> None:
    code, report, stderr = estimate_with(tmp_path, llama_with(**changes))
    assert code == 3, stderr
    assert report["roles"][0]["pool_tokens"] is None
    (finding,) = report["findings"]
    assert finding["rule"] == "KV305"
    assert finding["message"] == f"pool could not be estimated: model config {tmp_path / 'config.json'}: {why}"
    assert finding["hint"] == "pass the model's own config.json (model.config in the manifest)"


def test_infinite_context_in_config_is_kv305_not_a_crash(tmp_path: Path) -> None:
    text = llama_with(max_position_embeddings=1).replace('"max_position_embeddings": 1', '"max_position_embeddings": 1e400')
    code, report, _ = estimate_with(tmp_path, text)
    assert code == 3
    assert report["findings"][0]["message"].endswith("max_position_embeddings is inf, not a whole number from 1 to 1,099,511,627,776")


def test_whole_float_counts_are_accepted(tmp_path: Path) -> None:
    code, report, _ = estimate_with(tmp_path, llama_with(num_hidden_layers=32.0))
    assert code == 0
    assert report["roles"][0]["pool_tokens"] == 412019


def test_architectures_written_as_a_string_is_read_as_one_architecture(tmp_path: Path) -> None:
    code, report, _ = estimate_with(tmp_path, llama_with(architectures="LlamaForCausalLM"))
    assert code == 0
    assert report["roles"][0]["pool_tokens"] == 412019


def test_config_that_is_not_utf8_is_kv305_not_a_crash(tmp_path: Path) -> None:
    code, report, stderr = estimate_with(tmp_path, b"\xff\xfe\x00{}")
    assert code == 3, stderr
    assert report["findings"][0]["message"] == (
        f"pool could not be estimated: model config {tmp_path / 'config.json'} is not UTF-8 text (byte 0)"
    )
