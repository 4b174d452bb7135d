"""Independent logged pools of the newest non-DeepSeek families (issue 24): GLM-5/5.2 (DSA), Qwen3.5 (hybrid GDN),
Kimi-K3 (MLA + KDA).

Kept apart from calibration_cases.CASES because each case is priced as the release that printed it
(calibration_cases prices every case as 0.5.23) and some take the memory before weights from the log
when the GPU's free memory at start is not the profile's (the datapoint says why). Figures come from
tests/data/logs/datapoints.yaml; the FP8 Qwen3.8 checkpoint is priced as the Qwen3.5-27B config (the
same shapes, tests/data/logs/README.md) with its block-FP8 quantization_config.
"""

from __future__ import annotations

import json
import statistics
import tempfile
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from kvcheck.engines.sglang.sizing import default_profiles, estimate_role
from kvcheck.model import EstimateInputs, RoleTarget
from tests.datapaths import MODELS
from tests.estimate import calibration_cases as cc

FP8_BLOCK = {"activation_scheme": "dynamic", "fmt": "e4m3", "quant_method": "fp8", "weight_block_size": [128, 128]}

# Qwen3.5-9B's text and vision shapes as a public test fixture records them from the checkpoint itself
# (revision c2022362, the snapshot the 2x4090 log loads; stored file id 71387934500, repo not resolved);
# the rest of the config (rope, dtype, token ids) is the family's, taken from Qwen3.5-27B.
QWEN35_9B_TEXT = {
    "hidden_size": 4096, "intermediate_size": 12288, "num_hidden_layers": 32, "num_attention_heads": 16,
    "num_key_value_heads": 4, "head_dim": 256, "full_attention_interval": 4, "linear_conv_kernel_dim": 4,
    "linear_key_head_dim": 128, "linear_num_key_heads": 16, "linear_num_value_heads": 32,
    "linear_value_head_dim": 128, "vocab_size": 248320, "mamba_ssm_dtype": "float32", "mtp_num_hidden_layers": 1,
    "tie_word_embeddings": False,
}

# derived configs: (base config stem in the models folder, keys replaced at the top level,
# keys replaced in text_config, keys replaced in vision_config)
DERIVED: dict[str, tuple[str, dict[str, Any], dict[str, Any], dict[str, Any]]] = {
    "Qwen3.8-27B-FP8": ("Qwen--Qwen3.5-27B", {"quantization_config": FP8_BLOCK}, {}, {}),
    "Qwen3.5-9B": ("Qwen--Qwen3.5-27B", {"tie_word_embeddings": False}, QWEN35_9B_TEXT, {"out_hidden_size": 4096}),
    # MiniMax-M3 as SGLang serves it (the class its logs print; MiniMaxM3ForCausalLM is refused at load): the
    # MXFP8 checkpoint's config is not in the models folder, so its cases take their weights from their own logs
    "MiniMax-M3-sparse": ("MiniMaxAI--MiniMax-M3", {"architectures": ["MiniMaxM3SparseForCausalLM"]}, {}, {}),
}


# The Kimi-K3 MI355X sweep's launch environment (tests/data/logs/sglang-kimi-k3-8xMI355X-tp8-mfs-sweep-k3branch-
# 0515post1dev.log, its `export` line): the aiter MXFP4 path with K3's 128-aligned expert intermediate
K3_MI355X_ENV = {"SGLANG_USE_AITER": "1", "SGLANG_AITER_K3_OPT": "1", "AITER_FLYDSL_FORCE": "1", "AITER_SITUV2_A8W4": "1"}


@dataclass(frozen=True)
class NewCase:
    id: str
    family: str  # the architecture family row of docs/estimate.md
    model: str  # models-folder stem or a DERIVED key
    gpu: str
    release: str  # the release priced (the one that printed the log)
    args: dict[str, Any]
    note: str
    baseline_from_log: bool = False  # memory before weights = logged weights + logged free after them
    weights_from_log: bool = False  # weights per GPU from the log's own load line (the checkpoint's config is not here)
    independent: bool = True  # False: a profile figure was read from this log (shown, not in the family figures)
    env: dict[str, str] = field(default_factory=dict)  # the launch's environment, where the log states it


