"""The newest non-DeepSeek families against real logs they were not fit to (issue 24), each priced as the
release that printed it: within the per-family figures docs/estimate.md publishes, and the logged pool
inside the estimate's range."""

from __future__ import annotations

from dataclasses import replace

import pytest

from kvcheck.engines.sglang.sizing import default_profiles, estimate_role
from kvcheck.model import EstimateInputs, RoleTarget
from tests.datapaths import MODELS, MODELS_ABSENT

from . import calibration_cases as cc
from . import newest_cases as nc

pytestmark = pytest.mark.skipif(not cc.available(), reason=MODELS_ABSENT)

# docs/estimate.md, "Calibration: the newest families": every case's pool error bound, in percent
BOUND_PCT = {
    "sglang-qwen38-27b-fp8-H100-tp1-0.5.18": 1.5,
    "sglang-qwen38-27b-fp8-mi355x-tp1-rocm0517": 1.0,
    "sglang-qwen38-27b-fp8-mi355x-tp2-rocm0517": 1.0,
    "sglang-qwen35-9b-2x4090-tp2": 1.0,
    "sglang-glm5-fp8-mi35x-tp8-fp8kv": 1.0,
    "sglang-glm5-fp8-mi35x-tp8-fp8kv-rocm059": 1.0,
    # stated figures (no avail-mem lines): the cell matches to 0.01 %; the RTX PRO 6000's own TP8 reading (1,549 MiB
    # before the weights, the hydralisk smoke) in place of other PCIe cards' 1,200 takes it from +2.15 to +0.94 %
    "sglang-glm52-nvfp4-8xRTXPRO6000-tp8-fp8kv-inferencex2335": 1.0,
    # stated figures of two development builds on 4 GB300s (sglang PR #30531): cells exact; the budget pays for the
    # bf16 NextN draft layer and the draft's own embedding and lm_head, on the GB300's 284,208 MiB (-0.11, -0.30 %)
    "sglang-glm52-nvfp4-4xGB300-tp4-eagle-pr30531": 1.0,
    "sglang-glm52-nvfp4-4xGB300-tp4-eagle-pr30531-branch": 1.0,
    # MiniMax-M3 MXFP8 on B200 (BBuf/KDA-Pilot's server logs): weights from the logs (no config for the MXFP8
    # checkpoint), so the baseline, the fraction and the 45,312 B sparse cell are what is checked (-0.19, +0.08 %)
    "sglang-minimax-m3-mxfp8-8xB200-tp8-mfs065-devminimaxm3": 0.5,
    "sglang-minimax-m3-mxfp8-4xB200-tp4-pd-prefill-autofrac-devcu13minimaxm3": 0.5,
    # a development branch's stated sweep (0.93 point), with its aiter environment: cell exact, weights 0.63 GiB
    # light (the modules SGLang builds, aiter's padded expert scales included: docs/estimate.md, Kimi-K3 weights)
    "sglang-kimi-k3-8xMI355X-tp8-mfs-sweep-k3branch-0515post1dev": 1.0,
    # a 0.5.16 server on 2 x 8 B200s (kernelore/kimi-k3-gcp-enterprise-serving), its own max_total_num_tokens; no
    # memory lines: over-estimated as the two cases with logged weights are, whose weights are light
    "sglang-kimi-k3-16xB200-tp16-2node-0516-gke": 4.0,
    # a patched nightly on 8 B300s (whn09/kimi-k3-sglang): with its own weights and free memory the budget rule gives
    # +0.06 %; the estimate's weights (the modules SGLang builds and the freed router gates' pinned segments) are
    # 1.30 GiB light and its memory before them 0.71 GiB short, on a pool of 11 GiB out of 266 (each GiB is about
    # 9 % of its tokens): +6.42 %, inside the range
    "sglang-kimi-k3-8xB300-tp8-ep8-deepepv2-patched-nightly20260901": 6.5,
}


# Logged pools outside the estimate's range, and why (docs/estimate.md, the newest families).
OUTSIDE_RANGE: dict[str, str] = {}

