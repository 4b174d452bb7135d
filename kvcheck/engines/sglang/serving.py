"""How SGLang is launched, which prefill/decode role its args give it, and which prompts it admits.

The one home of these rules; every command (estimate, logs, measure, audit, probe) asks here.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

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


def device(args: Mapping[str, Any]) -> str:
    """The device `--device` selects (SGLang's default, None, means CUDA on a GPU host)."""
    value = args.get("device")
    return "cuda" if value in (None, "", "auto") else str(value)


def max_request_len(context_len: int, pool_tokens: int | None) -> int:
    """max_req_len: the longest request (prompt plus output) a server admits, in tokens.

    `pool_tokens` None means a pool too large to bind (only the context length limits).
    """
    return context_len - 1 if pool_tokens is None else min(context_len - 1, pool_tokens - 1)


def max_input_len(context_len: int, pool_tokens: int | None) -> int:
    """max_req_input_len: prompts of this many tokens or more are refused (may be negative)."""
    return max_request_len(context_len, pool_tokens) - ADMISSION_MARGIN_TOKENS


def data_parallel_ranks(args: Mapping[str, Any]) -> int:
    """The data-parallel ranks one server runs, each with its own KV pool: attention-DP ranks or DP replicas.

    `args` are keyed by SGLang field name; an unset or zero width counts as 1.
    """
    return max(int(args.get("attn_dp_size") or 1), int(args.get("dp_size") or 1))
