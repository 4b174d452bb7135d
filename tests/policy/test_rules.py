"""The capacity and engine-safety rules, case by case, as the contract states them."""

from __future__ import annotations

from dataclasses import replace

import pytest

from kvcheck.model import Finding, Location, PoolMeasurement, RoleTarget
from kvcheck.policy.config import PolicyConfig
from kvcheck.policy.judge import judge
from kvcheck.policy.registry import all_rules
from kvcheck.policy.rules import evaluate_deployment, evaluate_role

WINDOW = 1_048_576
DECODE_POOL = WINDOW - 7 + 512  # the smallest decode pool whose bound admits every prompt the window promises


def target(name="prefill", *, args=None, version="0.5.23", headroom=1.0, window=WINDOW, locations=None):
    return RoleTarget(
        name=name,
        context_length=window,
        min_headroom=headroom,
        engine_version=version,
        args=args or {},
        argv_args=(),
        location=Location("m.yaml", 10, 3),
        arg_locations=locations or {},
    )


def measured(pool, *, role="prefill", max_input=None, context_len=None, version=None, resolved=None):
    return PoolMeasurement(role=role, source="measure", pool_tokens=pool, max_input_tokens=max_input,
                           context_len=context_len, engine_version=version, resolved_args=resolved or {})


def codes(findings: list[Finding]) -> list[str]:
    return [f.rule for f in findings]


def test_pool_below_window_is_kv101_with_the_largest_context_that_fits() -> None:
    [found] = evaluate_role(target(), measured(681_280))
    assert (found.rule, found.severity, found.role) == ("KV101", "error", "prefill")
    assert "681,280" in found.message and "short by 367,296 tokens" in found.message
    assert found.hint.startswith("the largest context that fits this pool is 681,280 tokens")
    assert found.location == Location("m.yaml", 10, 3)


def test_pool_exactly_at_window_passes() -> None:
    assert evaluate_role(target(), measured(WINDOW)) == []
    assert codes(evaluate_role(target(), measured(WINDOW - 1))) == ["KV101"]


def test_headroom_raises_the_requirement_and_rounds_up() -> None:
    t = target(headroom=1.25, window=1000)
    assert t.required_tokens == 1250
    assert codes(evaluate_role(t, measured(1249))) == ["KV101"]
    assert evaluate_role(t, measured(1250)) == []
    [found] = evaluate_role(t, measured(1000))
    assert found.hint.startswith("the largest context that fits this pool is 800 tokens (with min_headroom 1.25)")


def test_unmeasured_pool_is_not_judged_by_capacity_rules() -> None:
    assert evaluate_role(target(), measured(None)) == []


def test_explicit_context_length_below_window_is_kv102_at_the_arg() -> None:
    where = Location("m.yaml", 7, 3)
    [found] = evaluate_role(
        target(args={"context_length": 131072}, locations={"context_length": where}), measured(WINDOW * 2)
    )
    assert found.rule == "KV102" and found.location == where
    assert "--context-length 131,072" in found.message


def test_engine_context_below_window_is_kv102() -> None:
    assert codes(evaluate_role(target(), measured(WINDOW * 2, context_len=202_752))) == ["KV102"]
    assert evaluate_role(target(), measured(WINDOW * 2, context_len=WINDOW)) == []


def test_max_total_tokens_cap_is_kv103() -> None:
    found = evaluate_role(target(args={"max_total_tokens": 500_000}), measured(500_000))
    assert codes(found) == ["KV101", "KV103"]
    assert evaluate_role(target(args={"max_total_tokens": WINDOW}), measured(WINDOW)) == []


@pytest.mark.parametrize(
    ("version", "expected"),
    [("0.5.21", ["KV201"]), ("0.5.22", []), ("0.5.23", []), ("0.4.10.post2", ["KV201"]), ("not-a-version", [])],
)
def test_old_release_on_a_disaggregated_role_is_kv201(version, expected) -> None:
    args = {"disaggregation_mode": "prefill", "disaggregation_enable_kv_checksum": True}
    assert codes(evaluate_role(target(args=args, version=version), measured(WINDOW))) == expected


def test_old_release_without_disaggregation_is_fine() -> None:
    assert evaluate_role(target(version="0.5.10"), measured(WINDOW)) == []


