"""The estimate model against the worked examples of docs/sglang-internals.md (Pool sizing, Defaults)."""

from __future__ import annotations

import json

import pytest

from kvcheck.engines.sglang.sizing import estimate_role
from kvcheck.model import EstimateInputs

from .helpers import role

H100_MIB = 81559


def test_llama31_8b_h100_worked_example_gives_414428_tokens():
    # Estimating without a GPU: pre = 79.18 GiB free at the baseline, after = 64.05 GiB, f = 0.830 (default), cell 131,072 B
    inputs = EstimateInputs(pre_baseline_mib=H100_MIB - 79.18 * 1024, weights_gib_per_gpu=79.18 - 64.05)
    est = estimate_role(role("meta-llama--Meta-Llama-3.1-8B", estimate=inputs))
    assert est.details["mem_fraction_static"] == 0.83
    assert est.kv_bytes_per_token == 131072
    assert est.pool_tokens == 414428
    assert est.context_len == 131072
    assert est.max_input_tokens == 131072 - 1 - 5
    assert est.max_running_requests == 2048
    # the user gave both uncertain inputs: the range collapses onto the figure
    assert est.pool_range == (414428, 414428)


def test_llama31_70b_tp8_cell_replicates_one_kv_head_per_rank():
    est = estimate_role(role("meta-llama--Meta-Llama-3.1-70B", tp_size=8))
    assert est.kv_bytes_per_token == 1 * 256 * 80 * 2 == 40960
    assert est.details["kv_cell_parts"]["kv_heads_per_rank"] == 1


def test_kv_heads_replicate_when_tp_exceeds_them():
    est = estimate_role(role("meta-llama--Meta-Llama-3.1-405B", tp_size=16, gpu="H200"))
    assert est.details["kv_cell_parts"]["kv_heads_per_rank"] == 1  # 8 heads at TP16 -> 1, not 0.5


@pytest.mark.parametrize(
    ("kv_dtype", "cell"),
    [("bf16", 70272), ("fp8_e4m3", 35136)],
)
def test_deepseek_v3_mla_cell(kv_dtype, cell):
    est = estimate_role(role("deepseek-ai--DeepSeek-V3", gpu="H200", tp_size=8, kv_cache_dtype=kv_dtype))
    assert est.details["architecture_kind"] == "mla"
    assert est.kv_bytes_per_token == cell


def test_deepseek_v3_mtp_draft_inflates_the_cell_and_counts_draft_weights():
    plain = estimate_role(role("deepseek-ai--DeepSeek-V3", gpu="H200", tp_size=8))
    spec = estimate_role(
        role("deepseek-ai--DeepSeek-V3", gpu="H200", tp_size=8, speculative_algorithm="EAGLE",
             speculative_num_draft_tokens=4)
    )
    assert spec.kv_bytes_per_token == 70272 + 70272 // 61 == 71424
    assert spec.details["draft_weights_gib_per_gpu"] > 0.5  # one MoE layer split 8 ways, fp8
    assert spec.pool_tokens < plain.pool_tokens
    assert spec.max_running_requests == 48


def test_deepseek_v32_dsa_fp8_scaled_layout_on_hopper():
    est = estimate_role(role("deepseek-ai--DeepSeek-V3.2", gpu="H200", tp_size=8, kv_cache_dtype="fp8_e4m3"))
    assert est.details["architecture_kind"] == "dsa"
    assert est.kv_bytes_per_token == 656 * 61 + 132 * 61 == 48068
    assert est.details["page_size"] == 64


def test_deepseek_v32_dsa_defaults_bf16_on_hopper_and_fp8_raw_rows_on_blackwell():
    hopper = estimate_role(role("deepseek-ai--DeepSeek-V3.2", gpu="H200", tp_size=8))
    assert hopper.details["kv_dtype"] == "bfloat16"
    assert hopper.kv_bytes_per_token == 1152 * 61 + 132 * 61 == 78324
    blackwell = estimate_role(role("deepseek-ai--DeepSeek-V3.2", gpu="B200", tp_size=8))
    assert blackwell.details["kv_dtype"] == "fp8_e4m3"
    # default DSA backend on SM100 with fp8 is trtllm, which keeps raw 576-byte rows
    assert blackwell.kv_bytes_per_token == 576 * 61 + 132 * 61 == 43188


def test_glm52_shared_indexer_layers_carry_no_index_rows():
    est = estimate_role(role("zai-org--GLM-5.2", gpu="H200", tp_size=8, kv_cache_dtype="fp8_e4m3"))
    parts = est.details["kv_cell_parts"]
    assert parts["layers"] == 78
    assert 0 < parts["indexer_layers"] < 78
    assert est.kv_bytes_per_token == 656 * 78 + 132 * parts["indexer_layers"]


def test_qwen3_next_tp4_full_attention_cell_is_12288(tmp_path):
    config = {
        "architectures": ["Qwen3NextForCausalLM"], "model_type": "qwen3_next", "num_hidden_layers": 48,
        "hidden_size": 2048, "num_attention_heads": 16, "num_key_value_heads": 2, "head_dim": 256,
        "full_attention_interval": 4, "linear_num_key_heads": 16, "linear_num_value_heads": 32,
        "linear_key_head_dim": 128, "linear_value_head_dim": 128, "linear_conv_kernel_dim": 4,
        "num_experts": 512, "moe_intermediate_size": 512, "shared_expert_intermediate_size": 512,
        "intermediate_size": 5120, "vocab_size": 151936, "max_position_embeddings": 262144,
        "torch_dtype": "bfloat16",
    }
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    est = estimate_role(role(path, tp_size=4))
    assert est.details["architecture_kind"] == "hybrid_linear"
    assert est.kv_bytes_per_token == 1 * 512 * 12 * 2 == 12288
    assert est.details["mamba_slots"] > 0


