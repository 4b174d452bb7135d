"""SGLang's command-line flags per release, read from the catalogues in profiles/sglang/.

The catalogues are generated from the released wheels by tools/gen_flag_catalogue.py. Lookup
mirrors SGLang's argparse: `-` and `_` are interchangeable in manifests, a leading `--` is allowed,
aliases resolve to their flag, and any unique prefix of a long flag is accepted (allow_abbrev).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from functools import cache
from typing import Any

from packaging.version import InvalidVersion, Version

from kvcheck.engines.flags import (  # noqa: F401  (re-exported for SGLang's modules)
    JSON_TYPES,
    Catalogue,
    Flag,
    FlagError,
    RemovedFlag,
    parse_human_readable_int,
)
from kvcheck.errors import InputError
from kvcheck.profiles import profile_path

CATALOGUE_SCHEMA = "kvcheck/sglang-flags/v1"

# Flags a manifest must not carry: kvcheck sets them itself or they hide arguments from the check.
RESERVED_FLAGS = {
    "model-path": "set model.path instead; kvcheck passes it as --model-path",
    "config": "put the config file's arguments in the manifest's args, so kvcheck can check them",
}


def _flag_from_json(item: Mapping[str, Any]) -> Flag:
    choices = item.get("choices")
    return Flag(
        name=item["flag"],
        field=item.get("field"),
        aliases=tuple(item.get("aliases") or ()),
        type=item.get("type") or "str",
        nargs=item.get("nargs"),
        store_true=bool(item.get("store_true")),
        action=item.get("action"),
        default=item.get("default"),
        choices=tuple(choices) if choices is not None else None,
        deprecated=bool(item.get("deprecated")),
    )


def catalogue_versions() -> list[str]:
    """SGLang versions that ship a catalogue, oldest first."""
    folder = profile_path("sglang")
    versions = []
    for path in folder.glob("flags-*.json"):
        text = path.stem.removeprefix("flags-")
        try:
            Version(text)
        except InvalidVersion:
            continue
        versions.append(text)
    return sorted(versions, key=Version)


@cache
def _load(version: str) -> Catalogue:
    path = profile_path("sglang", f"flags-{version}.json")
    data = json.loads(path.read_text(encoding="utf-8"))
    if data.get("schema") != CATALOGUE_SCHEMA:
        raise InputError(f"{path}: not a kvcheck SGLang flag catalogue (schema {data.get('schema')!r})")
    removed = {
        r["flag"]: RemovedFlag(r["flag"], r["last_version"], r.get("replacement"))
        for r in data.get("removed", [])
    }
    return Catalogue(
        version=str(data["sglang_version"]),
        flags=tuple(_flag_from_json(item) for item in data["flags"]),
        removed=removed,
        allow_abbrev=bool(data.get("allow_abbrev", True)),
        label="SGLang",
        reserved=RESERVED_FLAGS,
    )


def load_catalogue(version: str) -> tuple[Catalogue, str | None]:
    """The catalogue for `version`, plus a note when another release's catalogue stands in.

    A post or local build of a catalogued release (`0.5.23.post1`, `0.4.3.post2`, `0.5.23+cu129`)
    uses the newest catalogue of the same release at or below it, with no note: a post release
    whose parser changed has its own catalogue, and one that did not change has none because the
    release's catalogue is exact for it. Any other uncatalogued version gets the nearest older
    catalogued release; a version older than every catalogue gets the oldest one. Both come with
    a note, because flags added or removed in between may then be judged wrongly.
    """
    try:
        wanted = Version(str(version))
    except InvalidVersion as exc:
        raise InputError(f"'{version}' is not a version number (write it like \"0.5.23\")") from exc
    available = catalogue_versions()
    if not available:
        raise InputError("no SGLang flag catalogue is installed; reinstall kvcheck")
    parsed = {v: Version(v) for v in available}
    exact = [v for v in available if parsed[v] == wanted]
    if exact:
        return _load(exact[0]), None
    same_release = [
        v for v in available if parsed[v].release == wanted.release and not wanted.is_prerelease and parsed[v] < wanted
    ]
    if same_release:
        return _load(same_release[-1]), None
    older = [v for v in available if parsed[v] < wanted]
    if not older:
        chosen = available[0]
        note = (
            f"SGLang {version} is older than every flag catalogue kvcheck ships; arguments were "
            f"checked against {chosen}, the oldest, so a flag that {version} accepted and {chosen} "
            "does not is reported as unknown"
        )
        return _load(chosen), note
    chosen = older[-1]
    note = (
        f"no flag catalogue for SGLang {version}; arguments were checked against {chosen}, "
        "the nearest older release"
    )
    return _load(chosen), note


