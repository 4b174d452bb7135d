"""vLLM's planner: sweep its estimate model (sizing/model.py) over what an operator can change.

Every figure comes from `estimate_role` itself, so a recommended setting predicts what
`kvcheck verify --mode estimate` predicts once applied. The utilization range runs from the smallest
--gpu-memory-utilization whose pool holds the window (and that vLLM would start with) to the largest
vLLM can request on an otherwise idle GPU (its startup check: free memory >= total x utilization,
with the CUDA context and peers' buffers already taken: the GPU profile's memory in use before a
server's baseline). vLLM profiles its own activations and CUDA graphs and takes them from that
budget, so no value below the ceiling is unsafe in SGLang's sense.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from kvcheck.engines.base import PoolEstimate
from kvcheck.engines.vllm.cpu import GIB, KV_SPACE_ENV
from kvcheck.engines.vllm.serving import explicit_kv_bytes
from kvcheck.engines.vllm.sizing.model import _device, estimate_role
from kvcheck.errors import EstimateError, InputError
from kvcheck.gpus import GpuProfile, GpuProfiles, as_profiles
from kvcheck.model import FractionPlan, PlanOption, RolePlan, RoleTarget

TP_CANDIDATES = (1, 2, 4, 8)
KV_DTYPE_CANDIDATES = ("auto", "fp8")  # the model's own dtype first, then fp8 (e4m3)
SCALE = 1000  # utilization in thousandths
FLAG = "gpu-memory-utilization"
CPU_BYTES_FLAG = "kv-cache-memory-bytes"
MIB = 2**20
CPU_WORKERS = "CPU worker"  # how a CPU role's TP options name its ranks (no GPUs)
CPU_MAX_SPACE_BYTES = 64 * 2**40  # the CPU sweep's upper end: 64 TiB of host memory
_FAILURES = (EstimateError, InputError)


class _Sweep:
    def __init__(self, target: RoleTarget, profiles: GpuProfiles, offline: bool | None) -> None:
        self.target, self.profiles, self.offline = target, profiles, offline
        self.calls = 0
        self._memo: dict[tuple, PoolEstimate | Exception] = {}

    def __call__(self, overrides: Mapping[str, Any], target: RoleTarget | None = None) -> PoolEstimate:
        base = target or self.target
        key = (id(base), tuple(sorted(overrides.items())))
        hit = self._memo.get(key)
        if hit is None:
            self.calls += 1
            args = {k: v for k, v in {**base.args, **overrides}.items() if v is not None}
            try:
                hit = estimate_role(replace(base, args=args), profiles=self.profiles, offline=self.offline)
            except _FAILURES as exc:
                hit = exc
            self._memo[key] = hit
        if isinstance(hit, Exception):
            raise hit
        return hit


def largest_window(pool_tokens: int, min_headroom: float) -> int:
    window = math.floor(pool_tokens / min_headroom)
    while window > 0 and math.ceil(min_headroom * window) > pool_tokens:
        window -= 1
    return max(window, 0)


def length_refused(est: PoolEstimate) -> str:
    """An option's note when vLLM refuses the role's --max-model-len whatever the memory (KV220)."""
    return f"vLLM refuses --max-model-len {est.details.get('max_model_len') or 0:,} (KV220)"


def _holds(est: PoolEstimate, required: int, low: bool = False) -> bool:
    """The pool holds the window and vLLM would start (its one-request check passes)."""
    pool = est.pool_range[0] if low else est.pool_tokens
    return pool >= required and not est.details.get("vllm_would_refuse")


def _uncertain(est: PoolEstimate, required: int) -> bool:
    return est.pool_range[0] < required <= est.pool_range[1]


def _option(setting: str, value: int | str, est: PoolEstimate | None, required: int, *, current: bool,
            gpus: int | None = None, note: str | None = None) -> PlanOption:
    if est is None:
        return PlanOption(setting, value, None, None, False, False, current, 1 if gpus else None, gpus, note)
    if est.details.get("vllm_refuses_length"):
        # the length is refused before memory is sized: the pool this setting would give is never allocated
        refused = length_refused(est)
        note = refused if note is None else f"{refused}; {note}"
    elif est.details.get("vllm_would_refuse") and (note is None or CPU_WORKERS in note):
        refused = f"vLLM would refuse to start (max model len > {est.details.get('largest_max_model_len', 0):,})"
        note = refused if note is None else f"{refused}; {note}"
    return PlanOption(setting, value, est.pool_tokens, est.pool_range, _holds(est, required),
                      _uncertain(est, required), current, 1 if gpus else None, gpus, note)


def _ceiling_steps(target: RoleTarget, profiles: GpuProfiles, base: PoolEstimate) -> tuple[int | None, float | None]:
    """The largest utilization vLLM can request on an idle GPU, and the memory it leaves (MiB)."""
    if base.details.get("kv_cache_memory_bytes") is not None or not target.gpu:
        return None, None
    gpu = profiles.get(target.gpu)
    total = base.details.get("device_total_gib")
    if not isinstance(total, int | float) or total <= 0:
        return None, None
    peers = max(1, min(8, base.tp_size * base.pp_size))
    used_mib = gpu.pre_baseline.mib(peers) + gpu.pre_baseline.band(peers)
    steps = math.floor((total * 1024 - used_mib) / (total * 1024) * SCALE)
    return max(1, min(SCALE, steps)), used_mib


def _lowest(pred: Any, lo: int, hi: int) -> int | None:
    if hi < lo or not pred(hi):
        return None
    while lo < hi:
        mid = (lo + hi) // 2
        if pred(mid):
            hi = mid
        else:
            lo = mid + 1
    return lo


def _fraction(sweep: _Sweep, target: RoleTarget, base: PoolEstimate, required: int,
              ceiling: int | None, reserve_mib: float | None) -> FractionPlan:
    flag = target.args.get("gpu_memory_utilization")
    source = "manifest" if flag is not None else "vllm default"
    current = float(flag) if flag is not None else base.mem_fraction_static
    if base.details.get("kv_cache_memory_bytes") is not None:
        return FractionPlan(current, source, base.pool_tokens, None, None, None, None, None, None,
                            note="--kv-cache-memory-bytes sets the pool: vLLM ignores the utilization",
                            flag=FLAG, engine_label="vLLM")
    if base.details.get("num_gpu_blocks_override") is not None:
        return FractionPlan(current, source, base.pool_tokens, None, None, None, None, None, None,
                            note="--num-gpu-blocks-override sets the pool's blocks: no utilization changes it",
                            flag=FLAG, engine_label="vLLM")
    hi = ceiling or SCALE

    def at(steps: int) -> PoolEstimate:
        return sweep({"gpu_memory_utilization": steps / SCALE})

    def fits(steps: int) -> bool:
        try:
            return _holds(at(steps), required)
        except _FAILURES:
            return False

    def fits_low(steps: int) -> bool:
        try:
            return _holds(at(steps), required, low=True)
        except _FAILURES:
            return False

    lowest = _lowest(fits, 1, hi)
    worst = _lowest(fits_low, lowest or 1, hi) if lowest is not None else None
    note = None
    blocked = None
    length, derived = base.details.get("max_model_len"), base.details.get("derived_max_model_len")
    if isinstance(length, int) and isinstance(derived, int) and base.details.get("vllm_refuses_length"):
        # vLLM's config check refuses the length before any memory is sized: no utilization helps
        blocked = (f"no value helps: vLLM refuses --max-model-len {length:,}, above the model's own length "
                   f"{derived:,} (KV220), before it sizes any memory",
                   f"lower --max-model-len to {derived:,}, or set VLLM_ALLOW_LONG_MAX_MODEL_LEN=1 in the role's "
                   "env where the model is known to serve longer")
    if ceiling is not None and current * SCALE > ceiling:
        note = (f"the manifest's {current:g} is above {ceiling / SCALE:g}, the most vLLM can request on an idle "
                "GPU (it refuses to start when free memory is below total x utilization)")
    return FractionPlan(
        current=current, current_source=source, current_pool_tokens=base.pool_tokens,
        min_fitting=None if lowest is None else lowest / SCALE,
        min_fitting_pool_tokens=None if lowest is None else at(lowest).pool_tokens,
        min_fitting_worst_case=None if worst is None else worst / SCALE,
        max_safe=None if ceiling is None else ceiling / SCALE,
        max_safe_pool_tokens=None if ceiling is None else at(ceiling).pool_tokens,
        safe_reserve_mib=None if reserve_mib is None else round(reserve_mib, 1),
        note=note, flag=FLAG, engine_label="vLLM", blocked=blocked,
    )


def _cpu_space(target: RoleTarget) -> tuple[str, int] | None:
    """A CPU role's explicit KV space, the lever its pool moves with: (flag, value) where flag is
    VLLM_CPU_KVCACHE_SPACE (whole GiB, the legacy setting, which wins) or kv-cache-memory-bytes (bytes)."""
    space = target.env.get(KV_SPACE_ENV, "").strip()
    if space.isdigit():
        return KV_SPACE_ENV, int(space)
    explicit = explicit_kv_bytes(target.args, "cpu", target.engine_version)
    if isinstance(explicit, int) and not isinstance(explicit, bool):
        return CPU_BYTES_FLAG, explicit
    return None


def _cpu_fraction(sweep: _Sweep, target: RoleTarget, base: PoolEstimate, required: int) -> FractionPlan:
    """On vLLM's CPU backend the pool is the explicit KV space (host memory), not a share of a GPU: the
    smallest space that holds the window, in the unit the role sets it in (whole GiB for VLLM_CPU_KVCACHE_SPACE,
    MiB steps for --kv-cache-memory-bytes). The host's free memory is not known when planning; verify
    checks it before boot (KV324)."""
    lever = _cpu_space(target)
    if lever is None:  # the estimate already refused such a role (KV305); kept for the type
        raise EstimateError("a vLLM CPU role sizes its KV cache from VLLM_CPU_KVCACHE_SPACE or --kv-cache-memory-bytes")
    flag, current = lever
    unit = GIB if flag == KV_SPACE_ENV else MIB
    targets: dict[int, RoleTarget] = {}  # kept alive: the sweep's memo is keyed by the target's id

    def at(steps: int) -> PoolEstimate:
        if flag == CPU_BYTES_FLAG:
            return sweep({"kv_cache_memory_bytes": steps * unit})
        if steps not in targets:
            targets[steps] = replace(target, env={**target.env, KV_SPACE_ENV: str(steps)})
        return sweep({}, targets[steps])

    def fits(steps: int, low: bool = False) -> bool:
        try:
            return _holds(at(steps), required, low=low)
        except _FAILURES:
            return False

    hi = max(CPU_MAX_SPACE_BYTES // unit, current // unit + 1)
    lowest = _lowest(fits, 1, hi)
    worst = _lowest(lambda steps: fits(steps, low=True), lowest or 1, hi) if lowest is not None else None
    ranks = base.tp_size * base.pp_size
    note = ("host memory" + (f", per rank ({ranks} ranks each allocate it)" if ranks > 1 else "")
            + "; whether this host has it free is checked by `kvcheck verify` before boot (KV324)")
    return FractionPlan(
        current=current if flag == CPU_BYTES_FLAG else float(current), current_source="manifest",
        current_pool_tokens=base.pool_tokens,
        min_fitting=None if lowest is None else (float(lowest) if flag == KV_SPACE_ENV else lowest * unit),
        min_fitting_pool_tokens=None if lowest is None else at(lowest).pool_tokens,
        min_fitting_worst_case=None if worst is None else (float(worst) if flag == KV_SPACE_ENV else worst * unit),
        max_safe=None, max_safe_pool_tokens=None, safe_reserve_mib=None,
        note=note, flag=flag, engine_label="vLLM",
    )


def _tp_options(sweep: _Sweep, target: RoleTarget, base: PoolEstimate, required: int) -> tuple[PlanOption, ...]:
    cpu = _device(target) == "cpu"
    options = []
    for tp in sorted(set(TP_CANDIDATES) | {base.tp_size}):
        gpus = None if cpu else tp * base.pp_size
        cpu_note = _cpu_ranks_note(target, tp * base.pp_size) if cpu else None
        if tp == base.tp_size:
            options.append(_option("tensor_parallel_size", tp, base, required, current=True, gpus=gpus,
                                   note=cpu_note))
            continue
        runner_target, note = target, cpu_note
        pinned = target.estimate.weights_gib_per_gpu
        if pinned is not None:
            runner_target = replace(target, estimate=replace(target.estimate,
                                                             weights_gib_per_gpu=pinned * base.tp_size / tp))
            note = f"weights per GPU scaled from estimate.weights_gib_per_gpu: {pinned:g} x {base.tp_size}/{tp}"
        try:
            est = sweep({"tensor_parallel_size": tp}, runner_target)
        except _FAILURES as exc:
            options.append(_option("tensor_parallel_size", tp, None, required, current=False, gpus=gpus,
                                   note=f"cannot be estimated: {exc.message}"))
            continue
        options.append(_option("tensor_parallel_size", tp, est, required, current=False, gpus=gpus, note=note))
    return tuple(options)


def _kv_options(sweep: _Sweep, target: RoleTarget, base: PoolEstimate, required: int) -> tuple[PlanOption, ...]:
    arg = str(target.args.get("kv_cache_dtype") or "auto")
    options = []
    names = list(KV_DTYPE_CANDIDATES)
    if arg not in names:
        names.insert(0, arg)
    for name in names:
        if name == arg:
            options.append(_option("kv_cache_dtype", name, base, required, current=True))
            continue
        try:
            est = sweep({"kv_cache_dtype": name})
        except _FAILURES as exc:
            options.append(_option("kv_cache_dtype", name, None, required, current=False,
                                   note=f"cannot be estimated: {exc.message}"))
            continue
        if est.kv_dtype == base.kv_dtype:
            continue  # the same dtype under another name (auto on an fp8 checkpoint)
        options.append(_option("kv_cache_dtype", name, est, required, current=False))
    return tuple(options)


def _cpu_ranks_note(target: RoleTarget, ranks: int) -> str:
    """What `ranks` CPU workers take: each allocates the role's KV space in host memory."""
    lever = _cpu_space(target)
    if lever is None:
        return f"{ranks} {CPU_WORKERS}" + ("s" if ranks > 1 else "")
    flag, value = lever
    each = f"{value} GiB" if flag == KV_SPACE_ENV else f"{value / GIB:.2f} GiB"
    total = f"{value * ranks} GiB" if flag == KV_SPACE_ENV else f"{value * ranks / GIB:.2f} GiB"
    return f"{ranks} {CPU_WORKERS}{'s' if ranks > 1 else ''} x {each} of host memory = {total}"


