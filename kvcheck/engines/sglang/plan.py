"""SGLang's planner: sweep its estimate model over the settings an operator can change.

Every figure comes from `estimate_role` itself, never from a second formula, so a recommended
setting predicts exactly what `kvcheck verify --mode estimate` would predict once it is applied.
Callers reach it through `Engine.plan` and `Engine.safe_fraction`; the answer is a neutral RolePlan.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from kvcheck.engines.base import PoolEstimate, SafeFraction
from kvcheck.engines.sglang import serving
from kvcheck.engines.sglang.sizing.config import load_model_source, parse_override_args
from kvcheck.engines.sglang.sizing.defaults import KV_DTYPE_ALIASES
from kvcheck.engines.sglang.sizing.environ import effective_env
from kvcheck.engines.sglang.sizing.model import estimate_role
from kvcheck.engines.sglang.sizing.refusals import RefusedCandidate
from kvcheck.engines.sglang.sizing.shape import model_shape
from kvcheck.errors import EstimateError, InputError
from kvcheck.gpus import GpuProfile, GpuProfiles, as_profiles
from kvcheck.model import FractionPlan, PlanOption, RolePlan, RoleTarget

Option = PlanOption  # the planner's name for one alternative setting

GPUS_PER_NODE = 8  # one HGX/DGX host; a wider TP group spans nodes (--nnodes)
TP_CANDIDATES = (1, 2, 4, 8, 16)
KV_DTYPE_CANDIDATES = ("bf16", "fp8_e4m3")  # highest precision first
FP4_KV_DTYPES = ("nvfp4", "fp4_mx_block16")  # only where the GPU has FP4 tensor cores (Blackwell)
# mem_fraction_static is answered in thousandths: the precision SGLang rounds its own default to.
FRACTION_SCALE = 1000
MAX_FRACTION_STEPS = FRACTION_SCALE - 1  # 0.999: a fraction of 1.0 leaves nothing for activations
_CANONICAL_KV = KV_DTYPE_ALIASES
_ESTIMATE_FAILURES = (EstimateError, InputError)


class _Sweep:
    """estimate_role for one target under overrides, memoised; estimate failures propagate."""

    def __init__(self, target: RoleTarget, profiles: GpuProfiles, offline: bool | None) -> None:
        self.target = target
        self.profiles = profiles
        self.offline = offline
        self.calls = 0
        self._memo: dict[tuple, PoolEstimate | Exception] = {}
        self._parent: _Sweep | None = None

    def for_target(self, target: RoleTarget) -> _Sweep:
        """A sweep of another target (same profiles) whose evaluations count towards this one."""
        other = _Sweep(target, self.profiles, self.offline)
        other._parent = self
        return other

    def __call__(self, overrides: Mapping[str, Any]) -> PoolEstimate:
        key = tuple(sorted(overrides.items()))
        hit = self._memo.get(key)
        if hit is None:
            self.calls += 1
            if self._parent is not None:
                self._parent.calls += 1
            try:
                hit = estimate_role(self.target, overrides=overrides, profiles=self.profiles, offline=self.offline)
            except _ESTIMATE_FAILURES as exc:
                hit = exc
            self._memo[key] = hit
        if isinstance(hit, Exception):
            raise hit
        return hit


def required_for(context_tokens: int, min_headroom: float) -> int:
    """Pool tokens a window needs: the same ceil(min_headroom x window) as RoleTarget.required_tokens."""
    return math.ceil(min_headroom * context_tokens)


def largest_window(pool_tokens: int, min_headroom: float) -> int:
    """The largest window W with ceil(min_headroom x W) <= pool_tokens, i.e. floor(pool / headroom)."""
    window = math.floor(pool_tokens / min_headroom)
    while window > 0 and required_for(window, min_headroom) > pool_tokens:
        window -= 1  # float division rounded up across an integer
    while required_for(window + 1, min_headroom) <= pool_tokens:
        window += 1
    return window


def is_uncertain(pool_range: tuple[int, int] | None, required: int) -> bool:
    """The window lies inside the estimate's range: the low end falls short, the high end holds it."""
    return pool_range is not None and pool_range[0] < required <= pool_range[1]


