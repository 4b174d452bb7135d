"""Every real model config (tests/datapaths.py: MODELS) either gives a number or a clear not-understood error."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from kvcheck.engines.sglang.sizing import estimate_role
from kvcheck.errors import EstimateError
from tests.datapaths import MODELS_ABSENT

from .helpers import MODELS, model_config, role

# Checkpoints whose architecture SGLang 0.5.23 itself does not serve (no registry class, no auto_map):
# the only configs that stay unsized, each with the engine's reason.
NOT_SERVED = {
    "MiniMaxAI--MiniMax-M3": "MiniMaxM3ForCausalLM",
    "stepfun-ai--Step-3.7-Flash": "Step3p7FlashForCausalLM",
    "stepfun-ai--Step-3.7-Flash-FP8": "Step3p7FlashForCausalLM",
}
NOT_UNDERSTOOD: dict[str, str] = {}  # every architecture SGLang 0.5.23 serves is sized
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
    "deepseek-ai--DeepSeek-V4-Flash": "dsv4",
    "deepseek-ai--DeepSeek-V4-Pro": "dsv4",
    "nvidia--DeepSeek-V4-Pro-NVFP4": "dsv4",
    "sgl-project--DeepSeek-V4-Flash-FP8": "dsv4",
    "moonshotai--Kimi-K3": "hybrid_linear",
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
    if est.details["architecture_kind"] in ("hybrid_swa", "dsv4") and est.pool_tokens:
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

    from .helpers import model_config

    config = json.loads(model_config("nvidia--Llama-3_3-Nemotron-Super-49B-v1").read_text())
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

    from .helpers import model_config

    flash = json.loads(model_config("stepfun-ai--Step-3.7-Flash").read_text())
    wrapped = {"architectures": ["Step3p7ForConditionalGeneration"], "model_type": "step3p7",
               "text_config": {**flash, "architectures": ["Step3p5ForCausalLM"]}}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(wrapped))
    est = estimate_role(role(path, gpu="H200", tp_size=8), offline=True)
    assert est.details["architecture_kind"] == "hybrid_swa"
    assert (est.details["kv_cell_parts"]["full_layers"], est.details["kv_cell_parts"]["swa_layers"]) == (12, 33)


def test_deepseek_v4_pools_follow_dsv4_pool_configurator():
    est = estimate_role(role("deepseek-ai--DeepSeek-V4-Flash", gpu="B200", tp_size=8), offline=True)
    parts = est.details["kv_cell_parts"]
    # 43 layers: 2 SWA-only, 21 of compress ratio 4, 20 of ratio 128 (compress_ratios[:43])
    assert parts["compressed_layers_by_ratio"] == {4: 21, 128: 20}
    # V4 layout rows: 584 B padded per 256-token page to 576 B units -> 585 B/token (SWA), 585 (c4), 864 (c128)
    swa = 585 * 43 + 8 / 256 * (2 * 2 * 512 * 4 + 2 * 2 * 128 * 4) * 21
    assert parts["swa_bytes_per_token"] == swa == 31875.0
    compressed = 21 * (585 / 4 + 132 / 4) + 20 * (864 / 128)
    assert est.kv_bytes_per_token == pytest.approx(0.1 * swa + compressed)
    # c128 compress state for 257 request slots x 128-row rings (padded to 128 rows), fp32, per c128 layer
    assert parts["c128_state_fixed_bytes"] == 33152 * 2 * 512 * 4 * 20
    assert (est.details["page_size"], est.details["kv_dtype"], est.details["attention_backend"]) == (256, "fp8_e4m3", "dsv4")
    assert est.details["max_running_requests"] == 256
    assert est.details["swa_pool_tokens"] == est.pool_tokens // 10 // 256 * 256
    budget = est.details["budget_gib"] * 2**30
    assert est.pool_tokens == pytest.approx((budget - parts["fixed_bytes"]) / est.kv_bytes_per_token, abs=256 + 2000)


def test_deepseek_v4_mtp_inflates_the_pools_and_counts_the_draft_layer():
    plain = estimate_role(role("deepseek-ai--DeepSeek-V4-Flash", gpu="B200", tp_size=4), offline=True)
    mtp = estimate_role(role("deepseek-ai--DeepSeek-V4-Flash", gpu="B200", tp_size=4, speculative_algorithm="EAGLE",
                             speculative_num_draft_tokens=4, speculative_eagle_topk=1, speculative_num_steps=3),
                        offline=True)
    # speculative rings: c4 16 rows instead of 8 (get_compress_state_ring_size), then x (43 + 1) / 43
    swa = 585 * 43 + 16 / 256 * (2 * 2 * 512 * 4 + 2 * 2 * 128 * 4) * 21
    compressed = 21 * (585 / 4 + 132 / 4) + 20 * (864 / 128)
    assert plain.kv_bytes_per_token == pytest.approx(0.1 * (585 * 43 + 8 / 256 * 10240 * 21) + compressed)
    assert mtp.kv_bytes_per_token == pytest.approx((0.1 * swa + compressed) * 44 / 43)
    assert mtp.details["draft_weights_gib_per_gpu"] > 0.5
    assert mtp.pool_tokens < plain.pool_tokens


def test_deepseek_v4_refuses_drafts_sglang_refuses():
    # the V4 hook's assertion: SGLang's refusal (exit 2), not a role kvcheck cannot estimate (was KV305, exit 3)
    from kvcheck.engines.sglang.sizing.refusals import EngineRefusal as Refused

    with pytest.raises(Refused, match="--speculative-algorithm NGRAM: SGLang asserts 'Only EAGLE and DSPARK "
                       "speculative algorithms are supported for DeepseekV4ForCausalLM'"):
        estimate_role(role("deepseek-ai--DeepSeek-V4-Flash", gpu="B200", tp_size=4, speculative_algorithm="NGRAM"),
                      offline=True)


def test_every_config_in_the_data_folder_is_sized_unless_sglang_does_not_serve_it():
    sized, refused = [], []
    for name in _configs():
        try:
            estimate_role(role(name, gpu="B300", tp_size=8), offline=True)
            sized.append(name)
        except EstimateError as exc:
            refused.append(name)
            assert "is not served by SGLang 0.5.23" in exc.message, (name, exc.message)
    assert sorted(refused) == sorted(NOT_SERVED)
    assert len(sized) == len(_configs()) - 3


def test_kimi_k3_prices_kda_state_and_mla_full_layers():
    est = estimate_role(role("moonshotai--Kimi-K3", gpu="B300", tp_size=8), offline=True)
    # 24 full-attention layers keep a 576-element bf16 MLA latent; 69 KDA layers keep recurrent state
    assert est.details["kv_cell_parts"] == {"latent_bytes_per_layer": 1152, "layers": 24}
    conv = (96 * 128 * 3 // 8) * 3 * 2  # q, k, v channels over TP8 x (kernel 4 - 1) rows, bf16
    ssm = 96 // 8 * 128 * 128 * 4  # heads over TP8 x head_dim x head_dim, fp32
    assert est.details["mamba_state_bytes_per_request"] == (conv + ssm) * 69
    assert est.pool_tokens > 0


def _edited(tmp_path, config: dict, gpu: str):
    """The estimate (or its EstimateError) for an edited copy of a real config, at TP8 on `gpu`."""
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    try:
        return estimate_role(role(path, gpu=gpu, tp_size=8), offline=True).details["mem_fraction_static"]
    except EstimateError as exc:
        return exc.message


def test_kimi_k3_vision_factor_reads_sglangs_vision_config_class(tmp_path):
    """SGLang loads Kimi-K3's vision config as KimiK3VisionConfig (configs/kimi_k3.py), whose
    num_hidden_layers/hidden_size come from vt_num_hidden_layers/vt_hidden_size: a 27 x 1024 ViT scales the
    default fraction by 0.95 x 0.9875. On B300 TP8: round((275040 - 27136) / 275040, 3) = 0.901 x 0.938125,
    the 0.845250625 SGLang's own resolution prints (tests/estimate/oracle_defaults_0.5.23.json)."""
    est = estimate_role(role("moonshotai--Kimi-K3", gpu="B300", tp_size=8), offline=True)
    assert est.details["mem_fraction_static"] == round(0.901 * 0.95 * 0.9875, 4) == 0.8453
    config = json.loads(model_config("moonshotai--Kimi-K3").read_text())
    config["vision_config"]["vt_num_hidden_layers"] = 36  # 1.5 x ViT-L: factor 0.95 x (1 - 0.1 x 0.5)
    assert _edited(tmp_path, config, "B300") == round(0.901 * 0.95 * 0.95, 4) == 0.8132
    config["vision_config"]["vt_hidden_size"] = None
    assert _edited(tmp_path, config, "B300") == (
        "model config: vision_config.vt_hidden_size is null; SGLang's kimi_k3 vision config would carry None "
        "into its multimodal memory factor and fail"
    )


