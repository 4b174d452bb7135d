"""Capacity (KV1xx) and engine-safety (KV2xx) rules, applied to one role's target and measurement.

Each rule's documentation lives in its `define_rule` call: docs/rules.md is generated from them.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from fractions import Fraction
from typing import TYPE_CHECKING, Any

from packaging.version import InvalidVersion, Version

from kvcheck.engines import get_engine
from kvcheck.model import Finding, PoolMeasurement, RoleTarget, share_of_window
from kvcheck.policy.registry import define_rule, finding

if TYPE_CHECKING:
    from kvcheck.engines.base import Engine

# The first SGLang release whose disaggregated roles retire over-long prompts at intake instead of
# transferring a placeholder's KV (docs/sglang-internals.md, Admission bound).
ADMISSION_FIX_VERSION = Version("0.5.22")
KV_CHECKSUM_VERSION = Version("0.5.21")  # the first release with --disaggregation-enable-kv-checksum

KV101 = define_rule(
    "KV101",
    "error",
    "a role's KV pool is below min_headroom x context_length",
    """The pool is what one request can hold at most. A pool smaller than the advertised window
    means full-length requests cannot be served: they are refused, truncated, or (in disaggregated
    releases before the admission fixes) answered from stale KV pages. Fix: give the pool more
    memory (the engine's settings: SGLang's --mem-fraction-static, vLLM's --gpu-memory-utilization or
    VLLM_CPU_KVCACHE_SPACE; a wider TP degree or an FP8 KV cache), or advertise no more than the
    largest context that fits.""",
)
KV102 = define_rule(
    "KV102",
    "error",
    "the engine's own context length is below the advertised window",
    """The engine refuses prompts at its own context length (SGLang's --context-length, vLLM's
    --max-model-len, or what it derives from the model's config; vLLM's `auto` fits it to the pool).
    Clients promised a longer window get errors. Fix: set the engine's own flag (the finding names it)
    to the advertised window (and make sure the model supports it), or advertise the engine's context
    length.""",
)
KV103 = define_rule(
    "KV103",
    "error",
    "--max-total-tokens caps a role's pool below the window",
    """--max-total-tokens only ever lowers the pool the engine sizes. A cap below the window makes
    the role unable to hold one full-length request, whatever memory it has. Fix: remove the cap
    or raise it to at least min_headroom x context_length.""",
)
KV104 = define_rule(
    "KV104",
    "warning",
    "prefill and decode admit different request lengths",
    """In a disaggregated deployment both roles apply their own input limit (max_req_input_len,
    derived from each role's pool and context length; a decode role's is lowered further by the
    tokens it reserves per request, see KV107). When they differ, a prompt can be accepted
    by one role and refused, or mishandled, by the other. Fix: size both pools (or set the same
    --context-length) so that both admit the same lengths.""",
)
KV107 = define_rule(
    "KV107",
    "error",
    "a role's pool holds the window, but a per-request reservation keeps it from admitting the window's prompts",
    """Some roles admit a prompt only when the prompt plus a reservation fits the free pool: an SGLang
    decode role pre-allocates num_reserved_decode_tokens (512 by default) on top of every
    transferred prompt. A prompt that fits the pool but not with the reservation is not refused: it
    waits at decode with no error until the client gives up (real SGLang 0.5.23, 2,048-token pool:
    1,536 tokens served, 1,537 hang, while max_req_input_len says 2,042). Fix: give the role a pool
    of at least the window's longest prompt plus the reservation (the finding names the figure), or
    lower the reservation.""",
)
KV110 = define_rule(
    "KV110",
    "error",
    "prefill and decode serve different context lengths",
    """Both roles of a disaggregated deployment check a request against their own context length
    (vLLM's max_model_len, SGLang's context_len). When they differ, a prompt the longer role takes is
    refused by the other after the first has done its part: the prefill has computed and holds the
    KV for a request the decode role will not take, so the request fails between the two or, with
    connectors that wait for the decode role to pull the blocks (NIXL), hangs until the transfer times
    out. Public reports show requests hanging in such pairs (vLLM and SGLang alike). vLLM itself checks
    each instance alone. A role that may do both (vLLM's kv_both) is compared as either side. Fix: set
    the same --max-model-len (SGLang: --context-length) on every prefill and decode role, and
    advertise no more than it.""",
)
KV111 = define_rule(
    "KV111",
    "error",
    "a role's pool holds fewer full-length requests at once than the policy's min_concurrency",
    """A pool that holds one request of the window passes the engine's own check (vLLM refuses to start
    only when one request does not fit), yet serves long requests one at a time: at concurrency
    1.07x a second long request waits for the first to finish. The manifest's
    `policy.min_concurrency` (default 1: one full request, with vLLM's null block counted, which
    KV101 already checks) sets how many requests of the window each role must hold at once; kvcheck
    counts them as the engine allocates them (vLLM: whole KV blocks per request, (num_blocks - 1) /
    ceil(window / block_size)), and no more than the engine runs at once (SGLang's
    max_running_requests, vLLM's max_num_seqs, as the log, the server or the estimate states it, else
    the role's own argument): a pool that holds two requests behind --max-running-requests 1 still
    serves them one at a time. The message says which bound binds. Fix: give the pool more memory,
    raise the engine's running-request cap, or lower the window or the policy.""",
)
KV201 = define_rule(
    "KV201",
    "error",
    "a disaggregated role runs an SGLang release without the admission fixes (below 0.5.22)",
    """Before 0.5.22 a disaggregated role that marked an over-long prompt as rejected still went
    through the KV transfer with a one-token placeholder, and decode generated from stale pages of
    earlier requests: HTTP 200 with another tenant's data. Fix: deploy SGLang 0.5.22 or later for
    every disaggregated role.""",
)
KV202 = define_rule(
    "KV202",
    "warning",
    "--allow-auto-truncate is on: over-long prompts are cut silently",
    """With --allow-auto-truncate the engine cuts prompts longer than its input limit instead of
    answering HTTP 400, so clients get answers to a prompt they did not send. Fix: drop the flag
    unless clients are told their prompts may be truncated.""",
)
KV203 = define_rule(
    "KV203",
    "warning",
    "a disaggregated role runs without --disaggregation-enable-kv-checksum",
    """The KV checksum makes decode verify the pages prefill transferred before using them; a
    mismatch aborts the request with HTTP 500 instead of generating from wrong KV. Fix: add
    --disaggregation-enable-kv-checksum to both prefill and decode roles.""",
)

