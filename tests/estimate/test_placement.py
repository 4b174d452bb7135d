"""Weights SGLang keeps off the full TP group (kvcheck/engines/sglang/sizing/placement.py).

Read in each release's wheel: an all-to-all MoE backend (DeepEP and the others) sets ep_size = tp_size and
makes the shared experts one unsharded MLP on every rank (models/deepseek_v2.py `_shared_expert_use_tp1`,
qwen2_moe.py, glm4_moe.py, ...); under DP attention the input embedding is the whole table on every rank
(`enable_tp=not is_dp_attention_enabled()`: DeepSeek-V2/V3 before 0.5.8, Qwen before 0.5.9, DeepSeek-V4 and
Qwen3.5 in every release) or sharded over the attention-TP group (`use_attn_tp_group`, later). Before this the
estimate divided both by tp: a DeepSeek-V3 with DeepEP on 8 H200s was priced 2.08 GiB a GPU light (598,093
tokens, now 566,280), and with DP attention as well (TP8 DP8) 3.59 GiB light (171,248 tokens a DP rank, now 116,358).

The DeepSeek-V4 log checked here (sglang#24650) is a V4-Flash-FP8 on 4 H200s with DeepEP and EAGLE, from the
`deepseek-v4-hopper` image of 2026-05-08 (before the 0.5.12 wheel of 2026-05-16); it prints the pool only.
"""

from __future__ import annotations

import json
import re
import textwrap
from dataclasses import replace
from pathlib import Path

import pytest

from kvcheck.engines.sglang.sizing import estimate_role
from kvcheck.engines.sglang.sizing.placement import A2A_EP_SPANNING, placement, resolved_ep
from kvcheck.engines.sglang.sizing.refusals import EngineRefusal
from kvcheck.errors import EstimateError

from .helpers import model_config, role

V3 = "deepseek-ai--DeepSeek-V3"
GIB = 2**30
FP8_BLOCK = 1 + 4 / (128 * 128)  # a block-quantized FP8 weight and its float32 scale per 128 x 128


def _est(config: str | Path, version: str = "0.5.23", gpu: str = "H200", env: dict[str, str] | None = None, **args):
    return estimate_role(replace(role(config, gpu=gpu, env=env, **args), engine_version=version), offline=True)


def _cfg(name: str) -> dict:
    return json.loads(model_config(name).read_text())


def _v3_shared_bytes() -> float:
    c = _cfg(V3)
    moe_layers = c["num_hidden_layers"] - c["first_k_dense_replace"]
    return moe_layers * 3 * c["hidden_size"] * c["moe_intermediate_size"] * c["n_shared_experts"] * FP8_BLOCK


def _v3_embedding_bytes() -> float:
    c = _cfg(V3)
    return 2 * c["vocab_size"] * c["hidden_size"]


# --- expert parallelism --------------------------------------------------------------------------------------


@pytest.mark.parametrize("backend", sorted(A2A_EP_SPANNING))
def test_an_all_to_all_backend_spans_the_tp_group(backend):
    assert resolved_ep({"moe_a2a_backend": backend, "ep_size": 2}, 8) == 8


def test_the_deprecated_flags_resolve_as_sglang_resolves_them():
    # server_args.py 0.4.10-0.5.x: --enable-deepep-moe sets moe_a2a_backend = "deepep", --enable-ep-moe ep_size = tp_size
    deepep = _est(V3, "0.4.10.post2", tp_size=8, enable_deepep_moe=True)
    ep_only = _est(V3, "0.4.10.post2", tp_size=8, enable_ep_moe=True)
    plain = _est(V3, "0.4.10.post2", tp_size=8)
    assert (deepep.ep_size, ep_only.ep_size, plain.ep_size) == (8, 8, 1)
    assert ep_only.details["weights_gib_per_gpu"] == plain.details["weights_gib_per_gpu"]  # EP alone moves no bytes
    assert (deepep.details["weights_gib_per_gpu"] - plain.details["weights_gib_per_gpu"]) * GIB == pytest.approx(
        _v3_shared_bytes() * (1 - 1 / 8), abs=0.002 * GIB)


def test_without_one_ep_size_is_as_given():
    assert resolved_ep({"ep_size": 2}, 8) == 2
    assert resolved_ep({"moe_a2a_backend": "none"}, 8) == 1


def test_deepep_reports_the_ep_size_sglang_sets():
    assert _est(V3, tp_size=8, moe_a2a_backend="deepep").ep_size == 8
    assert _est(V3, tp_size=8).ep_size == 1


# --- shared experts ------------------------------------------------------------------------------------------


def test_deepep_replicates_deepseek_v3s_shared_experts():
    sharded = _est(V3, tp_size=8)
    replicated = _est(V3, tp_size=8, moe_a2a_backend="deepep")
    added = (replicated.details["weights_gib_per_gpu"] - sharded.details["weights_gib_per_gpu"]) * GIB
    assert added == pytest.approx(_v3_shared_bytes() * (1 - 1 / 8), abs=0.002 * GIB)  # 2.08 GiB a GPU
    assert (sharded.pool_tokens, replicated.pool_tokens) == (640_674, 564_792)
    assert "shared experts replicated on every rank (moe-a2a-backend deepep" in " ".join(replicated.assumptions)


@pytest.mark.parametrize("backend", ["mooncake", "nixl", "mori", "flashinfer", "megamoe", "pplx", "deepep_v2"])
def test_every_backend_deepseek_v2_names_replicates_them(backend):
    shape = dict(tp=8, attn_tp=8, attn_dp=1, ep=8, dense_tp=8, has_shared_experts=True, nvfp4=False)
    where = placement("DeepseekV3ForCausalLM", {"moe_a2a_backend": backend}, {}, "0.5.23", **shape)
    assert where.shared_tp == 1


