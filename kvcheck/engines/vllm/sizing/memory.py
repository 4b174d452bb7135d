"""What one vLLM worker has for its KV cache (vllm/v1/worker/gpu_worker.py `determine_available_memory`):

    requested = ceil(total_memory x gpu_memory_utilization)                     (utils.request_memory)
    available = requested - (weights + non-torch increase) - transient peak - CUDA-graph estimate

or `--kv-cache-memory-bytes` as given (profiling skipped). `total_memory` is what cudaMemGetInfo reports,
a little less than nvidia-smi's figure. The weights, the activation peak of the profiling run (which
depends on max_num_batched_tokens, the model and the release) and the non-torch memory cannot be known
exactly without the GPU: each comes with a band, and the pool's range is taken from their ends.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from packaging.version import InvalidVersion, Version

from kvcheck.engines.vllm.compilation import lax_int

GIB = float(1 << 30)
MIB = float(1 << 20)

# cudaMemGetInfo's total (GiB) as vLLM's own messages print it ("Free memory on device (x/79.19 GiB)"),
# by GPU profile; other cards: nvidia-smi's memory.total less TOTAL_RESERVE_MIB (+-TOTAL_BAND_MIB).
KNOWN_TOTAL_GIB = {
    "H100": 79.19, "H100-PCIe": 79.19, "H800": 79.19,
    "A100-80GB": 79.15, "A800-80GB": 79.15, "A100-80GB-PCIe": 79.15,
    "H200": 139.81, "A100-40GB": 39.39, "L40S": 44.42, "RTX-4090": 23.65, "RTX-5090": 31.4, "L4": 22.05,
    # B300 SXM6 AC: "Free memory on device (267.08/267.69 GiB)" (two public vLLM boots); GB300: "a total capacity of
    # 276.50 GiB" in two public PyTorch OOM messages, the same cudaMemGetInfo total (1,072 MiB under nvidia-smi)
    "B300": 267.69, "GB300": 276.5,
}  # fmt: skip
TOTAL_RESERVE_MIB = 600.0  # nvidia-smi minus cudaMemGetInfo: 346 (RTX 4090) to 870 MiB (A100 80GB) measured
TOTAL_BAND_MIB = 300.0
KNOWN_TOTAL_BAND_GIB = 0.005  # the message rounds to 0.01 GiB

# The non-torch memory vLLM counts (memory_profiling: cudaMemGetInfo's used memory less torch's reserved memory,
# grown since the worker's init snapshot): cuBLAS/cuDNN handles, loaded kernels, NCCL and IPC buffers, GiB.
# vLLM's own breakdowns print 0.03-0.27 GiB on one GPU.
NON_TORCH_GIB = 0.12
NON_TORCH_TP_GIB = 0.10  # extra with tensor/pipeline parallel peers, off NVSwitch (the 8 x L40S fit, PCIe)
NON_TORCH_BAND_GIB = 0.15

# Tensor parallelism on NVSwitch GPUs (read from the sources of 0.8.0-0.33.0 under /tmp/vllm-src):
# * from 0.11.0 the init snapshot is taken after init_worker_distributed_environment ("This ensures NCCL buffers
#   are allocated before we measure"), so NCCL's communicators, the custom all-reduce's IPC buffers (8 MiB
#   buffer + 8 MiB meta per rank, custom_all_reduce.py max_size) and the symmetric-memory all-reduce buffer are
#   not counted (they are in the startup free memory: 77.6 of 79.19 GiB free at TP 2-4 on H100, 78.7 at TP 1).
#   What is counted is what NCCL connects lazily at the profile run's first large all-reduce (the dummy forward's
#   8,192 x hidden activations exceed the custom all-reduce's 8 MiB and go to pynccl): NCCL's channel and NVLS
#   buffers, which vLLM's code cannot show (NCCL's version, channel count, NVLS). A range term, its central
#   figure fitted (below). Before 0.11 the snapshot preceded the distributed init: NCCL's setup was counted too.
# * from 0.17.0 the FlashInfer all-reduce + RMSNorm fusion is on by default (config/vllm.py
#   enable_allreduce_rms_fusion: TP > 1, SM 9.0 or 10.x, PP 1, DP 1, flashinfer a hard dependency of the wheel,
#   compiled mode only). Its pass creates one trtllm IPC workspace during the profile run's compile, after the
#   snapshot: three buffers (tp x T x hidden x 2, a flag buffer, 3 x tp x T x hidden x 2 lamport) with
#   T = min(max size / (hidden x dtype), max_num_batched_tokens), each rounded to 2 MiB and then to the
#   driver's allocation granularity for multicast-capable memory (FlashInfer's SymmDeviceMemory). The
#   granularity is the driver's, not in any code: fitted.
# Fitted on two boots only, llm-d-planner's vLLM 0.19.0 Llama-3.1-8B-Instruct at TP 2 and TP 4 on H100
# (non-torch 2.07 and 2.13 GiB): TP 4's buffers (8, 2 and 24 MiB before rounding) cost as much as TP 2's (128,
# 2 and 384 MiB), so each rounds to one granule of at least 384 MiB: 512 MiB, the next power of two, and
# NCCL's lazily connected buffers take the rest (0.48 GiB). Every other case stays held out.
NVSWITCH_GPUS = frozenset({"H100", "H200", "H800", "H20", "A100-80GB", "A100-40GB", "A800-80GB", "B200", "B300",
                           "GB200", "GB300"})
NCCL_LAZY_TP_GIB = (0.48, 0.10, 1.00)  # (central, low, high): central fitted (above), ends not knowable
NCCL_SETUP_BEFORE_011_GIB = 1.0  # < 0.11: NCCL's setup counted too (the startup free-memory gap): high end only
SNAPSHOT_AFTER_DIST_FROM = Version("0.11.0")
FUSION_FROM = Version("0.17.0")
FUSION_SM100_FAMILY_FROM = Version("0.19.0")  # 0.17-0.18: is_device_capability(100); 0.19+: the 10.x family
MULTICAST_GRANULARITY_MIB = 512  # fitted (above)
_FI_MAX_SIZE_MB = {  # FI_ALLREDUCE_FUSION_MAX_SIZE_MB, allreduce_rms_fusion.py: SM -> TP -> MiB
    90: {2: 64.0, 4: 2.0, 8: 0.5}, 100: {2: 64.0, 4: 32.0, 8: 1.0}, 103: {2: 64.0, 4: 64.0, 8: 2.0}}
_FI_MAX_SIZE_MB_025 = {100: {16: 64.0}, 103: {16: 64.0}}  # TP 16 from 0.25.0
_FI_MAX_COMM = 2147483647 & ~((1 << 21) - 1)


def _round_up(value: int, unit: int) -> int:
    return -(-value // unit) * unit


def fusion_workspace_bytes(version: Version | None, *, gpu_name: str, sm: int | None, tp: int, pp: int, dp: int,
                           compiled: bool, hidden: int, dtype_bytes: int, batched_tokens: int) -> tuple[int, bool]:
    """(bytes, whether the release is known) of the FlashInfer all-reduce fusion workspace vLLM allocates per GPU
    during its profile run; 0 where the fusion is off."""
    newest = version or NEWEST
    if (tp < 2 or pp != 1 or dp != 1 or not compiled or sm is None or gpu_name not in NVSWITCH_GPUS
            or newest.release < FUSION_FROM.release):
        return 0, version is not None
    if not (sm == 90 or sm == 100 or (sm // 10 == 10 and newest.release >= FUSION_SM100_FAMILY_FROM.release)):
        return 0, version is not None
    table = dict(_FI_MAX_SIZE_MB.get(sm if sm in _FI_MAX_SIZE_MB else 100, {}))
    if newest.release >= (0, 25, 0):
        table.update(_FI_MAX_SIZE_MB_025.get(sm, {}))
    size_mb = table.get(tp)
    if size_mb is None:
        return 0, version is not None
    tokens = min(int(size_mb * MIB) // (hidden * dtype_bytes), batched_tokens)
    elem = 4 if dtype_bytes == 4 else 2
    sizes = (tp * tokens * hidden * 2, tp * 256 * 4, min(tp * tokens * hidden * elem, _FI_MAX_COMM) * 3)
    granule = int(MULTICAST_GRANULARITY_MIB * MIB)
    return sum(_round_up(_round_up(s, 1 << 21) + 2048, granule) for s in sizes), version is not None


def tp_non_torch_gib(version: Version | None, *, gpu_name: str, tp: int, pp: int) -> tuple[float, float, float]:
    """(central, low, high) GiB of non-torch memory that peers add, the FlashInfer workspace apart."""
    if tp * pp <= 1:
        return 0.0, 0.0, 0.0
    if tp < 2 or gpu_name not in NVSWITCH_GPUS:
        return NON_TORCH_TP_GIB, NON_TORCH_TP_GIB, NON_TORCH_TP_GIB
    central, low, high = NCCL_LAZY_TP_GIB
    if version is None or version.release < SNAPSHOT_AFTER_DIST_FROM.release:
        high += NCCL_SETUP_BEFORE_011_GIB
    return central, low, high


# From 0.27.0 memory_profiling (utils/mem_utils.py) prices the non-KV memory as total_consumed (the drop in
# cudaMemGetInfo's free memory from the worker's init snapshot to the end of the profile run) plus
# transient_peak_headroom (torch's allocated peak less what is still allocated then); up to 0.26 it was
# weights_memory + the non-torch increase + the torch peak's increase over the profile run. With P torch's
# absolute allocated peak, R and A its reserved and allocated bytes after the run's empty_cache, A0 what was
# allocated when the profile run began and W the load's allocated increase (DeviceMemoryProfiler:
# max_memory_allocated after reset_peak_memory_stats): 0.27+ counts P + (R - A) + non-torch, 0.26 counted
# P + non-torch - (A0 - W). So the release adds two terms (the MoE workspace and the activations are in P
# either way):
# * A0 - W, the torch memory allocated after the snapshot outside the load: GPUModelRunner.__init__'s
#   persistent buffers (gpu_model_runner.py "Persistent buffers for CUDA graphs": inputs_embeds
#   max_num_tokens x hidden in the model dtype, input_ids int32, positions, req_indices and the block table's
#   slot_mapping int64, is_token_ids bool, per token; the block table max_num_seqs x max_model_len / block
#   int32; the per-request buffers are small). Read from the code: the central figure.
# * R - A, the caching allocator's fragmentation after empty_cache: segments that a freed load-time temporary
#   (weight processing after loading, the checkpoint's staging tensors) shares with a live weight cannot be
#   returned to the driver. Nothing in the deployment or the code states it; it grows with the weights'
#   tensors. A range term (low 0): its high end FRAGMENTATION_027_FIXED_GIB + FRAGMENTATION_027_HIGH of the
#   weights per GPU, an allowance chosen AFTER the 0.27.1 RTX PRO 6000 boots (held out, scored first) had
#   shown 1.48 GiB beyond the non-torch memory on 55.19 GiB of weights, and the 0.27.1 RTX 4090 boot (not a
#   case) 0.18 GiB on 0.93: no case was fitted, but the allowance is not independent of those boots.
TOTAL_CONSUMED_FROM = Version("0.27.0")
RUNNER_BYTES_PER_TOKEN = 4 + 8 + 8 + 8 + 1  # input_ids, positions, req_indices, slot_mapping, is_token_ids
RUNNER_BLOCK = 16  # the smallest usual block size: the block table's largest
FRAGMENTATION_027_HIGH = 0.03
FRAGMENTATION_027_FIXED_GIB = 0.20


def runner_buffer_bytes(*, batched_tokens: int, hidden: int, dtype_bytes: int, max_num_seqs: int,
                        max_model_len: int) -> int:
    """GPUModelRunner.__init__'s persistent device buffers (0.27.1), bytes."""
    per_token = hidden * dtype_bytes + RUNNER_BYTES_PER_TOKEN
    return batched_tokens * per_token + max_num_seqs * -(-max_model_len // RUNNER_BLOCK) * 4


def total_consumed_extra_bytes(version: Version | None, weights_bytes: float,
                               runner_bytes: int) -> tuple[float, float, float]:
    """(central, low, high) bytes that 0.27+'s total_consumed accounting counts beyond the weights, the
    non-torch increase and the activation peak; 0 before 0.27.0. An unstated release may be either: the
    newest's figure, 0 at the low end."""
    if version is not None and version.release < TOTAL_CONSUMED_FROM.release:
        return 0.0, 0.0, 0.0
    high = runner_bytes + FRAGMENTATION_027_FIXED_GIB * GIB + FRAGMENTATION_027_HIGH * weights_bytes
    return float(runner_bytes), float(runner_bytes) if version is not None else 0.0, high


ACTIVATION_BAND = (0.6, 1.6)  # the activation peak's low and high multipliers
ACTIVATION_BAND_MOE = (0.6, 2.5)  # MoE models: routing buffers and kernels beside the modelled workspace
# The dummy sampler's peak per logit element (max_num_seqs rows of the full vocabulary, run twice in
# profile_run). Read from the wheels: up to 0.16.0 PyTorch's sort for top-k/top-p (fp32 logits,
# probabilities, sorted values, int64 indices, a cumulative sum: about 38 B, fitted to the 0.9.2 and 0.10.2
# breakdowns; the held-out 0.11.0 boots of llm-d give 38.3-38.4 B once the hidden states below are apart).
# From 0.17.0 the Triton top-k/top-p kernel (v1/sample/ops/topk_topp_triton.py: in 0.17.0, not in
# 0.16.0), which works in place on the fp32 logits with a buffer of at most one row per SM; what stays is read
# from _dummy_sampler_run and Sampler.forward: the bf16 logits (2 B), their fp32 copy (4), the softmax
# probabilities (4) and random_sample's exponential draw (4): 14 B. 12-22 B in the range; an unknown
# release spans both.
# Up to 0.11.0 FlashInfer's sampler replaces the sort whenever `flashinfer.sampling` imports and
# VLLM_USE_FLASHINFER_SAMPLER is unset (topk_topp_sampler.py: "In V1, None means True"), and FlashInfer is
# an optional extra of those wheels (`Requires-Dist: flashinfer-python; extra == "flashinfer"`): whether the
# image has it is not in the deployment's inputs. FlashInfer's top_k_top_p_sampling_from_logits masks and
# softmaxes without sorting: the kernel's figure. Both occur in one public source (llm-d's 0.11.0 boots: the
# sort for Llama-3.1-8B and Qwen3, not for Mistral-Small-3.2), so such a release's range spans both, the
# central figure the sort's (the smaller pool). From 0.11.1 FlashInfer is a hard dependency and its sampler
# opt-in (VLLM_USE_FLASHINFER_SAMPLER=1).
# Beside them the Triton kernel caches one fp32 row of the vocabulary per program (apply_top_k_top_p_triton's
# _TRITON_BUFFER_CACHE: min(next_power_of_2(min(SMs, rows)), SMs) rows), alive through the peak: the SM count
# is the GPU's (num_compute_units), from the vendors' specifications; an unlisted GPU takes the H100's.
SM_COUNT = {"H100": 132, "H800": 132, "H200": 132, "H100-PCIe": 114, "H20": 78, "A100-80GB": 108, "A100-40GB": 108,
            "A800-80GB": 108, "A100-80GB-PCIe": 108, "L40S": 142, "L4": 58, "RTX-4090": 128, "RTX-5090": 170,
            "B200": 148, "GB200": 148}
SM_COUNT_OTHER = 132
SAMPLER_BYTES_SORT = (38.0, 32.0, 44.0)  # (central, low, high)
SAMPLER_BYTES_KERNEL = (14.0, 12.0, 22.0)
SAMPLER_BYTES_UNKNOWN = (29.0, 14.0, 44.0)
SAMPLER_BYTES_SORT_OR_FLASHINFER = (38.0, 12.0, 44.0)
SAMPLER_SORT_UNTIL = Version("0.16.99")
SAMPLER_KERNEL_FROM = Version("0.17.0")
FLASHINFER_SAMPLER_DEFAULT_UNTIL = Version("0.11.0")


def sampler_bytes_per_logit(version: Version | None, env: Mapping[str, str] | None = None) -> tuple[float, float, float]:
    """(central, low, high) bytes of the dummy sampler's peak per logit element, by release (and
    VLLM_USE_FLASHINFER_SAMPLER where the deployment sets it)."""
    flag = (env or {}).get("VLLM_USE_FLASHINFER_SAMPLER", "").strip()
    if version is None:
        return SAMPLER_BYTES_UNKNOWN
    if version.release >= SAMPLER_KERNEL_FROM.release:
        return SAMPLER_BYTES_KERNEL
    if flag not in ("", "0"):  # bool(int(value)) in envs.py: FlashInfer's sampler, no sort
        return SAMPLER_BYTES_KERNEL
    if version.release <= FLASHINFER_SAMPLER_DEFAULT_UNTIL.release and flag == "":
        return SAMPLER_BYTES_SORT_OR_FLASHINFER
    if version.release <= SAMPLER_SORT_UNTIL.release:
        return SAMPLER_BYTES_SORT
    return SAMPLER_BYTES_UNKNOWN


# The fused-MoE buffers of the dummy forward (Triton experts, fused_moe/fused_moe.py), bf16 activations:
# * up to 0.14: fused_experts_impl allocates them per call, M = min(tokens, VLLM_FUSED_MOE_CHUNK_SIZE) (32768
#   up to 0.11, 16384 from 0.12): cache13 M x topk x max(N, K) (caches 1 and 3 share it) and cache2
#   M x topk x N/2, freed after each layer: part of the forward's peak only;
# * from 0.15 the unquantized method runs the modular kernel (oracle: TritonExperts) whose buffers come from
#   the worker's WorkspaceManager (v1/worker/workspace.py), kept and reused: workspace13 M x topk x
#   max(N/2, K) (the output M x K shares it) and workspace2 M x topk x max(N, K), alive through the dummy
#   sampler as well (in 0.13-0.14 the modular kernel exists but the unquantized CUDA path calls
#   fused_experts directly). No chunking from 0.18 (M = the batched tokens).
# N = 2 x the expert width per rank (w13), K = hidden. MXFP4 (gpt-oss) runs other kernels: not modelled.
MOE_CHUNK_032768_UNTIL = Version("0.11.99")
MOE_CHUNK_UNTIL = Version("0.17.99")
MOE_PERSISTENT_FROM = Version("0.15.0")


def moe_workspace_bytes(text: Mapping[str, Any], *, tp: int, batched_tokens: int,
                        version: Version | None) -> tuple[float, bool]:
    """(bytes, whether they persist through the sampler) of the fused-MoE buffers; 0 for a dense model."""
    experts = _i(text, "n_routed_experts", "num_experts", "num_local_experts")
    quant = text.get("quantization_config")
    method = str(quant.get("quant_method") or "").lower() if isinstance(quant, Mapping) else ""
    if experts <= 1 or method == "mxfp4":
        return 0.0, False
    hidden = _i(text, "hidden_size", "n_embd", default=4096)
    topk = _i(text, "num_experts_per_tok", "moe_topk", "top_k", "experts_per_token", default=2)
    inter = _i(text, "moe_intermediate_size", "intermediate_size", default=4 * hidden)
    n = 2 * max(1, inter // max(1, tp))
    newest = version or NEWEST
    if newest.release <= MOE_CHUNK_032768_UNTIL.release:
        m = min(batched_tokens, 32768)
    elif newest.release <= MOE_CHUNK_UNTIL.release:
        m = min(batched_tokens, 16384)
    else:
        m = batched_tokens
    if newest.release >= MOE_PERSISTENT_FROM.release and not method:
        return float(m * topk * (max(n // 2, hidden) + max(n, hidden)) * 2), True
    return float(m * topk * (max(n, hidden) + n // 2) * 2), False


# CUDA-graph pool estimate (profile_cudagraph_memory) at the largest capture size 512: a few hundred MiB
# for dense models to ~1.6 GiB for large hybrids in the public logs.
CUDAGRAPH_GIB_AT_512 = 0.60
CUDAGRAPH_BAND = (0.15, 3.0)
WEIGHTS_BAND = 0.02  # config-computed weights: buffers, padding and scales the config cannot show
WEIGHTS_INDEX_BAND = 0.01  # checkpoint-index weights: rank imbalance and load-time buffers

# Releases: CUDA-graph memory profiling subtracts its estimate by default from 0.21.0
# (VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS, gpu_worker.py's own message: "default since v0.21.0");
# V1's sizing (this module) starts with 0.8.0; gpu_memory_utilization's default is 0.92 in 0.32.0
# (the flag catalogue), 0.9 in 0.12.0, 0.15.1 and 0.19.0 (their config/cache.py); 0.20-0.31 are not read.
CUDAGRAPH_DEFAULT_FROM = Version("0.21.0")
V1_FROM = Version("0.8.0")
UTIL_092_FROM = Version("0.32.0")
UTIL_090_UNTIL = Version("0.19.99")
NEWEST = Version("0.32.0")
NEWEST_READ = Version("0.33.0")  # the newest release whose source the sizing was read in


def release(version: str | None) -> Version | None:
    if not version:
        return None
    try:
        return Version(str(version))
    except InvalidVersion:
        return None


def default_utilization(version: Version | None) -> tuple[float, float]:
    """(central, other end) of --gpu-memory-utilization's default: 0.9 up to 0.19.0 and 0.92 in 0.32.0 (both
    read from the wheels); a release between them, or an unknown one, may have either."""
    if version is None:
        return 0.92, 0.90
    if version.release >= UTIL_092_FROM.release:
        return 0.92, 0.92
    if version.release <= UTIL_090_UNTIL.release:
        return 0.90, 0.90
    return 0.90, 0.92


def cudagraph_subtracted(version: Version | None, env: Mapping[str, str], eager: bool) -> tuple[bool, bool]:
    """(central, either end) of whether the CUDA-graph estimate is taken from the pool."""
    if eager:
        return False, False
    flag = env.get("VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS")
    if flag is not None and flag.strip() != "":
        on = flag.strip() not in ("0", "false", "False")
        return on, on
    if version is None:
        return True, False  # an unknown release: both behaviours lie in the range
    on = version.release >= CUDAGRAPH_DEFAULT_FROM.release
    return on, on


# The V2 model runner (v1/worker/gpu/model_runner.py) returns 0 from profile_cudagraph_memory up to 0.28.x
# ("It is TBD whether we keep this API or not"), and from 0.22.0 to 0.28.x config/vllm.py's
# use_v2_model_runner makes it the default for a generate model that is not MoE (and not hybrid, unless its
# architecture is on V2's default list): so a dense model's boot subtracts no CUDA-graph estimate there (the
# 0.27.1 RTX 4090 Qwen2.5-0.5B boot prints 0.0 GiB for it). An unsupported feature (speculative methods, stock
# torch.compile, sequence parallelism, ...) falls back to V1: the pool's low end keeps the estimate. From 0.29.0
# V2 profiles its graphs (_profile_cudagraph_memory). VLLM_USE_V2_MODEL_RUNNER decides where it is set.
V2_DEFAULT_DENSE_FROM = Version("0.22.0")
V2_GRAPH_ESTIMATE_ZERO_UNTIL = Version("0.28.99")
_HYBRID_KEYS = ("layers_block_type", "hybrid_override_pattern", "layer_types", "mamba_d_state", "ssm_state_size",
                "linear_num_value_heads", "full_attention_interval", "attn_type_list")


def v2_runner_skips_graph_estimate(version: Version | None, text: Mapping[str, Any],
                                   env: Mapping[str, str]) -> bool:
    """Whether the release's default runner for this model subtracts no CUDA-graph estimate (the V2 runner of
    0.22-0.28 for a dense model, or VLLM_USE_V2_MODEL_RUNNER=1 up to 0.28)."""
    if version is None or version.release > V2_GRAPH_ESTIMATE_ZERO_UNTIL.release:
        return False
    flag = (env.get("VLLM_USE_V2_MODEL_RUNNER") or "").strip()
    if flag:
        return flag not in ("0", "false", "False")
    if version.release < V2_DEFAULT_DENSE_FROM.release:
        return False
    moe = _i(text, "n_routed_experts", "num_experts", "num_local_experts") > 1
    return not moe and not any(text.get(key) for key in _HYBRID_KEYS)


def graph_bytes_at(end: int, graph: float, *, on: bool, other: bool, v2_zero: bool) -> float:
    """The CUDA-graph estimate a boot subtracts at one end of the range (0 central, -1 the pool's low end, +1 its
    high end): `on` the central behaviour, `other` the other one an unknown release may have."""
    subtracted = on if end == 0 else (on or other) if end < 0 else (on and other)
    if not subtracted or (v2_zero and end >= 0):
        return 0.0
    return graph * (CUDAGRAPH_BAND[0] if end > 0 else CUDAGRAPH_BAND[1] if end < 0 else 1.0)


@dataclass(frozen=True)
class DeviceTotal:
    gib: float
    band_gib: float
    source: str


def device_total(profile_name: str, nvidia_smi_mib: int, override_mib: int | None) -> DeviceTotal:
    if override_mib is None and profile_name in KNOWN_TOTAL_GIB:
        return DeviceTotal(KNOWN_TOTAL_GIB[profile_name], KNOWN_TOTAL_BAND_GIB,
                           f"cudaMemGetInfo total as vLLM prints it on {profile_name}")
    mib = override_mib if override_mib is not None else nvidia_smi_mib
    return DeviceTotal((mib - TOTAL_RESERVE_MIB) / 1024, TOTAL_BAND_MIB / 1024,
                       f"nvidia-smi {mib} MiB less {TOTAL_RESERVE_MIB:.0f} MiB the driver keeps (+-{TOTAL_BAND_MIB:.0f})")


def _i(text: Mapping[str, Any], *names: str, default: int = 0) -> int:
    for name in names:
        value = text.get(name)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return default


@dataclass(frozen=True)
class ActivationPeak:
    """The profiling run's transient peak: the dummy forward's and the dummy sampler's, bytes."""

    forward: float
    sampler_logits: int  # max_num_seqs x vocab elements
    sampler_bytes: tuple[float, float, float]  # per element: central, low, high
    sampler_fixed: float = 0.0  # bytes alive beside the sampler's logits (hidden states, the MoE workspace)
    moe_workspace: float = 0.0  # the fused-MoE buffers within `forward` (and within sampler_fixed when kept)
    note: str = ""  # what the inputs cannot settle about this peak, for the estimate's assumptions

    def at(self, end: int, band: tuple[float, float]) -> float:
        """end 0 central, -1 the largest peak (the pool's low end), +1 the smallest. The band scales the part
        of the forward the code does not show; the MoE workspace is read from the release's code."""
        per = self.sampler_bytes[0] if end == 0 else self.sampler_bytes[2] if end < 0 else self.sampler_bytes[1]
        rest = self.forward - self.moe_workspace
        forward = self.moe_workspace + rest * (1.0 if end == 0 else band[1] if end < 0 else band[0])
        return max(forward, self.sampler_logits * per + self.sampler_fixed)


def triton_sampler_buffer_bytes(gpu_name: str, rows: int, vocab: int) -> int:
    """The Triton top-k/top-p kernel's cached buffer (0.17+): one fp32 vocabulary row per program."""
    sms = SM_COUNT.get(gpu_name, SM_COUNT_OTHER)
    programs = min(sms, rows)
    return min(1 << max(0, programs - 1).bit_length(), sms) * vocab * 4


def activation_peak(text: Mapping[str, Any], *, tp: int, batched_tokens: int, max_num_seqs: int,
                    version: Version | None, env: Mapping[str, str] | None = None,
                    gpu_name: str = "") -> ActivationPeak:
    """The transient peak of vLLM's profiling run: the larger of the dummy forward pass over
    max_num_batched_tokens (the MLP's gate/up and activation outputs or the fused-MoE buffers, a few
    hidden-state buffers) and the dummy sampler over min(max_num_seqs, batched tokens) rows of the full
    vocabulary (profile_run), with what stays alive beside it."""
    hidden = _i(text, "hidden_size", "n_embd", default=4096)
    vocab = _i(text, "vocab_size", default=32000)
    experts = _i(text, "n_routed_experts", "num_experts", "num_local_experts")
    moe, kept = moe_workspace_bytes(text, tp=tp, batched_tokens=batched_tokens, version=version)
    if moe:
        mlp = moe
    elif experts:  # MXFP4 experts: the row count of the gate/up and activation outputs, the kernels' own apart
        topk = _i(text, "num_experts_per_tok", "moe_topk", "top_k", "experts_per_token", default=2)
        inter_rank = max(1, _i(text, "moe_intermediate_size", "intermediate_size", default=4 * hidden) // max(1, tp))
        mlp = float(batched_tokens * topk * (2 * inter_rank * 2 + inter_rank * 2))
    else:
        inter_rank = max(1, _i(text, "intermediate_size", "ffn_hidden_size", default=4 * hidden) // max(1, tp))
        mlp = float(batched_tokens * (2 * inter_rank * 2 + inter_rank * 2))
    forward = mlp + batched_tokens * hidden * 2 * 4
    reqs = min(max_num_seqs, batched_tokens)
    per = sampler_bytes_per_logit(version, env)
    # profile_run keeps the dummy forward's hidden states (`hidden_states`: batched tokens x hidden, bf16)
    # alive while _dummy_sampler_run runs (`del hidden_states, output` after it), and the MoE workspace where
    # the WorkspaceManager keeps it
    fixed = float(batched_tokens * hidden * 2) + (moe if kept else 0.0)
    if version is not None and version.release >= SAMPLER_KERNEL_FROM.release:
        fixed += triton_sampler_buffer_bytes(gpu_name, reqs, vocab)
    note = ""
    if per == SAMPLER_BYTES_SORT_OR_FLASHINFER:
        note = ("the dummy sampler of this release sorts the logits (PyTorch, about 38 B per logit) unless FlashInfer "
                "is installed (an optional extra of the wheel, in vLLM's own image), when its sampler runs without the "
                "sort (12-22 B): the deployment does not say which; the range spans both (set "
                "VLLM_USE_FLASHINFER_SAMPLER=0 for the sort, or measure)")
    return ActivationPeak(float(forward), reqs * vocab, per, fixed, moe, note)


def cudagraph_bytes(max_num_seqs: int, compilation: Mapping[str, Any] | None) -> float:
    """The CUDA-graph pool estimate, central figure, scaled by the largest capture size."""
    largest = min(512, 2 * max_num_seqs)
    if compilation:
        sizes = compilation.get("cudagraph_capture_sizes")
        read = [n for n in map(lax_int, sizes) if n is not None] if isinstance(sizes, list) else []
        cap = lax_int(compilation.get("max_cudagraph_capture_size"))
        if read:
            largest = max(read)
        elif cap is not None:
            largest = cap
    return CUDAGRAPH_GIB_AT_512 * GIB * max(0.05, min(2.0, largest / 512))


def ceil_requested(total_gib: float, utilization: float) -> float:
    return math.ceil(total_gib * GIB * utilization) / GIB
