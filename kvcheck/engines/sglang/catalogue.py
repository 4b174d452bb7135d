"""SGLang's command-line flags per release, read from the catalogues in profiles/sglang/.

The catalogues are generated from the released wheels by tools/gen_flag_catalogue.py. Lookup
mirrors SGLang's argparse: `-` and `_` are interchangeable in manifests, a leading `--` is allowed,
aliases resolve to their flag, and any unique prefix of a long flag is accepted (allow_abbrev).
"""

from __future__ import annotations

import json
from functools import cache

from kvcheck.engines.flags import (  # noqa: F401  (re-exported for SGLang's modules)
    JSON_TYPES,
    Catalogue,
    Flag,
    FlagError,
    RemovedFlag,
    catalogued_versions,
    flag_from_json,
    parse_human_readable_int,
    pick_catalogue,
    removed_from_json,
)
from kvcheck.errors import InputError
from kvcheck.profiles import profile_path

CATALOGUE_SCHEMA = "kvcheck/sglang-flags/v1"

# Flags a manifest must not carry: kvcheck sets them itself or they hide arguments from the check.
RESERVED_FLAGS = {
    "model-path": "set model.path instead; kvcheck passes it as --model-path",
    "config": "put the config file's arguments in the manifest's args, so kvcheck can check them",
}


def catalogue_versions() -> list[str]:
    """SGLang versions that ship a catalogue, oldest first."""
    return catalogued_versions("sglang")


@cache
def _load(version: str) -> Catalogue:
    path = profile_path("sglang", f"flags-{version}.json")
    data = json.loads(path.read_text(encoding="utf-8"))
    if data.get("schema") != CATALOGUE_SCHEMA:
        raise InputError(f"{path}: not a kvcheck SGLang flag catalogue (schema {data.get('schema')!r})")
    removed = removed_from_json(data)
    return Catalogue(
        version=str(data["sglang_version"]),
        flags=tuple(flag_from_json(item) for item in data["flags"]),
        removed=removed,
        allow_abbrev=bool(data.get("allow_abbrev", True)),
        label="SGLang",
        reserved=RESERVED_FLAGS,
    )


def load_catalogue(version: str) -> tuple[Catalogue, str | None]:
    """The catalogue for `version`, plus a note when another release's catalogue stands in
    (`kvcheck.engines.flags.pick_catalogue` says which)."""
    chosen, note = pick_catalogue(version, catalogue_versions(), label="SGLang", example="0.5.23")
    return _load(chosen), note


