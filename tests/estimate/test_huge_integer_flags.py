"""Integer flags of absurd size (review9 finding 2): a 400-digit vLLM max-model-len or SGLang
cuda-graph-max-bs-decode was an OverflowError (exit 4) in the sizing's float arithmetic, and SGLang's
chunked-prefill-size from 1e14 a MemoryError (its prefill capture list was built bucket by bucket). The flag
catalogue refuses integers above 1e18 in magnitude as it refuses floats (exit 2, file:line), and SGLang's capture
lists are counted, not built."""

from __future__ import annotations

from pathlib import Path

import pytest

from kvcheck.engines.sglang.sizing.defaults import decode_capture_count, prefill_capture_count
from tests.conftest import run_kvcheck
from tests.datapaths import MODELS
from tests.estimate.helpers import one_role_manifest

LLAMA_8B = MODELS / "meta-llama--Meta-Llama-3.1-8B.json"
DIGITS_400 = "9" * 400

HUGE = [
    ("vllm", "0.32.0", "max-model-len", ""),
    ("vllm", "0.32.0", "max-num-seqs", ""),
    ("vllm", "0.32.0", "max-num-batched-tokens", ""),
    ("vllm", "0.32.0", "kv-cache-memory-bytes", ""),
    ("vllm", "0.32.0", "num-gpu-blocks-override", ""),
    ("vllm", "0.32.0", "offload-prefetch-step", "offload-group-size: 2, "),
    ("sglang", "0.5.23", "cuda-graph-max-bs-decode", ""),
    ("sglang", "0.5.23", "chunked-prefill-size", ""),
    ("sglang", "0.5.23", "cpu-offload-gb", ""),
]


def _run(tmp_path: Path, command: str, engine: str, version: str, args: str) -> tuple[int, str, Path]:
    path = one_role_manifest(tmp_path, LLAMA_8B, args, name=f"{command}-{engine}", engine=engine, version=version)
    extra = ("--mode", "estimate") if command == "verify" else ()
    done = run_kvcheck(command, str(path), *extra)
    return done.exit_code, done.stdout + done.stderr, path


@pytest.mark.parametrize("command", ["verify", "plan"])
@pytest.mark.parametrize(("engine", "version", "flag", "before"), HUGE)
def test_a_400_digit_integer_flag_is_bad_input(tmp_path: Path, command: str, engine: str, version: str, flag: str,
                                               before: str) -> None:
    args = f"{before}{flag}: {DIGITS_400}"
    code, out, path = _run(tmp_path, command, engine, version, args)
    assert code == 2, out
    assert "Traceback" not in out and "internal error" not in out
    column = len("args: {") + len(args) - len(DIGITS_400) + 1
    assert (f"{path}:5:{column}: args.{flag}: '{flag}' must be an integer no larger than 1e+18, "
            "not a 400-digit integer") in out, out


@pytest.mark.parametrize("command", ["verify", "plan"])
@pytest.mark.parametrize(("engine", "version", "args", "message"), [
    ("sglang", "0.5.23", "chunked-prefill-size: -1000000000000000001",
     "'chunked-prefill-size' must be an integer no smaller than -1e+18, not -1000000000000000001"),
    ("sglang", "0.5.23", "chunked-prefill-size: 1000000000000000001",
     "'chunked-prefill-size' must be an integer no larger than 1e+18, not 1000000000000000001"),
    ("sglang", "0.5.23", f"context-length: {DIGITS_400}k",  # human_readable_int
     "'context-length' must be an integer no larger than 1e+18, not a 40"),
    ("vllm", "0.32.0", f"max-model-len: {DIGITS_400}k",  # vLLM's float arithmetic makes it inf
     "'max-model-len' must be an integer no larger than 1e+18, not a 400-character number with the suffix k"),
    ("vllm", "0.32.0", f"max-num-seqs: {'9' * 5000}",  # beyond what int() reads (4,300 digits)
     ":5:22: an integer of more than 4,300 digits"),
])
def test_integer_bounds_messages(tmp_path: Path, command: str, engine: str, version: str, args: str,
                                 message: str) -> None:
    code, out, _ = _run(tmp_path, command, engine, version, args)
    assert code == 2, out
    assert message in out, out
    assert "Traceback" not in out and "internal error" not in out


@pytest.mark.parametrize("command", ["verify", "plan"])
def test_chunked_prefill_size_at_the_bound_is_estimated(tmp_path: Path, command: str) -> None:
    """1e18, the largest value taken, was a MemoryError (from 1e14) in the prefill capture list; now estimated."""
    code, out, _ = _run(tmp_path, command, "sglang", "0.5.23", "chunked-prefill-size: 1000000000000000000")
    assert code in (0, 1), out
    assert "Traceback" not in out and "internal error" not in out


def _decode_sizes(max_bs: int, *, speculative: bool) -> list[int]:
    """SGLang's decode capture list, built (the code this file's counts replaced), for small sizes."""
    if speculative:
        sizes = [*range(1, 9), *range(10, 33, 2), *range(40, 65, 4), *range(72, 257, 8), *range(272, max_bs + 1, 16)]
    else:
        sizes = [1, 2, 4, 8, 12, *range(16, 257, 8), *range(272, 512, 16), *range(512, max_bs + 1, 32)]
    sizes = [s for s in sizes if s <= max_bs]
    return sizes if max_bs in sizes else [*sizes, max_bs]


def _prefill_sizes(max_tokens: int) -> list[int]:
    sizes = [*range(4, 33, 4), *range(48, 257, 16), *range(288, 513, 32), *range(576, 1025, 64),
             *range(1280, 4097, 256), *range(4608, max_tokens + 1, 512)]
    return [s for s in sizes if s <= max_tokens]


def test_capture_counts_match_the_lists_sglang_builds() -> None:
    for top in range(-2, 12_000):
        assert prefill_capture_count(top) == len(_prefill_sizes(top)), top
        for speculative in (False, True):
            assert decode_capture_count(top, speculative=speculative) == len(
                _decode_sizes(top, speculative=speculative)), (top, speculative)


def test_capture_counts_of_a_huge_size_are_arithmetic() -> None:
    top = 10**18  # the largest value the catalogue takes: on every step below, so captured in the tail
    # prefill: 50 fixed buckets up to 4096, then every 512 tokens from 4608
    assert prefill_capture_count(top) == 50 + (top - 4608) // 512 + 1
    # decode: 51 fixed sizes below 512, then every 32 from 512 (272 and 16 when speculative)
    assert decode_capture_count(top, speculative=False) == 51 + (top - 512) // 32 + 1
    assert decode_capture_count(top, speculative=True) == 51 + (top - 272) // 16 + 1
    # one below is off the step: captured besides the tail
    assert decode_capture_count(top - 1, speculative=False) == 51 + (top - 1 - 512) // 32 + 1 + 1
    assert decode_capture_count(top - 1, speculative=True) == 51 + (top - 1 - 272) // 16 + 1 + 1
