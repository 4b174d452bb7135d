"""Score the vLLM estimate model against the public startup logs in tests/data/vllm_logs/.

Usage: python tests/bench/calibrate_vllm_estimator.py

Two checks per case, printed as one table:
- layout: the log's own "Available KV cache memory" through kvcheck's block arithmetic
  (sizing/layout.py) against the log's "GPU KV cache size" (num_blocks x block_size) or, for a refused
  boot, against the maximum model length vLLM's refusal names;
- memory: the whole estimate (device total, utilization, weights, activation, non-torch, CUDA graphs)
  against the logged available memory, for the cases whose GPU and settings the log states.
`set` says whether the constants of sizing/memory.py were fitted to the case (fit) or not (held-out).
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from kvcheck.engines.modelconfig import load_model_source  # noqa: E402
from kvcheck.engines.vllm.sizing.layout import kv_layout, model_dtype_of, resolve_kv_dtype  # noqa: E402
from kvcheck.engines.vllm.sizing.model import estimate_role  # noqa: E402
from kvcheck.model import EstimateInputs, RoleTarget  # noqa: E402

DATA = ROOT / "tests" / "data" / "vllm_logs"
MODELS = ROOT / "tests" / "data" / "models"
GIB = float(1 << 30)


def layout_for(case: dict):
    source = load_model_source(model_config=MODELS / case["model"], model_path=None, offline=True)
    dtype = model_dtype_of(source.config, source.text, None)
    kv = resolve_kv_dtype(case["args"].get("kv_cache_dtype"), dtype, source.quant)
    return kv_layout(source.text, source.architecture, tp=int(case["args"].get("tensor_parallel_size", 1)), pp=1,
                     kv_dtype=kv, block_size=case["block_size"], device="cuda")


def layout_row(case: dict) -> dict:
    layout = layout_for(case)
    available = int(case["available_gib"] * GIB)
    if case["refused"]:
        predicted = layout.largest_model_len(available, 2048, case["max_model_len"])
        logged = case["logged_max_model_len"]
        refused = layout.max_memory_usage(case["max_model_len"], 2048) > available - layout.bytes_per_block
        return {"check": "layout", "predicted": predicted, "logged": logged, "refusal": "yes" if refused else "NO"}
    predicted = layout.num_blocks(available) * layout.block_size
    return {"check": "layout", "predicted": predicted, "logged": case["logged_tokens"], "refusal": "-"}


def memory_row(case: dict) -> dict | None:
    if not case.get("gpu"):
        return None
    target = RoleTarget(name=case["id"], context_length=case["max_model_len"] or 8192, min_headroom=1.0,
                        engine_version=case["version"], args=dict(case["args"]), argv_args=(), gpu=case["gpu"],
                        model_config=MODELS / case["model"], engine="vllm", estimate=EstimateInputs())
    est = estimate_role(target, offline=True)
    low, high = est.details["available_kv_gib_range"]
    return {"check": "memory (GiB)", "predicted": est.details["available_kv_gib"], "logged": case["available_gib"],
            "refusal": "-", "range": f"{low:.2f}-{high:.2f}"}


def main() -> int:
    cases = json.loads((DATA / "cases.json").read_text(encoding="utf-8"))["cases"]
    print(f"{'case':38} {'set':9} {'check':13} {'predicted':>11} {'logged':>11} {'error':>8}  range / refusal")
    errors: dict[str, list[float]] = {"fit": [], "held-out": []}
    for case in cases:
        for row in (layout_row(case), memory_row(case)):
            if row is None:
                continue
            err = (row["predicted"] - row["logged"]) / row["logged"] * 100
            errors[case["set"]].append(abs(err))
            extra = row.get("range") or (f"refused: {row['refusal']}" if row["refusal"] != "-" else "")
            fmt = ",.2f" if isinstance(row["predicted"], float) else ","
            print(f"{case['id']:38} {case['set']:9} {row['check']:13} {row['predicted']:>11{fmt}} "
                  f"{row['logged']:>11{fmt}} {err:>+7.2f}%  {extra}".rstrip())
    for name, values in errors.items():
        if values:
            print(f"{name}: {len(values)} checks, median |error| {statistics.median(values):.2f}%, "
                  f"worst {max(values):.2f}%")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