@pytest.mark.parametrize(
    ("model", "gpu", "args", "fraction"),
    [
        ("meta-llama--Meta-Llama-3.1-8B", "H100", {}, 0.830),
        ("deepseek-ai--DeepSeek-V3", "H100", {}, 0.816),
        ("meta-llama--Meta-Llama-3.1-8B", "H100", {"tp_size": 8}, 0.812),
        ("deepseek-ai--DeepSeek-V3", "H100", {"tp_size": 8}, 0.799),
        ("meta-llama--Meta-Llama-3.1-8B", "H100", {"disaggregation_mode": "prefill"}, 0.836),
        ("meta-llama--Meta-Llama-3.1-8B", "H100", {"disaggregation_mode": "decode"}, 0.874),
        ("meta-llama--Meta-Llama-3.1-8B", "A100-80GB", {}, 0.830),
        ("meta-llama--Meta-Llama-3.1-8B", "H200", {}, 0.903),
        ("deepseek-ai--DeepSeek-V3", "H200", {}, 0.896),
        ("meta-llama--Meta-Llama-3.1-8B", "H200", {"tp_size": 8}, 0.893),
        ("meta-llama--Meta-Llama-3.1-8B", "H200", {"disaggregation_mode": "decode"}, 0.929),
        ("meta-llama--Meta-Llama-3.1-8B", "B200", {}, 0.854),
        ("deepseek-ai--DeepSeek-V3", "B200", {}, 0.849),
        ("meta-llama--Meta-Llama-3.1-8B", "B200", {"disaggregation_mode": "decode"}, 0.944),
    ],
)
def test_default_mem_fraction_static_matches_sglang(model, gpu, args, fraction):
    est = estimate_role(role(model, gpu=gpu, **args))
    assert est.details["mem_fraction_static_defaulted"] is True
    assert est.details["mem_fraction_static"] == fraction


def test_explicit_mem_fraction_and_max_total_tokens():
    est = estimate_role(role("meta-llama--Meta-Llama-3.1-8B", mem_fraction_static=0.9, max_total_tokens=100000))
    assert est.details["mem_fraction_static"] == 0.9
    assert est.details["mem_fraction_static_defaulted"] is False
    assert est.pool_tokens == 100000


def test_overrides_replace_args_for_planner_sweeps():
    base = role("meta-llama--Meta-Llama-3.1-8B", mem_fraction_static=0.8)
    low = estimate_role(base)
    high = estimate_role(base, overrides={"mem_fraction_static": 0.9})
    fp8 = estimate_role(base, overrides={"kv_cache_dtype": "fp8_e4m3"})
    assert high.pool_tokens > low.pool_tokens
    assert fp8.kv_bytes_per_token == 65536
    assert abs(fp8.pool_tokens - 2 * low.pool_tokens) <= 2


def test_context_length_above_derived_is_refused_like_sglang():
    # SGLang's refusal (exit 2), not a role kvcheck cannot estimate (KV305, exit 3, before)
    from kvcheck.engines.sglang.sizing.refusals import EngineRefusal

    with pytest.raises(EngineRefusal, match="greater than the model's derived context_len 131072"):
        estimate_role(role("meta-llama--Meta-Llama-3.1-8B", context_length=200000))
    allowed = estimate_role(
        role("meta-llama--Meta-Llama-3.1-8B", context_length=200000,
             env={"SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN": "1"})
    )
    assert allowed.context_len == 200000


def test_rope_scaling_factor_multiplies_context_unless_original_is_given():
    # DeepSeek-V3: yarn with original_max_position_embeddings -> factor ignored
    assert estimate_role(role("deepseek-ai--DeepSeek-V3", gpu="H200", tp_size=8)).context_len == 163840


def test_page_size_follows_the_default_backend():
    b200 = estimate_role(role("meta-llama--Meta-Llama-3.1-8B", gpu="B200"))
    assert b200.details["attention_backend"] == "trtllm_mha"
    assert b200.details["page_size"] == 64
    assert b200.pool_tokens % 64 == 0
    mla = estimate_role(role("deepseek-ai--DeepSeek-V3", gpu="B200", tp_size=8))
    assert mla.details["attention_backend"] == "trtllm_mla"
    assert mla.details["page_size"] == 64


def test_weights_too_large_predict_a_failed_start_as_zero_tokens():
    est = estimate_role(role("meta-llama--Meta-Llama-3.1-70B", gpu="H100"))  # 140 GB on one 80 GB GPU
    assert est.pool_tokens == 0
    assert any("refuse to start" in a for a in est.assumptions)


def test_pp_takes_the_smallest_stage():
    est = estimate_role(role("meta-llama--Meta-Llama-3.1-70B", gpu="H100", tp_size=4, pp_size=2))
    assert est.details["parallel"]["pp"] == 2
    assert est.details["kv_cell_parts"]["layers"] == 40
