"""The pair rules on vLLM roles (KV104 on vLLM's bounds, KV110, kv_both on either side), KV111's
policy.min_concurrency, and SGLang's disaggregation rules kept off vLLM roles."""

from __future__ import annotations

import json
from dataclasses import replace

from kvcheck.model import PoolMeasurement, RoleTarget
from kvcheck.policy.rules import evaluate_deployment, evaluate_role


def vllm_role(name: str, kv_role: str | None, *, connector: str = "ExampleConnector", **args: object) -> RoleTarget:
    if kv_role is not None:
        args["kv_transfer_config"] = json.dumps({"kv_connector": connector, "kv_role": kv_role})
    return RoleTarget(name=name, context_length=2048, min_headroom=1.0, engine_version="0.32.0", args=args,
                      argv_args=(), engine="vllm")


def served(name: str, max_model_len: int, pool: int = 127 * 128) -> PoolMeasurement:
    # vLLM's bound: prompts of max_model_len tokens or more are refused
    return PoolMeasurement(role=name, source="measure", pool_tokens=pool, max_input_tokens=min(max_model_len, pool),
                           context_len=max_model_len)


def rules(found: list) -> list[tuple[str, str | None]]:
    return sorted((f.rule, f.role) for f in found)


def test_a_matching_vllm_pair_raises_nothing() -> None:
    targets = [vllm_role("p", "kv_producer"), vllm_role("d", "kv_consumer")]
    assert evaluate_deployment(targets, [served("p", 4096), served("d", 4096)]) == []


def test_different_max_model_len_is_kv110_and_kv104() -> None:
    targets = [vllm_role("p", "kv_producer"), vllm_role("d", "kv_consumer")]
    found = evaluate_deployment(targets, [served("p", 2048), served("d", 4096)])
    assert rules(found) == [("KV104", None), ("KV110", None)]
    [kv110] = [f for f in found if f.rule == "KV110"]
    assert (kv110.severity, kv110.message) == ("error", (
        "p serves a context length of 2,048 tokens but d 4,096: requests of 2,048 to 4,095 tokens are taken by d "
        "and refused by p, failing (or hanging) between the two"))


def test_a_usable_pool_that_binds_below_max_model_len_is_kv104_alone() -> None:
    # same max_model_len, but the decode role's pool (an override below the window) admits less
    targets = [vllm_role("p", "kv_producer"), vllm_role("d", "kv_consumer")]
    found = evaluate_deployment(targets, [served("p", 4096), served("d", 4096, pool=15 * 128)])
    assert rules(found) == [("KV104", None)]
    assert found[0].message.startswith("p admits prompts below 4,096 tokens but d below 1,920")


def test_kv_both_stands_on_either_side() -> None:
    # a kv_both role against a decode role: compared as the prefill side
    targets = [vllm_role("both", "kv_both"), vllm_role("d", "kv_consumer")]
    assert rules(evaluate_deployment(targets, [served("both", 4096), served("d", 2048)])) == [
        ("KV104", None), ("KV110", None)]
    # against a prefill role: compared as the decode side
    targets = [vllm_role("p", "kv_producer"), vllm_role("both", "kv_both")]
    assert rules(evaluate_deployment(targets, [served("p", 4096), served("both", 2048)])) == [
        ("KV104", None), ("KV110", None)]
    # two kv_both roles: each pair once, never a role with itself
    targets = [vllm_role("a", "kv_both"), vllm_role("b", "kv_both")]
    assert rules(evaluate_deployment(targets, [served("a", 4096), served("b", 2048)])) == [
        ("KV104", None), ("KV110", None)]
    assert evaluate_deployment([vllm_role("a", "kv_both")], [served("a", 4096)]) == []


def test_unified_vllm_servers_are_no_pair() -> None:
    targets = [vllm_role("a", None), vllm_role("b", None)]
    assert evaluate_deployment(targets, [served("a", 4096), served("b", 2048)]) == []


def test_sglangs_disaggregation_rules_stay_off_vllm_roles() -> None:
    # KV203 names --disaggregation-enable-kv-checksum and KV201 SGLang's 0.5.22 fixes: neither is vLLM's
    old = RoleTarget(name="p", context_length=2048, min_headroom=1.0, engine_version="0.4.2",
                     args={"kv_transfer_config": json.dumps({"kv_connector": "X", "kv_role": "kv_producer"})},
                     argv_args=(), engine="vllm")
    assert evaluate_role(old, served("p", 4096)) == []


def test_vllm_role_rules() -> None:
    nixl = vllm_role("r", "kv_both", connector="NixlConnector")
    assert rules(evaluate_role(nixl, served("r", 4096))) == [("KV210", "r")]
    recompute = vllm_role("r", None, kv_transfer_config=json.dumps(
        {"kv_connector": "ExampleConnector", "kv_role": "kv_producer", "kv_load_failure_policy": "recompute"}))
    assert rules(evaluate_role(recompute, served("r", 4096))) == [("KV212", "r")]
    sized = vllm_role("r", None, kv_cache_memory_bytes=2**30)
    assert rules(evaluate_role(sized, served("r", 4096))) == [("KV211", "r")]
    on_cpu = vllm_role("r", None, kv_cache_memory_bytes=2**30, device="cpu")
    assert evaluate_role(on_cpu, served("r", 4096)) == []