# Families whose independent cases do not meet issue 24's bar (median <= 1 %, every case <= 3 %), and why: the
# figures stay published (docs/estimate.md) and this list shrinks as the estimate closes the gap
BAR_NOT_MET = {
    "Kimi-K3 (MLA + KDA)": (
        "three cases, all over-estimated: a development branch's stated sweep on 8 MI355X, +0.95 % at its 0.93 point "
        "(+0.9 to +1.7 % over the sweep), the stated weights 0.63 GiB above the estimate's; a 0.5.16 server on 16 "
        "B200s, +3.65 %; a patched nightly on 8 B300s, +6.42 %, its weights 1.30 GiB above the "
        "estimate's on a pool of 11 GiB; every logged pool inside the range. The estimate's weights are the modules "
        "SGLang builds and the allocator segments their merges leave pinned (docs/estimate.md, Kimi-K3 weights); "
        "what the loads hold beyond them is not found in the source"
    ),
}


@pytest.fixture(scope="module")
def outcomes():
    return {o.case.id: o for o in nc.run_all()}


def test_every_case_has_a_bound(outcomes):
    assert set(outcomes) == set(BOUND_PCT)


@pytest.mark.parametrize("case_id", sorted(BOUND_PCT))
def test_pool_within_bound_and_range(outcomes, case_id):
    o = outcomes[case_id]
    assert abs(o.error_pct) <= BOUND_PCT[case_id], (o.predicted_tokens, o.logged_tokens)
    assert o.in_range == (case_id not in OUTSIDE_RANGE), (o.pool_range, o.logged_tokens)


def test_family_medians_within_one_percent(outcomes):
    for family, (count, median, worst) in nc.by_family(list(outcomes.values())).items():
        meets = count >= 2 and median <= 1.0 and worst <= 3.0  # one case does not make a median
        # a family listed as missing the bar must really miss it (else the list is stale), every other must meet it
        assert meets == (family not in BAR_NOT_MET), (family, median, worst)
        # a family missing the bar is held to its cases' own bounds (test_pool_within_bound_and_range)
        assert worst <= 3.0 or family in BAR_NOT_MET, (family, worst)


def test_glm5_family_figures_as_published(outcomes):
    count, median, worst = nc.by_family(list(outcomes.values()))["GLM-5 (MLA + DSA)"]
    assert (count, round(median, 2), round(worst, 2)) == (5, 0.3, 0.94)


def _glm5(release: str) -> RoleTarget:
    return RoleTarget(
        name="glm5", context_length=1, min_headroom=1.0, engine_version=release,
        args={"tp_size": 8, "kv_cache_dtype": "fp8_e4m3", "mem_fraction_static": 0.908, "page_size": 1,
              "attention_backend": "triton", "dsa_prefill_backend": "flashmla_auto",
              "dsa_decode_backend": "flashmla_kv"},
        argv_args=(), gpu="MI355X", model_config=MODELS / "zai-org--GLM-5-FP8.json",
    )


def test_dsa_fp8_tokens_counted_on_the_unscaled_row_before_0_5_17():
    """0.5.16's pool_configurator budgets (kv_lora_rank + rope) x 1 B + the indexer's 132 B per layer
    (708 for GLM-5) and allocates the block-scaled 656 + 132; 0.5.17 budgets the allocated row."""
    old = estimate_role(_glm5("0.5.16"), offline=True)
    new = estimate_role(_glm5("0.5.17"), offline=True)
    assert old.kv_bytes_per_token == new.kv_bytes_per_token == 788 * 78
    assert old.details["budget_gib"] == new.details["budget_gib"]
    # the same budget buys 788/708 as many tokens, to the page
    assert abs(old.pool_tokens / new.pool_tokens - 788 / 708) < 1e-4
    assert any("708 B" in a or "576 B per layer" in a for a in old.details["assumptions"])
    assert not any("576 B per layer" in a for a in new.details["assumptions"])