def test_measured_version_wins_over_the_declared_one() -> None:
    args = {"disaggregation_mode": "decode", "disaggregation_enable_kv_checksum": True}
    assert codes(evaluate_role(target(args=args), measured(DECODE_POOL, version="0.5.21"))) == ["KV201"]


def test_auto_truncate_is_kv202_also_when_only_the_server_reports_it() -> None:
    assert codes(evaluate_role(target(args={"allow_auto_truncate": True}), measured(WINDOW))) == ["KV202"]
    assert codes(evaluate_role(target(), measured(WINDOW, resolved={"allow_auto_truncate": True}))) == ["KV202"]


def test_disaggregated_role_without_checksum_is_kv203() -> None:
    # a decode pool of the window plus its 512-token reservation (less the 7 the window never promises)
    assert codes(evaluate_role(target(args={"disaggregation_mode": "decode"}), measured(DECODE_POOL))) == ["KV203"]
    assert codes(evaluate_role(target(args={"disaggregation_mode": "null"}), measured(WINDOW))) == []


def test_prefill_and_decode_limits_differ_is_kv104() -> None:
    targets = [target("p", args={"disaggregation_mode": "prefill"}), target("d", args={"disaggregation_mode": "decode"})]
    [found] = evaluate_deployment(targets, [measured(1, role="p", max_input=681_274), measured(1, role="d", max_input=1_048_570)])
    assert (found.rule, found.severity, found.role) == ("KV104", "warning", None)
    same = [measured(1, role="p", max_input=10), measured(1, role="d", max_input=10)]
    assert evaluate_deployment(targets, same) == []


def test_policy_ignore_and_severity_override() -> None:
    policy = PolicyConfig(ignore=frozenset({"KV203"}), severity={"KV202": "error"})
    report = judge(
        command="verify", mode="measure", source="m.yaml",
        targets=[target(args={"disaggregation_mode": "decode", "allow_auto_truncate": True})],
        measurements=[measured(DECODE_POOL)], policy=policy,
    )
    assert [(f.rule, f.severity) for f in report.findings] == [("KV202", "error")]
    assert (report.verdict, report.exit_code) == ("fail", 1)


def test_strict_turns_warnings_into_failures() -> None:
    kwargs = dict(command="verify", mode="measure", source="m.yaml",
                  targets=[target(args={"allow_auto_truncate": True})], measurements=[measured(WINDOW)],
                  policy=PolicyConfig())
    assert judge(**kwargs).exit_code == 0
    strict = judge(**kwargs, strict=True)
    assert (strict.roles[0].status, strict.exit_code) == ("fail", 1)


def test_a_role_that_could_not_be_measured_is_exit_3_and_a_failure_beats_it() -> None:
    broken = PoolMeasurement(role="d", source="measure", pool_tokens=None,
                             findings=(Finding("KV301", "error", "d", "exited with status 137"),))
    report = judge(command="verify", mode="measure", source="m.yaml", targets=[target("d")],
                   measurements=[broken], policy=PolicyConfig())
    assert (report.roles[0].status, report.verdict, report.exit_code) == ("error", "error", 3)
    both = judge(command="verify", mode="measure", source="m.yaml", targets=[target("p"), target("d")],
                 measurements=[measured(10, role="p"), broken], policy=PolicyConfig())
    assert [r.status for r in both.roles] == ["fail", "error"]
    assert (both.verdict, both.exit_code) == ("fail", 1)


def test_every_rule_has_documentation() -> None:
    rules = all_rules()
    for code in ("KV101", "KV102", "KV103", "KV104", "KV201", "KV202", "KV203", "KV204"):
        assert code in rules
        assert len(rules[code].doc) > 80 and "Fix:" in rules[code].doc


def test_a_role_without_a_pool_figure_is_an_error_even_with_no_finding() -> None:
    silent = PoolMeasurement(role="p", source="measure", pool_tokens=None)
    report = judge(command="verify", mode="measure", source="m.yaml", targets=[target("p")],
                   measurements=[silent], policy=PolicyConfig())
    assert (report.roles[0].status, report.verdict, report.exit_code) == ("error", "error", 3)
    assert [(f.rule, f.message) for f in report.findings] == [("KV301", "no pool figure was obtained for this role")]


def test_ignoring_the_measurement_failure_still_cannot_pass() -> None:
    broken = PoolMeasurement(role="p", source="estimate", pool_tokens=None,
                             findings=(Finding("KV305", "error", "p", "architecture X is not understood"),))
    report = judge(command="verify", mode="estimate", source="m.yaml", targets=[target("p")],
                   measurements=[broken], policy=PolicyConfig(ignore=frozenset({"KV305"})))
    assert (report.roles[0].status, report.exit_code) == ("error", 3)


