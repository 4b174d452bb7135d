"""vLLM's MoE weights per GPU under --data-parallel-size and --enable-expert-parallel (sizing/moe.py).

vllm/model_executor/layers/fused_moe/config.py FusedMoEParallelConfig.make: a MoE layer flattens TP across DP
(tp_size = dp_size x tp_size); with EP the experts (plus EPLB's redundant ones) are dealt whole over that
group by determine_expert_map. Attention, dense layers, shared experts, embedding and lm_head stay a full
replica per DP rank, split over its own TP group. Every expected figure below is counted from the config.
"""

from __future__ import annotations

import json
import math
import textwrap
from pathlib import Path
from typing import Any

import pytest

from kvcheck.engines.vllm.sizing.model import estimate_role
from kvcheck.errors import EstimateError
from kvcheck.model import EstimateInputs, RoleTarget

MODELS = Path(__file__).resolve().parents[2] / "tests" / "data" / "models"
GIB = float(1 << 30)
QWEN3_30B = MODELS / "Qwen--Qwen3-30B-A3B.json"
MIXTRAL = MODELS / "mistralai--Mixtral-8x7B-v0.1.json"
DSV3 = MODELS / "deepseek-ai--DeepSeek-V3.json"


def _config(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text())


def _target(config: Path, version: str, env: dict[str, str] | None = None, **args: Any) -> RoleTarget:
    base: dict[str, Any] = {"enforce_eager": True, "max_num_batched_tokens": 8192, "max_num_seqs": 256,
                            "max_model_len": 4096}
    base.update(args)
    return RoleTarget(name="server", context_length=4096, min_headroom=1.0, engine_version=version, args=base,
                      argv_args=(), gpu="H200", model_config=config, engine="vllm", estimate=EstimateInputs(),
                      env=env or {})


def _weights(config: Path, version: str = "0.32.0", env: dict[str, str] | None = None, **args: Any) -> float:
    """The estimate's weights per GPU, GiB (details rounds them to 0.001 GiB)."""
    return float(estimate_role(_target(config, version, env, **args), offline=True).details["weights_gib_per_gpu"])


def _expert_bytes(path: Path, per_param: float) -> tuple[float, int, int]:
    """(one routed expert's bytes in one layer, MoE layers, routed experts) from the config."""
    c = _config(path)
    inter = c.get("moe_intermediate_size") or c["intermediate_size"]
    experts = c.get("n_routed_experts") or c.get("num_experts") or c["num_local_experts"]
    layers = c["num_hidden_layers"] - (c.get("first_k_dense_replace") or 0)
    return 3 * c["hidden_size"] * inter * per_param, layers, experts


def _close(actual: float, expected_bytes: float) -> None:
    """Equal to the rounding of details' 0.001 GiB (both sides rounded)."""
    assert actual == pytest.approx(round(expected_bytes / GIB, 3), abs=0.0011)


# --- data parallel without EP: each expert split over dp x tp --------------------------------------------------


def test_data_parallel_splits_the_routed_experts_over_dp_x_tp() -> None:
    """Qwen3-30B-A3B bf16 at TP 2: DP 4 takes routed x (1/2 - 1/8) off each GPU; the rest is a DP replica."""
    expert, layers, experts = _expert_bytes(QWEN3_30B, 2)
    routed = expert * layers * experts  # all routed experts, bf16: 57.98 GB
    tp_only = _weights(QWEN3_30B, tensor_parallel_size=2)
    dp4 = _weights(QWEN3_30B, tensor_parallel_size=2, data_parallel_size=4)
    _close(tp_only - dp4, routed * (1 / 2 - 1 / 8))
    # without a DP peer nothing moves
    assert _weights(QWEN3_30B, tensor_parallel_size=2, data_parallel_size=1) == tp_only