def fraction_value(steps: int) -> float:
    return round(steps / FRACTION_SCALE, 3)


def _lowest(pred: Callable[[int], bool], lo: int, hi: int) -> int | None:
    """Smallest k in [lo, hi] with pred(k), pred monotone (false... true); None when pred(hi) fails."""
    if hi < lo or not pred(hi):
        return None
    while lo < hi:
        mid = (lo + hi) // 2
        if pred(mid):
            hi = mid
        else:
            lo = mid + 1
    return lo


def _plan_fraction(sweep: _Sweep, target: RoleTarget, base: PoolEstimate, required: int) -> FractionPlan:
    flag = target.args.get("mem_fraction_static")
    current = float(flag) if flag is not None else base.mem_fraction_static
    source = "manifest" if flag is not None else "sglang default"
    note = None

    # The safe ceiling: the value SGLang would pick itself (its reserve for activations and graphs).
    max_steps: int | None = None
    reserve_mib = None
    try:
        default = sweep({"mem_fraction_static": None})
    except _ESTIMATE_FAILURES as exc:
        default = None
        note = f"SGLang's own default could not be estimated ({exc.message}); no safe ceiling is known"
    if default is not None:
        ceiling = default.mem_fraction_static
        reserve_mib = default.mem_fraction_reserved_mib
        max_steps = _flag_steps_for_effective(sweep, ceiling)

    def pool_at(steps: int, low: bool = False) -> int:
        try:
            est = sweep({"mem_fraction_static": fraction_value(steps)})
        except _ESTIMATE_FAILURES:
            return 0  # SGLang would refuse to start with this little memory
        return est.pool_range[0] if low else est.pool_tokens

    if flag is None and max_steps is not None:
        # SGLang's own pick, as the flag value that gives it (with aiter a flag is scaled by 0.85 too)
        current = fraction_value(max_steps)
    upper = max_steps if max_steps is not None else MAX_FRACTION_STEPS
    min_steps = _lowest(lambda k: pool_at(k) >= required, 1, upper)
    worst_steps = _lowest(lambda k: pool_at(k, low=True) >= required, 1, upper)
    return FractionPlan(
        current=current,
        current_source=source,
        current_pool_tokens=base.pool_tokens,
        min_fitting=fraction_value(min_steps) if min_steps is not None else None,
        min_fitting_pool_tokens=pool_at(min_steps) if min_steps is not None else None,
        min_fitting_worst_case=fraction_value(worst_steps) if worst_steps is not None else None,
        max_safe=fraction_value(max_steps) if max_steps is not None else None,
        max_safe_pool_tokens=pool_at(max_steps) if max_steps is not None else None,
        safe_reserve_mib=reserve_mib,
        note=note,
    )


def safe_ceiling(
    target: RoleTarget,
    *,
    profiles: GpuProfiles | Mapping[str, GpuProfile] | Path | None = None,
    offline: bool | None = None,
) -> SafeFraction | None:
    """SGLang's own mem_fraction_static for the role, as the flag value that gives it, and the
    reserve (MiB) it keeps for activations and graphs; None when the estimate model cannot tell."""
    sweep = _Sweep(target, as_profiles(profiles), offline)
    try:
        default = sweep({"mem_fraction_static": None})
    except _ESTIMATE_FAILURES:
        return None
    steps = _flag_steps_for_effective(sweep, default.mem_fraction_static)
    if steps is None:
        return None
    return SafeFraction(fraction_value(steps), default.mem_fraction_reserved_mib)


