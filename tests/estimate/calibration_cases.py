"""The real logged pools the estimate model is checked against (tests/data/logs/datapoints.yaml).

Each case states the setup the log implies (GPU, parallelism, the memory fraction of the release that
printed it) and why; figures come from datapoints.yaml at run time, never from this file. Used by
tests/bench/calibrate_estimator.py (the table in docs/estimate.md) and tests/estimate/test_real_logs.py.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from kvcheck.engines.sglang.sizing import estimate_role
from kvcheck.model import RoleTarget
from tests.datapaths import DATAPOINTS, MODELS

GIB = float(1 << 30)

# SGLang releases before the 2025 memory heuristic defaulted mem_fraction_static by TP size alone:
# 0.88 (TP1), 0.87 (TP2), 0.85 (TP4), 0.81 (TP8), 0.79 (TP16) -- server_args.py of 0.3.x/0.4.x.
LEGACY_DEFAULT_FRACTION = {1: 0.88, 2: 0.87, 4: 0.85, 8: 0.81, 16: 0.79}


@dataclass(frozen=True)
class Case:
    """One logged pool and the setup the log implies."""

    id: str
    model: str  # config file stem in the model configs folder (tests/datapaths.py: MODELS)
    gpu: str
    args: dict[str, Any]
    note: str
    independent: bool = True  # False when a profile constant was read from this very log
    budget_cell_bytes: int | None = None  # the release counted only these bytes per token (bug)


@dataclass(frozen=True)
class Outcome:
    case: Case
    logged_tokens: int | None
    predicted_tokens: int | None
    pool_range: tuple[int, int] | None
    logged_weights_gib: float | None
    predicted_weights_gib: float | None
    cell_bytes: float | None
    logged_cell_bytes: float | None
    skipped: str | None = None
    details: dict = field(default_factory=dict)

    @property
    def error_pct(self) -> float | None:
        if self.logged_tokens and self.predicted_tokens is not None:
            return 100.0 * (self.predicted_tokens - self.logged_tokens) / self.logged_tokens
        return None


CASES: tuple[Case, ...] = (
    Case(
        "sglang-qwen3-235b-fp8-4xH100-vllm21348", "Qwen--Qwen3-235B-A22B-FP8", "H100",
        {"tp_size": 4, "mem_fraction_static": 0.93},
        "explicit --mem-fraction-static 0.93; 4xH100 stated; the NVIDIA per-peer baseline term was read from this log",
        independent=False,
    ),
    Case(
        "sglang-llama31-8b-docs-send-request-2025-01", "meta-llama--Meta-Llama-3.1-8B", "H100",
        {"mem_fraction_static": LEGACY_DEFAULT_FRACTION[1]},
        "GPU inferred (78.81 GiB free at the baseline: 80GB Hopper); 2025-01 release default 0.88 for TP1",
    ),
    Case(
        "sglang-llama31-8b-pr4760-fa3", "meta-llama--Meta-Llama-3.1-8B", "H100",
        {"mem_fraction_static": LEGACY_DEFAULT_FRACTION[1], "attention_backend": "fa3"},
        "GPU inferred (FA3, 78.59 GiB at the baseline); 2025-03 release default 0.88 for TP1",
    ),
    Case(
        "sglang-llama3-8b-mi300x-bench-latency", "meta-llama--Meta-Llama-3.1-8B", "MI300X",
        {"mem_fraction_static": LEGACY_DEFAULT_FRACTION[1], "attention_backend": "triton"},
        "Llama-3-8B priced with the 3.1-8B config (same shapes); 2024-10 default 0.88; MI300X base read from this log",
        independent=False,
    ),
    Case(
        "sglang-kimi-k25-mi35x-tp8", "moonshotai--Kimi-K2.5", "MI355X",
        {"tp_size": 8, "attention_backend": "triton"},
        "fraction as logged (0.826); MI355X baseline calibrated from this log",
        independent=False,
    ),
    Case(
        "sglang-dsv32-exp-8xB200-dpattn-main-pr11309", "deepseek-ai--DeepSeek-V3.2", "B200",
        {"tp_size": 8, "attn_dp_size": 8, "kv_cache_dtype": "fp8_e4m3", "dsa_decode_backend": "flashmla_kv",
         "dsa_prefill_backend": "flashmla_kv"},
        "V3.2-Exp priced with the V3.2 config; hardcoded 0.8; that release sized tokens on 656 B/layer "
        "(indexer left out, the bug PR #11309 fixed), so the predicted budget is divided the same way",
        budget_cell_bytes=656 * 61,
    ),
    Case(
        "sglang-qwen3-8b-tp1-blackwell288-clean-startup-doc", "Qwen--Qwen3-8B", "B300",
        {},
        "GPU inferred (SM100, 275.75 GiB free at the baseline); B300 memory_total chosen with this log in view (at least 282,368 MiB)",
        independent=False,
    ),
)

# Logs that cannot support a pool figure, and why (shown in the table instead of a fit).
UNUSABLE: dict[str, str] = {
    "sglang-deepseek-r1-2x8xH20-tp16-k8s-doc": (
        "launch command not in the excerpt and max_running_requests=50 shows non-default flags, so the "
        "memory fraction is unknown (with that release's TP16 default 0.79 the model predicts 520,203, -27%)"
    ),
    "sglang-glm5-fp8-mi35x-tp8-fp8kv": (
        "release sizes differently: its 186.77 GiB pool leaves 7.15 GiB of the 193.92 GiB free after "
        "weights, where the logged fraction 0.908 reserves 26.1 GiB (weights and cell still checked)"
    ),
    "sglang-dsv32-exp-8xB200-dpattn-pr11309": "the memory fraction that release defaulted to is not stated",
    "sglang-qwen3-36L-rtx32gb-issue7227": "model and GPU not identified",
    "sglang-qwen3-32b-ascend-npu-tp2-issue16526": "Ascend NPU: no GPU profile (cell and weights are still checked)",
    "sglang-mimo-v2-flash-tp4-swa-pr18039-main": "GPU not stated (SWA cell still checked)",
}

# K/V size checks: (datapoint id, model, args, logged tokens field) -> cell bytes from the logged GB
CELL_CHECKS: tuple[tuple[str, str, str, dict[str, Any]], ...] = (
    ("sglang-llama31-8b-docs-send-request-2025-01", "meta-llama--Meta-Llama-3.1-8B", "H100", {}),
    ("sglang-llama31-8b-pr4760-fa3", "meta-llama--Meta-Llama-3.1-8B", "H100", {}),
    ("sglang-qwen3-235b-fp8-4xH100-vllm21348", "Qwen--Qwen3-235B-A22B-FP8", "H100", {"tp_size": 4}),
    ("sglang-qwen3-32b-ascend-npu-tp2-issue16526", "Qwen--Qwen3-32B", "H100", {"tp_size": 2}),
    ("sglang-qwen3-8b-tp1-blackwell288-clean-startup-doc", "Qwen--Qwen3-8B", "B300", {}),
    ("sglang-kimi-k25-mi35x-tp8", "moonshotai--Kimi-K2.5", "MI355X", {"tp_size": 8}),
    ("sglang-glm5-fp8-mi35x-tp8-fp8kv", "zai-org--GLM-5-FP8", "MI355X",
     {"tp_size": 8, "kv_cache_dtype": "fp8_e4m3", "dsa_prefill_backend": "flashmla_auto",
      "dsa_decode_backend": "flashmla_kv"}),
    ("sglang-dsv32-exp-8xB200-dpattn-pr11309", "deepseek-ai--DeepSeek-V3.2", "B200",
     {"tp_size": 8, "attn_dp_size": 8, "kv_cache_dtype": "fp8_e4m3", "dsa_prefill_backend": "flashmla_kv",
      "dsa_decode_backend": "flashmla_kv"}),
    ("sglang-mimo-v2-flash-tp4-swa-pr18039-main", "XiaomiMiMo--MiMo-V2-Flash", "H200",
     {"tp_size": 4, "mem_fraction_static": 0.7, "page_size": 64}),
)


# Weight checks for logs whose pool is not usable: (datapoint id, model, gpu, args)
WEIGHT_CHECKS: tuple[tuple[str, str, str, dict[str, Any]], ...] = (
    ("sglang-glm5-fp8-mi35x-tp8-fp8kv", "zai-org--GLM-5-FP8", "MI355X", {"tp_size": 8}),
    ("sglang-qwen3-32b-ascend-npu-tp2-issue16526", "Qwen--Qwen3-32B", "H100", {"tp_size": 2}),
)


def available() -> bool:
    return DATAPOINTS.is_file() and MODELS.is_dir()


_LOG_PATTERNS = {
    "max_total_num_tokens": r"max_total_num_tokens=(\d+)",
    "kv_tokens_allocated": r"#tokens: (\d+)",
    "k_size_gb": r"K size: ([\d.]+) GB",
    "v_size_gb": r"V size: ([\d.]+) GB",
    "avail_mem_before_weights_gb": r"Load weight begin\. avail mem=([\d.]+) GB",
    "avail_mem_after_weights_gb": r"Load weight end\..*?avail mem=([\d.]+) GB",
}


def _from_log(path: Path) -> dict[str, Any]:
    """Figures of a log that has no datapoints.yaml entry, read from its own (rank 0) lines."""
    import re

    text = path.read_text()
    found: dict[str, Any] = {"id": path.stem, "log_file": path.name}
    for key, pattern in _LOG_PATTERNS.items():
        match = re.search(pattern, text)
        if match:
            found[key] = float(match.group(1)) if "." in match.group(1) else int(match.group(1))
    return found


def datapoints() -> dict[str, dict[str, Any]]:
    """datapoints.yaml entries, plus SGLang logs in the folder that have none (figures from the log)."""
    points = {d["id"]: d for d in yaml.safe_load(DATAPOINTS.read_text())}
    for log in sorted(DATAPOINTS.parent.glob("sglang-*.log")):
        if log.stem not in points:
            points[log.stem] = _from_log(log)
    return points


def _target(model: str, gpu: str, args: dict[str, Any], estimate=None) -> RoleTarget:
    from kvcheck.model import EstimateInputs

    return RoleTarget(
        name="calibration",
        context_length=1,
        min_headroom=1.0,
        engine_version="0.5.23",
        args=args,
        argv_args=(),
        gpu=gpu,
        model_config=MODELS / f"{model}.json",
        estimate=estimate or EstimateInputs(),
    )


def _logged_weights(d: dict[str, Any]) -> float | None:
    if d.get("weight_mem_usage_gb") is not None:
        return float(d["weight_mem_usage_gb"])
    if d.get("avail_mem_before_weights_gb") is not None and d.get("avail_mem_after_weights_gb") is not None:
        return float(d["avail_mem_before_weights_gb"]) - float(d["avail_mem_after_weights_gb"])
    return None


def logged_tokens(d: dict[str, Any]) -> int | None:
    for key in ("max_total_num_tokens", "kv_tokens_allocated"):
        if d.get(key):
            return int(d[key])
    return None


def logged_cell_bytes(d: dict[str, Any]) -> float | None:
    """Bytes per token from the logged sizes: K+V (or the MLA KV size) over (tokens + page)."""
    tokens = logged_tokens(d)
    if not tokens:
        return None
    page = int(d.get("page_size") or 1)
    if d.get("k_size_gb") is not None:
        total = float(d["k_size_gb"]) + float(d["v_size_gb"])
    elif d.get("kv_size_gb_mla") is not None:
        total = float(d["kv_size_gb_mla"])
    else:
        return None
    return total * GIB / (tokens + page)


def run_case(case: Case, points: dict[str, dict[str, Any]]) -> Outcome:
    d = points[case.id]
    args = dict(case.args)
    if "mem_fraction_static" not in args and d.get("mem_fraction_static") is not None:
        args["mem_fraction_static"] = float(d["mem_fraction_static"])
    est = estimate_role(_target(case.model, case.gpu, args), offline=True)
    tokens = est.pool_tokens
    pool_range = est.pool_range
    if case.budget_cell_bytes:
        page = est.details["page_size"]
        budget = est.details["budget_gib"] * GIB
        tokens = int(budget // case.budget_cell_bytes) // page * page
        pool_range = None
    return Outcome(
        case=case,
        logged_tokens=logged_tokens(d),
        predicted_tokens=tokens,
        pool_range=pool_range,
        logged_weights_gib=_logged_weights(d),
        predicted_weights_gib=est.details["weights_gib_per_gpu"] + est.details["load_overhead_gib"],
        cell_bytes=est.kv_bytes_per_token,
        logged_cell_bytes=logged_cell_bytes(d),
        details=dict(est.details),
    )


def run_all() -> list[Outcome]:
    points = datapoints()
    return [run_case(case, points) for case in CASES if case.id in points]


def cell_checks() -> list[tuple[str, float, float]]:
    """(id, predicted cell bytes, logged bytes per token) for every log that prints K/V sizes."""
    points = datapoints()
    rows = []
    for dp_id, model, gpu, args in CELL_CHECKS:
        if dp_id not in points:
            continue
        est = estimate_role(_target(model, gpu, args), offline=True)
        logged = logged_cell_bytes(points[dp_id])
        predicted = est.kv_bytes_per_token
        if est.details["architecture_kind"] == "hybrid_swa":
            predicted = est.details["kv_cell_parts"]["swa_bytes_per_layer"] * est.details["kv_cell_parts"]["swa_layers"]
        rows.append((dp_id, float(predicted), float(logged or 0)))
    return rows


def weight_checks() -> list[tuple[str, float, float]]:
    """(id, predicted GiB incl. load overhead, logged GiB) for logs used only for their weights."""
    points = datapoints()
    rows = []
    for dp_id, model, gpu, args in WEIGHT_CHECKS:
        if dp_id in points and _logged_weights(points[dp_id]) is not None:
            est = estimate_role(_target(model, gpu, args), offline=True)
            predicted = est.details["weights_gib_per_gpu"] + est.details["load_overhead_gib"]
            rows.append((dp_id, predicted, float(_logged_weights(points[dp_id]))))
    return rows


def median_abs_error(outcomes: list[Outcome], *, independent_only: bool = False) -> float:
    errors = [abs(o.error_pct) for o in outcomes if o.error_pct is not None and (o.case.independent or not independent_only)]
    return statistics.median(errors) if errors else float("nan")


