"""vLLM's pipeline stages as get_pp_indices splits the layers (distributed/utils.py:126-166, 0.17.0 to 0.32.0): the
even split with the remainder on the stages before the last, or VLLM_PP_LAYER_PARTITION. The most loaded worker is
whichever stage holds the most: for DeepSeek-V3 at PP2 the last (30 routed-expert layers and the lm_head), not the
first (3 dense and 28 routed-expert layers and the embedding), which the estimate used to take whatever the split."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvcheck.engines.vllm.sizing.weights import (
    config_weights_bytes,
    layer_bytes,
    stage_layer_counts,
)
from kvcheck.errors import EngineRefusal
from tests.conftest import run_kvcheck
from tests.datapaths import MODELS
from tests.estimate.helpers import one_role_manifest

DSV3 = json.loads((MODELS / "deepseek-ai--DeepSeek-V3.json").read_text())
LLAMA_8B = MODELS / "meta-llama--Meta-Llama-3.1-8B.json"
COMMON = dict(tp=8, model_bytes=2, linear=1.0)  # FP8 linears, bf16 embeddings and norms


def test_the_even_split_puts_the_remainder_before_the_last_stage():
    assert stage_layer_counts(61, 2, {}) == [31, 30]
    assert stage_layer_counts(61, 4, {}) == [15, 15, 16, 15]
    assert stage_layer_counts(62, 4, {}) == [15, 16, 16, 15]
    assert stage_layer_counts(32, 1, {"VLLM_PP_LAYER_PARTITION": "32"}) == [32]
    assert stage_layer_counts(61, 2, {"VLLM_PP_LAYER_PARTITION": "21, 40"}) == [21, 40]


@pytest.mark.parametrize(("given", "words"), [
    ("30,2", "sum(partitions)=32 does not match num_hidden_layers=61"),
    ("61", "len(parts)=1 does not match pp_size=2"),
    ("30;31", "Invalid partition string: 30;31"),
    ("", "Invalid partition string: "),
    ("69,-8", "a stage of -8 layers"),
    ("61,0", "a stage of 0 layers"),
])
def test_a_partition_vllm_refuses_is_bad_input(given, words):
    with pytest.raises(EngineRefusal, match="VLLM_PP_LAYER_PARTITION=") as refused:
        stage_layer_counts(61, 2, {"VLLM_PP_LAYER_PARTITION": given})
    assert words in refused.value.message


def test_deepseek_v3_at_pp2_is_sized_by_its_last_stage():
    moe = layer_bytes(DSV3, dense=False, **COMMON)
    head = DSV3["vocab_size"] * DSV3["hidden_size"] / 8 * 2
    last = 30 * moe + head  # layers 31-60, all with routed experts, and the lm_head
    assert config_weights_bytes(DSV3, pp=2, tied=False, **COMMON) == pytest.approx(last, rel=1e-12)
    # the first stage (3 dense layers, 28 with experts, the embedding) is 2.48 GiB a GPU lighter
    first = config_weights_bytes(DSV3, pp=2, tied=False, stages=[31], **COMMON) - head  # one stage: embed + head
    assert (last - first) / (1 << 30) == pytest.approx(2.48, abs=0.01)


def test_an_uneven_partition_weighs_the_stage_it_loads():
    even = config_weights_bytes(DSV3, pp=2, tied=False, **COMMON)
    skewed = config_weights_bytes(DSV3, pp=2, tied=False, stages=stage_layer_counts(
        61, 2, {"VLLM_PP_LAYER_PARTITION": "21,40"}), **COMMON)
    assert skewed - even == pytest.approx(10 * layer_bytes(DSV3, dense=False, **COMMON), rel=1e-9)


def _verify(tmp_path: Path, env: str, utilization: float = 0.9) -> tuple[int, str, dict | None]:
    path = one_role_manifest(tmp_path, LLAMA_8B, f"pipeline-parallel-size: 2, gpu-memory-utilization: {utilization}",
                             gpus="[0, 1]", env=env)
    done = run_kvcheck("verify", str(path), "--mode", "estimate", "--format", "json")
    return done.exit_code, done.stderr, json.loads(done.stdout) if done.stdout.strip() else None


def test_end_to_end_a_refused_partition_is_exit_2_and_a_valid_one_moves_the_weights(tmp_path: Path):
    code, stderr, _ = _verify(tmp_path, 'VLLM_PP_LAYER_PARTITION: "30,3"')
    assert code == 2
    assert "sum(partitions)=33 does not match num_hidden_layers=32" in stderr
    code, _, even = _verify(tmp_path, "")
    assert code == 0 and even is not None
    code, _, skewed = _verify(tmp_path, 'VLLM_PP_LAYER_PARTITION: "26,6"')
    assert code == 0 and skewed is not None
    # 10 more layers on the first stage: less room for its KV cache, which sizes every worker's
    assert skewed["roles"][0]["pool_tokens"] < even["roles"][0]["pool_tokens"]


def test_the_stage_with_the_most_layers_sizes_the_kv_cache(tmp_path: Path):
    # Llama-3.1-8B on 2 H100s, "30,2": stage 0's KV holds 30 layers a token (122,880 B), not ceil(32 / 2) = 16;
    # at 0.35 its pool is about 103K tokens, under the 131,072 window, which vLLM refuses to start
    code, _, skewed = _verify(tmp_path, 'VLLM_PP_LAYER_PARTITION: "30,2"', utilization=0.35)
    assert code == 1 and skewed is not None
    assert skewed["roles"][0]["details"]["kv_bytes_per_token"] == 30 * 4096
    assert skewed["roles"][0]["pool_tokens"] < 131_072
    code, _, even = _verify(tmp_path, "", utilization=0.35)
    assert code == 0 and even is not None
    assert even["roles"][0]["details"]["kv_bytes_per_token"] == 16 * 4096


def test_sliding_window_groups_are_the_whole_models_projected_on_each_stage():
    from packaging.version import Version

    from kvcheck.engines.vllm.sizing.layout import _swa_pages_per_block

    sliding = list(range(0, 36, 2))  # gpt-oss: 18 sliding and 18 full layers, alternating
    assert _swa_pages_per_block(sliding, 36, [36], Version("0.32.0")) == 18  # one group of each type
    # PP8 (4,4,4,5,5,5,5,4): a 5-layer stage holds 3 of one type, so its block costs 3 pages, not the 2 its own
    # counts (3 and 2) would group by
    assert _swa_pages_per_block(sliding, 36, stage_layer_counts(36, 8, {}), Version("0.32.0")) == 3
    assert _swa_pages_per_block(sliding, 36, stage_layer_counts(36, 4, {}), Version("0.32.0")) == 5
    # 10 sliding and 13 full: one type 1.3 times the other groups by the larger from 0.18.0 (1.5), by the
    # smaller before (1.25): groups of 10, the full layers in two groups of 7 and 6
    mixed = list(range(10))
    assert _swa_pages_per_block(mixed, 23, [23], Version("0.18.0")) == 13
    assert _swa_pages_per_block(mixed, 23, [23], Version("0.17.0")) == 10


def test_gpt_oss_120b_at_pp8_is_sized_by_vllms_grouping(tmp_path: Path):
    # the utilisation kvcheck plan used to advise for 131,072 tokens: with 3 pages a block vLLM holds about 91K
    path = one_role_manifest(tmp_path, MODELS / "openai--gpt-oss-120b.json",
                             "pipeline-parallel-size: 8, gpu-memory-utilization: 0.243", gpu="L40S",
                             gpus="[0, 1, 2, 3, 4, 5, 6, 7]")
    done = run_kvcheck("verify", str(path), "--mode", "estimate", "--format", "json")
    assert done.exit_code == 1, done.stdout + done.stderr
    role = json.loads(done.stdout)["roles"][0]
    assert role["pool_tokens"] == 91_056
