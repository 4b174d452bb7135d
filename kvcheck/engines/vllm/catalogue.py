"""vLLM's `vllm serve` flags per release, read from the catalogues in profiles/vllm/.

The catalogues are generated from each release's own argparse by tools/gen_vllm_catalogue.py. Lookup
is the shared argparse lookup (kvcheck.engines.flags), with vLLM's own value types: its
human_readable_int (`32k` = 32,000, `32K` = 32,768, decimals only with lower-case suffixes) and
`--max-model-len auto` (or -1: fit the window to the pool).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from functools import cache
from typing import Any

from packaging.version import Version

from kvcheck.engines.flags import (
    Catalogue,
    Flag,
    FlagError,
    catalogued_versions,
    flag_from_json,
    pick_catalogue,
    removed_from_json,
)
from kvcheck.errors import InputError
from kvcheck.profiles import profile_path

CATALOGUE_SCHEMA = "kvcheck/vllm-flags/v1"
HUMAN_INT = "vllm_human_readable_int"
HUMAN_INT_OR_AUTO = "vllm_human_readable_int_or_auto"
AUTO = -1  # what vLLM stores for `--max-model-len auto`

# Flags a manifest must not carry: kvcheck sets them itself or they hide arguments from the check.
RESERVED_FLAGS = {
    "model": "set model.path instead; kvcheck passes it as `vllm serve MODEL`",
    "config": "put the config file's arguments in the manifest's args, so kvcheck can check them",
    "host": "kvcheck picks where the measured server listens",
    "port": "kvcheck picks where the measured server listens",
}

_HUMAN_RE = re.compile(r"(\d+(?:\.\d+)?)([kKmMgGtT])")
_DECIMAL = {"k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12}
_BINARY = {"K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}


def human_readable_int(name: str, value: Any, *, auto: bool = False) -> int:
    """vLLM's human_readable_int(_or_auto): 1k=1000, 1K=1024, 25.6k=25600; with `auto`, auto/-1 -> -1."""
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise FlagError(f"'{name}' must be an integer such as 32768, 32k or 32K, not {value!r}")
    if isinstance(value, int):
        if value < 0 and not (auto and value == AUTO):
            raise FlagError(f"'{name}' must not be negative ({value})" + ("; write auto or -1 to fit" if auto else ""))
        return value
    text = value.strip()
    if auto and (text == "-1" or text.lower() == "auto"):
        return AUTO
    match = _HUMAN_RE.fullmatch(text)
    if match:
        number, suffix = match.groups()
        if suffix in _DECIMAL:
            return int(float(number) * _DECIMAL[suffix])
        if "." in number:
            raise FlagError(
                f"'{name}': decimals are not allowed with binary suffixes like {suffix} ({text!r}); "
                f"did you mean {number}{suffix.lower()}?"
            )
        return int(number) * _BINARY[suffix]
    try:
        parsed = int(text)
    except ValueError as exc:
        raise FlagError(
            f"'{name}' must be an integer such as 32768, 32k or 32K" + (" (or auto)" if auto else "")
            + f", not {value!r}"
        ) from exc
    if parsed < 0:
        raise FlagError(f"'{name}' must not be negative ({parsed})")
    return parsed