def test_bf16_dsa_is_not_affected():
    """With bf16 KV the budgeted and the allocated row are the same 576 x 2 bytes."""
    args = dict(_glm5("0.5.16").args, kv_cache_dtype="bfloat16")
    old = estimate_role(RoleTarget(**{**_glm5("0.5.16").__dict__, "args": args}), offline=True)
    new = estimate_role(RoleTarget(**{**_glm5("0.5.17").__dict__, "args": args}), offline=True)
    assert old.pool_tokens == new.pool_tokens


def _glm5_default(release: str, gpu: str) -> RoleTarget:
    """GLM-5-FP8 with fp8 KV and no DSA backend or page flags: the release's own defaults."""
    return RoleTarget(
        name="glm5", context_length=1, min_headroom=1.0, engine_version=release,
        args={"tp_size": 8, "kv_cache_dtype": "fp8_e4m3", "mem_fraction_static": 0.9,
              "dsa_prefill_backend": "tilelang", "dsa_decode_backend": "tilelang"},
        argv_args=(), gpu=gpu, model_config=MODELS / "zai-org--GLM-5-FP8.json",
    )


@pytest.mark.parametrize(("release", "gpu", "page", "cell"), [
    # before 0.5.10 fp8 KV forced flashmla_auto / flashmla_kv over the user's tilelang: scaled rows
    ("0.5.9", "MI355X", 1, 788 * 78),
    ("0.5.9", "B200", 64, 788 * 78),
    # 0.5.10 keeps a user's backends on ROCm (tilelang: raw rows); SM100 fp8 is forced to trtllm (raw)
    ("0.5.10", "MI355X", 1, 708 * 78),
    ("0.5.10", "B200", 64, 708 * 78),
    # ROCm pages of 64 x index_kpool from 0.5.12 (the aiter preshuffle path)
    ("0.5.11", "MI355X", 1, 708 * 78),
    ("0.5.12", "MI355X", 64, 708 * 78),
])
def test_dsa_defaults_by_release(release, gpu, page, cell):
    est = estimate_role(_glm5_default(release, gpu), offline=True)
    assert (est.page_size, est.kv_bytes_per_token) == (page, cell)


def _glm52_nvfp4_eagle(release: str) -> RoleTarget:
    """sglang PR #30531's launch: GLM-5.2-NVFP4 on 4 GB300s, the built-in MTP layer as the EAGLE draft."""
    return RoleTarget(
        name="glm52", context_length=1, min_headroom=1.0, engine_version=release,
        args={"tp_size": 4, "quantization": "modelopt_fp4", "speculative_algorithm": "EAGLE",
              "speculative_num_steps": 5, "speculative_eagle_topk": 1, "speculative_num_draft_tokens": 6},
        argv_args=(), gpu="GB300", model_config=MODELS / "nvidia--GLM-5.2-NVFP4.json",
    )


def test_glm52_nvfp4_eagle_on_gb300_pays_for_the_bf16_draft_and_its_own_embedding_and_head():
    """0.5.17 (the PR's 'main' arm): the GB300 reads 284,208 MiB (nvidia-smi), which SGLang 0.5.17's own resolution
    turns into the default fraction 0.901; the NextN draft layer is bf16 (DeepseekModelNextN drops the modelopt_fp4
    config: 4.786 GiB a rank at TP4, not the 1.552 of NVFP4 experts), and the draft's own embedding and lm_head
    (2 x 154,880 x 6,144 x 2 B / 4 = 0.886 GiB) are still allocated when the target's pool is sized."""
    est = estimate_role(_glm52_nvfp4_eagle("0.5.17"), offline=True)
    d = est.details
    assert (d["gpu_memory_mib"], d["mem_fraction_static"], d["mem_fraction_reserved_mib"]) == (284208, 0.901, 28160.0)
    assert d["draft_weights_gib_per_gpu"] == 5.673
    # 3,279 MiB in use before the weights at TP4 (the B300's figure over its CUDA total, on the GB300's)
    assert (d["pre_baseline_used_mib"], d["budget_gib"]) == (3279.0, 133.981)
    assert (est.kv_bytes_per_token, est.pool_tokens) == (78 * 708 + 708, 2_572_032)  # logged 2,574,848
    # 0.5.13's draft takes the target's embedding and lm_head in its constructor: its own two are not counted
    old = estimate_role(_glm52_nvfp4_eagle("0.5.13"), offline=True)
    assert round(d["draft_weights_gib_per_gpu"] - old.details["draft_weights_gib_per_gpu"], 3) == 0.887


