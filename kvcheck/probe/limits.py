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

from kvcheck.engines import get_engine
from kvcheck.errors import CheckError, EndpointError
from kvcheck.model import ProbeLimits
from kvcheck.probe.options import MAX_PROMPT_TOKENS, ProbeOptions

if TYPE_CHECKING:
    from kvcheck.engines.base import ServerInfo

# The probe talks to a deployment's front door and names no engine: the registry's default engine
# (SGLang) states the admission bound, reads the disaggregation mode and supplies the client.


class LimitsUnknown(CheckError):
    """The deployment's limits could not be learned; the probe has nothing to aim at (exit 3)."""


def admission_bound(context_len: int, pool_tokens: int | None) -> int:
    """The engine's max_req_input_len (SGLang's): prompts of this many tokens or more are refused."""
    return get_engine().max_input_len(context_len, pool_tokens)


def longest_promised_prompt(window_tokens: int) -> int:
    """The longest prompt SGLang admits under a window when the pool is ample: window - 7 tokens."""
    return admission_bound(window_tokens, None) - 1


DeploymentLimits = ProbeLimits  # the probe's name for what it aims at


def limits_from_options(options: ProbeOptions, *, note: str | None = None) -> DeploymentLimits:
    """Limits computed from --context-length and --pool alone (dry runs, fronts without /server_info)."""
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
    bound = admission_bound(options.context_length, options.pool_tokens)
    _check_bound(bound)
    return DeploymentLimits(
        window_tokens=options.context_length,
        window_source="--context-length",
        max_req_input_len=bound,
        bound_source=f"computed: min({options.context_length} - 1, {options.pool_tokens} - 1) - 5",
        pool_tokens=options.pool_tokens,
        served_context_len=None,
        source="options",
        has_tokenizer=options.text_prompts,
        model_name=options.model,
        notes=(note,) if note else (),
    )


def learn_limits(options: ProbeOptions, transport: httpx.BaseTransport) -> DeploymentLimits:
    """Ask the front door's /server_info through the guarded transport; fall back to the options."""
    try:
        with get_engine().server_client(  # the engine's shared server reader (audit uses it too)
            options.url,
            timeout_s=min(options.request_timeout_s, options.max_duration_s),  # every request: --request-timeout
            verify=options.verify,
            token=options.token,
            retries=0,  # every GET counts against --max-requests
            transport=transport,
        ) as client:
            info = client.server_info()
    except EndpointError as exc:
        if _is_auth_failure(exc):
            raise LimitsUnknown(exc.message, hint=exc.hint) from exc
        return limits_from_options(options, note=f"/server_info unavailable ({exc.message})")
    return limits_from_server_info(info, options)


def limits_from_server_info(info: ServerInfo, options: ProbeOptions) -> DeploymentLimits:
    """Combine what the server states with what the user promises (--context-length wins for W)."""
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
    pool = info.pool_tokens
    if pool is None and options.pool_tokens is not None:
        pool = options.pool_tokens
        notes.append(f"pool from --pool ({pool} tokens): the server states none")
    elif options.pool_tokens is not None and options.pool_tokens != pool:
        notes.append(f"--pool {options.pool_tokens} ignored: the server states {pool} tokens")
    if info.max_req_input_len is not None:
        bound, bound_source = info.max_req_input_len, f"{info.endpoint} max_req_input_len"
        if pool is not None:  # a decode role's reservation lowers the bound below its own figure
            role_bound = get_engine().max_input_len(served_context or window, pool, args, info.version)
            if role_bound < bound:
                bound, bound_source = role_bound, f"{info.endpoint}: the decode role's pool ({pool}) less its reservation"
    elif pool is not None:
        bound = get_engine().max_input_len(served_context or window, pool, args, info.version)
        bound_source = f"computed from the pool ({pool}) and context ({served_context or window})"
    else:
        raise LimitsUnknown(f"{info.url}: the server states neither max_req_input_len nor its pool")
    if window > MAX_PROMPT_TOKENS:
        raise LimitsUnknown(
            f"{info.url}: the window to probe is {window:,} tokens ({window_source}), beyond the longest prompt "
            f"the probe sends ({MAX_PROMPT_TOKENS:,} tokens)",
            hint="give --context-length, the window promised to clients, if the server's claim is not it",
        )
    promised = admission_bound(window, None)
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
    mode = get_engine().role_mode(args)
    return DeploymentLimits(
        window_tokens=window,
        window_source=window_source,
        max_req_input_len=bound,
        bound_source=bound_source,
        pool_tokens=pool,
        served_context_len=served_context,
        source="server_info",
        version=info.version,
        has_tokenizer=has_tokenizer,
        model_name=model,
        allow_auto_truncate=auto_truncate if isinstance(auto_truncate, bool) else None,
        disaggregation_mode=_text(mode) if mode is not None else None,
        notes=tuple(notes),
    )


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