def test_the_tp1_variable_replicates_them_without_a_backend():
    on = _est(V3, tp_size=8, env={"SGLANG_SHARED_EXPERT_TP1": "1"})
    off = _est(V3, tp_size=8, env={"SGLANG_SHARED_EXPERT_TP1": "no"})  # EnvBool: "no" is off
    assert on.details["weights_gib_per_gpu"] - off.details["weights_gib_per_gpu"] == pytest.approx(
        _v3_shared_bytes() * (7 / 8) / GIB, abs=0.002)


def test_the_fp4_all_gather_path_replicates_them():
    # flashinfer_cutlass MoE, DP attention, a modelopt_fp4 checkpoint, ep_size == attention DP size
    shape = dict(tp=8, attn_tp=1, attn_dp=8, dense_tp=8, has_shared_experts=True)
    args = {"moe_runner_backend": "flashinfer_cutlass"}
    assert placement("DeepseekV3ForCausalLM", args, {}, "0.5.23", ep=8, nvfp4=True, **shape).shared_tp == 1
    assert placement("DeepseekV3ForCausalLM", args, {}, "0.5.23", ep=1, nvfp4=True, **shape).shared_tp == 8
    assert placement("DeepseekV3ForCausalLM", args, {}, "0.5.23", ep=8, nvfp4=False, **shape).shared_tp == 8


def test_llama4s_shared_expert_stays_sharded_under_deepep():
    scout = "meta-llama--Llama-4-Scout-17B-16E-Instruct"
    assert (_est(scout, tp_size=8, moe_a2a_backend="deepep").details["weights_gib_per_gpu"]
            == _est(scout, tp_size=8).details["weights_gib_per_gpu"])


def test_kimi_k3_keeps_them_sharded_when_told():
    k3 = "moonshotai--Kimi-K3"
    # plain TP with the same EP layout: the experts' zero w2 bias Mxfp4MoEMethod makes is num_local_experts x hidden
    plain = _est(k3, tp_size=8, ep_size=8).details["weights_gib_per_gpu"]
    told = _est(k3, tp_size=8, moe_a2a_backend="deepep", shared_experts_tp_size=8).details["weights_gib_per_gpu"]
    replicated = _est(k3, tp_size=8, moe_a2a_backend="deepep").details["weights_gib_per_gpu"]
    assert told == plain < replicated


K3_ARCH = "KimiK3ForConditionalGeneration"
_K3_SHAPE = dict(tp=8, ep=8, dense_tp=8, has_shared_experts=True, nvfp4=False)


@pytest.mark.parametrize(("version", "env", "args", "attn_tp", "attn_dp", "expected"), [
    # 0.5.18: SGLANG_K3_SHARED_EXPERTS_ATTN_TP; the attention-TP group under DP attention with more than one rank
    ("0.5.18", {"SGLANG_K3_SHARED_EXPERTS_ATTN_TP": "1"}, {}, 4, 2, 4),
    # ... and the MLP built with no TP arguments, on the full TP group, at one rank an attention-TP group
    ("0.5.18", {"SGLANG_K3_SHARED_EXPERTS_ATTN_TP": "1"}, {}, 1, 8, 8),
    ("0.5.17", {"SGLANG_K3_SHARED_EXPERTS_ATTN_TP": "1"}, {}, 4, 2, 1),  # not read before 0.5.18
    ("0.5.19", {"SGLANG_K3_SHARED_EXPERTS_ATTN_TP": "1"}, {}, 4, 2, 1),  # the flag replaced it
    ("0.5.19", {}, {"enable_shared_experts_attn_tp": True}, 4, 2, 4),
    ("0.5.19", {}, {"enable_shared_experts_attn_tp": True}, 1, 8, 8),
    # 0.5.21 on: the attention-TP size, 1 replicating them (0.5.20 not read: the heavier reading)
    ("0.5.20", {}, {"enable_shared_experts_attn_tp": True}, 1, 8, 1),
    ("0.5.23", {}, {"enable_shared_experts_attn_tp": True}, 1, 8, 1),
    ("0.5.23", {}, {"enable_shared_experts_attn_tp": True}, 4, 2, 4),
    ("0.5.23", {}, {"enable_shared_experts_attn_tp": True, "shared_experts_tp_size": 2}, 4, 2, 2),
])
def test_kimi_k3_attention_tp_shared_experts_by_release(version, env, args, attn_tp, attn_dp, expected):
    # models/kimi_k3.py KimiK3MoE in the 0.5.17, 0.5.18, 0.5.19, 0.5.21 and 0.5.23 wheels
    where = placement(K3_ARCH, {"moe_a2a_backend": "deepep", **args}, env, version,
                      attn_tp=attn_tp, attn_dp=attn_dp, **_K3_SHAPE)
    assert where.shared_tp == expected


def test_kimi_k3_attention_tp_shared_experts_price_what_0_5_19_built():
    k3 = "moonshotai--Kimi-K3"
    dp8 = dict(tp_size=8, dp_size=8, enable_dp_attention=True, moe_a2a_backend="deepep",
               enable_shared_experts_attn_tp=True)
    full_tp = _est(k3, "0.5.19", **dp8).details["weights_gib_per_gpu"]
    replicated = _est(k3, "0.5.21", **dp8).details["weights_gib_per_gpu"]
    c = _cfg(k3)["text_config"]
    moe_layers = sum(1 for i in range(c["num_hidden_layers"]) if i >= c.get("first_k_dense_replace", 0))
    shared = moe_layers * 3 * c["hidden_size"] * c["moe_intermediate_size"] * c["num_shared_experts"] * 2  # bf16
    assert (replicated - full_tp) * GIB == pytest.approx(shared * (1 - 1 / 8), rel=0.02)