def test_nextn_draft_of_an_nvfp4_checkpoint_is_unquantized_from_0_4_8():
    """models/deepseek_nextn.py sets the NextN layer's quant_config to None for modelopt_fp4 from 0.4.8."""
    def draft(release: str) -> float:
        target = RoleTarget(
            name="v31", context_length=1, min_headroom=1.0, engine_version=release,
            args={"tp_size": 8, "quantization": "modelopt_fp4", "speculative_algorithm": "EAGLE",
                  "speculative_num_steps": 1, "speculative_eagle_topk": 1, "speculative_num_draft_tokens": 2},
            argv_args=(), gpu="B200", model_config=MODELS / "nvidia--DeepSeek-V3.1-NVFP4.json",
        )
        return estimate_role(target, offline=True).details["draft_weights_gib_per_gpu"]

    assert (draft("0.4.7"), draft("0.4.8")) == (0.99, 2.903)


def _glm52_bf16(release: str) -> RoleTarget:
    return RoleTarget(
        name="glm52", context_length=1, min_headroom=1.0, engine_version=release,
        args={"tp_size": 8, "kv_cache_dtype": "bfloat16", "mem_fraction_static": 0.85},
        argv_args=(), gpu="H200", model_config=MODELS / "zai-org--GLM-5.2-FP8.json",
    )


def test_glm52_shared_topk_layers_keep_an_indexer_row_before_0_5_18():
    """0.5.17's pool_configurator counts (and its pool allocates) the indexer's 132 B on all 78 layers;
    0.5.18 elides the index-K row of the 57 layers that reuse the previous layer's top-k (21 keep one)."""
    old = estimate_role(_glm52_bf16("0.5.17"), offline=True)
    new = estimate_role(_glm52_bf16("0.5.18"), offline=True)
    assert old.kv_bytes_per_token == (576 * 2 + 132) * 78
    assert new.kv_bytes_per_token == 576 * 2 * 78 + 132 * 21
    assert any("57 shared-top-k ones included" in a for a in old.details["assumptions"])
    assert not any("shared-top-k" in a for a in new.details["assumptions"])
    # GLM-5 has no shared layers: the same cell in both releases
    assert estimate_role(_glm5_default("0.5.17", "H200"), offline=True).kv_bytes_per_token == \
        estimate_role(_glm5_default("0.5.18", "H200"), offline=True).kv_bytes_per_token


def test_dsa_tokens_counted_without_the_indexer_in_0_5_3():
    """0.5.3's profile_max_num_token counts (kv_lora_rank + rope) x 1 B per layer, no indexer (576 for
    GLM-5); 0.5.3.post1 adds the indexer's 132 B (708)."""
    first = estimate_role(_glm5_default("0.5.3", "H200"), offline=True)
    post1 = estimate_role(_glm5_default("0.5.3.post1", "H200"), offline=True)
    assert first.kv_bytes_per_token == post1.kv_bytes_per_token == 788 * 78
    assert first.details["budget_gib"] == post1.details["budget_gib"]
    ratio = first.pool_tokens / post1.pool_tokens
    assert abs(ratio - 708 / 576) < 2e-4, ratio


def test_a_dsa_model_on_a_release_without_the_dsa_pool_is_not_estimated():
    from kvcheck.errors import EstimateError

    with pytest.raises(EstimateError, match=r"SGLang 0\.5\.2 has no DSA .* came in 0\.5\.3"):
        estimate_role(_glm5_default("0.5.2", "H200"), offline=True)


def _qwen35_9b(tp: int, release: str, **args) -> RoleTarget:
    return RoleTarget(
        name="q9", context_length=1, min_headroom=1.0, engine_version=release,
        args={"tp_size": tp, "mem_fraction_static": 0.8, **args}, argv_args=(), gpu="RTX-4090",
        model_config=nc._config("Qwen3.5-9B"),
    )


