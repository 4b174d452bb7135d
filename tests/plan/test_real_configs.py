"""The planner on real model configs (tests/datapaths.py: MODELS): invariants that hold for every model."""

from __future__ import annotations

import math

import pytest

from kvcheck.engines.sglang.sizing import estimate_role
from kvcheck.model import RoleTarget
from kvcheck.plan import plan_role
from kvcheck.plan.advice import hint_sentences, plan_findings

CASES = [  # (model, gpu, args)
    ("deepseek-ai--DeepSeek-V3", "H200", {"tp_size": 8}),
    ("deepseek-ai--DeepSeek-V3.2", "B200", {"tp_size": 8, "disaggregation_mode": "prefill"}),
    ("Qwen--Qwen3-235B-A22B-FP8", "H100", {"tp_size": 8, "kv_cache_dtype": "fp8_e4m3"}),
    ("Qwen--Qwen3-32B", "H100", {"tp_size": 2}),
    ("openai--gpt-oss-120b", "H100", {"tp_size": 4}),
    ("Qwen--Qwen3.5-397B-A17B", "B200", {"tp_size": 8}),
    ("meta-llama--Meta-Llama-3.1-70B", "A100-80GB", {"tp_size": 4, "mem_fraction_static": 0.85}),
]


def _target(model_configs, model: str, gpu: str, args: dict, window: int) -> RoleTarget:
    return RoleTarget(
        name="serve", context_length=window, min_headroom=1.0, engine_version="0.5.23", args=args,
        argv_args=(), gpu=gpu, model_config=model_configs / f"{model}.json",
    )


@pytest.mark.parametrize(("model", "gpu", "args"), CASES, ids=[c[0] for c in CASES])
def test_plan_invariants(model_configs, model: str, gpu: str, args: dict) -> None:
    windows = (8_192, 65_536, 131_072, 262_144, 524_288, 1_048_576)
    minimums = []
    for window in windows:
        target = _target(model_configs, model, gpu, args, window)
        plan = plan_role(target, offline=True)
        f = plan.fraction
        assert plan.largest_context_tokens == min(plan.pool_context_tokens, plan.model_context_tokens)
        assert plan.pool_context_tokens == plan.pool_tokens  # min_headroom 1
        if f.min_fitting is not None:
            at = estimate_role(target, overrides={"mem_fraction_static": f.min_fitting}, offline=True)
            below = estimate_role(target, overrides={"mem_fraction_static": round(f.min_fitting - 0.001, 3)},
                                  offline=True)
            assert at.pool_tokens >= window > below.pool_tokens
            assert f.min_fitting <= f.max_safe
            assert f.min_fitting_worst_case is None or f.min_fitting_worst_case >= f.min_fitting
        else:
            assert f.max_safe is None or (f.max_safe_pool_tokens or 0) < window
        for option in (*plan.tp_options, *plan.kv_dtype_options):
            if option.pool_tokens is not None:
                assert option.fits == (option.pool_tokens >= window)
                assert option.pool_range[0] <= option.pool_tokens <= option.pool_range[1]
        assert sum(o.current for o in plan.tp_options) == 1
        assert sum(o.current for o in plan.kv_dtype_options) == 1
        advice = plan_findings(target, plan)
        assert [(f.rule, f.severity) for f in advice] == [("KV106", "info")] * 4
        assert advice[0].message.startswith(f"largest context that fits: {plan.largest_context_tokens:,} tokens")
        hints = hint_sentences(plan)
        assert all(h.endswith(")") for h in hints)
        if not plan.fits:
            assert hints, "a role that falls short always gets at least the fraction sentence"
        minimums.append(math.inf if f.min_fitting is None else f.min_fitting)
    assert minimums == sorted(minimums)


def test_attention_dp_and_expert_parallelism_follow_tp(model_configs) -> None:
    args = {"tp_size": 8, "attn_dp_size": 8, "ep_size": 8}
    target = _target(model_configs, "deepseek-ai--DeepSeek-V3", "H200", args, 131_072)
    plan = plan_role(target, offline=True)
    by_tp = {o.value: o for o in plan.tp_options}
    expected = estimate_role(
        target, overrides={"tp_size": 16, "nnodes": 2, "attn_dp_size": 16, "ep_size": 16}, offline=True
    )
    assert (by_tp[16].pool_tokens, by_tp[16].nnodes) == (expected.pool_tokens, 2)
    assert expected.details["parallel"]["attn_dp"] == 16 and expected.details["parallel"]["ep"] == 16


def test_partial_ep_that_does_not_divide_is_not_offered(model_configs) -> None:
    target = _target(model_configs, "deepseek-ai--DeepSeek-V3", "H200", {"tp_size": 8, "ep_size": 4}, 131_072)
    plan = plan_role(target, offline=True)
    by_tp = {o.value: o for o in plan.tp_options}
    assert (by_tp[2].pool_tokens, by_tp[2].note) == (None, "ep-size 4 does not divide tp-size 2")
    assert by_tp[16].pool_tokens is not None