@pytest.mark.parametrize(("args", "message"), [
    ({"moe_a2a_backend": "deepep", "shared_experts_tp_size": 3},
     "--shared-experts-tp-size 3 is not a positive divisor of the attention TP size 8"),
    ({"moe_a2a_backend": "deepep", "shared_experts_tp_size": 0},
     "--shared-experts-tp-size 0 is not a positive divisor of the attention TP size 8"),
    ({"shared_experts_tp_size": 8}, "requires an expert-parallel all-to-all backend"),
    ({"moe_a2a_backend": "flashinfer_megamoe", "shared_experts_tp_size": 8},
     "(deepep, megamoe, mooncake, ascend_fuseep, mori), not flashinfer_megamoe"),
])
def test_kimi_k3_shared_experts_tp_settings_sglang_refuses(args, message):
    with pytest.raises(EngineRefusal, match=re.escape(message)):
        _est("moonshotai--Kimi-K3", tp_size=8, **args)


def test_shared_experts_tp_size_is_refused_off_kimi_k3():
    with pytest.raises(EngineRefusal, match="only supported for Kimi-K3 .KimiK3ForConditionalGeneration., not "
                                            "DeepseekV3ForCausalLM"):
        _est(V3, tp_size=8, moe_a2a_backend="deepep", shared_experts_tp_size=8)


def test_kimi_k3_shared_width_not_divisible_by_its_tp_is_refused_from_0_5_21(tmp_path):
    cfg = _cfg("moonshotai--Kimi-K3")
    cfg["text_config"]["moe_intermediate_size"] = 3074  # 2 shared experts: 6148, not divisible by 8
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    args = dict(tp_size=8, moe_a2a_backend="deepep", enable_shared_experts_attn_tp=True)
    with pytest.raises(EngineRefusal, match="intermediate size 6148 is not divisible by their TP size 8"):
        _est(path, **args)


def test_moe_dense_tp_moves_only_the_dense_layers_not_the_shared_experts():
    # deepseek_v2.py: the shared experts are DeepseekV2MLP(parallel_group="tp"), the full TP group, while
    # --moe-dense-tp-size 1 replicates the first_k_dense_replace dense MLPs alone
    c = _cfg(V3)
    dense = c["first_k_dense_replace"] * 3 * c["hidden_size"] * c["intermediate_size"] * FP8_BLOCK
    moved = (_est(V3, tp_size=8, moe_dense_tp_size=1).details["weights_gib_per_gpu"]
             - _est(V3, tp_size=8).details["weights_gib_per_gpu"]) * GIB
    # less the allocator's rounding of the TP8 shards (gate_up 31.5 MiB, down 15.75 MiB: 0.75 MiB a layer) that
    # the whole matrices, multiples of 2 MiB, do not leave (sizing/allocator.py)
    shard_rounding = c["first_k_dense_replace"] * 0.75 * 2**20
    # 0.97 GiB, not 3.05 with the shared experts
    assert moved == pytest.approx(dense * (1 - 1 / 8) - shard_rounding, abs=0.002 * GIB)


def test_a_backend_qwen2_moe_does_not_name_leaves_them_sharded():
    shape = dict(tp=4, attn_tp=4, attn_dp=1, ep=4, dense_tp=4, has_shared_experts=True, nvfp4=False)
    assert placement("Qwen2MoeForCausalLM", {"moe_a2a_backend": "deepep"}, {}, "0.5.23", **shape).shared_tp == 1
    assert placement("Qwen2MoeForCausalLM", {"moe_a2a_backend": "mooncake"}, {}, "0.5.23", **shape).shared_tp == 4


@pytest.mark.parametrize(("arch", "backend", "first", "before"), [
    ("Qwen2MoeForCausalLM", "deepep", "0.5.3", "0.5.2"),
    ("Qwen3NextForCausalLM", "flashinfer", "0.5.13", "0.5.12"),
    ("Qwen3_5MoeForConditionalGeneration", "mori", "0.5.18", "0.5.17"),
    ("Qwen2MoeForCausalLM", "megamoe", "0.5.20", "0.5.19"),
    ("Qwen2MoeForCausalLM", "ascend_fuseep", "0.5.22", "0.5.21"),
    ("NemotronHForCausalLM", "deepep", "0.5.16", "0.5.15"),
    ("Step3p5ForCausalLM", "deepep", "0.5.22", "0.5.21"),
    ("MiniMaxM3SparseForCausalLM", "megamoe", "0.5.22", "0.5.21"),
    ("Glm4MoeForCausalLM", "flashinfer", "0.5.9", "0.5.8"),
    ("Glm4MoeForCausalLM", "mori", "0.5.10", "0.5.9"),
    ("KimiK3ForConditionalGeneration", "mooncake", "0.5.19", "0.5.18"),
])
def test_each_file_replicates_them_from_the_release_that_names_the_backend(arch, backend, first, before):
    # the lists grew per release (the model files' `_shared_expert_use_tp1` / `tp_size=1` conditions)
    shape = dict(tp=8, attn_tp=8, attn_dp=1, ep=8, dense_tp=8, has_shared_experts=True, nvfp4=False)
    args = {"moe_a2a_backend": backend}
    assert placement(arch, args, {}, first, **shape).shared_tp == 1
    assert placement(arch, args, {}, before, **shape).shared_tp == 8
    assert placement(arch, args, {}, None, **shape).shared_tp == 1  # no release stated: the newest rules


def test_the_tp1_variable_is_read_from_0_5_12():
    env = {"SGLANG_SHARED_EXPERT_TP1": "1"}
    assert _est(V3, "0.5.11", tp_size=8, env=env).pool_tokens == _est(V3, "0.5.11", tp_size=8).pool_tokens
    assert _est(V3, "0.5.12", tp_size=8, env=env).pool_tokens < _est(V3, "0.5.12", tp_size=8).pool_tokens