KV205 = define_rule(
    "KV205",
    "warning",
    "mem-fraction-static above SGLang's own value for this GPU and role",
    """SGLang picks mem_fraction_static itself from the GPU's memory, the role and the parallel
    layout, keeping a reserve for activations, CUDA graphs and the sampler. A manifest value above
    that choice makes the pool larger by taking memory from that reserve: the engine boots and
    reports a fine pool, then may run out of memory under load (a long prefill, a large decode
    batch). kvcheck computes SGLang's value for the role with the estimate model, as `kvcheck plan`
    shows it ("safe maximum"); when the model cannot tell (no model config offline, an unknown GPU)
    the rule stays silent. Fix: set mem-fraction-static at or below that value and hold the window
    with a wider TP degree or an FP8 KV cache (see `kvcheck plan`), or measure the role under peak
    load before raising it.""",
)


def effective_args(target: RoleTarget, measurement: PoolMeasurement | None) -> dict[str, Any]:
    """The role's engine args: what the manifest set, completed by what the engine resolved."""
    args = dict(measurement.resolved_args) if measurement is not None else {}
    args.update({k: v for k, v in target.args.items() if v is not None})
    return args


def _parse_version(text: str | None) -> Version | None:
    if not text:
        return None
    try:
        return Version(str(text))
    except InvalidVersion:
        return None


def shortfall_hint(target: RoleTarget, measurement: PoolMeasurement) -> str:
    """What would fit: the largest window the pool holds, plus any settings a backend worked out."""
    pool = measurement.pool_tokens or 0
    fits = math.floor(pool / Fraction(str(target.min_headroom)))
    if pool > 0:
        parts = [f"the largest context that fits this pool is {fits:,} tokens"]
        if target.min_headroom != 1.0:
            parts[0] += f" (with min_headroom {target.min_headroom:g})"
    else:  # no pool at all: no context fits, and the engine would not start (see the message)
        parts = ["the weights must leave room for a pool first"]
    args = effective_args(target, measurement)
    cap = args.get("max_total_tokens")
    capped = isinstance(cap, int) and not isinstance(cap, bool) and 0 < cap <= pool
    if capped:
        # the cap, not the memory, sized this pool: raising it is the fix, if the memory holds it
        parts.append(f"the pool is capped by --max-total-tokens {cap:,}: raise it to at least "
                     f"{target.required_tokens:,} if the memory holds that many")
    parts.extend(measurement.fit_hints or ())
    engine = get_engine(target.engine)
    if engine.device(target) == "cpu" and not capped:
        # a CPU pool is sized from host memory: the planner's setting (an estimate) is one way, the
        # host's memory the other, so the engine's host-memory settings close the hint either way
        parts.append(f"or give the pool more host memory: {engine.cpu_memory_hint()}")
    elif len(parts) == 1:  # nothing more precise is known: the engine's own settings that give room
        parts.append(engine.fit_hint(args, target.env))
    return "; ".join(parts)


