"""A RolePlan in plain words: KV106 findings for `kvcheck plan`, short KV101 hints for `verify`."""

from __future__ import annotations

from kvcheck.model import Finding, FractionPlan, PlanOption, RolePlan, RoleTarget
from kvcheck.plan.rules import KV106
from kvcheck.policy.registry import finding

MIGHT_NOT_FIT = "might not fit; measure"


def tokens(value: int | None) -> str:
    return "-" if value is None else f"{value:,}"


def fraction(value: float | None) -> str:
    """0.85 stays 0.85, 0.8930 prints 0.893: the precision the value was given or computed in."""
    return "-" if value is None else f"{value:g}"


# Memory settings that are not a fraction of a GPU: vLLM's CPU backend sizes its pool from host memory.
KV_SPACE_GIB = "VLLM_CPU_KVCACHE_SPACE"  # whole GiB, an environment variable (engine.env)
KV_BYTES = "kv-cache-memory-bytes"


def setting_value(f: FractionPlan, value: float | None) -> str:
    """A memory setting's value as the role writes it: 0.9 (a fraction), 2 GiB (VLLM_CPU_KVCACHE_SPACE),
    2147483648 (--kv-cache-memory-bytes, with its GiB, or MiB below one GiB)."""
    if value is None:
        return "-"
    if f.flag == KV_SPACE_GIB:
        return f"{value:g} GiB"
    if f.flag == KV_BYTES:
        if value >= 2**30:
            return f"{int(value)} ({value / 2**30:.2f} GiB)"
        return f"{int(value)} ({value / 2**20:.1f} MiB)"  # a CPU test pool: 0.00 GiB would say nothing
    return fraction(value)


def set_hint(f: FractionPlan, value: float) -> str:
    """How to apply a memory setting: `set gpu-memory-utilization: 0.9`, or the environment variable."""
    if f.flag == KV_SPACE_GIB:
        return f'set {KV_SPACE_GIB}: "{value:g}" in engine.env (GiB of host memory)'
    if f.flag == KV_BYTES:
        return f"set {KV_BYTES}: {int(value)}"
    return f"set {f.flag}: {fraction(value)}"


def setting_flag(option: PlanOption) -> str:
    """The flag an option sets, as the engine spells it: tp-size, tensor-parallel-size, kv-cache-dtype."""
    return "tp-size" if option.setting == "tp_size" else option.setting.replace("_", "-")


def tp_label(option: PlanOption) -> str:
    """`tp-size 16 (2 nodes)`: a TP group wider than one node needs --nnodes."""
    text = f"{setting_flag(option)} {option.value}"
    if option.nnodes and option.nnodes > 1:
        text += f" ({option.nnodes} nodes)"
    return text


def _range(option_or_plan: PlanOption | RolePlan) -> str:
    low, high = option_or_plan.pool_range or (0, 0)
    return f"{low:,}-{high:,}"


def option_pool_text(option: PlanOption) -> str:
    """What an option gives: its pool, or why it has none."""
    if option.pool_tokens is None:
        return f"not possible: {option.note}" if option.note else "not possible"
    if option.pool_tokens == 0:
        return "no pool: the weights leave no memory for the KV cache (SGLang would refuse to start)"
    text = f"{option.pool_tokens:,} tokens"
    if option.uncertain:
        text += f" ({MIGHT_NOT_FIT}: range {_range(option)})"
    return text


def _fitting(options: tuple[PlanOption, ...]) -> list[PlanOption]:
    return [o for o in options if o.fits and not o.current]


