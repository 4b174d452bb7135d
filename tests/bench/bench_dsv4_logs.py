"""Score the estimate against the DeepSeek-V4 figures real SGLang servers logged (held out: nothing in
the sizing model was fit to them).

Usage: python tests/bench/bench_dsv4_logs.py [--repo DIR]   (DIR: another checkout to score, e.g. the
commit before a change; default this one). Prints one row per logged figure: the weights per GPU
('Load weight end' mem usage, where the log has it), the pool against the logged one, and for the
refused start whether the estimate predicts the refusal.
The configs and logs are read from this checkout's tests/data.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parents[2]
MODELS = HERE / "tests" / "data" / "models"

# (case, model config, GPU, release, args, env, logged weights GiB (mem usage), logged pool, logged outcome)
CASES = (
    ("V4-Pro FP4 experts, 8xH200 TP8, mfs 0.88 (InferenceX #2128)", "deepseek-ai--DeepSeek-V4-Pro", "H200", "0.5.14",
     {"tp_size": 8, "mem_fraction_static": 0.88, "moe_runner_backend": "marlin", "max_running_requests": 8,
      "chunked_prefill_size": 4096, "disable_radix_cache": True}, {}, 125.65, None,
     "refused (ValueError: Loaded weights leave no GPU memory)"),
    ("V4-Flash-Base FP8 experts, 8xH20 TP8, mfs 0.60 (fixture)", "sgl-project--DeepSeek-V4-Flash-FP8", "H20", "0.5.12",
     {"tp_size": 8, "mem_fraction_static": 0.6}, {}, 93.61 - 57.01, 1_317_632, "1,317,632 tokens"),
    # a ROCm development build (sglang#25118): no release, so the KV108 range over every layout applies
    ("V4-Flash-FP8, 4xMI300X TP4 DP4 DP attention, mfs 0.88 (sglang#25118, dev build)", "sgl-project--DeepSeek-V4-Flash-FP8",
     "MI300X", None,
     {"tp_size": 4, "dp_size": 4, "enable_dp_attention": True, "mem_fraction_static": 0.88, "max_running_requests": 256,
      "page_size": 256, "kv_cache_dtype": "fp8_e4m3", "disable_radix_cache": True, "chunked_prefill_size": 8192,
      "disable_cuda_graph": True, "swa_full_tokens_ratio": 0.8}, {}, 73.43, 529_408, "529,408 tokens (full_token)"),
    # the deepseek-v4-hopper image of 2026-05-08, before the 0.5.12 wheel (2026-05-16): no release, so the KV108
    # range applies; DeepEP replicates the shared experts; pool only (no weight lines)
    ("V4-Flash-FP8, 4xH200 TP4 DeepEP EAGLE, mfs 0.7 (sglang#24650, dev build)", "sgl-project--DeepSeek-V4-Flash-FP8",
     "H200", None,
     {"tp_size": 4, "dp_size": 1, "enable_dp_attention": True, "moe_a2a_backend": "deepep", "cuda_graph_max_bs": 32,
      "max_running_requests": 128, "mem_fraction_static": 0.7, "speculative_algorithm": "EAGLE",
      "speculative_num_steps": 1, "speculative_eagle_topk": 1, "speculative_num_draft_tokens": 2},
     {"SGLANG_DSV4_FP4_EXPERTS": "0"}, None, 1_066_240, "1,066,240 tokens"),
    ("the same, priced as 0.5.12 (its first release)", "sgl-project--DeepSeek-V4-Flash-FP8", "H200", "0.5.12",
     {"tp_size": 4, "dp_size": 1, "enable_dp_attention": True, "moe_a2a_backend": "deepep", "cuda_graph_max_bs": 32,
      "max_running_requests": 128, "mem_fraction_static": 0.7, "speculative_algorithm": "EAGLE",
      "speculative_num_steps": 1, "speculative_eagle_topk": 1, "speculative_num_draft_tokens": 2},
     {"SGLANG_DSV4_FP4_EXPERTS": "0"}, None, 1_066_240, "1,066,240 tokens"),
    # sglang PR #28620's branch (2026-07, between the 0.5.14 and 0.5.15 wheels), stated figures: the weights are the
    # target's "about 35.52 GB" and the MTP draft's "about 1.06 GB"; V4 takes EAGLE top-k 1
    ("V4-Flash-FP8, 8xL20 TP8, mfs 0.85, MTP, context 32768 (sglang PR #28620, dev branch)",
     "sgl-project--DeepSeek-V4-Flash-FP8", "L20", None,
     {"tp_size": 8, "mem_fraction_static": 0.85, "context_length": 32768, "max_running_requests": 8,
      "cuda_graph_max_bs": 8, "speculative_algorithm": "EAGLE"}, {}, 35.52 + 1.06, 73_472, "73,472 tokens"),
    ("the same, priced as 0.5.15 (the next release)", "sgl-project--DeepSeek-V4-Flash-FP8", "L20", "0.5.15",
     {"tp_size": 8, "mem_fraction_static": 0.85, "context_length": 32768, "max_running_requests": 8,
      "cuda_graph_max_bs": 8, "speculative_algorithm": "EAGLE"}, {}, 35.52 + 1.06, 73_472, "73,472 tokens"),
    # a source build of 2026-09-03, the day before the 0.5.19 wheel; GPU not printed (80 GB Hopper inferred), no
    # weight lines: the pool is scored on an assumed H100
    ("V4-Flash FP4 experts, 8xH100 (inferred) TP8, mfs 0.85, bf16 compress state (Pqlet, build a1fe4e30)",
     "deepseek-ai--DeepSeek-V4-Flash", "H100", "0.5.19",
     {"tp_size": 8, "kv_cache_dtype": "fp8_e4m3", "mem_fraction_static": 0.85, "context_length": 1_048_576,
      "chunked_prefill_size": 8192, "max_running_requests": 64}, {"SGLANG_DSV4_COMPRESS_STATE_DTYPE": "bf16"},
     None, 6_859_008, "6,859,008 tokens"),
    # a decode role of a private image on 0.5.15.post1 (a public report's fraction sweep; the 0.90 point): EP8, so
    # each rank holds 48 whole experts; no weight lines (the sweep's slope gives 130.30 GiB and 276.92 GiB free)
    ("V4-Pro FP4 experts, 8xMI355X TP8 DP8 DP attention EP8, PD decode, mfs 0.90 (report, 0.5.15.post1 image)",
     "deepseek-ai--DeepSeek-V4-Pro", "MI355X", "0.5.15.post1",
     {"tp_size": 8, "dp_size": 8, "enable_dp_attention": True, "ep_size": 8, "kv_cache_dtype": "fp8_e4m3",
      "context_length": 9472, "max_running_requests": 512, "swa_full_tokens_ratio": 0.15, "mem_fraction_static": 0.9,
      "disaggregation_mode": "decode"}, {}, None, 9_217_792, "9,217,792 tokens"),
    # the same pair on the v0.5.13 ROCm image (a report of the same team): 0.5.13's layout, the same budget; its load
    # log printed "Execute dequant fp8 wo_a", so the launch ran with SGLANG_OPT_FP8_WO_A_GEMM off (0.5.14 on turns it
    # off on HIP by itself)
    ("V4-Pro FP4 experts, 8xMI355X TP8 DP8 DP attention EP8, PD decode, mfs 0.90 (report, v0.5.13 image)",
     "deepseek-ai--DeepSeek-V4-Pro", "MI355X", "0.5.13",
     {"tp_size": 8, "dp_size": 8, "enable_dp_attention": True, "ep_size": 8, "kv_cache_dtype": "fp8_e4m3",
      "context_length": 9472, "max_running_requests": 512, "swa_full_tokens_ratio": 0.15, "mem_fraction_static": 0.9,
      "disaggregation_mode": "decode"}, {"SGLANG_OPT_FP8_WO_A_GEMM": "0"}, None, 3_895_296, "3,895,296 tokens"),
    ("the same pair's prefill leg, mfs 0.85 (v0.5.13 image)", "deepseek-ai--DeepSeek-V4-Pro", "MI355X", "0.5.13",
     {"tp_size": 8, "dp_size": 8, "enable_dp_attention": True, "ep_size": 8, "kv_cache_dtype": "fp8_e4m3",
      "context_length": 9472, "max_running_requests": 512, "swa_full_tokens_ratio": 0.15, "mem_fraction_static": 0.85,
      "disaggregation_mode": "prefill"}, {"SGLANG_OPT_FP8_WO_A_GEMM": "0"}, None, 3_441_920, "3,441,920 tokens"),
    # 4 x 8 H800, 0.5.12.post1, a team's stated tables (the weights they state are pipeline stage 0's; the pool is
    # the least of the stages', which the estimate gives)
    ("V4-Pro FP4 experts, 4x8xH800 TP8 PP4, marlin, SHARED_EXPERT_TP1, mfs 0.90, 1M context (report, 0.5.12.post1)",
     "deepseek-ai--DeepSeek-V4-Pro", "H800", "0.5.12.post1",
     {"tp_size": 8, "pp_size": 4, "nnodes": 4, "moe_runner_backend": "marlin", "context_length": 1_048_576,
      "mem_fraction_static": 0.9, "disable_cuda_graph": True, "disable_overlap_schedule": True},
     {"SGLANG_SHARED_EXPERT_TP1": "1"}, None, 1_607_936, "1,607,936 tokens"),
    ("the same at TP16 PP2 (report, 0.5.12.post1)", "deepseek-ai--DeepSeek-V4-Pro", "H800", "0.5.12.post1",
     {"tp_size": 16, "pp_size": 2, "nnodes": 4, "moe_runner_backend": "marlin", "context_length": 1_048_576,
      "mem_fraction_static": 0.9, "disable_cuda_graph": True, "disable_overlap_schedule": True},
     {"SGLANG_SHARED_EXPERT_TP1": "1"}, None, 1_573_888, "1,573,888 tokens"),
)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repo", type=Path, default=HERE)
    repo = parser.parse_args().repo.resolve()
    sys.path.insert(0, str(repo))
    from kvcheck.engines.sglang.sizing import estimate_role
    from kvcheck.model import EstimateInputs, RoleTarget

    print(f"kvcheck from {repo}")
    print("| case | release | logged weights GiB | predicted GiB | weights error % | logged pool | predicted pool "
          "| pool error % | range |")
    print("| --- | --- | ---: | ---: | ---: | --- | ---: | ---: | --- |")
    for name, model, gpu, release, args, env, logged, logged_pool, outcome in CASES:
        target = RoleTarget(name="server", context_length=1, min_headroom=1.0, engine_version=release, args=args,
                            argv_args=(), gpu=gpu, model_config=MODELS / f"{model}.json", env=env,
                            estimate=EstimateInputs())
        est = estimate_role(target, offline=True)
        predicted = est.details["weights_gib_per_gpu"] + est.details["load_overhead_gib"]
        refused = [f.message for f in getattr(est, "findings", ()) if f.rule == "KV120"]
        pool = "refused" if refused or est.pool_tokens == 0 else f"{est.pool_tokens:,}"
        weights = (f"not logged | {predicted:.2f} | -" if logged is None else
                   f"{logged:.2f} | {predicted:.2f} | {100 * (predicted - logged) / logged:+.1f}")
        pool_error = "-" if logged_pool is None else f"{100 * (est.pool_tokens - logged_pool) / logged_pool:+.2f}"
        print(f"| {name} | {release or 'not stated'} | {weights} | {outcome} | {pool} | {pool_error} "
              f"| {est.pool_range[0]:,}-{est.pool_range[1]:,} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
