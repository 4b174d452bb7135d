"""A start vLLM would refuse (KV220) keeps its max_model_len as its context length: KV220 and KV101 report
the refusal, never a KV102 "context length is 0" that asks for the max-model-len already set."""

from __future__ import annotations

import json
from pathlib import Path

from tests.conftest import run_kvcheck

ROOT = Path(__file__).resolve().parents[2]
CONFIG = ROOT / "tests" / "data" / "models" / "nvidia--Nemotron-H-56B-Base-8K.json"


def test_a_refused_start_is_kv220_and_kv101_never_a_context_of_0(tmp_path: Path) -> None:
    # Nemotron-H-56B's bf16 weights fill one H100: vLLM finds no memory for the cache blocks
    path = tmp_path / "nh.yaml"
    path.write_text(f"""\
name: nh
context_length: 8192
model: {{path: nvidia/Nemotron-H-56B-Base-8K, config: {CONFIG}}}
engine: {{name: vllm, version: "0.32.0"}}
gpu: H100
roles:
  main:
    gpus: [0]
    args:
      max-model-len: 8192
""", encoding="utf-8")
    done = run_kvcheck("verify", str(path), "--mode", "estimate", "--format", "json")
    assert done.exit_code == 1, done.stderr
    report = json.loads(done.stdout)
    assert [f["rule"] for f in report["findings"]] == ["KV220", "KV101"]
    assert report["findings"][0]["message"] == (
        "vLLM would refuse to start (predicted): No available memory for the cache blocks")
    [role] = report["roles"]
    assert (role["pool_tokens"], role["max_input_tokens"]) == (0, 0)