@dataclass(frozen=True)
class VllmCatalogue(Catalogue):
    """A vLLM release's flags: the shared argparse rules plus vLLM's value types."""

    def _coerce_one(self, flag: Flag, value: Any) -> Any:
        if flag.type in (HUMAN_INT, HUMAN_INT_OR_AUTO):
            if value is None:
                raise FlagError(f"'{flag.name[2:]}' needs a value (remove the key to use vLLM's default)")
            return human_readable_int(flag.name[2:], value, auto=flag.type == HUMAN_INT_OR_AUTO)
        if flag.type == "json" and isinstance(value, str) and value in ("", "None"):
            return None  # vLLM's optional_type: an empty or "None" value unsets a config
        return super()._coerce_one(flag, value)

    def config_file_value(self, flag: Flag, value: Any) -> Any:
        """vLLM's load_config_file (vllm/utils/argparse_utils.py, 0.32.0) turns `KEY: false` into `--no-KEY` only
        when the parser it runs in has that option, and it runs in the top-level `vllm` parser, which has none of
        `serve`'s: the value is dropped and vLLM's default applies (measured on the real 0.32.0 parser). Refused,
        since the file says the opposite of what runs."""
        if flag.boolean_optional and value is False:
            raise FlagError(
                f"'{flag.name[2:]}: false' in a --config file is dropped by vLLM {self.version} (its config loader "
                f"finds no --no-{flag.name[2:]} option), so vLLM's default applies; pass --no-{flag.name[2:]} on "
                "the command line instead"
            )
        return super().config_file_value(flag, value)

    def argv(self, flag: Flag, value: Any) -> list[str]:
        if flag.type == HUMAN_INT_OR_AUTO and value == AUTO:
            return [flag.name, "auto"]
        return super().argv(flag, value)


def catalogue_versions() -> list[str]:
    """vLLM versions that ship a catalogue, oldest first."""
    return catalogued_versions("vllm")


@cache
def _load(version: str) -> VllmCatalogue:
    path = profile_path("vllm", f"flags-{version}.json")
    data = json.loads(path.read_text(encoding="utf-8"))
    if data.get("schema") != CATALOGUE_SCHEMA:
        raise InputError(f"{path}: not a kvcheck vLLM flag catalogue (schema {data.get('schema')!r})")
    removed = removed_from_json(data)
    return VllmCatalogue(
        version=str(data["vllm_version"]),
        flags=tuple(flag_from_json(item) for item in data["flags"]),
        removed=removed,
        allow_abbrev=bool(data.get("allow_abbrev", True)),
        label="vLLM",
        reserved=RESERVED_FLAGS,
    )


def pick_vllm_catalogue(version: str, available: list[str]) -> tuple[str, str | None]:
    """Which catalogued release reads `version`'s arguments, plus a note when another release stands in.

    The shared rules (`kvcheck.engines.flags.pick_catalogue`: a release's own catalogue, or that of its
    post or local build such as `0.8.5.post1` / `0.32.0+cpu`), then vLLM's: a patch release whose parser
    equals the previous catalogued patch of its line has no file and is listed in that catalogue's
    `same_parser_releases` (exact, no note); any other uncatalogued patch of a catalogued minor line is
    read with the nearest catalogue of that line (at or below it, else the line's oldest), with a note;
    only a line without a catalogue falls back to the nearest older line.
    """
    chosen, note = pick_catalogue(version, available, label="vLLM", example="0.32.0")
    if note is None:
        return chosen, None
    wanted = Version(version)
    for catalogued, same in same_parser_releases().items():
        if any(Version(v) == wanted for v in same):
            return catalogued, None  # a patch with the same parser as a catalogued one: exact
    line = [v for v in available if Version(v).release[:2] == wanted.release[:2]]
    if not line:
        return chosen, note
    below = [v for v in line if Version(v) <= wanted]
    stand_in = below[-1] if below else line[0]
    return stand_in, (
        f"no flag catalogue for vLLM {version}; arguments were checked against {stand_in}, the catalogued "
        f"release of the same {wanted.major}.{wanted.minor} line (a flag added or removed between the two is "
        "judged as in " + stand_in + ")"
    )


@cache
def same_parser_releases() -> dict[str, tuple[str, ...]]:
    """Catalogued release -> the later patches of its line whose parser is the same (they have no file)."""
    found = {}
    for version in catalogue_versions():
        path = profile_path("vllm", f"flags-{version}.json")
        same = json.loads(path.read_text(encoding="utf-8")).get("same_parser_releases") or []
        if same:
            found[version] = tuple(str(v) for v in same)
    return found


def load_catalogue(version: str) -> tuple[VllmCatalogue, str | None]:
    """The catalogue for `version`, plus a note when another release's catalogue stands in
    (`pick_vllm_catalogue` says which)."""
    chosen, note = pick_vllm_catalogue(version, catalogue_versions())
    return _load(chosen), note