def test_an_architecture_not_read_is_refused_not_priced_as_sharded():
    shape = dict(tp=8, attn_tp=8, attn_dp=1, ep=8, dense_tp=8, nvfp4=False)
    with pytest.raises(EstimateError, match="BailingMoeV2ForCausalLM: where SGLang places the shared experts under "
                                            "--moe-a2a-backend deepep has not been read"):
        placement("BailingMoeV2ForCausalLM", {"moe_a2a_backend": "deepep"}, {}, "0.5.23", has_shared_experts=True,
                  **shape)
    # no shared experts, or no all-to-all backend: nothing to place
    placement("BailingMoeV2ForCausalLM", {"moe_a2a_backend": "deepep"}, {}, "0.5.23", has_shared_experts=False,
              **shape)
    placement("BailingMoeV2ForCausalLM", {}, {}, "0.5.23", has_shared_experts=True, **shape)


# --- the input embedding under DP attention ----------------------------------------------------------------


@pytest.mark.parametrize(("version", "embed_tp"), [("0.5.7", 1), ("0.5.8", 4), ("0.5.23", 4)])
def test_deepseek_v3s_embedding_by_release_at_partial_dp_attention(version, embed_tp):
    # TP8 with 2 attention-DP ranks: a 4-rank attention-TP group
    est = _est(V3, version, tp_size=8, dp_size=2, enable_dp_attention=True)
    note = ("input embedding replicated on every rank (DP attention)" if embed_tp == 1
            else "input embedding sharded over the 4-rank attention-TP group (DP attention)")
    assert note in est.assumptions
    shape = dict(tp=8, attn_tp=4, attn_dp=2, ep=1, dense_tp=8, has_shared_experts=True, nvfp4=False)
    assert placement("DeepseekV3ForCausalLM", {}, {}, version, **shape).embed_tp == embed_tp


def test_the_0_5_7_table_is_the_whole_embedding_heavier():
    old = _est(V3, "0.5.7", tp_size=8, dp_size=2, enable_dp_attention=True)
    new = _est(V3, "0.5.8", tp_size=8, dp_size=2, enable_dp_attention=True)
    assert (old.details["weights_gib_per_gpu"] - new.details["weights_gib_per_gpu"]) * GIB == pytest.approx(
        _v3_embedding_bytes() * (1 - 1 / 4), abs=0.002 * GIB)


def test_full_dp_attention_holds_the_whole_table_in_every_release():
    shape = dict(tp=8, attn_tp=1, attn_dp=8, ep=1, dense_tp=8, has_shared_experts=True, nvfp4=False)
    for version in ("0.5.5", "0.5.8", "0.5.23"):
        assert placement("DeepseekV3ForCausalLM", {}, {}, version, **shape).embed_tp == 1
    est = _est(V3, tp_size=8, dp_size=8, enable_dp_attention=True)
    assert "input embedding replicated on every rank (DP attention)" in est.assumptions


def test_the_replication_variable_from_0_5_13():
    shape = dict(tp=8, attn_tp=8, attn_dp=1, ep=1, dense_tp=8, has_shared_experts=True, nvfp4=False)
    env = {"SGLANG_ENABLE_EMBED_REPLICATION": "1"}
    assert placement("DeepseekV3ForCausalLM", {}, env, "0.5.13", **shape).embed_tp == 1
    assert placement("DeepseekV3ForCausalLM", {}, env, "0.5.12", **shape).embed_tp == 8  # no such variable yet
    assert placement("Qwen3MoeForCausalLM", {}, env, "0.5.23", **shape).embed_tp == 8  # qwen2_moe.py ignores it


@pytest.mark.parametrize(("arch", "version", "embed_tp"), [
    ("DeepseekV4ForCausalLM", "0.5.23", 1),  # deepseek_v4.py: enable_tp=not is_dp_attention_enabled()
    ("Qwen3_5MoeForConditionalGeneration", "0.5.23", 1),
    ("Qwen3MoeForCausalLM", "0.5.8", 1),
    ("Qwen3MoeForCausalLM", "0.5.9", 4),
    ("LlamaForCausalLM", "0.5.23", 8),  # llama.py: a plain VocabParallelEmbedding over the TP group
    ("NemotronHForCausalLM", "0.5.12", 8),
    ("NemotronHForCausalLM", "0.5.14", 4),
    ("SomeNewForCausalLM", "0.5.23", 1),  # not read: the whole table (the heavier layout)
    ("MiMoV2FlashForCausalLM", "0.5.8", 1),  # mimo_v2_flash.py replicates it until 0.5.8
    ("MiMoV2FlashForCausalLM", "0.5.9", 4),
    ("MiMoForCausalLM", "0.5.9", 4),  # mimo.py builds Qwen2Model
])
def test_the_embedding_of_each_file_read(arch, version, embed_tp):
    shape = dict(tp=8, attn_tp=4, attn_dp=2, ep=1, dense_tp=8, has_shared_experts=False, nvfp4=False)
    assert placement(arch, {}, {}, version, **shape).embed_tp == embed_tp


def test_gemma4s_embedding_is_whole_on_every_rank_without_dp_attention_too():
    # gemma4_causal.py: Gemma3TextScaledWordEmbedding is a plain nn.Embedding
    shape = dict(tp=8, attn_tp=8, attn_dp=1, ep=1, dense_tp=8, has_shared_experts=False, nvfp4=False)
    assert placement("Gemma4ForCausalLM", {}, {}, "0.5.23", **shape).embed_tp == 1
    assert placement("Qwen3ForCausalLM", {}, {}, "0.5.23", **shape).embed_tp == 8


def test_dp_size_one_is_no_dp_attention():
    # SGLang turns DP attention off at dp_size 1 (_handle_data_parallelism): nothing moves
    assert (_est(V3, tp_size=8, dp_size=1, enable_dp_attention=True).details["weights_gib_per_gpu"]
            == _est(V3, tp_size=8).details["weights_gib_per_gpu"])