CASES: tuple[NewCase, ...] = (
    NewCase(
        "sglang-qwen38-27b-fp8-H100-tp1-0.5.18", "Qwen3.5 (hybrid GDN)", "Qwen3.8-27B-FP8", "H100", "0.5.18",
        {"mem_fraction_static": 0.85, "max_running_requests": 32},
        "explicit 0.85 and --max-running-requests 32; H100 80GB stated; fa3 by default",
    ),
    NewCase(
        "sglang-qwen38-27b-fp8-mi355x-tp1-rocm0517", "Qwen3.5 (hybrid GDN)", "Qwen3.8-27B-FP8", "MI355X", "0.5.17",
        {"mem_fraction_static": 0.85, "max_running_requests": 32},
        "explicit 0.85 (x0.85 for the default aiter backend); MI355X stated",
    ),
    NewCase(
        "sglang-qwen38-27b-fp8-mi355x-tp2-rocm0517", "Qwen3.5 (hybrid GDN)", "Qwen3.8-27B-FP8", "MI355X", "0.5.17",
        {"mem_fraction_static": 0.85, "max_running_requests": 32, "tp_size": 2},
        "explicit 0.85, TP2; 7.5 GB less free at start than the TP1 run on the same GPUs, which the MI355X "
        "profile's refit of ROCm stacks from 0.5.9/0.5.10 now prices (fit on other logs: a check of it at TP2)",
    ),
    NewCase(
        "sglang-qwen35-9b-2x4090-tp2", "Qwen3.5 (hybrid GDN)", "Qwen3.5-9B", "RTX-4090", "0.5.10",
        {"tp_size": 2, "mem_fraction_static": 0.8, "context_length": 262144},
        "explicit 0.8, TP2, a 2026-04-14 main build priced as 0.5.10; the RTX-4090 TP2 baseline (1086 MiB) was read "
        "from this log, so it is a fit point for the baseline (weights, Mamba split and cell are independent)",
        independent=False,
    ),
    NewCase(
        "sglang-glm5-fp8-mi35x-tp8-fp8kv", "GLM-5 (MLA + DSA)", "zai-org--GLM-5-FP8", "MI355X", "0.5.8.post1",
        {"tp_size": 8, "kv_cache_dtype": "fp8_e4m3", "attention_backend": "triton"},
        "the launch flags only (--attention-backend triton --kv-cache-dtype fp8_e4m3) and the logged fraction 0.908; "
        "the release's DSA defaults follow: fp8 KV forces flashmla_auto / flashmla_kv (scaled rows), page 1 on ROCm, "
        "tokens counted on 708 B/layer and the pool allocated at 788 (before 0.5.17)",
    ),
    NewCase(
        "sglang-glm5-fp8-mi35x-tp8-fp8kv-rocm059", "GLM-5 (MLA + DSA)", "zai-org--GLM-5-FP8", "MI355X", "0.5.9",
        {"tp_size": 8, "kv_cache_dtype": "fp8_e4m3", "attention_backend": "triton"},
        "as the 0.5.8.post1 run; distributed init took 7.81 GB (3.81 in 0.5.8.post1): logged baseline",
        baseline_from_log=True,
    ),
    NewCase(
        "sglang-glm52-nvfp4-8xRTXPRO6000-tp8-fp8kv-inferencex2335", "GLM-5 (MLA + DSA)", "nvidia--GLM-5.2-NVFP4",
        "RTX-PRO-6000", "0.5.15.post1",
        {"tp_size": 8, "mem_fraction_static": 0.85, "attention_backend": "triton", "quantization": "modelopt_fp4",
         "disable_shared_experts_fusion": True, "context_length": 262144, "chunked_prefill_size": 8192,
         "max_running_requests": 8, "cuda_graph_max_bs": 8},
        "stated figures (InferenceX #2335): explicit 0.85, TP8, --attention-backend triton on SM120, the pinned "
        "v0.5.15.post1 image; fp8 KV by the release's Blackwell DSA default; the run's CONC (1, 2 or 4) is not stated "
        "and does not move the estimate; GLM-5.2's shared-top-k layers still carry an indexer row in this release",
    ),
    NewCase(
        "sglang-glm52-nvfp4-4xGB300-tp4-eagle-pr30531", "GLM-5 (MLA + DSA)", "nvidia--GLM-5.2-NVFP4", "GB300", "0.5.17",
        {"tp_size": 4, "quantization": "modelopt_fp4", "speculative_algorithm": "EAGLE", "speculative_num_steps": 5,
         "speculative_eagle_topk": 1, "speculative_num_draft_tokens": 6},
        "stated figures (sglang PR #30531's A/B table, the 'main' arm): main at b95a746 of 2026-08-14, between the "
        "0.5.17 (2026-08-08) and 0.5.18 wheels, priced as 0.5.17, whose layout its 55,225 B per token shows (an "
        "indexer row on all 78 layers); default fraction; the built-in MTP layer as the EAGLE draft",
    ),
    NewCase(
        "sglang-glm52-nvfp4-4xGB300-tp4-eagle-pr30531-branch", "GLM-5 (MLA + DSA)", "nvidia--GLM-5.2-NVFP4", "GB300",
        "0.5.18",
        {"tp_size": 4, "quantization": "modelopt_fp4", "speculative_algorithm": "EAGLE", "speculative_num_steps": 5,
         "speculative_eagle_topk": 1, "speculative_num_draft_tokens": 6},
        "the same table's PR arm: the shared-top-k indexer elision (no index-K row and no Indexer module on the 57 "
        "layers that reuse the previous top-k) that shipped in 0.5.18, priced as 0.5.18",
    ),
    NewCase(
        "sglang-minimax-m3-mxfp8-8xB200-tp8-mfs065-devminimaxm3", "MiniMax-M3 (MSA sparse)", "MiniMax-M3-sparse",
        "B200", "0.5.17",
        {"tp_size": 8, "mem_fraction_static": 0.65, "context_length": 1048576},
        "the SGLang cookbook's B200 launch (dev-minimax-m3 image of 2026-06-19, priced as 0.5.17, the first release "
        "with models/minimax_m3.py): explicit 0.65, TP8, bf16 KV, fa4 and page 128 by the MiniMax-M3 SM100 override; "
        "the MXFP8 checkpoint's weights from its log (52.79 GiB), so this checks the baseline, fraction and cell",
        weights_from_log=True,
    ),
    NewCase(
        "sglang-minimax-m3-mxfp8-4xB200-tp4-pd-prefill-autofrac-devcu13minimaxm3", "MiniMax-M3 (MSA sparse)",
        "MiniMax-M3-sparse", "B200", "0.5.17",
        {"tp_size": 4, "context_length": 1048576, "disaggregation_mode": "prefill"},
        "the same checkpoint at TP4 as a prefill role on the same host (dev-cu13-minimax-m3 image), the fraction "
        "SGLang chose as its server_args print it (0.81225); weights from its log (104.23 GiB)",
        weights_from_log=True,
    ),
    NewCase(
        "sglang-kimi-k3-8xMI355X-tp8-mfs-sweep-k3branch-0515post1dev", "Kimi-K3 (MLA + KDA)", "moonshotai--Kimi-K3",
        "MI355X", "0.5.15.post1",
        {"tp_size": 8, "attention_backend": "triton", "dtype": "bfloat16", "mem_fraction_static": 0.93,
         "cuda_graph_max_bs": 256, "disable_radix_cache": True},
        "stated figures of a Kimi-K3 development branch (0.5.15.post1.dev20260723, aiter MXFP4 experts with the "
        "author's SGLANG_USE_AITER set), priced as 0.5.15.post1: the sweep's chosen 0.93 point, bf16 KV, triton",
        env=dict(K3_MI355X_ENV),
    ),
    NewCase(
        "sglang-kimi-k3-16xB200-tp16-2node-0516-gke", "Kimi-K3 (MLA + KDA)", "moonshotai--Kimi-K3", "B200", "0.5.16",
        {"tp_size": 16, "ep_size": 16, "nnodes": 2, "mem_fraction_static": 0.85, "context_length": 131072},
        "2 GKE nodes of 8 B200s on 0.5.16, the running server's max_total_num_tokens (kernelore/kimi-k3-gcp-enterprise-"
        "serving); the launch line is abridged by its author, no memory lines",
    ),
    NewCase(
        "sglang-kimi-k3-8xB300-tp8-ep8-deepepv2-patched-nightly20260901", "Kimi-K3 (MLA + KDA)", "moonshotai--Kimi-K3",
        "B300", "0.5.19",
        {"tp_size": 8, "ep_size": 8, "moe_a2a_backend": "deepep", "moe_runner_backend": "deep_gemm",
         "chunked_prefill_size": 1024, "max_prefill_tokens": 1024, "disable_radix_cache": True,
         "mem_fraction_static": 0.85, "mamba_full_memory_ratio": 0.86},
        "a 2026-09-01 nightly (between the 0.5.18 and 0.5.19 wheels) patched to run deepep_v2, which stock SGLang refuses "
        "for Kimi-K3: priced as 0.5.19 with deepep, whose MoE path the patch gives it (shared experts replicated); the "
        "launch argv is verbatim, the weights line is the same host's 0.84 run. The pool is 11 GiB of 266: each GiB "
        "the estimate is off moves it by about 9 %",
    ),
)


