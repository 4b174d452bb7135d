"""The environment SGLang's code reads, from the one a role declares (sglang/srt/environ.py).

Two rules of SGLang's own, applied wherever kvcheck reads an SGLang variable from a role's env:

- From 0.5.3, importing environ.py copies every legacy `SGL_X` variable to `SGLANG_X`, over a value already set
  (`_convert_SGL_to_SGLANG`, `_handle_deprecated_envs` from 0.5.19), so `SGL_X` wins over `SGLANG_X`.
- A boolean (`EnvBool`) is on for `true`, `1`, `yes`, `y` after lower-casing only (no strip); any other value is
  off, or SGLang's default (False for every boolean kvcheck reads) after an "Invalid value" warning.
"""

from __future__ import annotations

from collections.abc import Mapping

from kvcheck.engines.sglang.sizing import releases as rel

LEGACY_PREFIX = "SGL_"
PREFIX = "SGLANG_"
TRUE_VALUES = ("true", "1", "yes", "y")


def effective_env(env: Mapping[str, str], version: str | None) -> dict[str, str]:
    """`env` as the SGLang release `version` sees it once environ.py is imported (None: the newest)."""
    out = dict(env)
    if not rel.rules_for(version).has(rel.SGL_PREFIX_RENAMED):
        return out
    for key, value in env.items():
        if key.startswith(LEGACY_PREFIX):
            out[PREFIX + key[len(LEGACY_PREFIX):]] = value
    return out


def env_bool(value: object) -> bool:
    """Whether SGLang's EnvBool reads `value` as on (unset, invalid and false values are all off)."""
    return value is not None and str(value).lower() in TRUE_VALUES
