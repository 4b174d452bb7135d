"""The planner's figures: exact worked example, agreement with the estimator, monotonicity, edge cases."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from kvcheck.engines.sglang.plan import largest_window
from kvcheck.engines.sglang.sizing import estimate_role
from kvcheck.errors import EstimateError
from kvcheck.model import EstimateInputs
from kvcheck.plan import fit_hints, plan_role
from kvcheck.plan.advice import hint_sentences, plan_findings
from tests.plan.helpers import LLAMA_31_8B, role, write_config

# Worked example (docs/plan.md): Llama-3.1-8B on one H100 80GB, weights pinned at 15.0 GiB/GPU so
# every figure follows by hand from docs/sglang-internals.md (Pool sizing) and the H100 profile:
#   pre   = (81,559 - 900 MiB before the baseline) / 1024 = 78.7685546875 GiB
#   after = pre - 15.0 = 63.7685546875 GiB; cell = 8 KV heads x 256 x 32 layers x 2 B = 131,072 B
#   pool(f) = floor((after - pre x (1 - f)) x 2^30 / 131,072)
#   SGLang's default f = round((81,559 - 13,904 MiB reserve) / 81,559, 3) = 0.83 -> 412,695 tokens
#   range: pre +/- 300 MiB -> 410,703 .. 414,687
POOL_AT_DEFAULT = 412_695
RANGE_AT_DEFAULT = (410_703, 414_687)


@pytest.fixture
def llama(tmp_path):
    return write_config(tmp_path)


def test_worked_example_fraction_range_is_exact(llama) -> None:
    # 2.5 x 131,072 = 327,680 tokens = exactly 40 GiB of KV: f >= 1 - (after - 40) / pre = 0.69825
    target = role(llama, min_headroom=2.5)
    plan = plan_role(target)
    f = plan.fraction
    assert plan.required_tokens == 327_680
    assert (f.current, f.current_source, f.current_pool_tokens) == (0.83, "sglang default", POOL_AT_DEFAULT)
    assert (f.min_fitting, f.min_fitting_pool_tokens) == (0.699, 328_165)
    assert f.min_fitting_worst_case == 0.701  # pre - 300 MiB: 1 - 23.4755859375 / 78.4755859375
    assert (f.max_safe, f.max_safe_pool_tokens, f.safe_reserve_mib) == (0.83, POOL_AT_DEFAULT, 13_904.0)


def test_min_fraction_agrees_with_the_estimator_itself(llama) -> None:
    target = role(llama, min_headroom=2.5)
    f = plan_role(target).fraction
    at_min = estimate_role(target, overrides={"mem_fraction_static": f.min_fitting})
    below = estimate_role(target, overrides={"mem_fraction_static": round(f.min_fitting - 0.001, 3)})
    assert at_min.pool_tokens >= target.required_tokens > below.pool_tokens
    worst = estimate_role(target, overrides={"mem_fraction_static": f.min_fitting_worst_case})
    worst_below = estimate_role(
        target, overrides={"mem_fraction_static": round(f.min_fitting_worst_case - 0.001, 3)}
    )
    assert worst.pool_range[0] >= target.required_tokens > worst_below.pool_range[0]


def test_largest_context_bound_by_the_model(llama) -> None:
    plan = plan_role(role(llama, min_headroom=2.5))
    assert (plan.pool_tokens, plan.pool_range) == (POOL_AT_DEFAULT, RANGE_AT_DEFAULT)
    assert plan.pool_context_tokens == 165_078  # floor(412,695 / 2.5)
    assert (plan.largest_context_tokens, plan.binding_limit) == (131_072, "model_context_length")
    assert plan.model_context_tokens == 131_072
    assert plan.uncertain is False


def test_no_value_fits(llama) -> None:
    # 4 x 131,072 = 524,288 tokens = 64 GiB of KV, more than the 63.77 GiB left after the weights
    target = role(llama, min_headroom=4.0)
    plan = plan_role(target)
    f = plan.fraction
    assert (f.min_fitting, f.min_fitting_pool_tokens, f.min_fitting_worst_case) == (None, None, None)
    assert (f.max_safe, f.max_safe_pool_tokens) == (0.83, POOL_AT_DEFAULT)
    assert (plan.largest_context_tokens, plan.binding_limit) == (103_173, "pool")  # floor(412,695 / 4)
    messages = [item.message for item in plan_findings(target, plan)]
    assert messages[1] == (
        "mem-fraction-static: no value fits: even the safe ceiling 0.83, SGLang's own default for this "
        "role (it keeps 13,904 MiB for activations and CUDA graphs) gives 412,695 of the 524,288 tokens "
        "required; SGLang's default 0.83 gives 412,695 tokens"
    )
    assert hint_sentences(plan)[0] == (
        "no mem-fraction-static up to SGLang's own 0.83 holds it (412,695 tokens at 0.83, estimate)"
    )


def test_window_inside_the_range_says_might_not_fit(llama) -> None:
    target = role(llama, min_headroom=3.15)  # ceil(3.15 x 131,072) = 412,877, inside 410,703..414,687
    plan = plan_role(target)
    assert plan.required_tokens == 412_877
    assert plan.uncertain is True
    context = plan_findings(target, plan)[0]
    assert context.rule == "KV106" and context.severity == "info"
    assert context.message == (
        "largest context that fits: 131,014 tokens, bound by the predicted pool of 412,695 tokens / "
        "min_headroom 3.15; the model allows 131,072; the advertised 131,072 does not fit; the 412,877 "
        "tokens required lie inside the estimate's range 410,703-414,687: might not fit; measure"
    )
    assert context.hint == "confirm with `kvcheck verify` on the role's GPUs before the rollout"


def test_tp_options_are_the_estimators_pools(llama) -> None:
    target = role(llama, min_headroom=4.0)
    plan = plan_role(target)
    assert [(o.value, o.nnodes, o.gpus, o.current) for o in plan.tp_options] == [
        (1, 1, 1, True), (2, 1, 2, False), (4, 1, 4, False), (8, 1, 8, False), (16, 2, 16, False),
    ]
    for option in plan.tp_options:
        # the manifest pins 15 GiB of weights per GPU at TP1: the planner shards them over the new TP
        sharded = replace(target, estimate=EstimateInputs(weights_gib_per_gpu=15.0 / option.value))
        expected = estimate_role(sharded, overrides={"tp_size": option.value, "nnodes": option.nnodes})
        assert (option.pool_tokens, option.pool_range) == (expected.pool_tokens, expected.pool_range)
        assert option.fits == (expected.pool_tokens >= 524_288)
    assert plan.tp_options[0].pool_tokens == POOL_AT_DEFAULT
    # TP2 by hand: pre = (81,559 - 900 - 512 MiB for the peer) / 1024, after = pre - 7.5, SGLang's default
    # round((81,559 - 14,032) / 81,559, 3) = 0.828, 4 KV heads per rank -> 65,536 B per token
    pre = (81_559 - 1_412) / 1024
    assert plan.tp_options[1].pool_tokens == int(int((pre - 7.5 - pre * (1 - 0.828)) * 2**30) // 65_536) == 938_907
    assert plan.tp_options[1].note == "weights per GPU scaled from estimate.weights_gib_per_gpu: 15 x 1/2"


def test_kv_dtype_options_by_gpu(llama) -> None:
    hopper = plan_role(role(llama, min_headroom=4.0))
    assert [(o.value, o.current) for o in hopper.kv_dtype_options] == [("bf16", True), ("fp8_e4m3", False)]
    fp8 = estimate_role(role(llama, min_headroom=4.0), overrides={"kv_cache_dtype": "fp8_e4m3"})
    assert hopper.kv_dtype_options[1].pool_tokens == fp8.pool_tokens
    assert hopper.kv_dtype_options[1].fits is True
    blackwell = plan_role(role(llama, gpu="B200", kv_cache_dtype="fp8_e4m3"))
    assert [(o.value, o.current) for o in blackwell.kv_dtype_options] == [
        ("bf16", False), ("fp8_e4m3", True), ("nvfp4", False), ("fp4_mx_block16", False),
    ]
    pools = [o.pool_tokens for o in blackwell.kv_dtype_options]
    assert pools[0] < pools[1] < pools[2] == pools[3]


def test_tp_degrees_the_heads_forbid_are_not_offered(tmp_path) -> None:
    config = dict(LLAMA_31_8B, num_attention_heads=40, num_key_value_heads=8, head_dim=128)
    plan = plan_role(role(write_config(tmp_path, config)))
    sixteen = plan.tp_options[-1]
    assert (sixteen.value, sixteen.pool_tokens, sixteen.fits) == (16, None, False)
    assert sixteen.note == "the model's 40 attention heads do not split over attention TP 16"


def test_max_total_tokens_binds(llama) -> None:
    target = role(llama, max_total_tokens=100_000)
    plan = plan_role(target)
    assert (plan.pool_tokens, plan.largest_context_tokens, plan.binding_limit) == (
        100_000, 100_000, "max_total_tokens",
    )
    assert plan.fraction.min_fitting is None
    assert plan_findings(target, plan)[1].hint == (
        "--max-total-tokens 100,000 caps the pool: remove it or raise it to 131,072"
    )


def test_manifest_fraction_above_the_safe_ceiling_is_called_out(llama) -> None:
    target = role(llama, mem_fraction_static=0.9)
    plan = plan_role(target)
    assert (plan.fraction.current, plan.fraction.current_source, plan.fraction.max_safe) == (0.9, "manifest", 0.83)
    assert plan_findings(target, plan)[1].message.endswith(
        "; the manifest's 0.9 is above the safe ceiling 0.83: less memory is left for activations and "
        "CUDA graphs than SGLang keeps, so serving may run out of memory"
    )


def test_scaled_user_fraction_gets_the_flag_that_lands_on_sglangs_default(llama) -> None:
    # ROCm aiter with context_len > 8192 multiplies every fraction by 0.85 (docs/sglang-internals.md): the safe
    # flag value is the one whose effective fraction equals SGLang's own effective default
    target = role(llama, gpu="MI300X")
    plan = plan_role(target)
    default = estimate_role(target)
    at_max = estimate_role(target, overrides={"mem_fraction_static": plan.fraction.max_safe})
    above = estimate_role(target, overrides={"mem_fraction_static": round(plan.fraction.max_safe + 0.001, 3)})
    assert at_max.details["mem_fraction_static"] <= default.details["mem_fraction_static"]
    assert above.details["mem_fraction_static"] > default.details["mem_fraction_static"]
    # MI300X: round((196,592 - 26,240 MiB) / 196,592, 3) = 0.867, used as 0.867 x 0.85 = 0.7369
    assert default.details["mem_fraction_static"] == 0.7369
    assert (plan.fraction.current, plan.fraction.max_safe) == (0.867, 0.867)
    assert plan.fraction.max_safe_pool_tokens == plan.fraction.current_pool_tokens == default.pool_tokens


@pytest.mark.parametrize("headroom", [0.5, 1.0, 1.1, 2.5, 3.0, 3.15, 7.0])
def test_largest_window_is_the_exact_inverse_of_required(headroom: float) -> None:
    for pool in (0, 1, 99, 412_695, 1_048_576, 2**31 - 1):
        window = largest_window(pool, headroom)
        assert math.ceil(headroom * window) <= pool < math.ceil(headroom * (window + 1))


def test_monotone_in_window_and_headroom(llama) -> None:
    minimums = []
    for window in (16_384, 32_768, 65_536, 98_304, 131_072):
        f = plan_role(role(llama, window=window, min_headroom=3.0)).fraction
        minimums.append(f.min_fitting if f.min_fitting is not None else math.inf)
    assert minimums == sorted(minimums) and len(set(minimums)) == len(minimums)
    largest = [plan_role(role(llama, min_headroom=h)).pool_context_tokens for h in (1.0, 1.5, 2.0, 4.0)]
    assert largest == sorted(largest, reverse=True)


def test_unestimable_role_raises_for_plan_and_gives_no_hints(tmp_path) -> None:
    config = write_config(tmp_path, dict(LLAMA_31_8B, architectures=["NoSuchModelForCausalLM"]))
    target = role(config)
    with pytest.raises(EstimateError):
        plan_role(target)
    assert fit_hints(target) == []
    assert fit_hints(role(write_config(tmp_path), gpu="NoSuchGPU")) == []


def test_fit_hints_name_the_settings_that_give_more_pool(llama) -> None:
    target = role(llama, min_headroom=2.5, mem_fraction_static=0.6)
    assert fit_hints(target) == [
        "mem-fraction-static 0.701 would hold the window even at the low end of the estimate "
        "(0.699 at its centre: 328,165 tokens)",
        # by hand at 0.6: fp8 halves the cell, (after - pre x 0.4) x 16,384 = 528,566; TP2 with 7.5 GiB
        # of weights and pre = (81,559 - 1,412) / 1024: 646,531
        "kv-cache-dtype fp8_e4m3 would hold 528,566 tokens (estimate)",
        "tp-size 2 would hold 646,531 tokens (estimate)",
    ]
    short = role(llama, min_headroom=4.0)
    assert fit_hints(short) == [
        "no mem-fraction-static up to SGLang's own 0.83 holds it (412,695 tokens at 0.83, estimate)",
        "kv-cache-dtype fp8_e4m3 would hold 825,391 tokens (estimate)",
        "tp-size 2 would hold 938,907 tokens (estimate)",
    ]


def test_a_decode_roles_reservation_binds_its_window_and_raises_what_the_window_needs(llama) -> None:
    target = role(llama, window=90_000, max_total_tokens=100_000, disaggregation_mode="decode")
    plan = plan_role(target)
    # the pool less the 512 reserved per request, plus the 7 tokens a window never admits
    assert (plan.pool_tokens, plan.largest_context_tokens, plan.pool_context_tokens, plan.binding_limit) == (
        100_000, 99_495, 99_495, "num_reserved_decode_tokens",
    )
    assert plan.required_tokens == 90_000 - 7 + 512
    assert estimate_role(target).max_input_tokens == 100_000 - 512 + 1
    smaller = role(llama, window=90_000, max_total_tokens=100_000, disaggregation_mode="decode",
                   num_reserved_decode_tokens=7)
    assert (plan_role(smaller).largest_context_tokens, plan_role(smaller).binding_limit) == (100_000, "max_total_tokens")
    prefill = plan_role(role(llama, window=90_000, max_total_tokens=100_000, disaggregation_mode="prefill"))
    assert (prefill.largest_context_tokens, prefill.required_tokens) == (100_000, 90_000)
