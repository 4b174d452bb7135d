"""The figures the probe aims at: the advertised window and the admission bound, and where each came from.

SGLang refuses prompts of `max_req_input_len` tokens or more, where
`max_req_input_len = min(context_len - 1, pool_tokens - 1) - 5` (docs/sglang-internals.md,
Admission bound), and its tokenizer refuses prompts of `context_len` tokens or more. The probe reads
both from /server_info when the front door serves it, else computes them from --context-length and
--pool; with neither it has nothing to aim at and fails closed.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import httpx

from kvcheck.engines import engine_names, get_engine
from kvcheck.errors import CheckError, EndpointError, ServerUnusable
from kvcheck.model import ProbeLimits
from kvcheck.probe.options import MAX_PROMPT_TOKENS, ProbeOptions

if TYPE_CHECKING:
    from kvcheck.engines.base import Engine, ServerInfo

# The probe talks to a deployment's front door: the engine is --engine's, else the first registered
# engine whose server reader reads the front door's answers as its own (the registry's default first, as
# `kvcheck audit` asks a bare URL). That engine states the admission bound, the role mode and the client.


class LimitsUnknown(CheckError):
    """The deployment's limits could not be learned; the probe has nothing to aim at (exit 3)."""


def admission_bound(context_len: int, pool_tokens: int | None, engine: Engine | None = None) -> int:
    """The shortest prompt the engine's front door refuses (SGLang's max_req_input_len)."""
    return (engine or get_engine()).probe_bound(context_len, pool_tokens)


def longest_promised_prompt(window_tokens: int, engine: Engine | None = None) -> int:
    """The longest prompt the engine admits under a window when the pool is ample (SGLang: W - 7, vLLM: W - 1)."""
    return admission_bound(window_tokens, None, engine) - 1


DeploymentLimits = ProbeLimits  # the probe's name for what it aims at


def probe_engine(options: ProbeOptions) -> Engine:
    """--engine's engine, else the registry's default (a dry run and a front door no engine reads)."""
    return get_engine(options.engine) if options.engine else get_engine()


def limits_from_options(options: ProbeOptions, *, note: str | None = None,
                        engine: Engine | None = None) -> DeploymentLimits:
    """Limits computed from --context-length and --pool alone (dry runs, fronts without /server_info)."""
    engine = engine or probe_engine(options)
    if options.context_length is None or options.pool_tokens is None:
        missing = " and ".join(
            flag
            for flag, value in (("--context-length", options.context_length), ("--pool", options.pool_tokens))
            if value is None
        )
        raise LimitsUnknown(
            f"cannot learn the deployment's limits: {note or '/server_info was not asked'}, and {missing} "
            "was not given",
            hint="give --context-length (the window promised to clients) and --pool (the smallest role's "
            "KV pool, from `kvcheck audit` on each role)",
        )
    bound = admission_bound(options.context_length, options.pool_tokens, engine)
    _check_bound(bound)
    return DeploymentLimits(
        window_tokens=options.context_length,
        window_source="--context-length",
        max_req_input_len=bound,
        bound_source=f"computed by {engine.label}'s rule from --context-length {options.context_length} and "
        f"--pool {options.pool_tokens}",
        pool_tokens=options.pool_tokens,
        served_context_len=None,
        source="options",
        has_tokenizer=options.text_prompts,
        model_name=options.model,
        notes=(note,) if note else (),
    )


def learn_limits(options: ProbeOptions, transport: httpx.BaseTransport) -> tuple[DeploymentLimits, Engine]:
    """Ask the front door for its limits through the guarded transport, with --engine's reader or each
    engine's in turn (the first that reads the answers as its own wins); fall back to the options."""
    from kvcheck.engines.base import RouterAnswer

    if options.engine:
        candidates = [get_engine(options.engine)]
    else:
        default = get_engine()
        candidates = [default, *(get_engine(name) for name in engine_names() if name != default.name)]
    failures: list[str] = []
    for engine in candidates:
        if engine.probe_front_door() is None:
            continue  # an engine the probe cannot talk to
        try:
            # a front door that states only its window is read as a router of the engine --engine names;
            # guessed from a bare URL it could be any OpenAI server (an SGLang one without /server_info)
            info = _server_info(engine, options, transport, window_only=options.engine is not None)
        except EndpointError as exc:
            if _is_auth_failure(exc):
                raise LimitsUnknown(exc.message, hint=exc.hint) from exc
            failures.append(f"{engine.label}: {exc.message}")
            if isinstance(exc, RouterAnswer | ServerUnusable):
                # a router of this engine, or a front door no reader would fare better with
                return limits_from_options(options, note=f"limits unavailable ({exc.message})", engine=engine), engine
            continue
        return limits_from_server_info(info, options, engine), engine
    engine = probe_engine(options)
    return limits_from_options(options, note=f"limits unavailable ({'; '.join(failures) or 'no engine asked'})",
                               engine=engine), engine