def _fraction_above_safe(target: RoleTarget, measurement: PoolMeasurement) -> Finding | None:
    """KV205: the manifest's mem-fraction-static above SGLang's own value for the role (when known)."""
    flag = target.args.get("mem_fraction_static")
    if flag is None or measurement.safe_fraction is None or float(flag) <= measurement.safe_fraction:
        return None
    reserve = measurement.safe_reserve_mib
    keeps = f" (it keeps {reserve:,.0f} MiB for activations and CUDA graphs)" if reserve is not None else ""
    return finding(
        "KV205",
        target.name,
        f"mem-fraction-static {float(flag):g} is above {measurement.safe_fraction:g}, SGLang's own value for "
        f"this GPU and role{keeps}: the pool takes memory from that reserve, so serving may run out of "
        "memory under load",
        hint=f"set mem-fraction-static at most {measurement.safe_fraction:g} and hold the window another way "
        "(see `kvcheck plan`), or measure the role under peak load",
        location=target.arg_location("mem_fraction_static"),
    )


def _reservation_shortfall(target: RoleTarget, measurement: PoolMeasurement, args: dict[str, Any]) -> list[Finding]:
    """KV107: the pool holds the window, yet the role's bound (lowered by a reservation per request)
    keeps the window's longest prompts out; they hang instead of being refused."""
    pool, window = measurement.pool_tokens, target.context_length
    if pool is None or window <= 0 or pool < target.required_tokens:
        return []  # without a pool that holds the window, KV101 says what is wrong
    engine = get_engine(target.engine)
    context = measurement.context_len or window
    version = measurement.engine_version or target.engine_version
    bound = engine.max_input_len(context, pool, args, version, target.env)
    plain = engine.max_input_len(context, pool)
    promised = engine.max_input_len(window, None)
    if bound >= plain or bound >= promised:
        return []
    reserved = pool + 1 - bound
    needed = promised - 1 + reserved
    flag = engine.reservation_flag  # the engine's own flag for the reservation (SGLang's decode roles)
    field = flag.replace("-", "_") if flag else None
    return [
        finding(
            "KV107",
            target.name,
            f"the pool holds {pool:,} tokens, but the role admits prompts only below {bound:,} tokens: it "
            f"reserves {reserved:,} tokens per request on top of the prompt; prompts of {bound:,} to "
            f"{promised - 1:,} tokens, which the {window:,}-token window promises, wait with no error",
            hint=f"give the role a pool of at least {needed:,} tokens, or lower its reservation"
            + (f" (--{flag})" if flag else ""),
            location=target.arg_location(field) if field and field in target.args else target.location,
        )
    ]


def _running_cap(engine: Engine, measurement: PoolMeasurement, args: dict[str, Any]) -> tuple[int, str] | None:
    """The engine's cap on requests at once and its argument's name: the measured figure (log line, server
    answer, estimate), else the role's own argument; None when neither states one."""
    field = engine.running_requests_field
    if field is None:
        return None
    cap: Any = measurement.max_running_requests
    if cap is None:
        cap = engine.running_cap(args)  # per pool: SGLang divides the argument among its DP-attention workers
    if isinstance(cap, bool) or not isinstance(cap, int) or cap <= 0:
        return None
    return cap, field


