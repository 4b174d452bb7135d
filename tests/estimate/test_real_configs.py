"""Every real model config (tests/datapaths.py: MODELS) either gives a number or a clear not-understood error."""

from __future__ import annotations

import pytest

from kvcheck.engines.sglang.sizing import estimate_role
from kvcheck.errors import EstimateError
from tests.datapaths import MODELS_ABSENT

from .helpers import MODELS, role

# Checkpoints whose architecture SGLang 0.5.23 itself does not serve (no registry class, no auto_map):
# the only configs that stay unsized, each with the engine's reason.
NOT_SERVED = {
    "MiniMaxAI--MiniMax-M3": "MiniMaxM3ForCausalLM",
    "stepfun-ai--Step-3.7-Flash": "Step3p7FlashForCausalLM",
    "stepfun-ai--Step-3.7-Flash-FP8": "Step3p7FlashForCausalLM",
}
NOT_UNDERSTOOD = {
    "deepseek-ai--DeepSeek-V4-Flash": "DeepseekV4ForCausalLM",
    "deepseek-ai--DeepSeek-V4-Pro": "DeepseekV4ForCausalLM",
    "nvidia--DeepSeek-V4-Flash-NVFP4": "DeepseekV4ForCausalLM",
    "nvidia--DeepSeek-V4-Pro-NVFP4": "DeepseekV4ForCausalLM",
    "sgl-project--DeepSeek-V4-Flash-FP8": "DeepseekV4ForCausalLM",
    "sgl-project--DeepSeek-V4-Pro-FP8": "DeepseekV4ForCausalLM",
    "moonshotai--Kimi-K3": "KimiK3ForConditionalGeneration",  # KDA linear attention
}
KINDS = {
    "meta-llama--Meta-Llama-3.1-8B": "mha",
    "Qwen--Qwen3-235B-A22B-FP8": "mha",
    "mistralai--Mixtral-8x7B-v0.1": "mha",
    "deepseek-ai--DeepSeek-R1": "mla",
    "moonshotai--Kimi-K2.5": "mla",
    "deepseek-ai--DeepSeek-V3.2": "dsa",
    "zai-org--GLM-5-FP8": "dsa",
    "openai--gpt-oss-120b": "hybrid_swa",
    "meta-llama--Llama-4-Scout-17B-16E-Instruct": "hybrid_swa",
    "XiaomiMiMo--MiMo-V2-Flash": "hybrid_swa",
    "google--gemma-4-26B-A4B": "hybrid_swa",
    "Qwen--Qwen3.5-397B-A17B": "hybrid_linear",
    "nvidia--Qwen3.6-27B-NVFP4": "hybrid_linear",
    "nvidia--NVIDIA-Nemotron-3-Nano-30B-A3B-BF16": "hybrid_linear",
    "nvidia--NVIDIA-Nemotron-3-Ultra-550B-A55B-FP8": "hybrid_linear",
    "nvidia--Llama-3_3-Nemotron-Super-49B-v1": "mha",
    "nvidia--MiniMax-M3-NVFP4": "mha",
}


def _configs() -> list:
    if not MODELS.is_dir():
        return [pytest.param("absent", marks=pytest.mark.skip(reason=MODELS_ABSENT))]
    return sorted(p.stem for p in MODELS.glob("*.json") if not p.name.endswith(".hf_quant_config.json"))


@pytest.mark.parametrize("name", _configs())
@pytest.mark.parametrize("gpu", ["H200", "B200"])
def test_each_real_config_gives_a_pool_or_says_it_is_not_understood(name, gpu):
    target = role(name, gpu=gpu, tp_size=8)
    if name in NOT_SERVED:
        with pytest.raises(EstimateError, match=f"architecture {NOT_SERVED[name]} is not served by SGLang 0.5.23: "):
            estimate_role(target, offline=True)
        return
    if name in NOT_UNDERSTOOD:
        with pytest.raises(EstimateError, match=f"architecture {NOT_UNDERSTOOD[name]} is not understood"):
            estimate_role(target, offline=True)
        return
    est = estimate_role(target, offline=True)
    assert est.pool_tokens >= 0
    low, high = est.pool_range
    assert low <= est.pool_tokens <= high
    assert est.kv_bytes_per_token > 0
    assert est.details["architecture"] == est.details["architecture"]
    if name in KINDS:
        assert est.details["architecture_kind"] == KINDS[name]
    if est.details["architecture_kind"] == "hybrid_swa":
        assert 0 < est.details["swa_pool_tokens"] <= est.pool_tokens