def test_the_dp_lm_head_shards_over_the_attention_tp_group():
    shape = dict(tp=8, attn_tp=2, attn_dp=4, ep=1, dense_tp=8, has_shared_experts=False, nvfp4=False)
    assert placement("DeepseekV3ForCausalLM", {"enable_dp_lm_head": True}, {}, "0.5.23", **shape).lm_head_tp == 2
    assert placement("DeepseekV3ForCausalLM", {}, {}, "0.5.23", **shape).lm_head_tp == 8
    # qwen2.py's lm_head does not read the flag: the full TP group
    assert placement("Qwen2ForCausalLM", {"enable_dp_lm_head": True}, {}, "0.5.23", **shape).lm_head_tp == 8


# --- what SGLang overrides the layout to ----------------------------------------------------------------


def test_waterfill_runs_deepep_whatever_backend_is_given():
    # overrides.py _a2a_backend_overrides (0.5.16 on): --enable-waterfill with a backend other than deepep or
    # megamoe is deepep, so ep_size = tp_size and the shared experts are whole on every rank
    waterfill = _est(V3, tp_size=8, enable_waterfill=True)
    assert (waterfill.ep_size, waterfill.pool_tokens) == (8, 564_792)
    assert waterfill.pool_tokens == _est(V3, tp_size=8, moe_a2a_backend="deepep").pool_tokens
    assert _est(V3, tp_size=8, enable_waterfill=True, moe_a2a_backend="megamoe").details["weights_gib_per_gpu"] == (
        _est(V3, tp_size=8, moe_a2a_backend="megamoe").details["weights_gib_per_gpu"])
    # server_args.py _handle_a2a_moe (0.5.12-0.5.15): --enable-deepep-waterfill
    old = _est(V3, "0.5.13", tp_size=8, enable_deepep_waterfill=True)
    assert (old.ep_size, old.pool_tokens, _est(V3, "0.5.13", tp_size=8).pool_tokens) == (8, 631_945, 640_674)


@pytest.mark.parametrize(("version", "pool"), [("0.5.12", 631_945), ("0.5.17", 631_945), ("0.5.18", 640_674)])
def test_the_mega_moe_variable_is_the_megamoe_backend_in_0_5_12_to_0_5_17(version, pool):
    env = {"SGLANG_OPT_USE_DEEPGEMM_MEGA_MOE": "1"}
    assert _est(V3, version, tp_size=8, env=env).pool_tokens == pool
    megamoe = version != "0.5.18"
    assert _est(V3, version, tp_size=8, env=env).ep_size == (8 if megamoe else 1)
    assert pool == _est(V3, version, tp_size=8, **({"moe_a2a_backend": "megamoe"} if megamoe else {})).pool_tokens
    assert placement("DeepseekV3ForCausalLM", {}, env, version, tp=8, attn_tp=8, attn_dp=1, ep=8, dense_tp=8,
                     has_shared_experts=True, nvfp4=False).shared_tp == (1 if megamoe else 8)


def test_a_fused_shared_expert_is_an_expert_slot_under_plain_ep():
    # --enforce-shared-experts-fusion under --ep-size: one more expert on every EP rank at the MoE-TP width
    # (tp / ep): whole at ep == tp, half at ep 4 of tp 8
    plain = _est(V3, tp_size=8, ep_size=8)
    fused = _est(V3, tp_size=8, ep_size=8, enforce_shared_experts_fusion=True)
    half = _est(V3, tp_size=8, ep_size=4, enforce_shared_experts_fusion=True)
    assert (plain.pool_tokens, fused.pool_tokens, half.pool_tokens) == (640_674, 608_861, 627_040)
    assert (fused.details["weights_gib_per_gpu"] - plain.details["weights_gib_per_gpu"]) * GIB == pytest.approx(
        _v3_shared_bytes() * (1 - 1 / 8), abs=0.002 * GIB)
    assert "shared experts replicated on every rank (fused as an expert slot under --ep-size 8" in " ".join(
        fused.assumptions)
    # every class that takes deepseek_v2.py's gate fuses when told: DeepSeek-V3.2 too (2.08 GiB a GPU)
    v32 = "deepseek-ai--DeepSeek-V3.2"
    v32_fused = _est(v32, tp_size=8, ep_size=8, enforce_shared_experts_fusion=True).details["weights_gib_per_gpu"]
    assert (v32_fused - _est(v32, tp_size=8, ep_size=8).details["weights_gib_per_gpu"]) * GIB == pytest.approx(
        _v3_shared_bytes() * (1 - 1 / 8), abs=0.002 * GIB)
    # a runner that turns fusion off, --disable-shared-experts-fusion, and no EP keep them sharded
    for kw in ({"moe_runner_backend": "flashinfer_trtllm"}, {"disable_shared_experts_fusion": True}):
        assert _est(V3, tp_size=8, ep_size=8, enforce_shared_experts_fusion=True, **kw).pool_tokens == 640_674
    assert _est(V3, tp_size=8, enforce_shared_experts_fusion=True).pool_tokens == _est(V3, tp_size=8).pool_tokens