def _below_min_concurrency(target: RoleTarget, measurement: PoolMeasurement, args: dict[str, Any],
                           min_concurrency: float) -> list[Finding]:
    """KV111: the pool holds the window (KV101 is silent) but the role runs fewer full requests at once than
    the policy asks, bounded by the pool or by the engine's own cap on running requests."""
    pool, window = measurement.pool_tokens, target.context_length
    if pool is None or window <= 0 or pool < target.required_tokens or min_concurrency <= 1.0:
        return []
    engine = get_engine(target.engine)
    held = engine.concurrency(pool, window, args, engine.device(target))
    cap = _running_cap(engine, measurement, args)
    if cap is not None and cap[0] < min_concurrency and cap[0] < held:
        running, field = cap
        return [
            finding(
                "KV111",
                target.name,
                f"the engine runs at most {running:,} request{'' if running == 1 else 's'} at once "
                f"({field}={running:,}), below the policy's min_concurrency {min_concurrency:g}: its pool of "
                f"{pool:,} tokens would hold {held:.2f} requests of the {window:,}-token window, but "
                f"{field} binds, so long requests queue behind each other",
                hint=f"raise --{field.replace('_', '-')} to at least {math.ceil(min_concurrency):,}, "
                "or lower policy.min_concurrency",
                location=target.arg_location(field) if field in target.args else target.location,
            )
        ]
    if held >= min_concurrency:
        return []
    return [
        finding(
            "KV111",
            target.name,
            f"the pool of {pool:,} tokens holds {held:.2f} requests of the {window:,}-token window at once, "
            f"below the policy's min_concurrency {min_concurrency:g}: the pool binds, so long requests queue "
            "behind each other",
            hint=f"give the pool room for {min_concurrency:g} full requests (about "
            f"{math.ceil(pool * min_concurrency / held):,} tokens), or lower policy.min_concurrency",
            location=target.location,
        )
    ]


def evaluate_role(target: RoleTarget, measurement: PoolMeasurement, min_concurrency: float = 1.0) -> list[Finding]:
    """Apply KV101-KV103, KV107, KV111, KV201-KV205 and the engine's own role rules to one role."""
    found: list[Finding] = []
    args = effective_args(target, measurement)
    required = target.required_tokens
    role = target.name
    engine = get_engine(target.engine)

    if measurement.pool_tokens is not None and measurement.pool_tokens < required:
        pool = measurement.pool_tokens
        what = "predicted pool" if measurement.source == "estimate" else "pool"
        text = (
            f"{what} holds {pool:,} tokens, below the {required:,} required "
            f"({target.min_headroom:g} x context_length {target.context_length:,}); "
            f"short by {required - pool:,} token{'' if required - pool == 1 else 's'} "
            f"({share_of_window(pool, required)} of the window)"
        )
        if pool <= 0:
            text = (
                f"no KV pool: the weights and the engine's own memory leave nothing for a KV cache under this "
                f"memory fraction, so the engine refuses to start ({what} 0 tokens, {required:,} required)"
            )
        found.append(
            finding(
                "KV101",
                role,
                text,
                hint=shortfall_hint(target, measurement),
                location=target.location,
            )
        )

    # the engine's own window flag (SGLang --context-length, vLLM --max-model-len); vLLM's `auto` (-1)
    # sets no window of its own: the engine fits one to the pool, and the measured context judges it
    window_flag = engine.window_flag
    window_field = window_flag.replace("-", "_")
    explicit_ctx = target.args.get(window_field)
    if (isinstance(explicit_ctx, int) and not isinstance(explicit_ctx, bool)
            and 0 < explicit_ctx < target.context_length):
        found.append(
            finding(
                "KV102",
                role,
                f"--{window_flag} {explicit_ctx:,} is below the advertised window {target.context_length:,}",
                hint=f"set {window_flag}: {target.context_length} (or advertise {explicit_ctx:,})",
                location=target.arg_location(window_field),
            )
        )
    elif measurement.context_len is not None and measurement.context_len < target.context_length:
        found.append(
            finding(
                "KV102",
                role,
                f"the engine's context length is {measurement.context_len:,} tokens, below the "
                f"advertised window {target.context_length:,}",
                # a role kvcheck starts or sizes itself, the flag unset: the engine's context length is the
                # model's own maximum, and raising the flag past it is refused at start (vLLM's ValueError,
                # SGLang's context_len check). An audited or logged server's flags are not known.
                hint=(
                    f"advertise at most {measurement.context_len:,}: the engine derives it from the model's "
                    f"config, and refuses a longer {window_flag} unless its long-context override is set"
                    if explicit_ctx is None and measurement.source in ("estimate", "measure") else
                    f"set {window_flag}: {target.context_length} in the role's args if the model "
                    f"supports it, or advertise {measurement.context_len:,}"
                ),
                location=target.location,
            )
        )

    cap = args.get("max_total_tokens")
    if cap is not None and int(cap) < required:
        found.append(
            finding(
                "KV103",
                role,
                f"--max-total-tokens {int(cap):,} caps the pool below the {required:,} required",
                hint=f"remove max-total-tokens or set it to at least {required}",
                location=target.arg_location("max_total_tokens"),
            )
        )

    found.extend(_reservation_shortfall(target, measurement, args))
    found.extend(_below_min_concurrency(target, measurement, args, min_concurrency))

    mode = engine.role_mode(args)
    version_text = measurement.engine_version or target.engine_version
    version = _parse_version(version_text)
    if "KV201" in engine.disaggregation_rules and mode is not None and version is not None \
            and version < ADMISSION_FIX_VERSION:
        found.append(
            finding(
                "KV201",
                role,
                f"disaggregated {mode} role runs SGLang {version_text}, which lacks the admission "
                f"fixes of {ADMISSION_FIX_VERSION} (over-long prompts can be answered from stale KV)",
                hint=f"deploy SGLang {ADMISSION_FIX_VERSION} or later",
                location=target.arg_location("disaggregation_mode"),
            )
        )
    if args.get("allow_auto_truncate"):
        found.append(
            finding(
                "KV202",
                role,
                "--allow-auto-truncate is on: prompts over the input limit are cut silently",
                hint="remove allow-auto-truncate so over-long prompts get HTTP 400",
                location=target.arg_location("allow_auto_truncate"),
            )
        )
    above = _fraction_above_safe(target, measurement)
    if above is not None:
        found.append(above)
    if "KV203" in engine.disaggregation_rules and mode is not None and not args.get("disaggregation_enable_kv_checksum"):
        if version is not None and version < KV_CHECKSUM_VERSION:
            # The flag would be refused as unknown by this release: the fix is the upgrade.
            hint = (
                f"SGLang {version_text} has no KV checksum (--disaggregation-enable-kv-checksum came in "
                f"{KV_CHECKSUM_VERSION}); deploy {ADMISSION_FIX_VERSION} or later and add it to both roles"
            )
        else:
            hint = "add disaggregation-enable-kv-checksum: true to both prefill and decode args"
        found.append(
            finding(
                "KV203",
                role,
                f"disaggregated {mode} role runs without --disaggregation-enable-kv-checksum",
                hint=hint,
                location=target.arg_location("disaggregation_mode"),
            )
        )
    found.extend(engine.role_findings(target, args, mode))
    return found