def plan_role(
    target: RoleTarget,
    *,
    profiles: GpuProfiles | Mapping[str, GpuProfile] | Path | None = None,
    offline: bool | None = None,
) -> RolePlan:
    """Sweep --gpu-memory-utilization (on vLLM's CPU backend: the explicit KV space), TP and the KV dtype for one
    vLLM role."""
    gpu_profiles = as_profiles(profiles)
    sweep = _Sweep(target, gpu_profiles, offline)
    base = sweep({})
    required = target.required_tokens
    derived = sweep({"max_model_len": None}).context_len if target.args.get("max_model_len") else base.context_len
    model_ctx = derived or base.context_len
    pool_ctx = largest_window(base.pool_tokens, target.min_headroom)
    one_request = int(base.details.get("largest_max_model_len") or 0)
    pool_ctx = min(pool_ctx, one_request) if one_request else pool_ctx
    largest, binding = (model_ctx, "model_context_length") if model_ctx <= pool_ctx else (pool_ctx, "pool")
    if _device(target) == "cpu":
        fraction = _cpu_fraction(sweep, target, base, required)
    else:
        ceiling, reserve = _ceiling_steps(target, gpu_profiles, base)
        fraction = _fraction(sweep, target, base, required, ceiling, reserve)
    return RolePlan(
        role=target.name, context_length=target.context_length, min_headroom=target.min_headroom,
        required_tokens=required, pool_tokens=base.pool_tokens, pool_range=base.pool_range,
        largest_context_tokens=largest, binding_limit=binding, pool_context_tokens=pool_ctx,
        model_context_tokens=model_ctx, model_context_overridable=False,
        uncertain=_uncertain(base, required), fraction=fraction,
        tp_options=_tp_options(sweep, target, base, required),
        kv_dtype_options=_kv_options(sweep, target, base, required),
        gpu=str(base.details.get("gpu") or target.gpu or "cpu"), kv_dtype=base.kv_dtype, tp_size=base.tp_size,
        estimates=sweep.calls,
    )
