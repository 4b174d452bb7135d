"""Cross-checking a role's figures: the minimum over ranks and sources wins, gaps are findings."""

from __future__ import annotations

from dataclasses import replace

from kvcheck.backends.measure.figures import EngineReport, RankPool, compare_estimate, judge_figures
from kvcheck.engines.base import ServerInfo
from tests.measure.conftest import make_target


def server(
    pool: int | None = 947824, capacities: tuple[int, ...] = (947824,), version: str | None = "0.5.23"
):
    return ServerInfo(
        url="http://127.0.0.1:30000",
        version=version,
        max_total_num_tokens=pool,
        max_req_input_len=131066,
        dp_token_capacities=capacities,
        swa_token_capacities=(),
        context_length_arg=None,
        served_context_len=131072,
        resolved_args={"tp_size": 2},
        launch_command=None,
        endpoint="/server_info",
    )


RANK = RankPool("TP0", 947824, 131072)


def test_log_and_server_agree() -> None:
    figures = judge_figures(make_target(), EngineReport(ranks=(RANK,), server=server()))
    assert (figures.pool_tokens, figures.max_input_tokens, figures.context_len) == (947824, 131066, 131072)
    assert figures.engine_version == "0.5.23"
    assert figures.findings == ()
    assert figures.details["log_ranks"] == [{"rank": "TP0", "pool_tokens": 947824, "context_len": 131072}]
    assert figures.details["server_info"]["dp_token_capacities"] == [947824]


def test_minimum_over_dp_ranks_and_pp_stages() -> None:
    ranks = (RankPool("DP0 TP0", 500000, 131072), RankPool("DP1 TP4", 480000, 131072))
    report = EngineReport(ranks=ranks, server=server(500000, (500000, 480000)))
    figures = judge_figures(make_target(), report)
    assert figures.pool_tokens == 480000
    assert figures.findings == ()


def test_disagreement_uses_the_smaller_figure_and_says_so() -> None:
    figures = judge_figures(make_target(), EngineReport(ranks=(RANK,), server=server(900000, (900000,))))
    assert figures.pool_tokens == 900000
    [gap] = figures.findings
    assert (gap.rule, gap.severity) == ("KV310", "warning")
    assert gap.message == (
        "the startup log gives a pool of 947,824 tokens (minimum over 1 rank line) but /server_info gives "
        "900,000; using the smaller, 900,000"
    )


def test_log_only_when_the_server_cannot_be_asked() -> None:
    report = EngineReport(ranks=(RANK,), server_error="cannot connect")
    figures = judge_figures(make_target(), report)
    assert figures.pool_tokens == 947824
    assert [(f.rule, f.severity) for f in figures.findings] == [("KV310", "warning"), ("KV303", "error")]
    assert "(cannot connect)" in figures.findings[0].message
    assert figures.findings[1].message.startswith("could not confirm the engine's version")
    assert figures.details["server_info_error"] == "cannot connect"


def test_server_only_when_the_log_shows_no_pool_line() -> None:
    figures = judge_figures(make_target(), EngineReport(server=server()))
    assert figures.pool_tokens == 947824
    assert [f.rule for f in figures.findings] == ["KV310"]
    assert "no max_total_num_tokens line" in figures.findings[0].message


def test_no_figures_at_all_is_kv301_never_a_pass() -> None:
    figures = judge_figures(make_target(engine_version=None), EngineReport(server_error="HTTP 404"))
    assert figures.pool_tokens is None
    [missing] = figures.findings
    assert (missing.rule, missing.severity) == ("KV301", "error")


def test_version_mismatch_is_kv303() -> None:
    figures = judge_figures(make_target(), EngineReport(ranks=(RANK,), server=server(version="0.5.22")))
    [mismatch] = figures.findings
    assert (mismatch.rule, mismatch.severity) == ("KV303", "error")
    assert mismatch.message.startswith("SGLang 0.5.22 booted, but the manifest declares 0.5.23")


def test_equal_versions_in_other_spellings_match() -> None:
    target = make_target(engine_version="0.5.23.0")
    assert judge_figures(target, EngineReport(ranks=(RANK,), server=server())).findings == ()


def test_engine_warning_below_context_is_kv314() -> None:
    warnings = ("[TP0] KV pool holds 98304 tokens, fewer than --context-length 131072.", "[TP1] ...")
    report = EngineReport(ranks=(RANK,), server=server(), below_context_warnings=warnings)
    [warned] = judge_figures(make_target(), report).findings
    assert (warned.rule, warned.severity) == ("KV314", "warning")
    assert warned.message.startswith("SGLang warned: [TP0] KV pool holds 98304 tokens")
    assert warned.message.endswith("(2 ranks)")


def test_estimate_gap_above_ten_percent_is_kv304() -> None:
    assert compare_estimate("p", 1_000_000, 1_100_000) == []
    assert compare_estimate("p", 1_000_000, None) == []
    assert compare_estimate("p", None, 5) == []
    [gap] = compare_estimate("p", 1_000_000, 1_100_001)
    assert (gap.rule, gap.severity) == ("KV304", "warning")
    assert (
        gap.message
        == "the estimate (1,100,001 tokens) is 10.0% away from the measured pool (1,000,000 tokens)"
    )


def test_a_vllm_version_mismatch_names_vllm_and_its_package() -> None:
    """KV303 on a vLLM role used to say "SGLang 0.32.0 booted ... install sglang==0.31.0"."""
    target = replace(make_target(engine_version="0.31.0"), engine="vllm")
    figures = judge_figures(target, EngineReport(ranks=(RANK,), server=server(version="0.32.0")))
    [mismatch] = [f for f in figures.findings if f.rule == "KV303"]
    assert mismatch.message.startswith("vLLM 0.32.0 booted, but the manifest declares 0.31.0")
    assert mismatch.hint.startswith("install vllm==0.31.0 on this host")