def test_glm5_bf16_does_not_fit_eight_h200s_and_says_sglang_would_refuse():
    est = estimate_role(role("zai-org--GLM-5", gpu="H200", tp_size=8), offline=True)
    assert est.pool_tokens == 0
    assert est.details["weights_gib_per_gpu"] > 140


def test_gpt_oss_reports_full_pool_and_swa_pool():
    est = estimate_role(role("openai--gpt-oss-120b", gpu="H100", tp_size=2), offline=True)
    assert est.details["swa_pool_tokens"] == est.pool_tokens * 8 // 10
    assert est.details["sliding_window"] == 128
    assert est.details["kv_cell_parts"]["full_layers"] == 18
    assert est.details["kv_cell_parts"]["swa_layers"] == 18


def test_nemotron_nas_prices_every_layer_with_one_kv_head_count():
    # 80 blocks, 49 with attention (8 KV heads), 31 no-op: SGLang's pool still holds a slot per layer
    est = estimate_role(role("nvidia--Llama-3_3-Nemotron-Super-49B-v1", gpu="H100", tp_size=4), offline=True)
    assert est.details["kv_cell_parts"] == {"kv_heads_per_rank": 2, "bytes_per_layer": 1024, "layers": 80}
    assert est.kv_bytes_per_token == 2 * 256 * 80 * 2
    assert 23.0 < est.details["weights_gib_per_gpu"] < 23.5  # 49.9 B parameters in bf16 over 4 ranks


def test_nemotron_nas_with_variable_gqa_is_refused_as_sglang_does(tmp_path):
    import json

    config = json.loads((MODELS / "nvidia--Llama-3_3-Nemotron-Super-49B-v1.json").read_text())
    config["block_configs"][1]["attention"]["n_heads_in_group"] = 4
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    with pytest.raises(EstimateError, match="Variable GQA \\(VGQA\\) is not yet supported for nemotron-nas"):
        estimate_role(role(path, gpu="H100"), offline=True)


def test_minimax_m3_sparse_pool_adds_the_index_k_rows():
    est = estimate_role(role("nvidia--MiniMax-M3-NVFP4", gpu="H200", tp_size=8), offline=True)
    parts = est.details["kv_cell_parts"]
    # 60 layers x K+V x 1 KV head (4 heads over TP8 -> 1) x 128 x bf16, + 57 sparse layers x index-K 128 x bf16
    assert (parts["main_bytes"], parts["indexer_bytes"]) == (60 * 2 * 1 * 128 * 2, 57 * 128 * 2)
    assert (est.details["attention_backend"], est.details["page_size"]) == ("fa3", 128)
    fp8 = estimate_role(role("nvidia--MiniMax-M3-NVFP4", gpu="B200", tp_size=4, kv_cache_dtype="fp8_e4m3"),
                        offline=True)
    assert fp8.kv_bytes_per_token == 60 * 2 * 128 + 57 * 128  # fp8 index-K with fp8 attention GEMMs on SM100
    assert fp8.details["attention_backend"] == "trtllm_mha"


def test_step_3_7_is_sized_as_sglang_serves_it(tmp_path):
    import json

    flash = json.loads((MODELS / "stepfun-ai--Step-3.7-Flash.json").read_text())
    wrapped = {"architectures": ["Step3p7ForConditionalGeneration"], "model_type": "step3p7",
               "text_config": {**flash, "architectures": ["Step3p5ForCausalLM"]}}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(wrapped))
    est = estimate_role(role(path, gpu="H200", tp_size=8), offline=True)
    assert est.details["architecture_kind"] == "hybrid_swa"
    assert (est.details["kv_cell_parts"]["full_layers"], est.details["kv_cell_parts"]["swa_layers"]) == (12, 33)