def test_an_error_finding_anywhere_means_a_non_zero_exit() -> None:
    from kvcheck.model import Report, RoleResult

    role = RoleResult("p", "pass", 10, 8, None, "estimate")
    advice = Finding("KV106", "error", "p", "raised to error by the policy")
    assert Report("plan", "estimate", "m.yaml", 8, (role,), (advice,)).exit_code == 1
    unmeasured = Finding("KV301", "error", "p", "no figure")
    assert Report("verify", "measure", "m.yaml", 8, (role,), (unmeasured,)).exit_code == 3


@pytest.mark.parametrize(("headroom", "window", "required"), [(1.1, 100_000, 110_000), (1.15, 1_000, 1_150),
                                                               (1.3, 10, 13), (1.0001, 10_000, 10_001)])
def test_required_tokens_are_exact_decimal_products(headroom, window, required) -> None:
    assert target(headroom=headroom, window=window).required_tokens == required


def test_a_decode_pool_that_holds_the_window_but_not_its_reservation_is_kv107() -> None:
    decode = {"disaggregation_mode": "decode", "disaggregation_enable_kv_checksum": True}
    # the smallest pool that admits the window's longest prompt (W - 7) plus 512 reserved: no finding
    assert codes(evaluate_role(target(args=decode), measured(DECODE_POOL))) == []
    [found] = evaluate_role(target(args=decode), measured(DECODE_POOL - 1))
    assert (found.rule, found.severity, found.role) == ("KV107", "error", "prefill")
    assert found.message == (
        "the pool holds 1,049,080 tokens, but the role admits prompts only below 1,048,569 tokens: it reserves "
        "512 tokens per request on top of the prompt; prompts of 1,048,569 to 1,048,569 tokens, which the "
        "1,048,576-token window promises, wait with no error"
    )
    assert found.hint == ("give the role a pool of at least 1,049,081 tokens, or lower its reservation "
                          "(--num-reserved-decode-tokens)")
    # the pool of exactly the window: every prompt from pool - 511 up waits
    [found] = evaluate_role(target(args=decode), measured(WINDOW))
    assert "admits prompts only below 1,048,065 tokens" in found.message
    # a prefill or unified role reserves nothing
    assert codes(evaluate_role(target(args={"disaggregation_mode": "prefill",
                                            "disaggregation_enable_kv_checksum": True}), measured(WINDOW))) == []
    # below the window KV101 says what is wrong, once
    assert codes(evaluate_role(target(args=decode), measured(WINDOW - 1))) == ["KV101"]


def test_the_decode_reservation_follows_the_flag_and_the_release() -> None:
    decode = {"disaggregation_mode": "decode", "disaggregation_enable_kv_checksum": True}
    smaller = {**decode, "num_reserved_decode_tokens": 7}
    # a pool of the window with 7 reserved admits W - 7 tokens, the longest prompt the window promises
    assert codes(evaluate_role(target(args=smaller), measured(WINDOW))) == []
    assert codes(evaluate_role(target(args={**decode, "num_reserved_decode_tokens": 8}), measured(WINDOW))) == ["KV107"]
    [found] = evaluate_role(target(args={**decode, "num_reserved_decode_tokens": 4096}), measured(DECODE_POOL))
    assert "it reserves 4,096 tokens per request" in found.message
    # 0.4.6.post3 and 0.4.7 read SGLANG_NUM_RESERVED_DECODE_TOKENS (the flag came in 0.4.7.post1)
    old = target(args=smaller, version="0.4.7")
    old = replace(old, env={"SGLANG_NUM_RESERVED_DECODE_TOKENS": "1024"})
    [found] = [f for f in evaluate_role(old, measured(WINDOW)) if f.rule == "KV107"]
    assert "it reserves 1,024 tokens per request" in found.message
    # before 0.4.6.post3 the reservation is a fixed 512, whatever the flag or the variable say
    fixed = replace(target(args=smaller, version="0.4.6"), env={"SGLANG_NUM_RESERVED_DECODE_TOKENS": "8"})
    [found] = [f for f in evaluate_role(fixed, measured(WINDOW)) if f.rule == "KV107"]
    assert "it reserves 512 tokens per request" in found.message