KV112 = define_rule(
    "KV112",
    "warning",
    "a --role filter left out the other side of a prefill/decode pair: the pair rules did not run",
    """KV104 and KV110 compare a prefill role with the decode roles it hands requests to, so they run
    only when both sides are checked in the same run. `--role prefill` and `--role decode` in two
    separate runs each pass on their own although the pair fails KV110 (a request between the two
    context lengths is taken by one and refused by the other). Fix: check the pair in one run
    (`--role prefill --role decode`, or no `--role`).""",
)


def pair_mode(target: RoleTarget, args: Mapping[str, Any]) -> str | None:
    """The role's prefill/decode mode for the pair rules: the side the manifest states (roles.N.side, where the
    engine's arguments cannot: a Dynamo vLLM worker), else what its engine reads from the arguments."""
    return target.side or get_engine(target.engine).role_mode(args)


def _pair_sides(target: RoleTarget) -> frozenset[str]:
    """The sides of a prefill/decode pair the role plays (vLLM's kv_both plays both)."""
    mode = pair_mode(target, target.args)
    if mode == "kv_both":
        return frozenset(("prefill", "decode"))
    return frozenset((mode,)) if mode in ("prefill", "decode") else frozenset()


def left_out_partners(every: Sequence[RoleTarget], checked: Sequence[RoleTarget]) -> list[Finding]:
    """KV112 for each checked prefill/decode role whose other side a --role filter left out."""
    names = {t.name for t in checked}
    found = []
    for target in checked:
        wanted = {"decode" if side == "prefill" else "prefill" for side in _pair_sides(target)}
        partners = [t.name for t in every if t.name not in names and wanted & _pair_sides(t)]
        if partners:
            found.append(finding(
                "KV112", target.name,
                f"--role left out {', '.join(partners)}, the other side of this prefill/decode pair: the pair "
                "rules (KV104, KV110) did not run",
                hint="check the pair in one run (--role for each side, or no --role)",
                location=target.location,
            ))
    return found


