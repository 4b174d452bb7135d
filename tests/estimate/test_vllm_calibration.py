"""The claims docs/estimate.md makes from the public vLLM logs (tests/bench/calibrate_vllm_estimator.py)."""

from __future__ import annotations

import re

from tests.bench.calibrate_vllm_estimator import load_cases, table


def _rows() -> list[str]:
    lines, _ = table()
    return lines[1:]


def test_every_logged_memory_lies_inside_the_predicted_range() -> None:
    memory = [line for line in _rows() if " memory (GiB) " in line]
    assert len(memory) == 7
    assert all(" holds;" in line for line in memory), memory


def test_every_boot_vllm_refused_is_predicted_as_a_refusal() -> None:
    refusals = [line for line in _rows() if " refusal " in line or "refusal predicted" in line]
    refused = [case for case in load_cases() if case.get("refused_boot") or case["refused"]]
    assert len(refusals) == len(refused) == 4
    assert all(line.rstrip().endswith(("predicted", "predicted: yes")) and "NOT" not in line for line in refusals), refusals


def test_the_block_arithmetic_matches_every_log() -> None:
    errors = {line.split()[0]: float(re.search(r"([+-]\d+\.\d+)%", line).group(1))  # type: ignore[union-attr]
              for line in _rows() if " layout " in line}
    multi_worker = {"4xh100-qwen3-235b-a22b-fp8-lmcache", "8xl40s-qwen3-235b-a22b-2507-fp8-v0.10.2"}
    assert len(errors) == 7
    assert all(abs(err) <= 0.02 for case, err in errors.items() if case not in multi_worker), errors
    assert all(abs(err) <= 1.2 for err in errors.values()), errors


def test_the_real_cpu_boots_are_predicted_exactly() -> None:
    rows = [line for line in _rows() if line.startswith("real-cpu-")]
    assert any(" pool " in line and "16,256      16,256   +0.00%" in line for line in rows), rows
    assert any(" max model len " in line and "1,920       1,920   +0.00%" in line for line in rows), rows