def _context_finding(target: RoleTarget, plan: RolePlan) -> Finding:
    if plan.binding_limit == "model_context_length":
        why = f"bound by the model's own context length (the predicted pool of {plan.pool_tokens:,} tokens"
        if plan.min_headroom != 1.0:
            why += f" would hold {plan.pool_context_tokens:,} with min_headroom {plan.min_headroom:g})"
        else:
            why += " would hold more)"
    else:
        what = {
            "pool": "the predicted pool",
            "num_reserved_decode_tokens": "the decode role's reservation per request (--num-reserved-decode-tokens) "
            "out of the predicted pool",
        }.get(plan.binding_limit, "the pool as --max-total-tokens caps it")
        why = f"bound by {what} of {plan.pool_tokens:,} tokens"
        if plan.min_headroom != 1.0:
            why += f" / min_headroom {plan.min_headroom:g}"
        if plan.model_context_overridable:
            why += (
                f"; the model's own {plan.model_context_tokens:,} is lifted by "
                "SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN"
            )
        else:
            why += f"; the model allows {plan.model_context_tokens:,}"
    message = f"largest context that fits: {plan.largest_context_tokens:,} tokens, {why}"
    hint = None
    if plan.largest_context_tokens < plan.context_length:
        message += f"; the advertised {plan.context_length:,} does not fit"
        hint = (
            f"advertise at most {plan.largest_context_tokens:,} tokens, or apply one of the settings "
            "below so the pool holds the window"
        )
    else:
        message += f"; the advertised {plan.context_length:,} fits"
    if plan.uncertain:
        message += (
            f"; the {plan.required_tokens:,} tokens required lie inside the estimate's range "
            f"{_range(plan)}: {MIGHT_NOT_FIT}"
        )
        hint = "confirm with `kvcheck verify` on the role's GPUs before the rollout"
    return finding(KV106.code, target.name, message, hint=hint, location=target.location)


def _fraction_finding(target: RoleTarget, plan: RolePlan) -> Finding:
    f = plan.fraction
    sglang = f.engine_label == "SGLang"
    where = "the manifest's" if f.current_source == "manifest" else f"{f.engine_label}'s default"
    current = f"{where} {setting_value(f, f.current)} gives {f.current_pool_tokens:,} tokens"
    ceiling = ""
    if f.max_safe is not None:
        ceiling = (f"{fraction(f.max_safe)}, SGLang's own default for this role" if sglang else
                   f"{fraction(f.max_safe)}, the most {f.engine_label} can request on an idle GPU")
        if f.safe_reserve_mib is not None:
            ceiling += (f" (it keeps {f.safe_reserve_mib:,.0f} MiB for activations and CUDA graphs)" if sglang else
                        f" (the CUDA context and peers' buffers take {f.safe_reserve_mib:,.0f} MiB before it starts)")
    hint: str | None
    if f.blocked is not None:
        message, hint = f"{f.flag}: {f.blocked[0]}", f.blocked[1]
    elif f.min_fitting is None:
        message, hint = _no_fraction_fits(target, f, plan.required_tokens, current, ceiling)
    else:
        message, hint = _fraction_fits(f, f.min_fitting, plan.required_tokens, current, ceiling)
    if f.max_safe is not None and f.current > f.max_safe and sglang:
        message += (
            f"; {where} {fraction(f.current)} is above the safe ceiling {fraction(f.max_safe)}: "
            "less memory is left for activations and CUDA graphs than SGLang keeps, so serving may run out of memory"
        )
    if f.note:
        message += f" ({f.note})"
    return finding(KV106.code, target.name, message, hint=hint,
                   location=target.arg_location("mem_fraction_static", "gpu_memory_utilization", "kv_cache_memory_bytes"))


def _no_fraction_fits(
    target: RoleTarget, f: FractionPlan, required: int, current: str, ceiling: str
) -> tuple[str, str]:
    """No fraction up to the ceiling (or 0.999) holds the window: what caps the pool instead."""
    if f.flag in (KV_SPACE_GIB, KV_BYTES):
        message = f"{f.flag}: no KV space kvcheck tries (up to 64 TiB) holds {required:,} tokens; {current}"
    elif f.max_safe is None:
        message = f"{f.flag}: no value up to 0.999 holds {required:,} tokens; {current}"
    else:
        message = (
            f"{f.flag}: no value fits: even the safe ceiling {ceiling} gives "
            f"{tokens(f.max_safe_pool_tokens)} of the {required:,} tokens required; {current}"
        )
    cap = target.args.get("max_total_tokens")
    if cap is not None and int(cap) < required:
        hint = f"--max-total-tokens {int(cap):,} caps the pool: remove it or raise it to {required:,}"
    else:
        hint = "use a wider TP degree or a smaller KV dtype (see the other advice), or advertise less"
    return message, hint


