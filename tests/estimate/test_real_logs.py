"""Each usable real SGLang log stays within the error docs/estimate.md publishes for its class."""

from __future__ import annotations

import pytest

from tests.datapaths import MODELS_ABSENT

from . import calibration_cases as cc

pytestmark = pytest.mark.skipif(not cc.available(), reason=MODELS_ABSENT)

# Published bounds (docs/estimate.md): the pool error of each usable case, in percent.
BOUND_PCT = {
    "sglang-qwen3-235b-fp8-4xH100-vllm21348": 1.5,
    "sglang-llama31-8b-docs-send-request-2025-01": 1.0,
    "sglang-llama31-8b-pr4760-fa3": 1.0,
    "sglang-llama3-8b-mi300x-bench-latency": 1.0,
    "sglang-kimi-k25-mi35x-tp8": 2.0,
    "sglang-dsv32-exp-8xB200-dpattn-main-pr11309": 11.0,
    "sglang-qwen3-8b-tp1-blackwell288-clean-startup-doc": 1.0,
}


@pytest.fixture(scope="module")
def outcomes():
    return {o.case.id: o for o in cc.run_all()}


def test_every_usable_case_has_a_published_bound(outcomes):
    assert set(outcomes) == set(BOUND_PCT)


@pytest.mark.parametrize("case_id", sorted(BOUND_PCT))
def test_pool_error_stays_within_the_published_bound(outcomes, case_id):
    outcome = outcomes[case_id]
    assert outcome.error_pct is not None
    assert abs(outcome.error_pct) <= BOUND_PCT[case_id], (outcome.predicted_tokens, outcome.logged_tokens)


def test_median_error_of_usable_cases_is_within_one_percent(outcomes):
    assert cc.median_abs_error(list(outcomes.values())) <= 1.0


@pytest.mark.parametrize("case_id", sorted(BOUND_PCT))
def test_logged_pool_lies_in_the_range_where_the_weights_are_known(outcomes, case_id):
    outcome = outcomes[case_id]
    if outcome.pool_range is None or outcome.logged_weights_gib is None:
        pytest.skip("no range or no logged weights for this case")
    low, high = outcome.pool_range
    assert low <= outcome.logged_tokens <= high


def test_weights_match_the_logged_load_within_three_percent(outcomes):
    for outcome in outcomes.values():
        if outcome.logged_weights_gib is not None:
            diff = abs(outcome.predicted_weights_gib - outcome.logged_weights_gib) / outcome.logged_weights_gib
            assert diff <= 0.03, (outcome.case.id, outcome.predicted_weights_gib, outcome.logged_weights_gib)


def test_weights_of_logs_used_only_for_their_weights():
    rows = cc.weight_checks()
    assert len(rows) == 2
    for dp_id, predicted, logged in rows:
        assert abs(predicted - logged) / logged <= 0.03, (dp_id, predicted, logged)


def test_cell_sizes_match_the_logged_kv_sizes():
    rows = cc.cell_checks()
    assert len(rows) >= 7
    for dp_id, predicted, logged in rows:
        assert logged > 0, dp_id
        # logged sizes are rounded to 0.01 GB: 0.1% covers the rounding of the smallest pools
        assert abs(predicted - logged) / logged <= 0.001, (dp_id, predicted, logged)
