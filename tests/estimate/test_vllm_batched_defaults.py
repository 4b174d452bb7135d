"""The batch vLLM profiles when --max-num-batched-tokens is unset (EngineArgs's defaults, per release): the
activation peak of the profile run, and so the pool, follows it."""

from __future__ import annotations

from pathlib import Path

import pytest

from kvcheck.engines.vllm.sizing.model import estimate_role
from kvcheck.model import EstimateInputs, RoleTarget
from tests.estimate.helpers import verify_estimate

MODELS = Path(__file__).resolve().parents[1] / "data" / "models"
LLAMA = MODELS / "meta-llama--Meta-Llama-3.1-8B.json"


def _target(version: str, **args: object) -> RoleTarget:
    return RoleTarget(name="server", context_length=131072, min_headroom=1.0, engine_version=version,
                      args={"max_model_len": 131072, "gpu_memory_utilization": 0.5, **args}, argv_args=(),
                      gpu="H100", model_config=LLAMA, engine="vllm", estimate=EstimateInputs())


@pytest.mark.parametrize("version", ["0.11.1", "0.32.0", None])
def test_chunked_prefill_off_profiles_a_batch_of_max_model_len(version: str | None) -> None:
    """EngineArgs raises the unset max_num_batched_tokens to max_model_len when chunked prefill is off (from
    0.11.1): the profile run's activations grow with it. The estimate kept the 8,192-token default."""
    off = estimate_role(_target(version, enable_chunked_prefill=False), offline=True)
    explicit = estimate_role(_target(version, max_num_batched_tokens=131072), offline=True)
    assert off.details["max_num_batched_tokens"] == 131072
    assert (off.pool_tokens, off.pool_range) == (explicit.pool_tokens, explicit.pool_range)


@pytest.mark.parametrize("version", ["0.10.0", "0.11.0"])
def test_before_0_11_1_v1_keeps_chunked_prefill_on_for_generation(version: str) -> None:
    """_set_default_args_v1 sets enable_chunked_prefill = True for every generative model up to 0.11.0."""
    off = estimate_role(_target(version, enable_chunked_prefill=False), offline=True)
    on = estimate_role(_target(version), offline=True)
    assert off.details["max_num_batched_tokens"] == 8192
    assert off.pool_tokens == on.pool_tokens


def test_a_set_max_num_batched_tokens_is_kept_with_chunked_prefill_off() -> None:
    est = estimate_role(_target("0.32.0", enable_chunked_prefill=False, max_num_batched_tokens=140000), offline=True)
    assert est.details["max_num_batched_tokens"] == 140000


def _verify(tmp_path: Path, args: str) -> tuple[int, list[str]]:
    code, report = verify_estimate(tmp_path, LLAMA, f"max-model-len: 131072, {args}")
    return code, sorted(f["rule"] for f in report["findings"] if f["severity"] == "error")


def test_cli_chunked_prefill_off_fails_a_role_the_default_batch_passes(tmp_path: Path) -> None:
    """Llama-3.1-8B on one H100 at gpu-memory-utilization 0.5: 180,080 tokens with the default batch (exit 0);
    vLLM profiles 131,072 tokens with chunked prefill off and cannot fit one request of 131,072 (exit 1)."""
    assert _verify(tmp_path, "gpu-memory-utilization: 0.5, enable-chunked-prefill: false") == (1, ["KV101", "KV220"])


def test_cli_throughput_mode_fails_a_role_the_balanced_defaults_pass(tmp_path: Path) -> None:
    """At gpu-memory-utilization 0.44 the balanced defaults leave 141,152 tokens (exit 0 before); the doubled
    batch and sequences leave 125,856, below one request of 131,072."""
    assert _verify(tmp_path, "gpu-memory-utilization: 0.44, performance-mode: throughput") == (1, ["KV101", "KV220"])


@pytest.mark.parametrize("version", ["0.17.0", "0.32.0", None])
def test_performance_mode_throughput_doubles_the_unset_batch_and_sequences(version: str | None) -> None:
    """`--performance-mode throughput` (from 0.17.0) doubles the default max_num_batched_tokens and max_num_seqs;
    the estimate priced the profile run at the balanced defaults, a larger pool than vLLM buys."""
    fast = estimate_role(_target(version, performance_mode="throughput"), offline=True)
    explicit = estimate_role(_target(version, max_num_batched_tokens=16384, max_num_seqs=2048), offline=True)
    assert (fast.details["max_num_batched_tokens"], fast.details["max_num_seqs"]) == (16384, 2048)
    assert (fast.pool_tokens, fast.pool_range) == (explicit.pool_tokens, explicit.pool_range)


def test_performance_mode_throughput_keeps_what_the_role_sets() -> None:
    est = estimate_role(_target("0.32.0", performance_mode="throughput", max_num_batched_tokens=4096,
                                max_num_seqs=128), offline=True)
    assert (est.details["max_num_batched_tokens"], est.details["max_num_seqs"]) == (4096, 128)


def test_throughput_and_chunked_prefill_off_raise_the_doubled_batch_to_max_model_len() -> None:
    est = estimate_role(_target("0.32.0", performance_mode="throughput", enable_chunked_prefill=False,
                                max_model_len=12000), offline=True)
    assert (est.details["max_num_batched_tokens"], est.details["max_num_seqs"]) == (16384, 2048)