def test_the_qwen3_vl_vision_tower_is_sharded_over_tp_unless_the_dp_encoder_replicates_it():
    tp1 = estimate_role(_qwen35_9b(1, "0.5.10"), offline=True).details["weights_gib_per_gpu"]
    tp2 = estimate_role(_qwen35_9b(2, "0.5.10"), offline=True).details["weights_gib_per_gpu"]
    dp_enc = estimate_role(_qwen35_9b(2, "0.5.10", mm_enable_dp_encoder=True), offline=True)
    # sharded: TP2 is half of TP1 but for the small replicated parts (norms, GDN A_log/dt_bias, conv biases)
    assert tp1 / 2 <= tp2 < tp1 / 2 + 0.05
    vision_gib = 0.84
    assert abs(dp_enc.details["weights_gib_per_gpu"] - tp2 - vision_gib / 2) < 0.01


def test_the_multimodal_runtime_reserve_leaves_the_budget_from_0_5_18():
    """kv_cache_configurator.mm_runtime_reservation_gb (SGLANG_VLM_CACHE_SIZE_MB, 100 MiB) came in 0.5.18."""
    before = estimate_role(_qwen35_9b(2, "0.5.17"), offline=True).details
    after = estimate_role(_qwen35_9b(2, "0.5.18"), offline=True).details
    assert "mm_reserve_gib" not in before
    assert after["mm_reserve_gib"] == pytest.approx(100 / 1024, abs=1e-3)
    assert before["budget_gib"] - after["budget_gib"] == pytest.approx(100 / 1024, abs=2e-3)


def test_newest_cells_and_recurrent_states_match_the_logged_sizes():
    """Kimi-K3 (24 MLA layers x 576 fp8 + KDA state), Qwen3.5 (16 or 8 full-attention layers + GDN state),
    GLM-5.2 in 0.5.15.post1 (78 x (576 + 132)), MiniMax-M2.1 (62 x 8 heads x 128 x K+V x 2 B):
    the logged sizes over tokens (and over slots + the padding row) within the logs' rounding."""
    checks = {c.id: c for c in nc.cell_checks()}
    assert set(checks) == {dp_id for dp_id, *_ in nc.CELL_CHECKS}
    for c in checks.values():
        assert abs(c.predicted_cell - c.logged_cell) / c.logged_cell < 0.002, c
        if c.logged_state is not None:
            assert abs(c.predicted_state - c.logged_state) / c.logged_state < 0.002, c


def _glm52_fp8_rtx(fraction: float, context: int, max_total_tokens: int | None) -> RoleTarget:
    """The hydralisk load smoke (tests/data/logs/sglang-glm52-fp8-8xRTXPRO6000-tp8-maxtok4096-hydralisk.log):
    GLM-5.2-FP8 on 8 RTX PRO 6000s, the pinned v0.5.13.post1 image, TP8, custom all-reduce and radix cache off."""
    args = {"tp_size": 8, "context_length": context, "mem_fraction_static": fraction,
            "disable_custom_all_reduce": True, "disable_radix_cache": True}
    if max_total_tokens is not None:
        args["max_total_tokens"] = max_total_tokens
    return RoleTarget(
        name="glm52", context_length=context, min_headroom=1.0, engine_version="0.5.13.post1", args=args,
        argv_args=(), gpu="RTX-PRO-6000", model_config=MODELS / "zai-org--GLM-5.2-FP8.json",
    )


def test_glm52_fp8_weights_on_rtx_pro_6000():
    # the author's summary: 89.44 GB used per rank after the load (GiB, as SGLang prints it)
    est = estimate_role(_glm52_fp8_rtx(0.98, 4096, 4096), offline=True)
    predicted = est.details["weights_gib_per_gpu"] + est.details["load_overhead_gib"]
    assert round(predicted, 2) == 89.13
    assert abs(predicted - 89.44) / 89.44 < 0.005  # -0.35 %
    assert est.pool_tokens == 4096  # capped by --max-total-tokens


