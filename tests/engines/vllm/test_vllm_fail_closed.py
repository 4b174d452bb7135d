"""The vLLM estimate fails closed, end to end on a manifest file: an override vLLM cannot allocate is a
refused start (KV220), a draft it does not price and an architecture it does not model are KV305 (exit 3),
never a pool sized as if they were not there."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import REPO_ROOT, run_kvcheck

LLAMA = json.loads((REPO_ROOT / "docs/examples/vllm/config.json").read_text(encoding="utf-8"))

MANIFEST = """\
name: t
context_length: {context}
model: {{path: meta-llama/Llama-3.1-8B-Instruct, config: config.json}}
engine: {{name: vllm, version: "0.32.0"}}
gpu: H100
args: {args}
roles:
  server: {{gpus: [0]}}
"""


def verify(tmp_path: Path, args: dict[str, Any], *, config: dict[str, Any] | None = None,
           context: int = 100000) -> tuple[int, dict[str, Any]]:
    (tmp_path / "config.json").write_text(json.dumps(config or LLAMA), encoding="utf-8")
    path = tmp_path / "t.yaml"
    path.write_text(MANIFEST.format(context=context, args=json.dumps(args)), encoding="utf-8")
    done = run_kvcheck("verify", str(path), "--mode", "estimate", "--format", "json")
    return done.exit_code, json.loads(done.stdout)


def rules(report: dict[str, Any]) -> list[str]:
    return [f["rule"] for f in report["findings"]]


def message(report: dict[str, Any], rule: str) -> str:
    return next(f["message"] for f in report["findings"] if f["rule"] == rule)


# 1. --num-gpu-blocks-override: vLLM allocates the blocks it names whatever the memory holds


def test_a_block_override_larger_than_the_gpu_is_a_refused_start(tmp_path: Path) -> None:
    code, report = verify(tmp_path, {"num-gpu-blocks-override": 10_000_000})
    assert code == 1
    assert "KV220" in rules(report)
    text = message(report, "KV220")
    # Llama-3.1-8B: 32 layers x 8 KV heads x 128 x 2 (K, V) x 2 B = 128 KiB a token, 2 MiB a 16-token block
    assert "--num-gpu-blocks-override 10,000,000" in text
    assert f"{10_000_000 * 2 * 1024 * 1024:,} B" in text
    assert "H100" in text and "torch.OutOfMemoryError" in text
    [role] = report["roles"]
    assert role["pool_tokens"] == 0


def test_a_block_override_that_fits_sizes_the_pool_it_names(tmp_path: Path) -> None:
    code, report = verify(tmp_path, {"num-gpu-blocks-override": 1000, "max-model-len": 8192}, context=8192)
    assert code == 0, report["findings"]
    [role] = report["roles"]
    assert role["pool_tokens"] == 999 * 16  # every block but the null block


def test_vllm_checks_one_request_against_the_overridden_blocks_not_the_profiled_memory(tmp_path: Path) -> None:
    # get_kv_cache_configs plans against override x bytes per block: 1,000 blocks hold 15,984 tokens, not
    # one request of the model's 131,072, whatever the H100 would have profiled
    code, report = verify(tmp_path, {"num-gpu-blocks-override": 1000}, context=8192)
    assert code == 1
    assert "KV220" in rules(report)
    assert "the estimated maximum model length is 15984" in message(report, "KV220")


# 2. --speculative-config: a draft's weights and KV layers share the target's GPUs and pool


@pytest.mark.parametrize("spec", [
    {"method": "eagle3", "model": "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B", "num_speculative_tokens": 3},
    {"method": "draft_model", "model": "meta-llama/Llama-3.2-1B-Instruct", "num_speculative_tokens": 4},
    {"model": "meta-llama/Llama-3.2-1B-Instruct", "num_speculative_tokens": 4},  # vLLM: a draft model
    {"method": "deepseek_mtp", "num_speculative_tokens": 1},
    {"method": "mtp", "num_speculative_tokens": 1},
])
def test_a_speculative_draft_is_kv305_never_the_target_alone(tmp_path: Path, spec: dict[str, Any]) -> None:
    code, report = verify(tmp_path, {"speculative-config": json.dumps(spec)}, context=8192)
    assert code == 3
    assert rules(report) == ["KV305"]
    text = message(report, "KV305")
    assert "--speculative-config method" in text
    assert repr(spec.get("method", "draft_model")) in text
    assert (repr(spec["model"]) if "model" in spec else "own MTP/draft layers") in text
    [role] = report["roles"]
    assert role["pool_tokens"] is None


@pytest.mark.parametrize("spec", [{"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_max": 4},
                                  {"method": "suffix"}])
def test_a_method_with_no_draft_model_sizes_as_the_target_alone(tmp_path: Path, spec: dict[str, Any]) -> None:
    code, plain = verify(tmp_path, {}, context=8192)
    code_spec, report = verify(tmp_path, {"speculative-config": json.dumps(spec)}, context=8192)
    assert (code, code_spec) == (0, 0)
    assert report["roles"][0]["pool_tokens"] == plain["roles"][0]["pool_tokens"] > 0


def test_ngram_on_the_gpu_is_kv305_for_its_token_buffers(tmp_path: Path) -> None:
    # gpu_model_runner keeps a [max_num_seqs, max_model_len] int32 token tensor on the GPU for it
    spec = {"method": "ngram_gpu", "num_speculative_tokens": 3, "prompt_lookup_max": 4}
    code, report = verify(tmp_path, {"speculative-config": json.dumps(spec)}, context=8192)
    assert code == 3
    assert "--speculative-config method 'ngram_gpu' keeps the requests' tokens in GPU buffers" in (
        message(report, "KV305"))


# 3. architectures: only those whose KV layout the estimate reproduces


@pytest.mark.parametrize("architecture", ["MysteryForCausalLM", "BertModel", "MiniMaxText01ForCausalLM"])
def test_an_architecture_the_estimate_does_not_model_is_kv305(tmp_path: Path, architecture: str) -> None:
    code, report = verify(tmp_path, {}, config={**LLAMA, "architectures": [architecture]}, context=8192)
    assert code == 3
    assert rules(report) == ["KV305"]
    assert f"architecture {architecture} is not one the vLLM estimate model sizes" in message(report, "KV305")
    assert report["roles"][0]["pool_tokens"] is None


def test_a_config_naming_no_architecture_is_kv305(tmp_path: Path) -> None:
    config = {k: v for k, v in LLAMA.items() if k != "architectures"}
    code, report = verify(tmp_path, {}, config=config, context=8192)
    assert code == 3
    assert "names no architectures" in message(report, "KV305")