def test_rocm_fuses_deepseek_v3s_shared_expert_under_ep_by_default():
    # deepseek_v2.py shared_experts_fusion_disable_reason: under EP only HIP gfx942 and newer fuse it
    # (at 0.5.23, with the ROCm memory before the baseline of 0.5.10 and later: 6,844 MiB a GPU more than before,
    # and the weights with the caching allocator's rounding)
    assert _est(V3, gpu="MI300X", tp_size=8, ep_size=8).pool_tokens == 751_470
    assert _est(V3, gpu="MI300X", tp_size=8, ep_size=8, disable_shared_experts_fusion=True).pool_tokens == 783_284
    assert _est(V3, gpu="MI355X", tp_size=8, ep_size=8).pool_tokens == 2_016_872
    shape = dict(tp=8, attn_tp=8, attn_dp=1, ep=8, dense_tp=8, has_shared_experts=True, nvfp4=False)
    text = {"n_shared_experts": 1, "n_routed_experts": 256}
    assert placement("Glm4MoeForCausalLM", {}, {}, "0.5.23", gpu_arch="gfx942", text=text, **shape).shared_tp == 1
    assert placement("Glm4MoeForCausalLM", {}, {}, "0.5.23", gpu_arch="9.0", text=text, **shape).shared_tp == 8
    # two-batch or single-batch overlap turns DeepSeek's fusion off from 0.5.11 (the gate's check); before
    # 0.5.6 ROCm did not fuse under EP
    for overlap in ("enable_two_batch_overlap", "enable_single_batch_overlap"):
        assert placement("DeepseekV3ForCausalLM", {overlap: True}, {}, "0.5.23", gpu_arch="gfx942", text=text,
                         **shape).shared_tp == 8
    assert placement("DeepseekV3ForCausalLM", {"enable_single_batch_overlap": True}, {}, "0.5.10.post1",
                     gpu_arch="gfx942", text=text, **shape).shared_tp == 1
    assert placement("DeepseekV3ForCausalLM", {}, {}, "0.5.6", gpu_arch="gfx942", text=text, **shape).shared_tp == 1
    assert placement("DeepseekV3ForCausalLM", {}, {}, "0.5.5", gpu_arch="gfx942", text=text, **shape).shared_tp == 8
    # 384 routed experts (Kimi-K2/K2.5) fuse only from a Quark checkpoint (0.5.13 on; 256 alone before), which
    # the estimate does not price: a compressed-tensors Kimi-K2.5 and an FP8 Kimi-K2 stay sharded
    for name, pool in (("moonshotai--Kimi-K2.5", 2_391_351), ("moonshotai--Kimi-K2-Instruct", 1_991_154)):
        assert _est(name, gpu="MI355X", tp_size=8, ep_size=8).pool_tokens == pool
        assert _est(name, gpu="MI355X", tp_size=8, ep_size=8, disable_shared_experts_fusion=True).pool_tokens == pool
    k25 = {"n_shared_experts": 1, "n_routed_experts": 384}
    for version in ("0.5.12", "0.5.23"):
        assert placement("KimiK25ForConditionalGeneration", {}, {}, version, gpu_arch="gfx950", text=k25,
                         **shape).shared_tp == 8
    # a V3.2 or V2 config is not the V2 class's fused_shared_experts_architecture: no default fusion
    assert placement("DeepseekV32ForCausalLM", {}, {}, "0.5.23", gpu_arch="gfx942", text=text, **shape).shared_tp == 8
    assert placement("DeepseekV3ForCausalLM", {}, {}, "0.5.23", gpu_arch="gfx90a", text=text, **shape).shared_tp == 8


def test_the_auto_runner_on_sm120_takes_the_fp4_all_gather_path():
    # overrides.py: --moe-runner-backend auto with --quantization modelopt_fp4 on SM110/SM120 is flashinfer_cutlass
    nvfp4 = "nvidia--DeepSeek-V3.1-NVFP4"
    layout = dict(tp_size=8, dp_size=8, enable_dp_attention=True, ep_size=8)
    auto = _est(nvfp4, gpu="RTX-PRO-6000", quantization="modelopt_fp4", **layout)
    written = _est(nvfp4, gpu="RTX-PRO-6000", quantization="modelopt_fp4", moe_runner_backend="flashinfer_cutlass",
                   **layout)
    assert auto.pool_tokens == written.pool_tokens == 13_458
    assert "the FP4 all-gather path" in " ".join(auto.assumptions)
    # without --quantization the server argument stays unset on SM120 and the runner auto: sharded
    assert _est(nvfp4, gpu="RTX-PRO-6000", **layout).pool_tokens == 49_239


@pytest.mark.parametrize("version", ["0.4.10.post2", "0.5.1"])
def test_dp_attention_at_dp_size_one_does_not_start_before_0_5_2(version):
    with pytest.raises(EngineRefusal, match=f"SGLang {version} refuses --enable-dp-attention with --dp-size 1"):
        _est(V3, version, tp_size=8, dp_size=1, enable_dp_attention=True)
    assert _est(V3, "0.5.2", tp_size=8, dp_size=1, enable_dp_attention=True).pool_tokens == (
        _est(V3, "0.5.2", tp_size=8).pool_tokens)


def test_dwdp_is_refused_not_priced_as_plain_tp():
    with pytest.raises(EstimateError, match=r"--dwdp-size 8: DWDP .* weight buffers \(layers/moe/dwdp\) whose size"):
        _est(V3, tp_size=8, dwdp_size=8, disaggregation_mode="prefill")
    assert _est(V3, tp_size=8, dwdp_size=1).pool_tokens == 640_674


def test_the_built_in_draft_places_its_shared_expert_for_the_speculative_backend():
    # layers/moe/utils.py speculative_moe_a2a_backend_context: the MTP layer is built under
    # --speculative-moe-a2a-backend (unset: the target's backend), so its one shared expert follows that backend
    eagle = dict(tp_size=8, speculative_algorithm="EAGLE", speculative_num_steps=1, speculative_eagle_topk=1,
                 speculative_num_draft_tokens=2)
    one_layer = _v3_shared_bytes() / (61 - 3) * (1 - 1 / 8)  # V3: 58 MoE layers; the MTP layer is one more
    weights = {
        (target, draft): _est(V3, **eagle, **({"moe_a2a_backend": target} if target else {}),
                              **({"speculative_moe_a2a_backend": draft} if draft else {})).details["weights_gib_per_gpu"]
        for target, draft in ((None, None), (None, "deepep"), ("deepep", None), ("deepep", "none"))
    }
    # each figure is rounded to 0.001 GiB in details, so a difference of two is good to 0.001 GiB (2.8 % here)
    assert (weights[(None, "deepep")] - weights[(None, None)]) * GIB == pytest.approx(one_layer, abs=0.001 * GIB)
    assert (weights[("deepep", None)] - weights[("deepep", "none")]) * GIB == pytest.approx(one_layer, abs=0.001 * GIB)