def _flag_steps_for_effective(sweep: _Sweep, ceiling: float) -> int | None:
    """The largest flag value (in steps) whose effective fraction stays within SGLang's default.

    SGLang may scale a user's value (x0.85 with the aiter backend) and its own default differently
    (multimodal towers), so the ceiling is found through the estimate model, not assumed equal.
    """
    guess = min(MAX_FRACTION_STEPS, math.floor(ceiling * FRACTION_SCALE + 1e-6))
    if guess < 1:
        return None

    def effective(steps: int) -> float | None:
        try:
            return sweep({"mem_fraction_static": fraction_value(steps)}).mem_fraction_static
        except _ESTIMATE_FAILURES:
            return None

    value = effective(guess)
    if value is None:
        return None
    if value > 0 and abs(value - fraction_value(guess)) > 1e-9:
        # the flag is scaled before use: solve for the flag that lands on the ceiling
        scale = value / fraction_value(guess)
        guess = max(1, min(MAX_FRACTION_STEPS, math.floor(ceiling / scale * FRACTION_SCALE + 1e-6)))

    def within(steps: int) -> bool:
        value = effective(steps)
        return value is not None and value <= ceiling + 1e-9

    while guess >= 1 and not within(guess):
        guess -= 1
    while 1 <= guess < MAX_FRACTION_STEPS and within(guess + 1):
        guess += 1
    return guess if guess >= 1 else None


@dataclass(frozen=True)
class _Heads:
    """The head counts a TP degree must divide (SGLang's QKV/linear-attention sharding)."""

    attention: int
    kv: int | None  # None for latent attention (MLA/DSA): the latent is not split by TP
    linear: int | None  # Mamba / gated-delta-net heads of hybrid linear models

    def why_not(self, attn_tp: int) -> str | None:
        if self.attention % attn_tp:
            return f"the model's {self.attention} attention heads do not split over attention TP {attn_tp}"
        if self.kv is not None and self.kv % attn_tp and attn_tp % self.kv:
            return f"the model's {self.kv} KV heads neither split over nor replicate across attention TP {attn_tp}"
        if self.linear is not None and self.linear % attn_tp:
            return f"the model's {self.linear} linear-attention heads do not split over TP {attn_tp}"
        return None


def _heads(target: RoleTarget, offline: bool | None) -> _Heads | None:
    args = target.args
    try:
        source = load_model_source(
            model_config=target.model_config,
            model_path=target.model_path,
            override_args=parse_override_args(args.get("json_model_override_args")),
            offline=offline,
        )
        ssm_dtype = target.env.get("SGLANG_MAMBA_SSM_DTYPE") or args.get("mamba_ssm_dtype")
        shape = model_shape(source, dtype_arg=args.get("dtype"), mamba_ssm_dtype=ssm_dtype)
    except _ESTIMATE_FAILURES:
        return None
    return _Heads(
        attention=shape.num_heads,
        kv=None if shape.is_mla else shape.num_kv_heads,
        linear=shape.mamba.num_heads if shape.mamba is not None else None,
    )


def _option(
    setting: str,
    value: int | str,
    est: PoolEstimate | None,
    required: int,
    *,
    current: bool,
    nnodes: int | None = None,
    gpus: int | None = None,
    note: str | None = None,
) -> Option:
    if est is None:
        return Option(setting, value, None, None, False, False, current, nnodes, gpus, note)
    return Option(
        setting,
        value,
        est.pool_tokens,
        est.pool_range,
        est.pool_tokens >= required,
        is_uncertain(est.pool_range, required),
        current,
        nnodes,
        gpus,
        note,
    )


