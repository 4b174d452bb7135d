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

GIB = float(1 << 30)
MIB = float(1 << 20)

# cudaMemGetInfo's total (GiB) as vLLM's own messages print it ("Free memory on device (x/79.19 GiB)"),
# by GPU profile; other cards: nvidia-smi's memory.total less TOTAL_RESERVE_MIB (+-TOTAL_BAND_MIB).
KNOWN_TOTAL_GIB = {
    "H100": 79.19, "H100-PCIe": 79.19, "H800": 79.19,
    "A100-80GB": 79.15, "A800-80GB": 79.15, "A100-80GB-PCIe": 79.15,
    "H200": 139.81, "A100-40GB": 39.39, "L40S": 44.42, "RTX-4090": 23.65, "RTX-5090": 31.4, "L4": 22.05,
}  # fmt: skip
TOTAL_RESERVE_MIB = 600.0  # nvidia-smi minus cudaMemGetInfo: 346 (RTX 4090) to 870 MiB (A100 80GB) measured
TOTAL_BAND_MIB = 300.0
KNOWN_TOTAL_BAND_GIB = 0.005  # the message rounds to 0.01 GiB

# The non-torch memory vLLM counts (cuBLAS/cuDNN workspaces, NCCL and custom all-reduce buffers), GiB:
# vLLM's own breakdowns print 0.03-0.23 GiB on one GPU and 0.18-0.30 GiB with TP peers.
NON_TORCH_GIB = 0.12
NON_TORCH_TP_GIB = 0.10  # extra with tensor/pipeline parallel peers (NCCL, custom all-reduce IPC buffers)
NON_TORCH_BAND_GIB = 0.15
ACTIVATION_BAND = (0.6, 1.6)  # the activation peak's low and high multipliers
ACTIVATION_BAND_MOE = (0.6, 2.5)  # MoE models: fused-MoE workspaces are not modelled
# The dummy sampler's peak per logit element (max_num_seqs rows of the full vocabulary, run twice in
# profile_run). Read from the wheels: 0.12.0 and 0.15.1 have only PyTorch's sort for top-k/top-p (fp32
# logits, probabilities, sorted values, int64 indices, a cumulative sum: about 38 B, the 0.9.2 and 0.10.2
# breakdowns); 0.19.0 and 0.32.0 have the Triton top-k/top-p kernel (v1/sample/ops/topk_topp_triton.py;
# about 20 B, the 0.19.0 gpt-oss-20b log leaves at most 22). 0.16-0.18 are not read: their band spans both.
SAMPLER_BYTES_SORT = (38.0, 32.0, 44.0)  # (central, low, high)
SAMPLER_BYTES_KERNEL = (20.0, 14.0, 26.0)
SAMPLER_BYTES_UNKNOWN = (29.0, 14.0, 44.0)
SAMPLER_SORT_UNTIL = Version("0.15.99")
SAMPLER_KERNEL_FROM = Version("0.19.0")


def sampler_bytes_per_logit(version: Version | None) -> tuple[float, float, float]:
    """(central, low, high) bytes of the dummy sampler's peak per logit element, by release."""
    if version is None:
        return SAMPLER_BYTES_UNKNOWN
    if version.release <= SAMPLER_SORT_UNTIL.release:
        return SAMPLER_BYTES_SORT
    if version.release >= SAMPLER_KERNEL_FROM.release:
        return SAMPLER_BYTES_KERNEL
    return SAMPLER_BYTES_UNKNOWN


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

    def at(self, end: int, band: tuple[float, float]) -> float:
        """end 0 central, -1 the largest peak (the pool's low end), +1 the smallest."""
        per = self.sampler_bytes[0] if end == 0 else self.sampler_bytes[2] if end < 0 else self.sampler_bytes[1]
        forward = self.forward * (1.0 if end == 0 else band[1] if end < 0 else band[0])
        return max(forward, self.sampler_logits * per)


def activation_peak(text: Mapping[str, Any], *, tp: int, batched_tokens: int, max_num_seqs: int,
                    version: Version | None) -> ActivationPeak:
    """The transient peak of vLLM's profiling run: the larger of the dummy forward pass over
    max_num_batched_tokens (the MLP's gate/up and activation outputs, a few hidden-state buffers) and the
    dummy sampler over min(max_num_seqs, batched tokens) rows of the full vocabulary (profile_run)."""
    hidden = _i(text, "hidden_size", "n_embd", default=4096)
    vocab = _i(text, "vocab_size", default=32000)
    experts = _i(text, "n_routed_experts", "num_experts", "num_local_experts")
    if experts:
        topk = _i(text, "num_experts_per_tok", "moe_topk", "top_k", "experts_per_token", default=2)
        inter = _i(text, "moe_intermediate_size", "intermediate_size", default=4 * hidden)
        rows = batched_tokens * topk
    else:
        inter = _i(text, "intermediate_size", "ffn_hidden_size", default=4 * hidden)
        rows = batched_tokens
    inter_rank = max(1, inter // max(1, tp))
    forward = rows * (2 * inter_rank * 2 + inter_rank * 2) + batched_tokens * hidden * 2 * 4
    reqs = min(max_num_seqs, batched_tokens)
    return ActivationPeak(float(forward), reqs * vocab, sampler_bytes_per_logit(version))


def cudagraph_bytes(max_num_seqs: int, compilation: Mapping[str, Any] | None) -> float:
    """The CUDA-graph pool estimate, central figure, scaled by the largest capture size."""
    largest = min(512, 2 * max_num_seqs)
    if compilation:
        sizes = compilation.get("cudagraph_capture_sizes")
        if isinstance(sizes, list) and sizes:
            largest = max(int(s) for s in sizes)
        elif isinstance(compilation.get("max_cudagraph_capture_size"), int):
            largest = int(compilation["max_cudagraph_capture_size"])
    return CUDAGRAPH_GIB_AT_512 * GIB * max(0.05, min(2.0, largest / 512))


def ceil_requested(total_gib: float, utilization: float) -> float:
    return math.ceil(total_gib * GIB * utilization) / GIB