def test_min_concurrency_counts_whole_blocks_with_the_null_block() -> None:
    role = vllm_role("r", None, block_size=128)
    # 127 usable blocks, 16 a request of 2,048: 7.94 requests at once
    assert evaluate_role(role, served("r", 2048), min_concurrency=7.9) == []
    [kv111] = evaluate_role(role, served("r", 2048), min_concurrency=8)
    assert (kv111.rule, kv111.severity) == ("KV111", "error")
    assert kv111.message.startswith("the pool of 16,256 tokens holds 7.94 requests of the 2,048-token window at once")
    assert "the pool binds" in kv111.message
    # the default (1) is one full request: KV101's check, never a second finding
    short = served("r", 2048, pool=15 * 128)
    assert [f.rule for f in evaluate_role(role, short)] == ["KV101"]
    assert [f.rule for f in evaluate_role(role, short, min_concurrency=4)] == ["KV101"]


def test_sglang_pairs_get_kv110_too() -> None:
    def sglang(name: str, mode: str) -> RoleTarget:
        return RoleTarget(name=name, context_length=2048, min_headroom=1.0, engine_version="0.5.23",
                          args={"disaggregation_mode": mode}, argv_args=())

    measured = [PoolMeasurement(role="p", source="measure", pool_tokens=10_000, max_input_tokens=4089,
                                context_len=4096),
                PoolMeasurement(role="d", source="measure", pool_tokens=10_000, max_input_tokens=2041,
                                context_len=2048)]
    assert rules(evaluate_deployment([sglang("p", "prefill"), sglang("d", "decode")], measured)) == [
        ("KV104", None), ("KV110", None)]


def test_min_concurrency_counts_the_engines_running_request_cap() -> None:
    """KV111 takes the smaller of pool / window and the engine's max_running_requests (measured, else the
    role's argument): a pool of 4,096 behind max_running_requests=1 serves one 2,048-token request at once."""
    sglang = RoleTarget(name="r", context_length=2048, min_headroom=1.0, engine_version="0.5.23", args={},
                        argv_args=())
    measured = PoolMeasurement(role="r", source="log", pool_tokens=4096, max_input_tokens=2042, context_len=2048,
                               max_running_requests=1)
    [kv111] = evaluate_role(sglang, measured, min_concurrency=2)
    assert kv111.message == (
        "the engine runs at most 1 request at once (max_running_requests=1), below the policy's min_concurrency 2: "
        "its pool of 4,096 tokens would hold 2.00 requests of the 2,048-token window, but max_running_requests "
        "binds, so long requests queue behind each other")
    # a cap at or above the policy, or above what the pool holds, leaves the pool to judge
    assert evaluate_role(sglang, replace(measured, max_running_requests=2), min_concurrency=2) == []
    [by_pool] = evaluate_role(sglang, replace(measured, max_running_requests=1), min_concurrency=3)
    assert by_pool.message.startswith("the engine runs at most 1 request at once")
    [by_pool] = evaluate_role(sglang, replace(measured, max_running_requests=8), min_concurrency=3)
    assert by_pool.message.startswith("the pool of 4,096 tokens holds 2.00 requests")
    # no measured cap: the role's own argument (vLLM: max_num_seqs)
    role = vllm_role("r", None, max_num_seqs=2)
    [kv111] = evaluate_role(role, served("r", 2048), min_concurrency=3)
    assert kv111.message.startswith("the engine runs at most 2 requests at once (max_num_seqs=2)")
    assert evaluate_role(vllm_role("r", None, max_num_seqs=8), served("r", 2048), min_concurrency=3) == []


def test_min_concurrency_divides_sglangs_argument_among_dp_attention_workers() -> None:
    """Under DP attention each worker (one pool) runs max_running_requests // dp_size: --max-running-requests 8 at
    DP 8 is one request at once per pool, so a pool of four windows with min_concurrency 2 is KV111 when no
    measurement states the per-worker cap (a log cut before the scheduler line, a server that does not say)."""
    args = {"enable_dp_attention": True, "dp_size": 8, "tp_size": 8, "max_running_requests": 8}
    sglang = RoleTarget(name="r", context_length=2048, min_headroom=1.0, engine_version="0.5.23", args=args,
                        argv_args=())
    unstated = PoolMeasurement(role="r", source="log", pool_tokens=8192, max_input_tokens=2042, context_len=2048)
    [kv111] = evaluate_role(sglang, unstated, min_concurrency=2)
    assert kv111.message.startswith("the engine runs at most 1 request at once (max_running_requests=1)")
    # without DP attention the argument is the one pool's own cap
    plain = replace(sglang, args={**args, "enable_dp_attention": False})
    assert evaluate_role(plain, unstated, min_concurrency=2) == []