def _server_info(engine: Engine, options: ProbeOptions, transport: httpx.BaseTransport, *,
                 window_only: bool) -> ServerInfo:
    """The engine's server reader (audit uses it too); for an engine whose bound follows from the window,
    a front door that states only /v1/models' max_model_len (a router in front of vLLM) is enough."""
    with engine.server_client(
        options.url,
        timeout_s=min(options.request_timeout_s, options.max_duration_s),  # every request: --request-timeout
        verify=options.verify,
        token=options.token,
        retries=0,  # every GET counts against --max-requests
        transport=transport,
    ) as client:
        try:
            return client.server_info()
        except EndpointError as exc:
            front = engine.probe_front_door()
            if not window_only or front is None or not front.bound_from_window or isinstance(exc, ServerUnusable):
                raise
            try:
                served = client.served_context()
            except EndpointError:
                raise exc from None
            if served is None:
                raise
            from kvcheck.engines.base import ServerInfo

            return ServerInfo(
                url=client.url, version=None, max_total_num_tokens=None, max_req_input_len=None,
                dp_token_capacities=(), swa_token_capacities=(), context_length_arg=None, served_context_len=served,
                resolved_args={}, launch_command=None, endpoint="/v1/models", served_context_source="/v1/models",
                notes=(f"no pool figure ({exc.message}): a router in front of {engine.label} servers; the bound "
                       f"follows from /v1/models max_model_len {served}",),
            )


def limits_from_server_info(info: ServerInfo, options: ProbeOptions, engine: Engine | None = None) -> DeploymentLimits:
    """Combine what the server states with what the user promises (--context-length wins for W)."""
    engine = engine or probe_engine(options)
    args = info.resolved_args
    served_context = info.served_context_len or info.context_length_arg
    notes = list(info.notes)
    if options.context_length is not None:
        window, window_source = options.context_length, "--context-length"
    elif served_context is not None:
        window, window_source = served_context, "served context length (/v1/models max_model_len)"
    else:
        raise LimitsUnknown(
            f"{info.url}: the server states no context length (no /v1/models max_model_len, no "
            "--context-length among its arguments)",
            hint="give --context-length, the window promised to clients",
        )
    pool = judged_pool = info.pool_tokens
    if pool is None and options.pool_tokens is not None:
        pool = judged_pool = options.pool_tokens
        notes.append(f"pool from --pool ({pool} tokens): the server states none")
    elif options.pool_tokens is not None and pool is not None and options.pool_tokens < pool:
        # the smaller figure wins: a role behind this front door (a prefill role behind a decode front, one
        # replica of several) may hold less than the one that answered; prompts still aim at what it admits
        judged_pool = options.pool_tokens
        notes.append(f"--pool {judged_pool:,} is below the {pool:,} tokens the server states: the limits row "
                     "judges the smaller figure")
    elif options.pool_tokens is not None and options.pool_tokens != pool:
        notes.append(f"--pool {options.pool_tokens} not used: the server states {pool} tokens, fewer")
    bound, bound_source = _bound(info, engine, window, served_context, pool)
    if window > MAX_PROMPT_TOKENS:
        raise LimitsUnknown(
            f"{info.url}: the window to probe is {window:,} tokens ({window_source}), beyond the longest prompt "
            f"the probe sends ({MAX_PROMPT_TOKENS:,} tokens)",
            hint="give --context-length, the window promised to clients, if the server's claim is not it",
        )
    promised = admission_bound(window, None, engine)
    if bound > promised:  # prompts aim at what is promised, never at what a server merely claims
        notes.append(f"the server states a bound of {bound:,} tokens, beyond what the window W = {window:,} "
                     f"admits; probed at {promised:,}")
        bound, bound_source = promised, f"computed from the window ({window}), below the server's claim"
    _check_bound(bound)
    skip_tokenizer = args.get("skip_tokenizer_init")
    has_tokenizer = options.text_prompts
    if has_tokenizer is None and isinstance(skip_tokenizer, bool):
        has_tokenizer = not skip_tokenizer
    model = options.model or _text(args.get("served_model_name")) or _text(args.get("model_path"))
    auto_truncate = args.get("allow_auto_truncate")
    mode = engine.role_mode(args)
    return DeploymentLimits(
        window_tokens=window,
        window_source=window_source,
        max_req_input_len=bound,
        bound_source=bound_source,
        pool_tokens=judged_pool,
        served_context_len=served_context,
        source="server_info",
        version=info.version,
        has_tokenizer=has_tokenizer,
        model_name=model,
        allow_auto_truncate=auto_truncate if isinstance(auto_truncate, bool) else None,
        disaggregation_mode=_text(mode) if mode is not None else None,
        notes=tuple(notes),
    )


def _bound(info: ServerInfo, engine: Engine, window: int, served_context: int | None,
           pool: int | None) -> tuple[int, str]:
    """The admission bound B the server states or its engine's rule gives, and where it comes from."""
    args = info.resolved_args
    front = engine.probe_front_door()
    if front is not None and front.bound_from_window:
        context = served_context or window
        return (engine.probe_bound(context, pool, args, info.version),
                f"{engine.label} refuses prompts of its max_model_len ({context}) tokens or more")
    if info.max_req_input_len is not None:
        bound, bound_source = info.max_req_input_len, f"{info.endpoint} max_req_input_len"
        if pool is not None:  # a decode role's reservation lowers the bound below its own figure
            role_bound = engine.max_input_len(served_context or window, pool, args, info.version)
            if role_bound < bound:
                bound, bound_source = role_bound, f"{info.endpoint}: the decode role's pool ({pool}) less its reservation"
        return bound, bound_source
    if pool is not None:
        return (engine.probe_bound(served_context or window, pool, args, info.version),
                f"computed from the pool ({pool}) and context ({served_context or window})")
    raise LimitsUnknown(f"{info.url}: the server states neither max_req_input_len nor its pool")


def _check_bound(bound: int) -> None:
    if bound < 2:
        raise LimitsUnknown(
            f"the admission bound is {bound} tokens: no prompt could be admitted, nothing to probe",
            hint="check --context-length and --pool",
        )


def _is_auth_failure(exc: EndpointError) -> bool:
    return "HTTP 401" in exc.message or "HTTP 403" in exc.message


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None
