"""vLLM's KVTransferConfig values: what `--kv-transfer-config` must hold for vLLM to build its config.

A key check alone (`catalogue.VllmCatalogue._check_keys`, 0.16.0 on) passes `{"kv_role": "kv_consumr"}`,
which vLLM refuses before any model loads; kvcheck's prefill/decode pair rules (KV104, KV110) read the role
from this value, so a misspelt role made them stop running and the estimate passed. The rules are the same
in every release kvcheck catalogues (read in vllm/config.py of 0.8.5, vllm/config/kv_transfer.py of
0.11.0, 0.16.0, 0.32.0 and 0.33.0):

- `kv_role`: one of kv_producer, kv_consumer, kv_both ("Unsupported kv_role"), or unset;
- `kv_connector` set with no `kv_role`: "Please specify kv_role when kv_connector is set" (0.8 to 0.15
  spell it kv_disagg_role);
- `kv_load_failure_policy` (where the release has the field): "recompute" or "fail" (a Literal).

Other fields are left to vLLM: kvcheck does not read them, and a measured boot reports its refusal.
"""

from __future__ import annotations

import difflib
from collections.abc import Collection, Mapping
from typing import Any

KV_ROLES = ("kv_producer", "kv_consumer", "kv_both")
LOAD_FAILURE_POLICIES = ("recompute", "fail")


def _close(value: Any, names: tuple[str, ...]) -> str:
    close = difflib.get_close_matches(str(value), names, n=1, cutoff=0.6) if isinstance(value, str) else []
    return f" (did you mean '{close[0]}'?)" if close else ""


def value_problem(config: Mapping[str, Any], keys: Collection[str] | None) -> str | None:
    """Why vLLM refuses `config` (a --kv-transfer-config mapping), None when it builds it.

    `keys` are the release's KVTransferConfig fields when the catalogue lists them (None before 0.16.0):
    a field the release lacks is the key check's to refuse, not this one's.
    """
    role = config.get("kv_role")
    if role is not None and role not in KV_ROLES:
        return (f"'kv_role' must be one of {', '.join(KV_ROLES)}; got {role!r}{_close(role, KV_ROLES)} "
                "(\"Unsupported kv_role\")")
    if config.get("kv_connector") is not None and role is None:
        return (f"'kv_connector' {config['kv_connector']!r} is set without a 'kv_role' (one of "
                f"{', '.join(KV_ROLES)}): \"Please specify kv_role when kv_connector is set\"")
    policy = config.get("kv_load_failure_policy")
    if policy is not None and keys is not None and "kv_load_failure_policy" in keys and policy not in LOAD_FAILURE_POLICIES:
        return (f"'kv_load_failure_policy' must be recompute or fail; got {policy!r}"
                f"{_close(policy, LOAD_FAILURE_POLICIES)}")
    return None


__all__ = ["KV_ROLES", "value_problem"]