@dataclass(frozen=True)
class NewOutcome:
    case: NewCase
    logged_tokens: int
    predicted_tokens: int
    pool_range: tuple[int, int]
    logged_weights_gib: float | None
    predicted_weights_gib: float  # the target's weights (a draft's not included)

    @property
    def error_pct(self) -> float:
        return 100.0 * (self.predicted_tokens - self.logged_tokens) / self.logged_tokens

    @property
    def in_range(self) -> bool:
        return self.pool_range[0] <= self.logged_tokens <= self.pool_range[1]


def _config(model: str) -> Path:
    if model not in DERIVED:
        return MODELS / f"{model}.json"
    base, top, text, vision = DERIVED[model]
    config = json.loads((MODELS / f"{base}.json").read_text())
    config.update(top)
    if text:
        config["text_config"].update(text)
    if vision:
        config["vision_config"].update(vision)
    folder = Path(tempfile.gettempdir()) / "kvcheck-newest-configs"
    folder.mkdir(exist_ok=True)
    path = folder / f"{model}.json"
    text = json.dumps(config)
    if not path.is_file() or path.read_text() != text:
        path.write_text(text)
    return path


def run_case(case: NewCase, points: dict[str, dict[str, Any]]) -> NewOutcome:
    d = points[case.id]
    args = dict(case.args)
    if "mem_fraction_static" not in args and d.get("mem_fraction_static") is not None:
        args["mem_fraction_static"] = float(d["mem_fraction_static"])
    logged_weights = cc._logged_weights(d)
    estimate = EstimateInputs(weights_gib_per_gpu=logged_weights) if case.weights_from_log else EstimateInputs()
    if case.baseline_from_log:
        before = d.get("avail_mem_before_weights_gb")
        if before is None:
            before = float(d["avail_mem_after_weights_gb"]) + float(d["weight_mem_usage_gb"])
        total_mib = default_profiles().get(case.gpu).memory_total_mib
        estimate = replace(estimate, pre_baseline_mib=total_mib - float(before) * 1024)
    target = RoleTarget(
        name="newest", context_length=1, min_headroom=1.0, engine_version=case.release, args=args, argv_args=(),
        gpu=case.gpu, model_config=_config(case.model), estimate=estimate, env=dict(case.env),
    )
    est = estimate_role(target, offline=True)
    logged = cc.logged_tokens(d)
    assert logged is not None, case.id
    return NewOutcome(
        case=case,
        logged_tokens=logged,
        predicted_tokens=est.pool_tokens,
        pool_range=est.pool_range,
        logged_weights_gib=logged_weights,
        # the target's, as the logged 'Load weight end' line counts them: a draft's weights load after that line
        predicted_weights_gib=(est.details["weights_gib_per_gpu"] + est.details["load_overhead_gib"]
                               - est.details.get("draft_weights_gib_per_gpu", 0.0)),
    )