def _fraction_fits(
    f: FractionPlan, min_fitting: float, required: int, current: str, ceiling: str
) -> tuple[str, str | None]:
    """Some fraction holds the window: the smallest, the safe ceiling, and the low end of the range."""
    holds = f"{setting_value(f, min_fitting)} is the smallest value that holds {required:,} tokens " \
            f"({f.min_fitting_pool_tokens:,} predicted)"
    if f.max_safe is not None:
        holds += f"; safe up to {ceiling}"
    hint = None
    if f.current_pool_tokens >= required:
        message = f"{f.flag}: {current}, enough; {holds}"
    else:
        message = f"{f.flag} {setting_value(f, min_fitting)} would hold the window: {holds}; {current}"
        hint = set_hint(f, min_fitting)
        if f.max_safe is not None:
            hint += f" (any value up to {fraction(f.max_safe)} holds the window)"
    if f.min_fitting_worst_case is None:
        message += (
            f"; at the low end of the estimate's range no safe value holds it: {MIGHT_NOT_FIT}"
        )
    elif f.min_fitting_worst_case > min_fitting:
        message += (
            f"; {setting_value(f, f.min_fitting_worst_case)} holds it even at the low end of the estimate's range"
        )
    return message, hint


def _blocked(target: RoleTarget, plan: RolePlan, flag: str, *names: str) -> Finding | None:
    """The engine refuses the role before it sizes memory (vLLM's length check): no setting of `flag` helps."""
    if plan.fraction.blocked is None:
        return None
    message, hint = plan.fraction.blocked
    return finding(KV106.code, target.name, f"{flag}: {message}", hint=hint, location=target.arg_location(*names))


def _tp_finding(target: RoleTarget, plan: RolePlan) -> Finding:
    current = next(o for o in plan.tp_options if o.current)
    blocked = _blocked(target, plan, setting_flag(current), "tp_size", "tensor_parallel_size")
    if blocked is not None:
        return blocked
    fitting = _fitting(plan.tp_options)
    hint = None
    if current.fits:
        smaller = [o for o in fitting if int(o.value) < int(current.value)]
        message = f"{setting_flag(current)} {current.value} holds the window ({option_pool_text(current)})"
        if smaller:
            best = smaller[0]
            on = f"on {best.gpus} GPUs" if best.gpus is not None else f"on {best.note}" if best.note else "too"
            message += f"; {tp_label(best)} would too, {on}: {option_pool_text(best)}"
        elif any(int(o.value) < int(current.value) for o in plan.tp_options):
            message += "; no smaller TP degree does"
    elif fitting:
        best = fitting[0]
        message = (
            f"{tp_label(best)} would hold the window: {option_pool_text(best)} "
            f"({setting_flag(current)} {current.value} gives {option_pool_text(current)})"
        )
        hint = f"set {setting_flag(best)}: {best.value}"
        if best.gpus is None and best.note:
            hint += f" ({best.note})"
        if best.nnodes and best.nnodes > 1 and best.gpus is not None:
            hint += f" and nnodes: {best.nnodes}, with {best.gpus // best.nnodes} GPUs per node"
    else:
        message = f"no {setting_flag(current)} up to {max(int(o.value) for o in plan.tp_options)} holds the window"
        possible = [o for o in plan.tp_options if o.pool_tokens is not None]
        if possible:
            widest = max(possible, key=lambda o: int(o.value))
            message += f"; {tp_label(widest)} gives {option_pool_text(widest)}"
    return finding(KV106.code, target.name, message, hint=hint, location=target.arg_location("tp_size", "tensor_parallel_size"))