def test_a_deepep_v2_draft_is_refused_as_sglang_refuses_it():
    # arg_groups/moe_hook.py validate_deepep_v2_speculative_draft: given, or inherited from the target
    eagle = dict(tp_size=8, speculative_algorithm="EAGLE", speculative_num_steps=1, speculative_eagle_topk=1,
                 speculative_num_draft_tokens=2)
    with pytest.raises(EngineRefusal, match="SGLang refuses a speculative draft on --moe-a2a-backend deepep_v2"):
        _est(V3, moe_a2a_backend="deepep_v2", **eagle)
    with pytest.raises(EngineRefusal, match="deepep_v2"):
        _est(V3, speculative_moe_a2a_backend="deepep_v2", **eagle)
    assert _est(V3, moe_a2a_backend="deepep_v2", speculative_moe_a2a_backend="deepep", **eagle).pool_tokens > 0
    assert _est(V3, tp_size=8, moe_a2a_backend="deepep_v2").pool_tokens > 0  # no draft: nothing refused


# --- DeepSeek-V4 ---------------------------------------------------------------------------------------------

V4_FLASH_FP8 = "sgl-project--DeepSeek-V4-Flash-FP8"
LOGGED_24650 = 1_066_240  # max_total_num_tokens, sglang#24650


def _issue_24650(version: str | None, **kw):
    args = dict(tp_size=4, dp_size=1, enable_dp_attention=True, moe_a2a_backend="deepep", cuda_graph_max_bs=32,
                max_running_requests=128, mem_fraction_static=0.7, speculative_algorithm="EAGLE",
                speculative_num_steps=1, speculative_eagle_topk=1, speculative_num_draft_tokens=2, context_length=1_048_576)
    args.update(kw)
    return estimate_role(replace(role(V4_FLASH_FP8, gpu="H200", window=1_048_576, env={"SGLANG_DSV4_FP4_EXPERTS": "0"},
                                      **args), engine_version=version), offline=True)


def test_v4_shared_experts_under_deepep():
    c = _cfg(V4_FLASH_FP8)
    shared = c["num_hidden_layers"] * 3 * c["hidden_size"] * c["moe_intermediate_size"] * c["n_shared_experts"]
    deepep = _issue_24650("0.5.12", speculative_algorithm=None)
    plain = _issue_24650("0.5.12", moe_a2a_backend="none", speculative_algorithm=None)
    added = (deepep.details["weights_gib_per_gpu"] - plain.details["weights_gib_per_gpu"]) * GIB
    assert added == pytest.approx(shared * FP8_BLOCK * (1 - 1 / 4), abs=0.002 * GIB)
    # the EAGLE draft's MTP layer runs the same backend (speculative_moe_a2a_backend defaults to it): its
    # shared expert is replicated too, one layer's worth more
    with_draft = _issue_24650("0.5.12")
    draft_plain = _issue_24650("0.5.12", moe_a2a_backend="none")
    added_draft = (with_draft.details["weights_gib_per_gpu"] - draft_plain.details["weights_gib_per_gpu"]) * GIB
    assert added_draft == pytest.approx(added * (c["num_hidden_layers"] + 1) / c["num_hidden_layers"], abs=0.003 * GIB)


def test_the_issue_24650_pool():
    # a build before 0.5.12: no release to place it (KV108), and the range holds what it logged
    undeclared = _issue_24650(None)
    assert [f.rule for f in undeclared.findings] == ["KV108"]
    assert undeclared.pool_range[0] <= LOGGED_24650 <= undeclared.pool_range[1]
    # priced as 0.5.12, its first release: +0.48 % (+3.46 % with the shared experts sharded; +1.82 % and +4.80 %
    # with wo_a in FP8, which 0.5.12 turns off below SM100)
    assert _issue_24650("0.5.12").pool_tokens == 1_071_360
    assert _issue_24650("0.5.12", moe_a2a_backend="none").pool_tokens == 1_103_104


def test_v4_embedding_is_replicated_under_dp_attention():
    c = _cfg(V4_FLASH_FP8)
    dp = _issue_24650("0.5.23", dp_size=4, moe_a2a_backend="none", speculative_algorithm=None)
    tp = _issue_24650("0.5.23", dp_size=1, enable_dp_attention=False, moe_a2a_backend="none", speculative_algorithm=None)
    assert "input embedding replicated on every rank (DP attention)" in dp.assumptions
    embedding = 2 * c["vocab_size"] * c["hidden_size"]
    attention_moved = dp.details["weights_gib_per_gpu"] - tp.details["weights_gib_per_gpu"]
    assert attention_moved * GIB > embedding * (1 - 1 / 4)  # the embedding's 0.74 GiB, and the attention's


# --- end to end ----------------------------------------------------------------------------------------------


def _manifest(tmp_path: Path, backend: str) -> Path:
    (tmp_path / "config.json").write_text(model_config(V3).read_text())
    path = tmp_path / "manifest.yaml"
    path.write_text(textwrap.dedent(f"""\
        name: deepseek-v3 deepep
        context_length: 150000
        model:
          path: deepseek-ai/DeepSeek-V3
          config: config.json
        gpu: H200
        engine:
          version: "0.5.23"
        args: {{tp-size: 8, dp-size: 8, enable-dp-attention: true, moe-a2a-backend: {backend}}}
        roles:
          server: {{}}
        """))
    return path


def test_cli_the_deepep_deployment_fails_the_window_its_sharded_twin_passes(tmp_path, kvcheck):
    sharded = kvcheck("verify", str(_manifest(tmp_path, "none")), "--mode", "estimate", "--format", "json")
    assert sharded.exit_code == 0, sharded.stderr
    assert json.loads(sharded.stdout)["roles"][0]["pool_tokens"] == 192_859
    deepep = kvcheck("verify", str(_manifest(tmp_path, "deepep")), "--mode", "estimate", "--format", "json")
    assert deepep.exit_code == 1, deepep.stderr
    role_ = json.loads(deepep.stdout)["roles"][0]
    assert role_["pool_tokens"] == 114_879  # each attention-DP rank's pool, under the 150,000 window
    assert role_["details"]["parallel"]["ep"] == 8
    assert ("shared experts replicated on every rank (moe-a2a-backend deepep, as SGLang's DeepseekV3ForCausalLM "
            "places them)") in role_["details"]["assumptions"]