@pytest.mark.parametrize(("fraction", "context", "max_total_tokens"), [(0.80, 32768, None), (0.92, 8192, 8192)])
def test_glm52_fp8_starts_the_author_saw_refused_are_predicted_refused(fraction, context, max_total_tokens):
    # both attempts stopped with SGLang's "Not enough memory" at pool init; the 0.98 start booted (above)
    est = estimate_role(_glm52_fp8_rtx(fraction, context, max_total_tokens), offline=True)
    assert est.pool_tokens == 0
    assert [f.rule for f in est.findings] == ["KV120"]


@pytest.mark.parametrize(("fraction", "logged"), [(0.85, 838_048), (0.93, 1_292_032), (0.94, 1_348_780),
                                                 (0.95, 1_405_528)])
def test_kimi_k3_on_mi355x_sweep_lies_in_range(fraction, logged):
    """Kimi-K3 on 8 MI355X, a 0.5.15.post1 development branch (tests/data/logs/sglang-kimi-k3-8xMI355X-tp8-mfs-sweep-
    k3branch-0515post1dev.log, launched with SGLANG_USE_AITER and SGLANG_AITER_K3_OPT): every point of the author's
    fraction sweep inside the range, 0.9-1.7 % high (1.4-2.5 % before the experts' aiter layout and the K3
    modules as SGLang builds them)."""
    target = RoleTarget(
        name="k3", context_length=1, min_headroom=1.0, engine_version="0.5.15.post1",
        args={"tp_size": 8, "attention_backend": "triton", "dtype": "bfloat16", "mem_fraction_static": fraction,
              "cuda_graph_max_bs": 256, "disable_radix_cache": True},
        argv_args=(), gpu="MI355X", model_config=MODELS / "moonshotai--Kimi-K3.json", env=dict(nc.K3_MI355X_ENV),
    )
    est = estimate_role(target, offline=True)
    low, high = est.pool_range
    assert low <= logged <= high
    assert 0.008 < (est.pool_tokens - logged) / logged < 0.018
    assert est.kv_bytes_per_token == 24 * 576 * 2  # the stated 21.35 GB over 829,332 tokens: 27,642 B


@pytest.mark.parametrize(("extra", "logged"), [
    ({"chunked_prefill_size": 1024, "max_prefill_tokens": 1024}, 232_384),
    ({"chunked_prefill_size": 2048, "max_prefill_tokens": 2048, "disable_cuda_graph": True}, 232_384),
    ({"chunked_prefill_size": 2048, "max_prefill_tokens": 2048, "disable_cuda_graph": True,
      "max_running_requests": 32}, 364_416),
])
def test_kimi_k3_b300_rows_from_their_own_weights_and_free_memory(extra, logged):
    """whn09/kimi-k3-sglang's three 0.85 launches on 8 B300s, given the host's own load line (214.88 GiB of
    weights, 51.11 GiB free after them): the MLA cell, the KDA state per slot, the mamba/full split at ratio 0.86,
    the slots a max_running_requests of 32 keeps and the fraction of the free memory reproduce each pool to 0.1 %.
    What the estimate misses on this case (+6.42 %) is the weights and the memory before them, nothing else."""
    total = default_profiles().get("B300").memory_total_mib
    inputs = EstimateInputs(weights_gib_per_gpu=214.88, pre_baseline_mib=total - (214.88 + 51.11) * 1024)
    args = {"tp_size": 8, "ep_size": 8, "moe_a2a_backend": "deepep", "moe_runner_backend": "deep_gemm",
            "disable_radix_cache": True, "mem_fraction_static": 0.85, "mamba_full_memory_ratio": 0.86, **extra}
    target = RoleTarget(name="k3", context_length=1, min_headroom=1.0, engine_version="0.5.19", args=args,
                        argv_args=(), gpu="B300", model_config=MODELS / "moonshotai--Kimi-K3.json")
    est = estimate_role(replace(target, estimate=inputs), offline=True)
    assert abs(est.pool_tokens / logged - 1) < 0.001, (est.pool_tokens, logged)