def run_all() -> list[NewOutcome]:
    points = cc.datapoints()
    return [run_case(case, points) for case in CASES if case.id in points]


def by_family(outcomes: list[NewOutcome]) -> dict[str, tuple[int, float, float]]:
    """family -> (independent cases, median |error| %, worst |error| %)."""
    families: dict[str, list[float]] = {}
    for o in outcomes:
        if not o.case.independent:
            continue
        families.setdefault(o.case.family, []).append(abs(o.error_pct))
    return {f: (len(e), statistics.median(e), max(e)) for f, e in families.items()}


# Cell and recurrent-state checks for logs whose pool cannot be scored (no fraction or release):
# (datapoint id, model, gpu, args, release priced)
CELL_CHECKS: tuple[tuple[str, str, str, dict[str, Any], str], ...] = (
    ("sglang-kimi-k3-8xB300-tp8-fp8kv-skill-excerpt", "moonshotai--Kimi-K3", "B300",
     {"tp_size": 8, "kv_cache_dtype": "fp8_e4m3"}, "0.5.23"),
    ("sglang-qwen38-27b-fp8-H100-tp1-0.5.18", "Qwen3.8-27B-FP8", "H100",
     {"mem_fraction_static": 0.85, "max_running_requests": 32}, "0.5.18"),
    ("sglang-qwen35-9b-2x4090-tp2", "Qwen3.5-9B", "RTX-4090", {"tp_size": 2, "mem_fraction_static": 0.8}, "0.5.10"),
    ("sglang-glm52-nvfp4-8xRTXPRO6000-tp8-fp8kv-inferencex2335", "nvidia--GLM-5.2-NVFP4", "RTX-PRO-6000",
     {"tp_size": 8, "mem_fraction_static": 0.85, "attention_backend": "triton", "quantization": "modelopt_fp4",
      "disable_shared_experts_fusion": True}, "0.5.15.post1"),
    ("sglang-minimax-m21-fp8-RTXPRO6000-tp1-kt1757", "MiniMaxAI--MiniMax-M2.5", "RTX-PRO-6000",
     {"dtype": "float16"}, "0.5.6"),
)


