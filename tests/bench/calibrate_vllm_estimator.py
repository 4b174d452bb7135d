"""Score the vLLM estimate model against the public startup logs in tests/data/vllm_logs/.

Usage: python tests/bench/calibrate_vllm_estimator.py

Per case, up to four checks, printed as one table:
- layout: the log's own "Available KV cache memory" through kvcheck's block arithmetic
  (sizing/layout.py) against the log's "GPU KV cache size" (num_blocks x block_size) or, for a refused
  boot, against the maximum model length vLLM's refusal names (and whether it refuses);
- memory: the estimate's available KV memory with the log's own weights (estimate.weights_gib_per_gpu):
  device total, utilization, activation peak, non-torch memory and CUDA-graph estimate, against the
  logged figure, with the range;
- pool: the blocks that memory buys, as tokens, against the logged "GPU KV cache size";
- weights: the weights counted from config.json against "Model loading took";
- refusal: for a boot vLLM refused, whether the estimate predicts the refusal (KV220).
A refused boot's memory error is given in GiB (its available memory is near or below zero).
`set` says whether the constants of sizing/memory.py were fitted to the case (fit) or not (held-out).
A case whose source contradicts itself (`source_inconsistent` in cases.json) is scored and marked `(!)`;
the summary states each set with and without such cases.
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from kvcheck.engines.modelconfig import load_model_source  # noqa: E402
from kvcheck.engines.vllm.sizing.layout import KvLayout, kv_layout, model_dtype_of, resolve_kv_dtype  # noqa: E402
from kvcheck.engines.vllm.sizing.model import estimate_role  # noqa: E402
from kvcheck.errors import EstimateError  # noqa: E402
from kvcheck.model import EstimateInputs, RoleTarget  # noqa: E402

DATA = ROOT / "tests" / "data" / "vllm_logs"
TEST_DATA = ROOT / "tests" / "data"
GIB = float(1 << 30)
GIB_CHECK = "memory in GiB"


def load_cases() -> list[dict]:
    return json.loads((DATA / "cases.json").read_text(encoding="utf-8"))["cases"]


def layout_for(case: dict, block_size: int | None = None):
    """The KV layout at the log's block size, or at the block size the estimate chose (its blocks are counted in
    that size: MLA's default is 64 in the estimate, whatever the backend a boot picked)."""
    source = load_model_source(model_config=TEST_DATA / case["model"], model_path=None, offline=True)
    dtype = model_dtype_of(source.config, source.text, case["args"].get("dtype"))
    kv = resolve_kv_dtype(case["args"].get("kv_cache_dtype"), dtype, source.quant)
    return kv_layout(source.text, source.architecture, tp=int(case["args"].get("tensor_parallel_size", 1)),
                     pp=int(case["args"].get("pipeline_parallel_size", 1)), kv_dtype=kv, block_size=block_size or case["block_size"],
                     device="cuda")


def layout_row(case: dict) -> dict | None:
    if case.get("logged_tokens") is None and not case["refused"] or case.get("available_gib") is None:
        return None
    try:
        layout = layout_for(case)
    except EstimateError as exc:
        return {"check": "layout", "refused": f"KV305: {exc.message[:60]}..."}
    available = int(case["available_gib"] * GIB)
    if case["refused"]:
        length = int(case["args"]["max_model_len"])
        predicted = layout.largest_model_len(available, 2048, length)
        refused = layout.max_memory_usage(length, 2048) > available - layout.bytes_per_block
        return {"check": "layout", "predicted": predicted, "logged": case["logged_max_model_len"],
                "extra": f"refusal predicted: {'yes' if refused else 'NO'}"}
    return {"check": "layout", "predicted": reported_tokens(layout, layout.num_blocks(available)),
            "logged": case["logged_tokens"], "extra": ""}


def reported_tokens(layout: KvLayout, blocks: int) -> int:
    """The "GPU KV cache size" vLLM prints for a number of blocks. Up to 0.2x it is num_blocks //
    len(kv_cache_groups) x block_size (v1/core/kv_cache_utils.py): a hybrid layout's groups share the
    blocks, so the line is that share, not the full-attention capacity the estimate's pool states."""
    groups = max(1, layout.full_groups + layout.sliding_groups)
    return blocks // groups * layout.block_size


def target_for(case: dict, *, weights: bool) -> RoleTarget:
    args = dict(case["args"])
    return RoleTarget(
        name=case["id"], context_length=int(args.get("max_model_len") or 8192), min_headroom=1.0,
        engine_version=case["version"], args=args, argv_args=(), gpu=case["gpu"],
        model_config=TEST_DATA / case["model"], engine="vllm", env={},
        estimate=EstimateInputs(weights_gib_per_gpu=case["weights_gib"] if weights else None))


