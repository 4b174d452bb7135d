"""PyTorch's caching allocator as it holds SGLang's weights: the rounding each large tensor's block carries.

SGLang's "Load weight end ... mem usage" is the device memory PyTorch's caching allocator has reserved once the
weights are loaded (and its cache emptied), not the sum of the tensors' bytes. The allocator
(c10/cuda/CUDACachingAllocator.cpp, the same code hipified on ROCm) rounds every request up to 512 B
(kMinBlockSize) and gives a request of 10 MiB or more (kMinLargeAlloc) a segment of its own, rounded up to
2 MiB (kRoundLarge). A weight tensor that is not a multiple of 2 MiB so leaves the rest of its last 2 MiB
reserved: the tensor's slack, counted here per tensor as SGLang allocates it (fused shapes, one rank's shard).

A large block's tail over 1 MiB (kSmallSize) is split off and stays free; the next request of 1-10 MiB that
fits it best takes it. The two then share the segment: when the first tensor is freed after loading (a merge
that re-points it into a new buffer) and the cache emptied, the live tenant keeps the whole segment reserved
(pinned_segment). Not modelled: tensors of 1-10 MiB share 20 MiB segments (kLargeBuffer), which a run of them
fills closely, and tails taken by a tensor that lives on; both are counted as no slack.
With `expandable_segments:True` the allocator maps pages into one growing segment instead (no per-tensor
rounding), and Ascend NPUs have their own allocator: no slack in either case.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping

SLACK = "allocator_slack"  # the weights component that is the caching allocator's rounding of the tensors
MIB = 1 << 20
MIN_BLOCK = 512  # kMinBlockSize: every request is rounded up to this
SMALL_SIZE = MIB  # kSmallSize: requests up to this come from the small pool; a large block splits past this
MIN_LARGE_ALLOC = 10 * MIB  # kMinLargeAlloc: from here a request gets a segment of its own ...
ROUND_LARGE = 2 * MIB  # kRoundLarge: ... rounded up to this
# the variables PyTorch reads its allocator settings from, the first one set wins: PYTORCH_ALLOC_CONF (2.9 on),
# then the CUDA spelling, or on ROCm the HIP spelling before the CUDA one
ALLOC_CONF_VARS = ("PYTORCH_ALLOC_CONF", "PYTORCH_CUDA_ALLOC_CONF")
ALLOC_CONF_VARS_ROCM = ("PYTORCH_ALLOC_CONF", "PYTORCH_HIP_ALLOC_CONF", "PYTORCH_CUDA_ALLOC_CONF")


def block_slack(nbytes: float) -> float:
    """Bytes the allocator reserves beyond one tensor of `nbytes` (0 under 10 MiB: see the module's note)."""
    size = math.ceil(round(nbytes, 3) / MIN_BLOCK) * MIN_BLOCK
    if size < MIN_LARGE_ALLOC:
        return 0.0
    return math.ceil(size / ROUND_LARGE) * ROUND_LARGE - nbytes


def pinned_segment(freed: float, tenant: float) -> float:
    """Bytes that stay reserved beyond `tenant` once a tensor of `freed` bytes is freed and the cache emptied,
    where `tenant` (a later request) took the split tail of the freed tensor's segment: the segment, less the
    tenant. 0 where the segment has no split tail (under 10 MiB, or 1 MiB or less left over), or the tenant is
    a small-pool request or does not fit the tail (it went elsewhere)."""
    size = math.ceil(round(freed, 3) / MIN_BLOCK) * MIN_BLOCK
    taken = math.ceil(round(tenant, 3) / MIN_BLOCK) * MIN_BLOCK
    if size < MIN_LARGE_ALLOC:
        return 0.0
    segment = math.ceil(size / ROUND_LARGE) * ROUND_LARGE
    tail = segment - size
    if tail <= SMALL_SIZE or taken <= SMALL_SIZE or taken > tail:
        return 0.0
    return segment - tenant


def tensors_slack(sizes: Iterable[float]) -> float:
    return sum(block_slack(b) for b in sizes)


def expandable_segments(env: Mapping[str, str], *, rocm: bool = False) -> bool:
    """Whether the role's env turns on expandable segments: `expandable_segments:True` in the allocator setting
    PyTorch reads, the first of its variables that is set (a later one is not read at all)."""
    setting = next((str(env[var]) for var in (ALLOC_CONF_VARS_ROCM if rocm else ALLOC_CONF_VARS) if env.get(var)), "")
    for option in setting.split(","):
        key, _, value = option.partition(":")
        if key.strip() == "expandable_segments" and value.strip() == "True":
            return True
    return False


def rounds_weights(env: Mapping[str, str], *, npu: bool, rocm: bool = False) -> bool:
    """Whether the weights carry the caching allocator's per-tensor rounding (block_slack)."""
    return not npu and not expandable_segments(env, rocm=rocm)