def _tp_options(
    sweep: _Sweep, target: RoleTarget, base: PoolEstimate, required: int, heads: _Heads | None
) -> tuple[Option, ...]:
    base_tp, pp, attn_dp, ep = base.tp_size, base.pp_size, base.attn_dp_size, base.ep_size
    attn_cp = int(target.args.get("attn_cp_size") or 1)
    options = []
    candidates = sorted(set(TP_CANDIDATES) | {base_tp})
    for tp in candidates:
        gpus = tp * pp
        nnodes = max(1, math.ceil(gpus / GPUS_PER_NODE))
        if tp == base_tp:
            options.append(_option("tp_size", tp, base, required, current=True, nnodes=nnodes, gpus=gpus))
            continue
        overrides: dict[str, Any] = {"tp_size": tp, "nnodes": nnodes}
        new_attn_dp = attn_dp
        if attn_dp > 1 and attn_dp == base_tp:  # full data-parallel attention scales with TP
            new_attn_dp = tp
            overrides["attn_dp_size"] = tp
            if target.args.get("enable_dp_attention"):
                overrides["dp_size"] = tp
        if ep > 1 and ep == base_tp:  # expert parallelism over the whole TP group scales with it
            overrides["ep_size"] = tp
        reason = None
        if tp % (new_attn_dp * attn_cp):
            reason = f"tp-size {tp} is not a multiple of attn-dp-size x attn-cp-size ({new_attn_dp} x {attn_cp})"
        elif "ep_size" not in overrides and ep > 1 and tp % ep:
            reason = f"ep-size {ep} does not divide tp-size {tp}"
        elif heads is not None:
            reason = heads.why_not(tp // new_attn_dp // attn_cp)
        if reason is not None:
            options.append(_option("tp_size", tp, None, required, current=False, nnodes=nnodes, gpus=gpus,
                                   note=reason))
            continue
        runner, note = sweep, None
        pinned = target.estimate.weights_gib_per_gpu
        if pinned is not None:
            # the manifest pins weights per GPU at its own TP degree: shard them over the new one
            scaled = replace(target, estimate=replace(target.estimate, weights_gib_per_gpu=pinned * base_tp / tp))
            runner = sweep.for_target(scaled)
            note = f"weights per GPU scaled from estimate.weights_gib_per_gpu: {pinned:g} x {base_tp}/{tp}"
        try:
            est = runner(overrides)
        except _ESTIMATE_FAILURES as exc:
            options.append(_option("tp_size", tp, None, required, current=False, nnodes=nnodes, gpus=gpus,
                                   note=f"cannot be estimated: {exc.message}"))
            continue
        options.append(_option("tp_size", tp, est, required, current=False, nnodes=nnodes, gpus=gpus, note=note))
    return tuple(options)


def _kv_dtype_options(
    sweep: _Sweep, target: RoleTarget, base: PoolEstimate, required: int, gpu: GpuProfile
) -> tuple[Option, ...]:
    resolved = base.kv_dtype
    arg = target.args.get("kv_cache_dtype")
    explicit = None if arg in (None, "auto") else str(arg)
    candidates = list(KV_DTYPE_CANDIDATES)
    if gpu.vendor == "nvidia" and gpu.is_blackwell:
        candidates.extend(FP4_KV_DTYPES)
    accepted = _release_kv_dtypes(target.engine_version)
    if accepted is not None:
        # Offer only what the declared release's --kv-cache-dtype accepts (0.4.0-0.4.2: auto and
        # fp8_e5m2; bf16 as a spelling from 0.5.x).
        if "fp8_e4m3" not in accepted and "fp8_e5m2" in accepted:
            candidates = [("fp8_e5m2" if c == "fp8_e4m3" else c) for c in candidates]

    def is_current(name: str) -> bool:
        if explicit is not None and name in FP4_KV_DTYPES:
            return name == explicit
        return _CANONICAL_KV.get(name) == resolved

    options = []
    if not any(is_current(name) for name in candidates):
        # the role runs a dtype the planner does not propose (fp16, fp8_e5m2, mxfp8): show it first
        options.append(_option("kv_cache_dtype", explicit or resolved, base, required, current=True))
    for name in candidates:
        if is_current(name):
            options.append(_option("kv_cache_dtype", name, base, required, current=True))
            continue
        if accepted is not None and name not in accepted:
            continue
        try:
            est = sweep({"kv_cache_dtype": name})
        except RefusedCandidate:
            continue  # SGLang refuses this dtype for the model, GPU or backend: never proposed
        except _ESTIMATE_FAILURES as exc:
            options.append(_option("kv_cache_dtype", name, None, required, current=False,
                                   note=f"cannot be estimated: {exc.message}"))
            continue
        options.append(_option("kv_cache_dtype", name, est, required, current=False))
    return tuple(options)


def _release_kv_dtypes(version: str | None) -> frozenset[str] | None:
    """The --kv-cache-dtype values the declared SGLang release accepts; None when unknown."""
    if version is None:
        return None
    from kvcheck.engines.sglang.catalogue import FlagError, load_catalogue

    try:
        choices = load_catalogue(version)[0].resolve("kv-cache-dtype").choices
    except (InputError, FlagError):
        return None
    return None if choices is None else frozenset(str(c) for c in choices)


def _truthy(value: str | None) -> bool:
    return str(value or "").strip().lower() in ("1", "true", "yes", "on")


def plan_role(
    target: RoleTarget,
    *,
    profiles: GpuProfiles | Mapping[str, GpuProfile] | Path | None = None,
    offline: bool | None = None,
) -> RolePlan:
    """Sweep mem_fraction_static, TP and KV dtype for one role; EstimateError when it cannot be estimated."""
    target = replace(target, env=effective_env(target.env, target.engine_version))
    gpu_profiles = as_profiles(profiles)
    sweep = _Sweep(target, gpu_profiles, offline)
    base = sweep({})
    headroom = target.min_headroom
    reserve = serving.reserved_decode_tokens(target.args, target.engine_version, target.env)
    # a decode role holds the window's longest prompt plus its reservation, or that prompt waits forever
    required = max(target.required_tokens, serving.decode_pool_needed(target.context_length, reserve))

    if target.args.get("context_length") is None:
        model_ctx = base.context_len
    else:
        model_ctx = sweep({"context_length": None}).context_len
    overridable = _truthy(target.env.get("SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN"))
    pool_ctx = largest_window(base.pool_tokens, headroom)
    reserved_ctx = serving.decode_window(base.pool_tokens, reserve)
    reservation_binds = reserved_ctx < pool_ctx
    pool_ctx = min(pool_ctx, reserved_ctx)
    if not overridable and model_ctx < pool_ctx:
        largest, binding = model_ctx, "model_context_length"
    elif reservation_binds:
        largest, binding = pool_ctx, "num_reserved_decode_tokens"
    else:
        largest, binding = pool_ctx, "pool"
        cap = target.args.get("max_total_tokens")
        page = base.page_size or 1
        if cap is not None and base.pool_tokens == int(cap) // page * page:
            binding = "max_total_tokens"

    gpu = gpu_profiles.get(str(target.gpu))
    fraction = _plan_fraction(sweep, target, base, required)
    tp_options = _tp_options(sweep, target, base, required, _heads(target, offline))
    kv_options = _kv_dtype_options(sweep, target, base, required, gpu)
    return RolePlan(
        role=target.name,
        context_length=target.context_length,
        min_headroom=headroom,
        required_tokens=required,
        pool_tokens=base.pool_tokens,
        pool_range=base.pool_range,
        largest_context_tokens=largest,
        binding_limit=binding,
        pool_context_tokens=pool_ctx,
        model_context_tokens=model_ctx,
        model_context_overridable=overridable,
        uncertain=is_uncertain(base.pool_range, required),
        fraction=fraction,
        tp_options=tp_options,
        kv_dtype_options=kv_options,
        gpu=gpu.name,
        kv_dtype=base.kv_dtype,
        tp_size=base.tp_size,
        estimates=sweep.calls,
    )