def test_kimi_k25_vision_factor_and_prefill_graph_as_sglang_resolves_them(tmp_path):
    """SGLang loads Kimi-K2.5's vision config as KimiK25VisionConfig (configs/kimi_k25.py): it reads the plain
    num_hidden_layers/hidden_size, defaulting to 27 x 1152, and ignores the checkpoint's vt_* keys, so the
    factor is 0.95 x (1 - 0.1 x (27 x 1152^2 / (24 x 1024^2) - 1)) = 0.909736328125. KimiK25ForConditionalGeneration
    is on the multimodal breakable-graph allow-list (0.5.18 on), so the MLA prefill graph's 1.5 GiB stays in the
    reserve: on B200 TP8 round((183359 - 28672) / 183359, 3) = 0.844, x 0.909736 = 0.76782, as SGLang prints."""
    factor = 0.95 * (1 - 0.1 * (27 * 1152**2 / (24 * 1024**2) - 1))
    est = estimate_role(role("moonshotai--Kimi-K2.5", gpu="B200", tp_size=8), offline=True)
    assert est.details["mem_fraction_static"] == round(0.844 * factor, 4) == 0.7678
    config = json.loads(model_config("moonshotai--Kimi-K2.5").read_text())
    config["vision_config"]["vt_num_hidden_layers"] = 36  # SGLang's class ignores it
    assert _edited(tmp_path, config, "B200") == 0.7678
    config["vision_config"]["num_hidden_layers"] = 36  # the key it reads: 36 x 1152
    factor36 = 0.95 * (1 - 0.1 * (36 * 1152**2 / (24 * 1024**2) - 1))
    assert _edited(tmp_path, config, "B200") == round(0.844 * factor36, 4) == 0.7298
    config["vision_config"]["hidden_size"] = None
    assert _edited(tmp_path, config, "B200") == (
        "model config: vision_config.hidden_size is null; SGLang's kimi_k25 vision config would carry None "
        "into its multimodal memory factor and fail"
    )
    # 0.5.17 did not list Kimi-K2.5: the multimodal rule turns the prefill graph off, no 1.5 GiB reserve
    older = replace(role("moonshotai--Kimi-K2.5", gpu="B200", tp_size=8), engine_version="0.5.17")
    assert estimate_role(older, offline=True).details["mem_fraction_static"] == round(0.852 * factor, 4) == 0.7751
