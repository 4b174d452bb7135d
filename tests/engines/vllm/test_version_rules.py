"""The version rules for known vLLM prefill/decode defects (KV213, KV214): each raised on the releases its
public issue or PR shows affected (read in each release's source), and on no other; then one end to end
through the CLI on a manifest file."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from kvcheck.model import PoolMeasurement, RoleTarget
from kvcheck.policy.rules import evaluate_role


def role(version: str, config: dict[str, object] | None, **args: object) -> RoleTarget:
    if config is not None:
        args["kv_transfer_config"] = json.dumps(config)
    return RoleTarget(name="d", context_length=2048, min_headroom=1.0, engine_version=version, args=args,
                      argv_args=(), engine="vllm")


def served() -> PoolMeasurement:
    return PoolMeasurement(role="d", source="measure", pool_tokens=127 * 128, max_input_tokens=4096, context_len=4096)


def codes(target: RoleTarget) -> list[str]:
    return sorted(f.rule for f in evaluate_role(target, served()))


DECODE = {"kv_connector": "LMCacheConnectorV1", "kv_role": "kv_consumer"}


@pytest.mark.parametrize(
    ("version", "expected"),
    [
        ("0.11.0", []),  # no recovery from failed loads yet
        ("0.11.1", ["KV213"]),  # vllm-project/vllm#19330: always recomputed
        ("0.12.0", ["KV213"]),
        ("0.13.0", ["KV213"]),  # kv_load_failure_policy, default recompute
        ("0.16.0", ["KV213"]),
        ("0.16.1rc1", ["KV213"]),
        ("0.17.0", []),  # vllm-project/vllm#34896: default fail
        ("0.32.0", []),
    ],
)
def test_kv213_follows_the_releases_that_recompute_failed_loads_by_default(version: str, expected: list[str]) -> None:
    assert codes(role(version, DECODE)) == expected


def test_kv213_says_what_each_release_lets_you_do() -> None:
    [fixed_by_setting] = evaluate_role(role("0.14.0", DECODE), served())
    assert fixed_by_setting.message == (
        "vLLM 0.14.0 recomputes a request whose KV blocks failed to load (kv_load_failure_policy defaults to "
        "recompute): a failing transfer is hidden, and recompute has given wrong output when requests share blocks")
    assert fixed_by_setting.hint == "set kv_load_failure_policy: fail in --kv-transfer-config"
    [fixed_by_upgrade] = evaluate_role(role("0.12.0", DECODE), served())
    assert "(it cannot be turned off)" in fixed_by_upgrade.message
    assert fixed_by_upgrade.hint == "deploy vLLM 0.17.0 or later (0.13.0 to 0.16.x: set kv_load_failure_policy: fail)"


def test_kv213_is_not_raised_where_the_policy_is_set_or_there_is_no_transfer() -> None:
    assert codes(role("0.14.0", {**DECODE, "kv_load_failure_policy": "fail"})) == []
    assert codes(role("0.14.0", {**DECODE, "kv_load_failure_policy": "recompute"})) == ["KV212"]  # stated: KV212's
    assert codes(role("0.14.0", None)) == []
    assert codes(role("0.14.0", None, block_size=32)) == []
    assert codes(role("not-a-release", DECODE)) == []  # an unreadable release: no version rule guesses


NIXL = {"kv_connector": "NixlConnector", "kv_role": "kv_consumer", "kv_load_failure_policy": "fail"}


@pytest.mark.parametrize(
    ("version", "expected"),
    [
        ("0.11.0", []),  # before heterogeneous block sizes (vllm-project/vllm#26759)
        ("0.11.1", ["KV214"]),
        ("0.11.2", ["KV214"]),
        ("0.12.0", []),  # vllm-project/vllm#28925
    ],
)
def test_kv214_follows_the_releases_with_the_nixl_block_size_ratio_defect(version: str, expected: list[str]) -> None:
    assert codes(role(version, NIXL, block_size=128)) == expected


def test_kv214_needs_nixl_and_a_block_size_of_the_roles_own() -> None:
    assert codes(role("0.11.2", NIXL)) == []  # the backend's own block size: logical and physical agree
    assert codes(role("0.11.2", {**NIXL, "kv_connector": "LMCacheConnectorV1"}, block_size=128)) == []
    [kv214] = evaluate_role(role("0.11.2", NIXL, block_size=128), served())
    assert (kv214.severity, kv214.hint) == ("warning", "deploy vLLM 0.12.0 or later, or drop --block-size on both roles")
    assert kv214.message.startswith("NixlConnector with --block-size 128 on vLLM 0.11.2: ")


def test_the_cli_raises_kv213_for_a_decode_role_of_an_affected_release(tmp_path: Path) -> None:
    from tests.conftest import run_kvcheck
    from tests.engines.conformance.conftest import TINY_VLLM_CONFIG

    model = tmp_path / "tiny-llama"
    model.mkdir()
    (model / "config.json").write_text(json.dumps(TINY_VLLM_CONFIG))
    manifest = tmp_path / "deploy.yaml"
    manifest.write_text(yaml.safe_dump({
        "name": "decode on 0.16.0",
        "context_length": 4096,
        "model": {"path": str(model)},
        # 0.16.0's CPU worker sizes its cache from VLLM_CPU_KVCACHE_SPACE (it reads --kv-cache-memory-bytes from 0.20.0)
        "engine": {"name": "vllm", "version": "0.16.0", "env": {"VLLM_CPU_KVCACHE_SPACE": "1"}},
        "device": "cpu",
        "args": {"max-model-len": 4096,
                 "kv-transfer-config": {"kv_connector": "ExampleConnector", "kv_role": "kv_consumer",
                                        "kv_connector_extra_config": {"shared_storage_path": str(tmp_path)}}},
        "roles": {"decode": {}},
    }, sort_keys=False))
    done = run_kvcheck("verify", str(manifest), "--mode", "estimate", "--format", "json")
    report = json.loads(done.stdout)
    assert done.exit_code == 0, done.stderr + done.stdout  # a warning: the estimate passes, the finding says why
    [kv213] = [f for f in report["findings"] if f["rule"] == "KV213"]
    assert (kv213["severity"], kv213["role"]) == ("warning", "decode")
    assert kv213["message"].startswith("vLLM 0.16.0 recomputes a request whose KV blocks failed to load")
