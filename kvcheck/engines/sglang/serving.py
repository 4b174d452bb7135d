"""How SGLang is launched, which prefill/decode role its args give it, and which prompts it admits.

The one home of these rules; every command (estimate, logs, measure, audit, probe) asks here.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from packaging.version import InvalidVersion, Version

DEFAULT_ENGINE_COMMAND: tuple[str, ...] = ("python3", "-m", "sglang.launch_server")

# The scheduler admits a prompt only when it fits max_req_len minus this margin (tp_worker.py:
# max_req_input_len = max_req_len - 5); see docs/sglang-internals.md.
ADMISSION_MARGIN_TOKENS = 5

# The largest token figure a server can hold: SGLang keeps token counts and pool indices in int32
# tensors. A larger figure in an answer or a log (2**62, 10**4000) is damage or a lie, never a pool.
MAX_TOKEN_FIGURE = 2**31 - 1


def disaggregation_mode(args: Mapping[str, Any]) -> str | None:
    """The PD role an engine's args give it (prefill, decode), None for a unified server.

    `args` are keyed by SGLang field name; "null" is how server_args and JSON spell no mode.
    """
    mode = args.get("disaggregation_mode")
    return None if mode in (None, "null", "") else str(mode)


def args_device(args: Mapping[str, Any]) -> str | None:
    """The device `--device` selects; None when unset (SGLang's default: CUDA on a GPU host)."""
    value = args.get("device")
    return None if value in (None, "", "auto") else str(value)


def device(args: Mapping[str, Any], declared: str | None = None) -> str:
    """The device a role runs on: the manifest's `device` (`declared`), else `--device`, else CUDA."""
    return declared or args_device(args) or "cuda"


def max_request_len(context_len: int, pool_tokens: int | None) -> int:
    """max_req_len: the longest request (prompt plus output) a server admits, in tokens.

    `pool_tokens` None means a pool too large to bind (only the context length limits).
    """
    return context_len - 1 if pool_tokens is None else min(context_len - 1, pool_tokens - 1)


def max_input_len(context_len: int, pool_tokens: int | None) -> int:
    """max_req_input_len: prompts of this many tokens or more are refused (may be negative)."""
    return max_request_len(context_len, pool_tokens) - ADMISSION_MARGIN_TOKENS


# A decode role pre-allocates each transferred request's prompt plus this many tokens, and admits it
# only when that fits the free pool (disaggregation/decode.py, `_required_admission_tokens` in
# 0.5.23): with a 2,048-token pool real 0.5.23 serves a 1,536-token prompt and leaves a 1,537-token
# one waiting forever, with no error, although max_req_input_len says 2,042. By release: decode
# mode came in 0.4.4.post2 with a fixed 512; 0.4.6.post3 and 0.4.7 read the variable below;
# --num-reserved-decode-tokens (default 512) replaced it in 0.4.7.post1 (docs/sglang-internals.md).
DEFAULT_RESERVED_DECODE_TOKENS = 512
RESERVED_DECODE_FLAG = "num-reserved-decode-tokens"  # Engine.reservation_flag: what KV107's fix names
RESERVED_DECODE_ENV = "SGLANG_NUM_RESERVED_DECODE_TOKENS"
_RESERVE_ENV_FROM = Version("0.4.6.post3")
_RESERVE_FLAG_FROM = Version("0.4.7.post1")


def reserved_decode_tokens(
    args: Mapping[str, Any], version: str | None = None, env: Mapping[str, str] | None = None
) -> int:
    """Tokens a decode role reserves on top of each admitted prompt (0 for any other role).

    `version` None (or a build string kvcheck cannot read) means the newest rules: the flag.
    """
    if disaggregation_mode(args) != "decode":
        return 0
    release = _release(version)
    if release is not None and release < _RESERVE_FLAG_FROM:
        text = (env or {}).get(RESERVED_DECODE_ENV) if release >= _RESERVE_ENV_FROM else None
        return _count(text, DEFAULT_RESERVED_DECODE_TOKENS)
    return _count(args.get("num_reserved_decode_tokens"), DEFAULT_RESERVED_DECODE_TOKENS)


def admission_bound(
    context_len: int,
    pool_tokens: int | None,
    args: Mapping[str, Any] | None = None,
    version: str | None = None,
    env: Mapping[str, str] | None = None,
) -> int:
    """The role's real admission bound: prompts of this many tokens or more are refused, or (on a
    decode role, past its reservation) never admitted. A decode role admits a prompt P only while
    P + reserved fits its free pool, so an idle decode role's bound is pool - reserved + 1."""
    bound = max_input_len(context_len, pool_tokens)
    reserve = reserved_decode_tokens(args or {}, version, env)
    if reserve and pool_tokens is not None:
        bound = min(bound, pool_tokens - reserve + 1)
    return bound


def decode_pool_needed(window: int, reserve: int) -> int:
    """The pool a role reserving `reserve` tokens per request needs to admit the longest prompt a
    window of `window` tokens promises (window - 7 tokens): that prompt plus the reservation."""
    return max_input_len(window, None) - 1 + reserve if reserve and window > 0 else 0


def decode_window(pool_tokens: int, reserve: int) -> int:
    """The largest window whose longest prompt, plus the reservation, fits the pool; a huge number
    when nothing is reserved (the reservation does not bind)."""
    if not reserve:
        return MAX_TOKEN_FIGURE
    return max(0, pool_tokens - reserve + 1 + ADMISSION_MARGIN_TOKENS + 1)


def _release(version: str | None) -> Version | None:
    if not version:
        return None
    try:
        return Version(str(version).lstrip("v"))
    except InvalidVersion:
        return None


def _count(value: Any, default: int) -> int:
    """A token count from an arg or variable; what is unset or not an integer is the default (the
    engine's own parser refuses such a value at boot, so no role runs with it)."""
    if value is None or isinstance(value, bool):
        return default
    try:
        number = int(str(value).strip())
    except ValueError:
        return default
    return number


def data_parallel_ranks(args: Mapping[str, Any]) -> int:
    """The data-parallel ranks one server runs, each with its own KV pool: attention-DP ranks or DP replicas.

    `args` are keyed by SGLang field name; an unset or zero width counts as 1.
    """
    return max(int(args.get("attn_dp_size") or 1), int(args.get("dp_size") or 1))