def test_expert_parallel_at_an_even_split_weighs_what_the_flattened_tp_does() -> None:
    """128 experts over dp x tp = 8 GPUs: 16 whole experts each, the same bytes as 1/8 of every expert."""
    flat = _weights(QWEN3_30B, tensor_parallel_size=2, data_parallel_size=4)
    ep = _weights(QWEN3_30B, tensor_parallel_size=2, data_parallel_size=4, enable_expert_parallel=True)
    assert ep == flat
    expert, layers, experts = _expert_bytes(QWEN3_30B, 2)
    _close(_weights(QWEN3_30B, tensor_parallel_size=2) - ep, expert * layers * (experts / 2 - experts // 8))


# --- expert parallel: whole experts, the most loaded rank priced -------------------------------------------------


def test_an_uneven_expert_split_prices_the_most_loaded_rank_by_release() -> None:
    """Mixtral's 8 experts over DP 3 x TP 1 with EP: from 0.10.1 the first ranks take the remainder (3 experts:
    ceil 8/3); up to 0.10.0 the last rank takes it (8 - 2 x 2 = 4). Old code priced all 8 (TP 1)."""
    expert, layers, experts = _expert_bytes(MIXTRAL, 2)
    assert experts == 8
    single = _weights(MIXTRAL, "0.32.0", tensor_parallel_size=1)
    _close(single - _weights(MIXTRAL, "0.32.0", data_parallel_size=3, enable_expert_parallel=True),
           expert * layers * (8 - 3))
    _close(single - _weights(MIXTRAL, "0.10.1", data_parallel_size=3, enable_expert_parallel=True),
           expert * layers * (8 - 3))
    _close(single - _weights(MIXTRAL, "0.10.0", data_parallel_size=3, enable_expert_parallel=True),
           expert * layers * (8 - 4))
    _close(single - _weights(MIXTRAL, "0.8.4", data_parallel_size=3, enable_expert_parallel=True),
           expert * layers * (8 - 4))


def test_before_0_8_4_ep_at_tp_1_is_the_flattened_tp_and_an_uneven_width_does_not_start() -> None:
    """0.8.0-0.8.3: use_ep needs tp_size > 1, so at TP 1 x DP 3 each expert is split 3 ways, and vLLM asserts
    Mixtral's 14,336-wide experts divide by 3: a start that fails is no figure (KV305)."""
    assert 14336 % 3
    with pytest.raises(EstimateError, match="divides by 3"):
        estimate_role(_target(MIXTRAL, "0.8.3", data_parallel_size=3, enable_expert_parallel=True), offline=True)
    # at DP 2 the width divides: each expert halved (the same bytes as 4 whole experts)
    expert, layers, _ = _expert_bytes(MIXTRAL, 2)
    _close(_weights(MIXTRAL, "0.8.3") - _weights(MIXTRAL, "0.8.3", data_parallel_size=2, enable_expert_parallel=True),
           expert * layers * 4)


# --- EPLB's redundant experts ------------------------------------------------------------------------------------


def test_redundant_experts_add_whole_experts_on_every_rank() -> None:
    """DeepSeek-V3 fp8 (1 byte per weight), DP 8 x TP 1 with EP: 256 experts are 32 a GPU; 32 redundant
    experts make 288, 36 a GPU: 4 more experts in each of its 58 MoE layers."""
    expert, layers, _ = _expert_bytes(DSV3, 1)
    assert layers == 58
    args = {"data_parallel_size": 8, "enable_expert_parallel": True}
    plain = _weights(DSV3, "0.32.0", **args)
    eplb = _weights(DSV3, "0.32.0", enable_eplb=True, eplb_config='{"num_redundant_experts": 32}', **args)
    _close(eplb - plain, expert * layers * 4)
    # 0.9.2-0.11.x: the top-level --num-redundant-experts
    legacy = _weights(DSV3, "0.10.0", enable_eplb=True, num_redundant_experts=32, **args)
    _close(legacy - _weights(DSV3, "0.10.0", **args), expert * layers * 4)


def test_redundant_experts_without_eplb_are_refused() -> None:
    with pytest.raises(EstimateError, match="without --enable-eplb"):
        estimate_role(_target(DSV3, "0.32.0", data_parallel_size=8, enable_expert_parallel=True,
                              eplb_config={"num_redundant_experts": 32}), offline=True)


# --- sequence-parallel MoE: DeepSeek's shared experts replicated per GPU ----------------------------------------


def test_sequence_parallel_moe_replicates_deepseeks_shared_experts() -> None:
    """EP with TP 8 and DP 2 on 0.32.0's default all2all backend (allgather_reducescatter):
    ParallelConfig.use_sequence_parallel_moe, so DeepseekV2MLP(disable_tp=True) keeps the whole shared expert
    (1 x 2048 wide) on every GPU: 7/8 of it more than TP 8 splits."""
    expert, layers, _ = _expert_bytes(DSV3, 1)  # the shared expert is as wide as a routed one here
    args = {"tensor_parallel_size": 8, "data_parallel_size": 2, "enable_expert_parallel": True}
    sp = _weights(DSV3, "0.32.0", **args)
    # not a sequence-parallel backend in 0.32.0's use_sequence_parallel_moe list
    two_sided = _weights(DSV3, "0.32.0", all2all_backend="flashinfer_nvlink_two_sided", **args)
    _close(sp - two_sided, expert * layers * (1 - 1 / 8))
    # the routed experts: 256 over 16 GPUs, against TP 8's 1/8
    _close(_weights(DSV3, "0.32.0", tensor_parallel_size=8) - two_sided, expert * layers * (256 / 8 - 256 / 16))


@pytest.mark.parametrize("removed", ["pplx", "naive"])
def test_the_removed_backends_fall_back_to_allgather_reducescatter_from_0_19(removed: str) -> None:
    """ParallelConfig.__post_init__ (0.19.0 on) rewrites pplx and naive to allgather_reducescatter, a
    sequence-parallel backend: the shared experts are whole on every GPU, as with the default."""
    args = {"tensor_parallel_size": 8, "data_parallel_size": 2, "enable_expert_parallel": True}
    for version in ("0.19.0", "0.32.0"):
        assert _weights(DSV3, version, all2all_backend=removed, **args) == _weights(DSV3, version, **args)
    # 0.18.0 still runs pplx as itself, not in its sequence-parallel list: sharded
    expert, layers, _ = _expert_bytes(DSV3, 1)
    _close(_weights(DSV3, "0.18.0", **args) - _weights(DSV3, "0.18.0", all2all_backend="pplx", **args),
           expert * layers * (1 - 1 / 8))


QWEN35_397B = MODELS / "Qwen--Qwen3.5-397B-A17B.json"


def test_qwen3_next_blocks_replicate_their_shared_expert_under_sequence_parallel_moe_from_0_20() -> None:
    """qwen3_next.py Qwen3NextSparseMoeBlock (Qwen3.5-MoE builds it) passes is_sequence_parallel to its shared
    expert from 0.20.0: Qwen2MoeMLP(disable_tp=True), whole on every GPU (bf16 here)."""
    c = _config(QWEN35_397B)
    text = c.get("text_config", c)
    shared = text["num_hidden_layers"] * 3 * text["hidden_size"] * text["shared_expert_intermediate_size"] * 2
    args = {"tensor_parallel_size": 8, "data_parallel_size": 2, "enable_expert_parallel": True}
    plain = {**args, "all2all_backend": "flashinfer_nvlink_two_sided"}
    _close(_weights(QWEN35_397B, "0.32.0", **args) - _weights(QWEN35_397B, "0.32.0", **plain), shared * (1 - 1 / 8))
    # 0.19.0's block keeps it split over TP whether the backend is sequence parallel or not
    assert _weights(QWEN35_397B, "0.19.0", **args) == _weights(QWEN35_397B, "0.19.0", **plain)


def test_eplb_with_an_uneven_deal_or_without_ep_is_refused() -> None:
    """fused_moe/layer.py (0.10.2 on): 'EPLB currently only supports even distribution of experts across ranks';
    ParallelConfig (0.11.0 on) refuses --enable-eplb without --enable-expert-parallel."""
    uneven = {"data_parallel_size": 8, "enable_expert_parallel": True, "enable_eplb": True,
              "eplb_config": '{"num_redundant_experts": 30}'}
    with pytest.raises(EstimateError, match="EPLB over 8 expert-parallel GPUs with 256 experts \\+ 30 redundant"):
        _weights(DSV3, "0.32.0", **uneven)
    even = {**uneven, "eplb_config": '{"num_redundant_experts": 32}'}
    assert _weights(DSV3, "0.32.0", **even) > 0
    with pytest.raises(EstimateError, match="--enable-eplb without --enable-expert-parallel"):
        _weights(DSV3, "0.32.0", data_parallel_size=8, enable_eplb=True)


def test_0_10_2_replicates_them_only_on_a_deepep_backend() -> None:
    """0.10.2's DeepseekV2MoE: VLLM_ALL2ALL_BACKEND deepep_* with EP and TP > 1, no DP needed."""
    expert, layers, _ = _expert_bytes(DSV3, 1)
    args = {"tensor_parallel_size": 8, "enable_expert_parallel": True}
    naive = _weights(DSV3, "0.10.2", **args)  # the env var's default, naive
    deepep = _weights(DSV3, "0.10.2", env={"VLLM_ALL2ALL_BACKEND": "deepep_low_latency"}, **args)
    _close(deepep - naive, expert * layers * (1 - 1 / 8))


# --- the checkpoint index cannot be split ------------------------------------------------------------------------


def test_a_checkpoint_index_under_data_parallel_moe_is_not_guessed(tmp_path: Path) -> None:
    """model.safetensors.index.json states the total only: total / (tp x pp) would price the routed experts
    DP times over, so the estimate refuses (KV305) rather than split it."""
    (tmp_path / "config.json").write_text(QWEN3_30B.read_text())
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps({"metadata": {"total_size": 61_064_245_248},
                                                                       "weight_map": {}}))
    with pytest.raises(EstimateError, match="total size"):
        estimate_role(_target(tmp_path / "config.json", "0.32.0", tensor_parallel_size=2, data_parallel_size=4),
                      offline=True)
    # TP alone splits everything the same way: the index still prices it
    est = estimate_role(_target(tmp_path / "config.json", "0.32.0", tensor_parallel_size=2), offline=True)
    assert est.details["weights_source"] == "checkpoint-index"
    assert math.isclose(est.details["weights_gib_per_gpu"], round(61_064_245_248 / 2 / GIB, 3))


# --- end to end ----------------------------------------------------------------------------------------------------


def _manifest(tmp_path: Path) -> Path:
    path = tmp_path / "manifest.yaml"
    path.write_text(textwrap.dedent(f"""\
        name: qwen3-30b-a3b dp8
        context_length: 40960
        model:
          path: Qwen/Qwen3-30B-A3B
          config: {QWEN3_30B}
        gpu: H100
        engine: {{name: vllm, version: "0.32.0"}}
        args: {{data-parallel-size: 8, max-model-len: 40960, gpu-memory-utilization: 0.78}}
        roles:
          server: {{}}
        """))
    return path


def test_cli_a_data_parallel_moe_role_prices_one_eighth_of_the_experts(tmp_path: Path, kvcheck) -> None:
    """Qwen3-30B-A3B bf16 on H100s, DP 8 x TP 1: each GPU holds 1/8 of every routed expert (54.0 GiB of
    them in all), not all of them. Priced at TP 1 the weights (56.9 GiB) left too little of 0.78 of the GPU
    for one 40,960-token request: a KV220 refusal vLLM does not make."""
    result = kvcheck("verify", str(_manifest(tmp_path)), "--mode", "estimate", "--format", "json")
    assert result.exit_code == 0, result.stdout + result.stderr
    [role] = json.loads(result.stdout)["roles"]
    assert role["status"] == "pass"
    details = role["details"]
    expert, layers, experts = _expert_bytes(QWEN3_30B, 2)
    single = _weights(QWEN3_30B, tensor_parallel_size=1)
    _close(single - details["weights_gib_per_gpu"], expert * layers * experts * (1 - 1 / 8))
    assert details["parallel"] == {"tp": 1, "pp": 1, "dp": 8}
    assert any("dp x tp = 8 GPUs" in a for a in details["assumptions"])
    assert details["vllm_would_refuse"] is False


@pytest.mark.parametrize(("flag", "field"), [("--eplb-config", "eplb_config"),
                                             ("--compilation-config", "compilation_config"),
                                             ("--speculative-config", "speculative_config")])
def test_a_json_flag_that_is_not_json_is_an_estimate_error_naming_the_flag(flag: str, field: str) -> None:
    args = {"data_parallel_size": 8, "enable_expert_parallel": True, "enable_eplb": True, field: "{not json"}
    with pytest.raises(EstimateError, match=f"^{flag} '{{not json' is not valid JSON"):
        _weights(DSV3, "0.32.0", **args)