def explicit_rows(case: dict) -> list[dict]:
    """A boot with its KV memory given (--kv-cache-memory-bytes): the pool and the boot check alone."""
    est = estimate_role(target_for(case, weights=False), offline=True)
    rows: list[dict] = []
    if case.get("measured_usable_tokens"):
        rows.append({"check": "pool", "predicted": est.pool_tokens, "logged": case["measured_usable_tokens"],
                     "extra": f"range {est.pool_range[0]:,}-{est.pool_range[1]:,} (usable, measured /metrics)"})
    if case.get("refused_boot"):
        rows.append({"check": "refusal", "text": "predicted" if est.details["vllm_would_refuse"] else "NOT predicted"})
        rows.append({"check": "max model len", "predicted": est.details["largest_max_model_len"],
                     "logged": case["logged_max_model_len"], "extra": "vLLM's 'estimated maximum model length'"})
    return rows


def memory_rows(case: dict) -> list[dict]:
    if case["args"].get("kv_cache_memory_bytes"):
        return explicit_rows(case)
    if not case.get("gpu"):
        return []
    logged_weights = case.get("weights_gib") is not None
    try:
        est = estimate_role(target_for(case, weights=logged_weights), offline=True)
    except EstimateError as exc:
        return [{"check": "memory", "refused": f"KV305: {exc.message[:60]}..."}]
    low, high = est.details["available_kv_gib_range"]
    logged = case["available_gib"]
    holds = "holds" if low <= logged <= high else "MISSES"
    weights = "log's weights" if logged_weights else "weights counted"
    rows = [{"check": "memory (GiB)", "predicted": est.details["available_kv_gib"], "logged": logged,
             "extra": f"range {low:.2f}-{high:.2f} {holds}; {weights}"}]
    if case.get("refused_boot"):
        rows.append({"check": "refusal", "text": "predicted" if est.details["vllm_would_refuse"] else
                     ("might refuse (range)" if est.details["vllm_might_refuse"] else "NOT predicted")})
    if case.get("logged_tokens"):
        blocks = est.details["num_gpu_blocks"]
        counted_in = layout_for(case, est.details["block_size"])
        rows.append({"check": "pool", "predicted": reported_tokens(counted_in, blocks), "logged": case["logged_tokens"],
                     "extra": f"range {est.pool_range[0]:,}-{est.pool_range[1]:,} (usable, null block out"
                              + ("; the line is the groups' share, the range the full-attention capacity)"
                                 if layout_for(case).sliding_groups else ")")})
    if logged_weights:
        counted = estimate_role(target_for(case, weights=False), offline=True)
        rows.append({"check": "weights (GiB)", "predicted": counted.details["weights_gib_per_gpu"],
                     "logged": case["weights_gib"], "extra": counted.details["weights_source"]})
    return rows


def table() -> tuple[list[str], dict[str, dict[str, list[float]]]]:
    lines = [f"{'case':40} {'set':9} {'check':14} {'predicted':>11} {'logged':>11} {'error':>8}  notes"]
    errors: dict[str, dict[str, list[float]]] = {}
    for case in load_cases():
        for row in [layout_row(case), *memory_rows(case)]:
            if row is None:
                continue
            if "text" in row:
                lines.append(f"{case['id']:40} {case['set']:9} {row['check']:14} {'-':>11} {'refused':>11} {'-':>8}  "
                             f"{row['text']}")
                continue
            if "refused" in row:
                lines.append(f"{case['id']:40} {case['set']:9} {row['check']:14} {'-':>11} {'-':>11} {'-':>8}  "
                             f"{row['refused']}")
                continue
            if row["check"].startswith("memory") and case.get("refused_boot"):
                # a refused boot's available memory is near or below zero: the error is stated in GiB
                diff = row["predicted"] - row["logged"]
                lines.append(f"{case['id']:40} {case['set']:9} {row['check']:14} {row['predicted']:>11,.2f} "
                             f"{row['logged']:>11,.2f} {diff:>+6.2f}G  {row['extra']}")
                continue
            err = (row["predicted"] - row["logged"]) / row["logged"] * 100
            check = row["check"].split(" (")[0]
            keys = [case["set"]] + ([] if case.get("source_inconsistent") else [f"{case['set']} (consistent sources)"])
            for key in keys:
                errors.setdefault(key, {}).setdefault(check, []).append(abs(err))
                if check == "memory":  # a small pool's relative error is large for a small miss: the GiB too
                    errors[key].setdefault(GIB_CHECK, []).append(abs(row["predicted"] - row["logged"]))
            fmt = ",.2f" if isinstance(row["predicted"], float) else ","
            mark = " (!) source contradicts itself" if case.get("source_inconsistent") else ""
            lines.append(f"{case['id']:40} {case['set']:9} {row['check']:14} {row['predicted']:>11{fmt}} "
                         f"{row['logged']:>11{fmt}} {err:>+7.2f}%  {row['extra']}{mark}".rstrip())
    return lines, errors


def main() -> int:
    lines, errors = table()
    print("\n".join(lines))
    for name in ("fit", "held-out", "held-out (consistent sources)"):
        if name.endswith("sources)") and errors.get(name) == errors.get(name.split(" (")[0]):
            continue
        for check, values in errors.get(name, {}).items():
            unit = " GiB" if check == GIB_CHECK else "%"
            print(f"{name} {check}: {len(values)} case(s), median |error| {statistics.median(values):.2f}{unit}, "
                  f"worst {max(values):.2f}{unit}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