def evaluate_deployment(
    targets: Sequence[RoleTarget], measurements: Sequence[PoolMeasurement]
) -> list[Finding]:
    """Cross-role rules: KV104 (prefill and decode admission limits differ), KV110 (their context lengths
    differ). A role that may do both (vLLM's kv_both) stands on either side."""
    limits: dict[str, list[tuple[str, int]]] = {"prefill": [], "decode": []}
    contexts: dict[str, list[tuple[str, int]]] = {"prefill": [], "decode": []}
    engines = {target.name: get_engine(target.engine) for target in targets}
    for target, measurement in zip(targets, measurements, strict=True):
        mode = pair_mode(target, effective_args(target, measurement))
        sides = ("prefill", "decode") if mode == "kv_both" else (mode,) if mode in limits else ()
        for side in sides:
            if measurement.max_input_tokens is not None:
                limits[side].append((target.name, measurement.max_input_tokens))
            if measurement.context_len is not None:
                contexts[side].append((target.name, measurement.context_len))
    found = []
    seen: set[frozenset[str]] = set()
    for p_name, p_len in contexts["prefill"]:
        for d_name, d_len in contexts["decode"]:
            pair = frozenset((p_name, d_name))
            if p_name == d_name or p_len == d_len or pair in seen:
                continue
            seen.add(pair)
            longer, shorter = (p_name, d_name) if p_len > d_len else (d_name, p_name)
            found.append(
                finding(
                    "KV110",
                    None,
                    f"{p_name} serves a context length of {p_len:,} tokens but {d_name} {d_len:,}: requests "
                    f"of {min(p_len, d_len):,} to {max(p_len, d_len) - 1:,} tokens are taken by {longer} and "
                    f"refused by {shorter}, failing (or hanging) between the two",
                    hint=f"set the same {_window_flags(engines[p_name], engines[d_name])} on both roles, at "
                    "least the advertised window",
                )
            )
    seen.clear()
    for p_name, p_limit in limits["prefill"]:
        for d_name, d_limit in limits["decode"]:
            pair = frozenset((p_name, d_name))
            if p_name == d_name or pair in seen:
                continue
            seen.add(pair)
            if p_limit != d_limit:
                between = (
                    f"prompts of {d_limit:,} to {p_limit - 1:,} tokens pass {p_name} and then wait at "
                    f"{d_name} with no error" if d_limit < p_limit
                    else f"prompts of {p_limit:,} to {d_limit - 1:,} tokens are refused by {p_name} though "
                    f"{d_name} would hold them"
                )
                found.append(
                    finding(
                        "KV104",
                        None,
                        f"{p_name} admits prompts below {p_limit:,} tokens but {d_name} below "
                        f"{d_limit:,}: {between}",
                        hint="size both roles' pools and context lengths"
                        + _reservation_part(engines[d_name])
                        + " so their admission bounds match",
                    )
                )
    return found


KV204 = define_rule(
    "KV204",
    "warning",
    "no flag catalogue for the declared SGLang release; a neighbouring release's stood in",
    """kvcheck checks engine arguments against the flag catalogue of the declared SGLang release
    (it ships one for every release from 0.4.0; a post or local build of a catalogued release uses
    that release's catalogue without this finding). For another release the nearest older
    catalogued release is used, or the oldest (0.4.0) for a release older than every catalogue, so
    a flag added or removed in between may be judged wrongly. Fix: upgrade kvcheck, or generate the
    release's catalogue with tools/gen_flag_catalogue.py.""",
)


def _window_flags(first: Engine, second: Engine) -> str:
    """The flag that sets the served window on two roles, in their engines' own spelling."""
    if first.window_flag == second.window_flag:
        return f"--{first.window_flag}"
    return f"window (--{first.window_flag} on {first.label}, --{second.window_flag} on {second.label})"


def _reservation_part(decode: Engine) -> str:
    """KV104's mention of the decode role's per-request reservation, where its engine has one."""
    return f" (and the decode role's --{decode.reservation_flag})" if decode.reservation_flag else ""
