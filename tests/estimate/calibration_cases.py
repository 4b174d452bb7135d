"""The real logged pools the estimate model is checked against (tests/data/logs/datapoints.yaml).

Each case states the setup the log implies (GPU, parallelism, the memory fraction of the release that
printed it) and why; figures come from datapoints.yaml at run time, never from this file. Used by
tests/bench/calibrate_estimator.py (the table in docs/estimate.md) and tests/estimate/test_real_logs.py.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field, replace
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


# Attention shapes of logged models whose config.json is not in the models folder: enough for the
# KV cell (layers, heads, head sizes) and the context; their weights are taken from the log's own
# 'Load weight' lines (Case.weights_from_log), so these cases check the baseline, fraction and cell.
SHAPES: dict[str, dict[str, Any]] = {
    "Qwen2-72B": {"architectures": ["Qwen2ForCausalLM"], "hidden_size": 8192, "num_attention_heads": 64,
                  "num_key_value_heads": 8, "num_hidden_layers": 80, "vocab_size": 152064,
                  "intermediate_size": 29568, "max_position_embeddings": 32768, "torch_dtype": "bfloat16"},
    "Mistral-7B": {"architectures": ["MistralForCausalLM"], "hidden_size": 4096, "num_attention_heads": 32,
                   "num_key_value_heads": 8, "num_hidden_layers": 32, "vocab_size": 32000,
                   "intermediate_size": 14336, "max_position_embeddings": 32768, "torch_dtype": "bfloat16"},
    # XVERSE-MoE-A4.2B: 28 layers of 32 heads x 80 (MHA); priced as a Llama-shaped attention stack
    "XVERSE-MoE-A4.2B": {"architectures": ["LlamaForCausalLM"], "hidden_size": 2560, "num_attention_heads": 32,
                         "num_key_value_heads": 32, "num_hidden_layers": 28, "vocab_size": 100534,
                         "intermediate_size": 1728, "max_position_embeddings": 8192, "torch_dtype": "bfloat16"},
    "DeepSeek-V2-Lite": {"architectures": ["DeepseekV2ForCausalLM"], "hidden_size": 2048, "num_attention_heads": 16,
                         "num_key_value_heads": 16, "num_hidden_layers": 27, "vocab_size": 102400,
                         "kv_lora_rank": 512, "qk_rope_head_dim": 64, "qk_nope_head_dim": 128, "v_head_dim": 128,
                         "intermediate_size": 10944, "moe_intermediate_size": 1408, "n_routed_experts": 64,
                         "n_shared_experts": 2, "first_k_dense_replace": 1, "max_position_embeddings": 163840,
                         "torch_dtype": "bfloat16"},
}


@dataclass(frozen=True)
class Case:
    """One logged pool and the setup the log implies."""

    id: str
    model: str  # config file stem in the models folder, or a SHAPES key
    gpu: str
    args: dict[str, Any]
    note: str
    independent: bool = True  # False when a profile figure was read from this very log (a fit point)
    budget_cell_bytes: int | None = None  # the release counted only these bytes per token (bug)
    weights_from_log: bool = False  # weights per GPU from the log's own load lines (no config here)
    release: str = ""  # the SGLang release that printed the log, as the datapoint states it
    trust: str = "high"  # high: GPU, fraction and figures stated; medium: one of them inferred; low: several
    in_targets: bool = True  # False: shown, but outside the published targets (the note says why)
    # the release whose memory before the baseline the log shows, where a GPU profile moves its figure by release
    # (a `shift` term): the table prices every case as 0.5.23, but a 0.4.6 image does not hold what 0.5.10's does
    stack_release: str | None = None


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

    @property
    def vendor(self) -> str:
        return str(self.details.get("gpu_vendor", "nvidia"))

    @property
    def gpus(self) -> int:
        par = self.details.get("parallel", {})
        return int(par.get("tp", 1)) * int(par.get("pp", 1))


CASES: tuple[Case, ...] = (
    # --- single GPU -------------------------------------------------------------------------------
    Case(
        "sglang-llama31-8b-docs-send-request-2025-01", "meta-llama--Meta-Llama-3.1-8B", "H100",
        {"mem_fraction_static": LEGACY_DEFAULT_FRACTION[1]},
        "GPU inferred (78.81 GiB free at the baseline: 80GB Hopper); 2025-01 release default 0.88 for TP1; "
        "one of the two logs the H100 TP1 base (900 MiB) was read from",
        independent=False, release="2025-01", trust="medium",
    ),
    Case(
        "sglang-llama31-8b-pr4760-fa3", "meta-llama--Meta-Llama-3.1-8B", "H100",
        {"mem_fraction_static": LEGACY_DEFAULT_FRACTION[1], "attention_backend": "fa3"},
        "GPU inferred (FA3, 78.59 GiB at the baseline); 2025-03 release default 0.88 for TP1; "
        "one of the two logs the H100 TP1 base was read from",
        independent=False, release="2025-03", trust="medium",
    ),
    Case(
        "sglang-llama3-8b-H200-tp1-pd-prefill-issue6753", "meta-llama--Meta-Llama-3.1-8B", "H200",
        {"disaggregation_mode": "prefill", "disable_cuda_graph": True},
        "Llama-3-8B priced with the 3.1-8B config (same shapes); fraction as logged (0.8718); the H200 TP1 base "
        "(1227 MiB) was read from this log",
        independent=False, release="2025-05 main",
    ),
    Case(
        "sglang-llama3-8b-mi300x-bench-latency", "meta-llama--Meta-Llama-3.1-8B", "MI300X",
        {"mem_fraction_static": LEGACY_DEFAULT_FRACTION[1], "attention_backend": "triton"},
        "Llama-3-8B priced with the 3.1-8B config (same shapes); 2024-10 default 0.88; MI300X base read from this log",
        independent=False, release="2024-10", trust="medium",
    ),
    Case(
        "sglang-qwen3-8b-tp1-blackwell288-clean-startup-doc", "Qwen--Qwen3-8B", "GB300",
        {},
        "GPU inferred: SM100 with 275.75 GiB free at the baseline, more than a B300's whole CUDA total (267.69 GiB), "
        "so a GB300 (276.50 GiB); the GB300 TP1 base was read from this log",
        independent=False, release="2026-05 main", trust="low",
    ),
    Case(
        "sglang-rank-zephyr-7b-4090-tp1-issue1612", "Mistral-7B", "RTX-4090",
        {"mem_fraction_static": 0.88},
        "Mistral-7B shape; fraction as logged (0.88); weights from the log (23.16 - 9.59 GiB); the PCIe-card TP1 "
        "base (853 MiB) was read from this log",
        independent=False, weights_from_log=True, release="2024-10 fork", trust="medium",
    ),
    Case(
        "sglang-xverse-moe-a4.2b-A800-tp1-issue1109", "XVERSE-MoE-A4.2B", "A800-80GB",
        {"mem_fraction_static": 0.88, "disable_cuda_graph": True},
        "XVERSE attention shape (28 x 32 heads x 80); fraction as logged; weights from the log; the A800/A100 TP1 "
        "base (1085 MiB) was read from this log",
        independent=False, weights_from_log=True, release="0.2.12",
    ),
    Case(
        "sglang-deepseek-v2-lite-A40-48Q-tp1-issue3451", "DeepSeek-V2-Lite", "A40",
        {"mem_fraction_static": 0.88, "attention_backend": "flashinfer"},
        "V2-Lite MLA shape (27 layers x 576); fraction as logged; weights from the log; an A40-48Q vGPU priced as "
        "the A40 (46,068 MiB)",
        weights_from_log=True, release="0.4.2.post3", trust="medium",
    ),
    # --- several GPUs -----------------------------------------------------------------------------
    Case(
        "sglang-qwen3-235b-fp8-4xH100-vllm21348", "Qwen--Qwen3-235B-A22B-FP8", "H100",
        {"tp_size": 4, "mem_fraction_static": 0.93},
        "explicit --mem-fraction-static 0.93; 4xH100 stated; no baseline line, so the H100 TP4 figure (2436 MiB) "
        "was inferred from this pool",
        independent=False, release="not stated (2025-07)", trust="medium",
    ),
    Case(
        "sglang-qwen2-72b-8xH100-tp8-issue1386", "Qwen2-72B", "H100",
        {"tp_size": 8, "mem_fraction_static": 0.83},
        "Qwen2-72B shape; fraction as logged (0.83); weights from the log (76.73 - 59.73 GiB); the H100 TP8 figure "
        "(2990 MiB) was read from this log",
        independent=False, weights_from_log=True, release="0.3.0",
    ),
    Case(
        "sglang-deepseek-r1-2x8xH800-tp16-issue4161", "deepseek-ai--DeepSeek-R1", "H800",
        {"tp_size": 16, "nnodes": 2, "mem_fraction_static": 0.7},
        "explicit 0.7; two 8-GPU hosts (8 ranks per host); the H800 8-rank figure (2775 MiB) was read from this log",
        independent=False, release="0.4.3.post2",
    ),
    Case(
        "sglang-mixtral-8x7b-8xL4-tp8-issue1191", "mistralai--Mixtral-8x7B-v0.1", "L4",
        {"tp_size": 8, "mem_fraction_static": 0.83},
        "fraction as logged (0.83); one of the PCIe-card points of the flat ~1.2 GiB multi-GPU figure",
        independent=False, release="0.2.13",
    ),
    Case(
        "sglang-llama3-8b-4xA10G-tp4-issue565", "meta-llama--Meta-Llama-3.1-8B", "A10G",
        {"tp_size": 4, "mem_fraction_static": 0.75},
        "Llama-3-8B priced with the 3.1-8B config; explicit 0.75; one of the PCIe-card points",
        independent=False, release="0.1.17",
    ),
    Case(
        "sglang-qwen3-32b-4x5090-tp4-summary", "Qwen--Qwen3-32B", "RTX-5090",
        {"tp_size": 4, "mem_fraction_static": 0.88, "attention_backend": "triton"},
        "explicit 0.88; figures from the author's table, not raw lines",
        release="0.5.13.post1", trust="medium",
    ),
    Case(
        "sglang-llama33-70b-8xH200inferred-tp8-pcg-pr11716", "meta-llama--Meta-Llama-3.1-70B", "H200",
        {"tp_size": 8},
        "Llama-3.3-70B priced with the 3.1-70B config (same shapes); GPU inferred (137.34 GiB free at the "
        "baseline); SGLang's 2025-10 default fraction; the H200 TP8 figure (3135 MiB) was read from this log",
        independent=False, release="2025-10 main", trust="low",
    ),
    Case(
        "sglang-kimi-k25-mi35x-tp8", "moonshotai--Kimi-K2.5", "MI355X",
        {"tp_size": 8, "attention_backend": "triton"},
        "fraction as logged (0.826); the MI355X TP8 figure was read from this log",
        independent=False, release="0.5.8.post1 (ROCm image)", trust="medium", stack_release="0.5.8.post1",
    ),
    Case(
        "sglang-deepseek-r1-8xMI308-tp8-issue6001", "deepseek-ai--DeepSeek-R1", "MI308X",
        {"tp_size": 8, "mem_fraction_static": 0.7, "chunked_prefill_size": 130172, "page_size": 1,
         "attention_backend": "triton"},
        "explicit 0.7; that release's ROCm MLA backend (triton: no aiter x0.85 rule); weights from the log: 0.4.6 "
        "fused tp_size copies of the shared expert (n_share_experts_fusion = tp_size, 'Shared experts fusion "
        "optimization is enabled' in the log), 2.1 GiB per GPU that 0.5.23's single fused slot does not hold; "
        "the MI300X/MI308X TP8 figure (6810 MiB) was read from this log",
        independent=False, weights_from_log=True, release="0.4.6.post2", stack_release="0.4.6.post2",
    ),
    Case(
        "sglang-deepseek-r1-8xMI300X-tp8-azure", "deepseek-ai--DeepSeek-R1", "MI300X",
        {"tp_size": 8, "mem_fraction_static": LEGACY_DEFAULT_FRACTION[8], "attention_backend": "triton"},
        "0.4.2's TP8 default 0.81 (not logged) and ROCm MLA backend (triton); ROCm TP8 figure from the MI308X log",
        release="0.4.2 (ROCm image)", trust="low", stack_release="0.4.2",
    ),
    Case(
        "sglang-dsv32-exp-8xB200-dpattn-main-pr11309", "deepseek-ai--DeepSeek-V3.2", "B200",
        {"tp_size": 8, "attn_dp_size": 8, "kv_cache_dtype": "fp8_e4m3", "dsa_decode_backend": "flashmla_kv",
         "dsa_prefill_backend": "flashmla_kv", "mem_fraction_static": 0.8, "chunked_prefill_size": 8192},
        "V3.2-Exp priced with the V3.2 config; hardcoded 0.8; that release sized tokens on 656 B/layer "
        "(indexer left out, the bug PR #11309 fixed), so the predicted budget is divided the same way. Outside the "
        "targets: a development build with a known sizing bug, no weights line, and a budget that cannot hold the "
        "weights the config implies under any baseline (so its weights, not its pool, are in question)",
        budget_cell_bytes=656 * 61, release="2025-10 main (development build)", trust="low", in_targets=False,
    ),
)

# Logs that cannot support a pool figure, and why (shown in the table instead of a fit).
UNUSABLE: dict[str, str] = {
    "sglang-deepseek-r1-2x8xH20-tp16-k8s-doc": (
        "launch command not in the excerpt and max_running_requests=50 shows non-default flags, so the "
        "memory fraction is unknown"
    ),
    "sglang-deepseek-v3-0324-2x8xH100-tp16-dp16-issue6027": (
        "the memory fraction the DP-attention default gave is not logged and the pod ran a newer main than its "
        "check_env says; only the KV line is quoted"
    ),
    "sglang-glm5-fp8-mi35x-tp8-fp8kv": (
        "scored as 0.5.8.post1 in tests/estimate/newest_cases.py (that release counts DSA tokens on 708 B/layer and "
        "allocates 788; this table prices every case as 0.5.23)"
    ),
    "sglang-dsv32-exp-8xB200-dpattn-pr11309": "the memory fraction that release defaulted to is not stated",
    # the newest families (issue 24): each priced as the release that printed it in newest_cases.py
    **{dp_id: "scored as its own release in tests/estimate/newest_cases.py (this table prices every case as 0.5.23)"
       for dp_id in ("sglang-qwen38-27b-fp8-H100-tp1-0.5.18", "sglang-qwen38-27b-fp8-mi355x-tp1-rocm0517",
                     "sglang-qwen38-27b-fp8-mi355x-tp2-rocm0517", "sglang-glm5-fp8-mi35x-tp8-fp8kv-rocm059",
                     "sglang-minimax-m3-mxfp8-8xB200-tp8-mfs065-devminimaxm3",
                     "sglang-minimax-m3-mxfp8-4xB200-tp4-pd-prefill-autofrac-devcu13minimaxm3")},
    "sglang-glm52-nvfp4-8xRTXPRO6000-tp8-fp8kv-inferencex2335": (
        "scored as 0.5.15.post1 in tests/estimate/newest_cases.py (that release keeps GLM-5.2's indexer row on all 78 "
        "layers; this table prices every case as 0.5.23)"
    ),
    "sglang-minimax-m21-fp8-RTXPRO6000-tp1-kt1757": (
        "KT-Kernel keeps most experts on the CPU (GPU weights are the fork's choice), fraction and release not logged: "
        "its MiniMax-M2 attention cell is checked in tests/estimate/newest_cases.py"
    ),
    "sglang-minimax-m25-nvfp4-2xRTXPRO6000-tp2-jreb": (
        "a third-party NVFP4 checkpoint whose config is not in the models folder, no weights or KV line, a nightly build: "
        "with bf16 KV the pool implies ~59.7 GiB of weights per GPU (the author states ~120 GB in all)"
    ),
    "sglang-kimi-k3-8xB300-tp8-fp8kv-skill-excerpt": (
        "fraction, release and weights not stated: its cell and KDA state are checked in tests/estimate/newest_cases.py"
    ),
    "sglang-glm46-fp8-2xB300-tp8-pd-preload-0510-aws": (
        "no pool (both starts failed after the weights): its reading before the weights is one of the two B300 TP8 "
        "figures in profiles/gpus/B300.yaml"
    ),
    "sglang-dsv4-pro-fp8-b300inferred-tp8-mtp-inferencex439758": (
        "GPU, release, fraction and pool are not in the public copy: its reading before the weights is the other "
        "B300 TP8 figure in profiles/gpus/B300.yaml"
    ),
    "sglang-qwen3-36L-rtx32gb-issue7227": "model and GPU not identified",
    "sglang-llama31-8b-hicache-4xH100-96g-tp4-issue7059": (
        "GPU memory variant not identified ('96GB' and '98GB' in the same text): with the explicit fraction 0.4 "
        "neither the 80 GB H100 (-10%) nor the 94 GB H100 NVL (+7.6%) is the card; only the final line is quoted"
    ),
    "sglang-qwen3-32b-ascend-npu-tp2-issue16526": (
        "Ascend NPU: the Ascend-910B profile's TP2 figure was read from this log (cell, page and weights checked)"
    ),
    "sglang-mimo-v2-flash-tp4-swa-pr18039-main": "GPU not stated (SWA cell still checked)",
    "sglang-mimo-v2-flash-fp8-4xB200-tp4-pr15464": "memory fraction not known (its baseline reading fits B200 TP4)",
    "sglang-qwen3-0.6b-fp8-H100-tp1-issue7495": (
        "4.63 GiB already in use at the baseline of a TP1 H100 (860-1085 MiB in every other TP1 H100 log): "
        "something else held that GPU; with the logged baseline the model gives 606,9xx (+0.0%), with the "
        "profile's +5.1% (measure mode's KV302 check reports such a GPU)"
    ),
    "sglang-qwen2-72b-gptq-4x2080ti22g-tp4-issue748": "a 22 GB modded RTX 2080 Ti (no such card to profile)",
    "sglang-r1-distill-qwen32b-2xA100pcie-tp2-issue3765": "token count not printed (its baseline reading fits A100 TP2)",
    "sglang-nemotron70b-awq-eagle-2xL40S-tp2-issue4351": "token count not printed (its baseline reading fits L40S TP2)",
    "sglang-phi35-mini-H100pcie-tp1-issue1751": "token count not printed (its baseline reading fits H100-PCIe TP1)",
    "sglang-qwen35-9b-2x4090-tp2": (
        "scored as its own release in tests/estimate/newest_cases.py with Qwen3.5-9B's shapes (its baseline reading "
        "fits RTX-4090 TP2)"
    ),
    "sglang-qwen35-397b-fp8-cpuoffload-2x4090-tp2-kt1870": "experts offloaded to the CPU (kt-kernel): weights not on the GPU",
    "sglang-qwen38-27b-nvfp4-dflash2-2x5090-tp2-club3090-1261": "memory fraction and release not known",
    "sglang-qwen3-32b-4x5090-tp4-cp2-summary": "attention context parallelism: not priced by the estimate model",
    "sglang-dsv4-flash-base-8xH20-tp8-mfs060-fixture": "an abridged test fixture (its baseline reading fits H20 TP8)",
    "sglang-grok2-fp8-8xH100-tp8-k8s-blog": (
        "Grok-2 (Grok1ForCausalLM) is not a model kvcheck sizes; its baseline reading is the H100 8-rank check: "
        "2,273 MiB in use on 0.5.2rc2, 717 MiB below the profile's 2,990 (docs/estimate.md)"
    ),
    "sglang-dsv4-flash-fp8-4xMI300X-tp4-dp4-dpattn-issue25118": (
        "a ROCm development build that stops at the pool's allocation (no pool); its weights, baseline and "
        "bytes_per_full_token are checked in tests/estimate/test_dsv4_prerelease.py"
    ),
    "sglang-dsv4-flash-8xH100-tp8-bf16state-pqlet": (
        "GPU not printed (an 80 GB Hopper inferred) and no weight lines: its bytes_per_full_token, c128 fixed "
        "bytes and pool from the logged available bytes are checked in tests/estimate/test_dsv4_state_dtype.py, "
        "its pool on an assumed H100 in tests/bench/bench_dsv4_logs.py"
    ),
    "sglang-dsv4-flash-fp8-4xH200-tp4-dpattn-eagle-issue24650": (
        "a development build before 0.5.12 that prints its pool only (no weights): the KV108 range and the pool as "
        "0.5.12 are checked in tests/estimate/test_placement.py and tests/bench/bench_dsv4_logs.py"
    ),
    "sglang-dsv4-flash-fp8-8xL20-tp8-mtp-pr28620": (
        "stated figures of a development branch between 0.5.14 and 0.5.15 (no release): scored, with the KV108 "
        "range and as 0.5.15, in tests/bench/bench_dsv4_logs.py"
    ),
    "sglang-dsv4-pro-8xMI355X-tp8-dp8-dpattn-pd-decode-mfs090-0515post1": (
        "stated DSV4 lines of a private 0.5.15.post1 image (no weight or baseline lines): its bytes_per_full_token, "
        "c128 fixed bytes and the five-point fraction sweep are checked in tests/estimate/test_dsv4_ep_experts.py, "
        "its pools in tests/bench/bench_dsv4_logs.py"
    ),
    **{dp_id: "stated figures of development builds, scored as 0.5.17 and 0.5.18 in tests/estimate/newest_cases.py"
       for dp_id in ("sglang-glm52-nvfp4-4xGB300-tp4-eagle-pr30531", "sglang-glm52-nvfp4-4xGB300-tp4-eagle-pr30531-branch")},
    **{dp_id: ("a team's stated DeepSeek-V4-Pro figures on 4x8 H800 (0.5.12.post1, PP): scored as that release in "
               "tests/estimate/test_dsv4_release_logs.py and tests/bench/bench_dsv4_logs.py")
       for dp_id in ("sglang-dsv4-pro-4x8xH800-tp8-pp4-marlin-mfs090-0512post1",
                     "sglang-dsv4-pro-4x8xH800-tp16-pp2-marlin-mfs090-0512post1")},
    "sglang-dsv4-pro-8xMI355X-tp8-dp8-dpattn-pd-rocm0513-mfs085-090": (
        "a report's DSV4 lines on the v0.5.13 ROCm image: scored as 0.5.13 in tests/estimate/test_dsv4_release_logs.py"
    ),
    "sglang-kimi-k3-8xMI355X-tp8-mfs-sweep-k3branch-0515post1dev": (
        "a Kimi-K3 development branch's stated sweep: scored as 0.5.15.post1 in tests/estimate/newest_cases.py"
    ),
    "sglang-kimi-k3-16xB200-tp16-2node-0516-gke": (
        "a Kimi-K3 server's stated pool on 2 x 8 B200s: scored as 0.5.16 in tests/estimate/newest_cases.py"
    ),
    "sglang-kimi-k3-8xB300-tp8-ep8-deepepv2-patched-nightly20260901": (
        "a patched Kimi-K3 nightly's stated figures: scored as 0.5.19 in tests/estimate/newest_cases.py"
    ),
    "sglang-glm52-fp8-8xRTXPRO6000-tp8-maxtok4096-hydralisk": (
        "the pool is capped by --max-total-tokens 4096: its weights and the two refused starts are checked in "
        "tests/estimate/test_newest_families.py"
    ),
    "sglang-dsv4-pro-8xH200-tp8-mfs088-refused-inferencex2128": (
        "a refused start (no pool): its weights are checked (-0.5 % under the launch's Marlin experts), "
        "and with them the estimate gives the logged refusal (tests/estimate/test_dsv4_weights_refusal.py)"
    ),
}

# K/V size checks: (datapoint id, model, args, logged tokens field) -> cell bytes from the logged GB
CELL_CHECKS: tuple[tuple[str, str, str, dict[str, Any]], ...] = (
    ("sglang-llama31-8b-docs-send-request-2025-01", "meta-llama--Meta-Llama-3.1-8B", "H100", {}),
    ("sglang-llama31-8b-pr4760-fa3", "meta-llama--Meta-Llama-3.1-8B", "H100", {}),
    ("sglang-qwen3-235b-fp8-4xH100-vllm21348", "Qwen--Qwen3-235B-A22B-FP8", "H100", {"tp_size": 4}),
    ("sglang-qwen3-32b-ascend-npu-tp2-issue16526", "Qwen--Qwen3-32B", "H100", {"tp_size": 2}),
    ("sglang-qwen3-8b-tp1-blackwell288-clean-startup-doc", "Qwen--Qwen3-8B", "GB300", {}),
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


# Weight checks for logs whose pool is not usable: (datapoint id, model, gpu, args, release priced)
WEIGHT_CHECKS: tuple[tuple[str, str, str, dict[str, Any], str], ...] = (
    ("sglang-glm5-fp8-mi35x-tp8-fp8kv", "zai-org--GLM-5-FP8", "MI355X", {"tp_size": 8}, "0.5.23"),
    ("sglang-qwen3-32b-ascend-npu-tp2-issue16526", "Qwen--Qwen3-32B", "Ascend-910B", {"tp_size": 2}, "0.5.23"),
    # DeepSeek-V4 (docs/estimate.md, DeepSeek-V4 weights): FP4 experts on Hopper in 0.5.14 under the launch's
    # own --moe-runner-backend marlin (E8M0 Marlin scales beside the float32 loader scales it keeps), and the
    # FP8-expert Flash-Base fixture priced with the FP8 Flash config
    ("sglang-dsv4-pro-8xH200-tp8-mfs088-refused-inferencex2128", "deepseek-ai--DeepSeek-V4-Pro", "H200",
     {"tp_size": 8, "mem_fraction_static": 0.88, "moe_runner_backend": "marlin"}, "0.5.14"),
    ("sglang-dsv4-flash-base-8xH20-tp8-mfs060-fixture", "sgl-project--DeepSeek-V4-Flash-FP8", "H20",
     {"tp_size": 8, "mem_fraction_static": 0.6}, "0.5.12"),
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


def _config_path(model: str) -> Path:
    """The models-folder config, or a SHAPES entry written once to a temporary folder."""
    if model not in SHAPES:
        return MODELS / f"{model}.json"
    import json
    import tempfile

    folder = Path(tempfile.gettempdir()) / "kvcheck-calibration-shapes"
    folder.mkdir(exist_ok=True)
    path = folder / f"{model}.json"
    text = json.dumps(SHAPES[model])
    if not path.is_file() or path.read_text() != text:
        path.write_text(text)
    return path


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
        model_config=_config_path(model),
        estimate=estimate or EstimateInputs(),
    )


def _number(value: Any) -> float:
    """A datapoint figure, also when the entry annotates it ("15.50 ('Load memory / GPU' in the table)")."""
    return float(str(value).split()[0])


def _logged_weights(d: dict[str, Any]) -> float | None:
    if d.get("weight_mem_usage_gb") is not None:
        return _number(d["weight_mem_usage_gb"])
    if d.get("avail_mem_before_weights_gb") is not None and d.get("avail_mem_after_weights_gb") is not None:
        return _number(d["avail_mem_before_weights_gb"]) - _number(d["avail_mem_after_weights_gb"])
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
    estimate = None
    if case.weights_from_log:
        from kvcheck.model import EstimateInputs

        estimate = EstimateInputs(weights_gib_per_gpu=_logged_weights(d))
    target = _target(case.model, case.gpu, args, estimate)
    est = estimate_role(target, offline=True, profiles=_stack_profiles(case))
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
        details={**est.details, "gpu_vendor": _vendor(case.gpu)},
    )


def _stack_profiles(case: Case) -> dict[str, Any] | None:
    """The case's GPU profile with the figure moved as `case.stack_release`'s stack holds it (None: 0.5.23's)."""
    if case.stack_release is None:
        return None
    from kvcheck.engines.sglang.sizing import default_profiles

    profile = default_profiles().get(case.gpu)
    pre = profile.pre_baseline
    terms = tuple(t for t in pre.terms if not t.shift_mib or t.applies(t.min_ranks, case.stack_release))
    return {profile.name: replace(profile, pre_baseline=replace(pre, terms=terms))}


def _vendor(gpu: str) -> str:
    from kvcheck.engines.sglang.sizing import default_profiles

    return default_profiles().get(gpu).vendor


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
    for dp_id, model, gpu, args, release in WEIGHT_CHECKS:
        if dp_id in points and _logged_weights(points[dp_id]) is not None:
            est = estimate_role(replace(_target(model, gpu, args), engine_version=release), offline=True)
            predicted = est.details["weights_gib_per_gpu"] + est.details["load_overhead_gib"]
            rows.append((dp_id, predicted, float(_logged_weights(points[dp_id]))))
    return rows


def target_outcomes(outcomes: list[Outcome]) -> list[Outcome]:
    """The cases the published targets are computed over (Case.in_targets)."""
    return [o for o in outcomes if o.case.in_targets and o.error_pct is not None]


def median_abs_error(outcomes: list[Outcome], *, independent_only: bool = False) -> float:
    errors = [abs(o.error_pct) for o in target_outcomes(outcomes) if o.case.independent or not independent_only]
    return statistics.median(errors) if errors else float("nan")