def test_cli_waterfill_without_a_backend_fails_as_deepep_does(tmp_path, kvcheck):
    path = _manifest(tmp_path, "none")
    path.write_text(path.read_text().replace("moe-a2a-backend: none", "enable-waterfill: true"))
    result = kvcheck("verify", str(path), "--mode", "estimate", "--format", "json")
    assert result.exit_code == 1, result.stderr
    role_ = json.loads(result.stdout)["roles"][0]
    assert (role_["pool_tokens"], role_["details"]["parallel"]["ep"]) == (114_879, 8)


def test_cli_dwdp_is_an_estimate_error_exit_3(tmp_path, kvcheck):
    path = _manifest(tmp_path, "none")
    path.write_text(path.read_text().replace("dp-size: 8, enable-dp-attention: true, moe-a2a-backend: none",
                                             "dwdp-size: 8, disaggregation-mode: prefill"))
    result = kvcheck("verify", str(path), "--mode", "estimate", "--format", "json")
    assert result.exit_code == 3, result.stderr
    assert "--dwdp-size 8: DWDP" in result.stdout


def test_cli_0_5_1_refuses_dp_attention_at_dp_size_one_with_exit_2_at_its_line(tmp_path, kvcheck):
    path = _manifest(tmp_path, "none")
    path.write_text(path.read_text().replace('version: "0.5.23"', 'version: "0.5.1"')
                    .replace("dp-size: 8, enable-dp-attention: true, moe-a2a-backend: none",
                             "dp-size: 1, enable-dp-attention: true"))
    result = kvcheck("verify", str(path), "--mode", "estimate", "--format", "json")
    assert result.exit_code == 2, result.stdout
    assert f"{path}:9:" in result.stderr  # the args line
    assert "SGLang 0.5.1 refuses --enable-dp-attention with --dp-size 1" in result.stderr


@pytest.mark.parametrize(("size", "message"), [
    # TP8 DP8: the attention TP size is 1, checked first (handle_shared_experts_tp's order)
    (8, "--shared-experts-tp-size 8 is not a positive divisor of the attention TP size 1"),
    (1, "--shared-experts-tp-size is only supported for Kimi-K3 (KimiK3ForConditionalGeneration), not "
        "DeepseekV3ForCausalLM"),
])
def test_cli_shared_experts_tp_size_sglang_refuses_is_exit_2_at_its_line(tmp_path, kvcheck, size, message):
    path = _manifest(tmp_path, "deepep")
    path.write_text(path.read_text().replace("moe-a2a-backend: deepep}",
                                             f"moe-a2a-backend: deepep, shared-experts-tp-size: {size}}}"))
    result = kvcheck("verify", str(path), "--mode", "estimate", "--format", "json")
    assert result.exit_code == 2, result.stdout
    assert f"{path}:9:84: role server: {message}" in result.stderr


K3 = "moonshotai--Kimi-K3"


@pytest.mark.parametrize(("config", "version", "refused"), [
    (K3, "0.5.23", True),  # the K3 B300 runs on deepep_v2 (whn09/kimi-k3-sglang) patched this list to start
    (K3, "0.5.19", True),
    (V3, "0.5.19", False),
    ("zai-org--GLM-5-FP8", "0.5.21", True),  # GlmMoeDsaForCausalLM: validated from 0.5.22
    ("zai-org--GLM-5-FP8", "0.5.22", False),
])
def test_deepep_v2_starts_only_for_the_architectures_the_release_validated(config, version, refused):
    # arg_groups/moe_hook.py validate_deepep_v2_model_architecture, in _handle_a2a_moe before any weight loads;
    # SGLang 0.5.23's own resolution (tools/sglang-reference) raises the same for Kimi-K3 on 8 B300s
    args = dict(tp_size=8, ep_size=8, moe_a2a_backend="deepep_v2")
    gpu = "B300" if config == K3 else "B200"  # Kimi-K3's 1.5 TB leaves 8 B200s no pool
    if not refused:
        assert _est(config, version, gpu=gpu, **args).pool_tokens > 0
        return
    arch = _cfg(config)["architectures"][0]
    with pytest.raises(EngineRefusal, match=re.escape(
            f"SGLang refuses --moe-a2a-backend deepep_v2 for {arch}: \"DeepEP v2 MoE is not validated for '{arch}'\"")):
        _est(config, version, gpu=gpu, **args)
    assert _est(config, version, gpu=gpu, **dict(args, moe_a2a_backend="deepep")).pool_tokens > 0


def test_deepep_v2_for_kimi_k3_is_exit_2_naming_the_line(tmp_path, kvcheck):
    (tmp_path / "config.json").write_text(model_config(K3).read_text())
    manifest = tmp_path / "k3.yaml"
    manifest.write_text(
        "name: kimi-k3 on b300\n"
        "context_length: 262144\n"
        "model: {path: moonshotai/Kimi-K3, config: config.json}\n"
        "engine: {version: 0.5.23}\n"
        "gpu: B300\n"
        "args:\n"
        "  tp-size: 8\n"
        "  ep-size: 8\n"
        "  moe-a2a-backend: deepep_v2\n"
        "roles:\n"
        "  server: {}\n"
    )
    result = kvcheck("verify", str(manifest), "--mode", "estimate")
    assert result.exit_code == 2, result.stderr
    assert f"{manifest}:9:3: role server: SGLang refuses --moe-a2a-backend deepep_v2 for " \
           "KimiK3ForConditionalGeneration" in result.stderr
