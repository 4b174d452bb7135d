"""Every real model config (tests/datapaths.py: MODELS) either gives a number or a clear not-understood error."""

from __future__ import annotations

import pytest

from kvcheck.engines.sglang.sizing import estimate_role
from kvcheck.errors import EstimateError
from tests.datapaths import MODELS_ABSENT

from .helpers import MODELS, role

NOT_UNDERSTOOD = {
    "MiniMaxAI--MiniMax-M3": "MiniMaxM3ForCausalLM",
    "nvidia--MiniMax-M3-NVFP4": "MiniMaxM3SparseForConditionalGeneration",
    "deepseek-ai--DeepSeek-V4-Flash": "DeepseekV4ForCausalLM",
    "deepseek-ai--DeepSeek-V4-Pro": "DeepseekV4ForCausalLM",
    "nvidia--DeepSeek-V4-Flash-NVFP4": "DeepseekV4ForCausalLM",
    "nvidia--DeepSeek-V4-Pro-NVFP4": "DeepseekV4ForCausalLM",
    "sgl-project--DeepSeek-V4-Flash-FP8": "DeepseekV4ForCausalLM",
    "sgl-project--DeepSeek-V4-Pro-FP8": "DeepseekV4ForCausalLM",
    "moonshotai--Kimi-K3": "KimiK3ForConditionalGeneration",  # KDA linear attention
    "nvidia--Llama-3_3-Nemotron-Super-49B-v1": "DeciLMForCausalLM",  # variable per-layer blocks
    "stepfun-ai--Step-3.7-Flash": "Step3p7FlashForCausalLM",  # not an SGLang 0.5.23 architecture
    "stepfun-ai--Step-3.7-Flash-FP8": "Step3p7FlashForCausalLM",
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
}


def _configs() -> list:
    if not MODELS.is_dir():
        return [pytest.param("absent", marks=pytest.mark.skip(reason=MODELS_ABSENT))]
    return sorted(p.stem for p in MODELS.glob("*.json") if not p.name.endswith(".hf_quant_config.json"))


@pytest.mark.parametrize("name", _configs())
@pytest.mark.parametrize("gpu", ["H200", "B200"])
def test_each_real_config_gives_a_pool_or_says_it_is_not_understood(name, gpu):
    target = role(name, gpu=gpu, tp_size=8)
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