def _kv_dtype_finding(target: RoleTarget, plan: RolePlan) -> Finding:
    current = next(o for o in plan.kv_dtype_options if o.current)
    blocked = _blocked(target, plan, "kv-cache-dtype", "kv_cache_dtype")
    if blocked is not None:
        return blocked
    fitting = _fitting(plan.kv_dtype_options)  # highest precision first
    hint = None
    fp4_note = ""
    if not any(o.value == "nvfp4" for o in plan.kv_dtype_options):
        fp4_note = f" (FP4 KV caches need a Blackwell GPU; {plan.gpu} has none)"
    if current.fits:
        message = f"kv-cache-dtype {current.value} holds the window ({option_pool_text(current)})"
        better = [o for o in fitting if _precision(o) > _precision(current)]
        if better:
            message += f"; {better[0].value} would too, at higher precision: {option_pool_text(better[0])}"
    elif fitting:
        best = fitting[0]
        message = (
            f"kv-cache-dtype {best.value} would hold the window: {option_pool_text(best)} "
            f"({current.value} gives {option_pool_text(current)})"
        )
        hint = f"set kv-cache-dtype: {best.value}"
    else:
        tried = ", ".join(f"{o.value} {option_pool_text(o)}" for o in plan.kv_dtype_options)
        message = f"no KV-cache dtype holds the window: {tried}{fp4_note}"
    return finding(KV106.code, target.name, message, hint=hint, location=target.arg_location("kv_cache_dtype"))


_PRECISION = {"auto": 16, "bf16": 16, "bfloat16": 16, "float16": 16, "fp16": 16}


def _precision(option: PlanOption) -> int:
    name = str(option.value)
    if name in _PRECISION:
        return 16
    return 4 if name in ("nvfp4", "fp4_mx_block16") else 8


def plan_findings(target: RoleTarget, plan: RolePlan) -> list[Finding]:
    """The plan as KV106 findings: context, memory fraction, TP degree, KV dtype, in that order."""
    return [
        _context_finding(target, plan),
        _fraction_finding(target, plan),
        _tp_finding(target, plan),
        _kv_dtype_finding(target, plan),
    ]


def _estimate_tag(option_uncertain: bool) -> str:
    return f"(estimate; {MIGHT_NOT_FIT})" if option_uncertain else "(estimate)"


def hint_sentences(plan: RolePlan) -> list[str]:
    """Short sentences for a KV101 hint: the settings that would hold the window, by the estimate."""
    out = []
    f = plan.fraction
    if f.min_fitting is not None and f.min_fitting > f.current:
        if f.min_fitting_worst_case is not None and f.min_fitting_worst_case == f.min_fitting:
            out.append(
                f"{f.flag} {setting_value(f, f.min_fitting)} would hold {f.min_fitting_pool_tokens:,} tokens, "
                "the window even at the low end of the estimate"
            )
        elif f.min_fitting_worst_case is not None:
            out.append(
                f"{f.flag} {setting_value(f, f.min_fitting_worst_case)} would hold the window even at the "
                f"low end of the estimate ({setting_value(f, f.min_fitting)} at its centre: "
                f"{f.min_fitting_pool_tokens:,} tokens)"
            )
        else:
            out.append(
                f"{f.flag} {setting_value(f, f.min_fitting)} would hold {f.min_fitting_pool_tokens:,} tokens "
                + _estimate_tag(True)
            )
    elif f.min_fitting is None and f.max_safe is not None:
        out.append(
            f"no {f.flag} up to {f.engine_label}'s own {fraction(f.max_safe)} holds it "
            f"({tokens(f.max_safe_pool_tokens)} tokens at {fraction(f.max_safe)}, estimate)"
        )
    # only settings that give more pool than the current ones: a measured pool below the estimate
    # must not be answered with a setting that shrinks it
    kv = [o for o in _fitting(plan.kv_dtype_options) if (o.pool_tokens or 0) > plan.pool_tokens]
    if kv:
        out.append(f"kv-cache-dtype {kv[0].value} would hold {kv[0].pool_tokens:,} tokens {_estimate_tag(kv[0].uncertain)}")
    tp = [o for o in _fitting(plan.tp_options) if (o.pool_tokens or 0) > plan.pool_tokens]
    if tp:
        out.append(f"{tp_label(tp[0])} would hold {tp[0].pool_tokens:,} tokens {_estimate_tag(tp[0].uncertain)}")
    return out