@dataclass(frozen=True)
class CellCheck:
    id: str
    predicted_cell: float
    logged_cell: float
    predicted_state: float | None  # recurrent-state bytes per slot (Mamba/GDN/KDA)
    logged_state: float | None


def cell_checks() -> list[CellCheck]:
    points = cc.datapoints()
    rows = []
    for dp_id, model, gpu, args, release in CELL_CHECKS:
        d = points.get(dp_id)
        if d is None:
            continue
        target = RoleTarget(
            name="newest-cell", context_length=1, min_headroom=1.0, engine_version=release, args=args,
            argv_args=(), gpu=gpu, model_config=_config(model),
        )
        est = estimate_role(target, offline=True)
        logged_state = None
        if d.get("mamba_cache_slots"):
            state_gib = float(d["mamba_ssm_state_gb"]) + float(d["mamba_conv_state_gb"])
            # the state tensors hold one padding row (index 0) besides the logged slots
            logged_state = state_gib * cc.GIB / (int(d["mamba_cache_slots"]) + 1)
        rows.append(CellCheck(
            id=dp_id,
            predicted_cell=float(est.kv_bytes_per_token),
            logged_cell=float(cc.logged_cell_bytes(d) or 0.0),
            predicted_state=est.details.get("mamba_state_bytes_per_request"),
            logged_state=logged_state,
        ))
    return rows
