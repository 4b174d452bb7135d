"""An engine's command-line flags as its argparse declares them: lookup, typing and rendering.

Engine-neutral: each engine ships catalogues of its own releases (SGLang's in profiles/sglang/) and
builds `Catalogue` values from them. Lookup mirrors argparse: `-` and `_` are interchangeable in
manifests, a leading `--` is allowed, aliases resolve to their flag, and any unique prefix of a long
flag is accepted (allow_abbrev).
"""

from __future__ import annotations

import difflib
import json
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from typing import Any

from packaging.version import InvalidVersion, Version

from kvcheck.errors import InputError
from kvcheck.io.jsontext import JsonRejected
from kvcheck.io.jsontext import loads as json_loads
from kvcheck.profiles import profile_path

# Flag types whose single command-line token is JSON text (SGLang parses it with json/orjson).
JSON_TYPES = frozenset({"json", "json_list_type", "parse_cuda_graph_config_arg"})


class FlagError(ValueError):
    """A manifest argument that the engine's argparse would reject (or that kvcheck cannot check)."""


# The other engine's name for a flag, as a manifest of one engine may carry it (docs/import.md names both
# engines' canonical flags): engine label -> {the other engine's name: (this engine's flag, how they differ)}.
# Only settings that mean the same, or nearly, in both; string similarity cannot find these (`tp-size` is
# closest to vLLM's `ubatch-size`). SGLang takes `tensor-parallel-size` itself (an alias of --tp-size).
_FRACTIONS_DIFFER = ("the meanings differ: SGLang's mem-fraction-static is the share of the whole GPU for the weights "
                     "and the KV pool, with activations and CUDA graphs outside it, while vLLM's "
                     "gpu-memory-utilization budget holds all of them, so the same number gives another pool")
OTHER_ENGINE_NAMES: dict[str, dict[str, tuple[str, str]]] = {
    "vLLM": {
        "tp-size": ("tensor-parallel-size", ""),
        "mem-fraction-static": ("gpu-memory-utilization", _FRACTIONS_DIFFER),
        "context-length": ("max-model-len", ""),
    },
    "SGLang": {
        "gpu-memory-utilization": ("mem-fraction-static", _FRACTIONS_DIFFER),
        "max-model-len": ("context-length", ""),
    },
}
OTHER_ENGINES = {"vLLM": "SGLang", "SGLang": "vLLM"}


@dataclass(frozen=True)
class Flag:
    """One engine server flag as argparse declares it."""

    name: str  # "--tp-size"
    field: str | None
    aliases: tuple[str, ...]
    type: str
    nargs: str | int | None
    store_true: bool
    action: str | None
    default: Any
    choices: tuple[Any, ...] | None
    deprecated: bool
    # what the engine's config class takes beyond argparse's type (vLLM: pydantic's gt/ge/lt/le and enum values of
    # the field the flag sets, with that field's name in "config"); None when it takes every value of the type
    # (a tuple of (key, value) pairs, so a Flag stays hashable)
    bounds: tuple[tuple[str, Any], ...] | None = None
    # a JSON flag whose value becomes a config class that takes only its own fields (vLLM's @config dataclasses):
    # (the class's name, its field names); None when any key is taken
    config_keys: tuple[str, tuple[str, ...]] | None = None

    @property
    def key(self) -> str:
        """The field name under which kvcheck stores the value (underscores)."""
        return self.field or self.name[2:].replace("-", "_")

    @property
    def boolean_optional(self) -> bool:
        return self.action == "BooleanOptionalAction"


@dataclass(frozen=True)
class RemovedFlag:
    flag: str
    last_version: str
    replacement: str | None


@dataclass(frozen=True)
class Catalogue:
    """The flags of one engine release, as its argparse declares them."""

    version: str
    flags: tuple[Flag, ...]
    removed: Mapping[str, RemovedFlag]
    allow_abbrev: bool = True
    label: str = "the engine"  # the engine's name in messages ("SGLang")
    reserved: Mapping[str, str] = field(default_factory=dict)  # flags a manifest must not carry -> why
    _names: dict[str, Flag] = field(init=False, repr=False, compare=False)
    _extra_option_strings: frozenset[str] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        names: dict[str, Flag] = {}
        for flag in self.flags:
            names[flag.name] = flag
            for alias in flag.aliases:
                names[alias] = flag
        object.__setattr__(self, "_names", names)
        extra = {"--help"} | {"--no-" + f.name[2:] for f in self.flags if f.boolean_optional}
        object.__setattr__(self, "_extra_option_strings", frozenset(extra))

    def resolve(self, key: str) -> Flag:
        """The flag a manifest key names, or FlagError with the engine's verdict and a suggestion."""
        norm = "--" + key.strip().lstrip("-").replace("_", "-")
        names = self._names
        bare = norm[2:]
        reserved = names.get(norm)
        for name in (bare, reserved.name[2:] if reserved else None):
            if name is not None and name in self.reserved:
                raise FlagError(f"'{bare}' cannot be set in args: {self.reserved[name]}")
        if norm in names:
            return names[norm]
        removed = self.removed.get(norm)
        # argparse also counts the --no-X forms and -h/--help when it matches prefixes.
        option_strings = set(names) | self._extra_option_strings
        prefix_matches = sorted(n for n in option_strings if n.startswith(norm)) if self.allow_abbrev else []
        if removed is not None:
            text = f"flag '{norm}' was removed in {self.label} {self.version} (last in {removed.last_version})"
            if removed.replacement:
                text += f"; use '{removed.replacement}'"
            if len(prefix_matches) > 1:
                text += f" (as a prefix it is ambiguous: {', '.join(prefix_matches)}; argparse exits 2)"
            raise FlagError(text)
        if len(prefix_matches) == 1 and prefix_matches[0] in names:
            return names[prefix_matches[0]]
        if len(prefix_matches) == 1:
            raise FlagError(f"'{norm}' abbreviates '{prefix_matches[0]}', which a manifest cannot set")
        if len(prefix_matches) > 1:
            shown = ", ".join(prefix_matches[:6]) + (", ..." if len(prefix_matches) > 6 else "")
            raise FlagError(
                f"'{norm}' is an ambiguous abbreviation in {self.label} {self.version} (matches {shown}); "
                "argparse exits 2"
            )
        text = f"unknown {self.label} flag '{bare}' ({self.label} {self.version})"
        other = OTHER_ENGINE_NAMES.get(self.label, {}).get(bare)
        if other is not None and "--" + other[0] in names:
            engine, note = OTHER_ENGINES[self.label], other[1]
            raise FlagError(f"{text} (did you mean '{other[0]}'? '{bare}' is {engine}'s name for it"
                            + (f"; {note}" if note else "") + ")")
        close = difflib.get_close_matches(norm, list(names), n=1, cutoff=0.6)
        if close:
            text += f" (did you mean '{close[0][2:]}'?)"
        raise FlagError(text)

    def dotted_keys(self, flag: Flag) -> bool:
        """Whether the engine's command line takes `--FLAG.KEY VALUE`, one key inside the flag's JSON value
        (vLLM's FlexibleArgumentParser); none by default: argparse has no such option and exits 2."""
        return False

    def no_dotted_keys(self, flag: Flag) -> str:
        """Why `flag` takes no dotted key, in the engine's terms (dotted_keys is False)."""
        whole = (f"; write the whole value, {flag.name[2:]}: {{KEY: ...}}"
                 if flag.type in JSON_TYPES or _takes_json_text(flag) else "")
        return (f"{self.label} {self.version} takes no dotted keys: its argparse has no '{flag.name}.KEY' option "
                f"and exits 2 on it{whole}")

    def config_file_value(self, flag: Flag, value: Any) -> Any:
        """A `--config` file's value for `flag` as the engine's loader passes it on (the engine may drop or
        refuse what its command line would take), typed; FlagError when the engine would not apply it."""
        return self.coerce(flag, value)

    def coerce(self, flag: Flag, value: Any) -> Any:
        """The typed value argparse would produce, or FlagError."""
        if flag.store_true or flag.boolean_optional or flag.nargs == 0:
            if not isinstance(value, bool):
                raise FlagError(f"'{flag.name[2:]}' is a switch: write true or false, not {value!r}")
            if flag.store_true and flag.choices is None and value is False and flag.default is True:
                raise FlagError(f"'{flag.name[2:]}' cannot be turned off from the command line")
            return value
        if flag.nargs in ("+", "*") or isinstance(flag.nargs, int):
            items = value if isinstance(value, list) else [value]
            if flag.nargs == "+" and not items:
                raise FlagError(f"'{flag.name[2:]}' needs at least one value")
            if isinstance(flag.nargs, int) and len(items) != flag.nargs:
                raise FlagError(f"'{flag.name[2:]}' takes exactly {flag.nargs} values")
            return [self._coerce_one(flag, item) for item in items]
        if isinstance(value, list):
            raise FlagError(f"'{flag.name[2:]}' takes one value, not a list")
        return self._coerce_one(flag, value)

    def _coerce_one(self, flag: Flag, value: Any) -> Any:
        name = flag.name[2:]
        if value is None:
            raise FlagError(f"'{name}' needs a value (remove the key to use {self.label}'s default)")
        kind = flag.type
        if kind == "int":
            if isinstance(value, bool) or not isinstance(value, int):
                raise FlagError(f"'{name}' must be an integer, not {value!r}")
            out: Any = bounded_int(name, value)
        elif kind == "float":
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise FlagError(f"'{name}' must be a number, not {value!r}")
            out = _finite(name, value)
        elif kind == "human_readable_int":
            out = bounded_int(name, parse_human_readable_int(name, value))
        elif kind in JSON_TYPES:
            out = _json_value(name, kind, value)
        elif kind == "bool":
            if not isinstance(value, bool):
                raise FlagError(f"'{name}' must be true or false, not {value!r}")
            out = value
        else:
            out = _text_value(flag, name, value)
        if flag.choices is not None:
            _check_choice(name, flag.choices, out)
        return out

    def argv(self, flag: Flag, value: Any) -> list[str]:
        """The command-line tokens for one validated value."""
        if flag.store_true or flag.nargs == 0:
            return [flag.name] if value else []
        if flag.boolean_optional:
            return [flag.name] if value else ["--no-" + flag.name[2:]]
        if isinstance(value, list) and flag.type not in JSON_TYPES and not _takes_json_text(flag):
            return [flag.name, *(_render(v) for v in value)]
        if (flag.type in JSON_TYPES or _takes_json_text(flag)) and not isinstance(value, str):
            return [flag.name, json.dumps(value, separators=(",", ":"))]
        return [flag.name, _render(value)]


def merge_dotted(into: dict[str, Any], keys: Sequence[str], value: Any) -> None:
    """One dotted key's value into the merged mapping, as vLLM's recursive_dict_update (vllm/utils/argparse_utils.py):
    two lists at one key are concatenated, two mappings merged, anything else replaced."""
    for key in keys[:-1]:
        nested = into.get(key)
        if not isinstance(nested, dict):
            nested = into[key] = {}
        into = nested
    old = into.get(keys[-1])
    if isinstance(old, list) and isinstance(value, list):
        into[keys[-1]] = [*old, *value]
    elif isinstance(old, dict) and isinstance(value, dict):
        for key, item in value.items():
            merge_dotted(old, [key], item)
    else:
        into[keys[-1]] = value


def _takes_json_text(flag: Flag) -> bool:
    """Text flags whose value SGLang parses as JSON (--json-model-override-args and the like)."""
    return flag.type == "str" and flag.nargs is None and ("json" in flag.name or flag.default == "{}")


def _render(value: Any) -> str:
    if isinstance(value, float) and value.is_integer() is False:
        return repr(value)
    return str(value)


_HUMAN_INT = re.compile(r"(\d+(?:\.\d+)?)(Ki|Mi|Gi|Ti|k|M|G|T)")
_SI = {"k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12}
_IEC = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40}


def parse_human_readable_int(name: str, value: Any) -> int:
    """SGLang's human_readable_int: 1k=1000, 1Mi=1048576, case-sensitive, decimals only for SI."""
    if isinstance(value, bool):
        raise FlagError(f"'{name}' must be an integer such as 131072, 128k or 1Mi, not {value!r}")
    if isinstance(value, int):
        return value
    if not isinstance(value, str):
        raise FlagError(f"'{name}' must be an integer such as 131072, 128k or 1Mi, not {value!r}")
    text = value.strip()
    match = _HUMAN_INT.fullmatch(text)
    if match:
        number, suffix = match.groups()
        if suffix in _IEC:
            if "." in number:
                raise FlagError(f"'{name}': decimals are not allowed with IEC suffixes ({text!r})")
            return int(number) * _IEC[suffix]
        try:
            return int(Decimal(number) * _SI[suffix])
        except InvalidOperation as exc:  # pragma: no cover - the regex admits only decimals
            raise FlagError(f"'{name}': invalid number {text!r}") from exc
    try:
        return int(text)
    except ValueError as exc:
        raise FlagError(
            f"'{name}' must be an integer such as 131072, 128k or 1Mi (suffixes are case-sensitive), "
            f"not {value!r}"
        ) from exc


def _text_value(flag: Flag, name: str, value: Any) -> Any:
    """str, nullable_str and parser functions that take one token: argparse sees text."""
    if isinstance(value, dict | list) and _takes_json_text(flag):
        return value  # rendered as JSON text, which SGLang parses itself
    if isinstance(value, dict | list) or isinstance(value, bool):
        raise FlagError(f"'{name}' takes a single text value, not {value!r}")
    if isinstance(value, str) and flag.default == "{}" and _takes_json_text(flag):
        json_text(name, value)  # SGLang json.loads it at startup (--json-model-override-args): checked, kept as written
    return str(value) if not isinstance(value, str) else value


def _json_value(name: str, kind: str, value: Any) -> Any:
    """A JSON-typed flag's value: a mapping or list as given, a string parsed as JSON."""
    if kind == "json_list_type" and not isinstance(value, list | str):
        raise FlagError(f"'{name}' must be a list (or a JSON list string), not {value!r}")
    if isinstance(value, dict | list):
        return value
    if isinstance(value, str):
        return json_text(name, value)
    raise FlagError(f"'{name}' must be a JSON object or string, not {value!r}")


def json_text(name: str, text: str, refusal: str = "must be JSON") -> Any:
    """A flag's JSON text parsed within kvcheck's JSON bounds; FlagError naming the flag when it is not
    JSON (`refusal`: the decoder's message) or is JSON kvcheck will not read (5,000 nested brackets)."""
    try:
        return json_loads(text)
    except json.JSONDecodeError as exc:
        raise FlagError(f"'{name}' {refusal}: {exc.msg}") from exc
    except JsonRejected as exc:
        raise FlagError(f"'{name}' cannot be read safely: {exc}") from exc


def _check_choice(name: str, choices: Sequence[Any], value: Any) -> None:
    """A value outside the flag's choices is a FlagError that suggests the closest ones."""
    allowed = [str(c) for c in choices]
    if str(value) in allowed:
        return
    close = [c for c in allowed if c.startswith(str(value))] or difflib.get_close_matches(
        str(value), allowed, n=1, cutoff=0.5
    )
    text = f"'{name}' must be one of {', '.join(allowed)}; got {value!r}"
    if len(close) == 1:
        text += f" (did you mean '{close[0]}'?)"
    elif close:
        text += f" (did you mean one of {', '.join(repr(c) for c in close)}?)"
    raise FlagError(text)


# -- catalogue files, shared by every engine (profiles/<engine>/flags-<version>.json) --------------


def flag_from_json(item: Mapping[str, Any]) -> Flag:
    """One flag of a catalogue file."""
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
        bounds=tuple((k, tuple(v) if isinstance(v, list) else v) for k, v in item["bounds"].items())
        if isinstance(item.get("bounds"), Mapping) else None,
        config_keys=(str(item["config_keys"]["config"]), tuple(item["config_keys"]["keys"]))
        if isinstance(item.get("config_keys"), Mapping) else None,
    )


def removed_from_json(data: Mapping[str, Any]) -> dict[str, RemovedFlag]:
    """A catalogue file's removed flags, by name."""
    return {
        r["flag"]: RemovedFlag(r["flag"], r["last_version"], r.get("replacement")) for r in data.get("removed", [])
    }


def catalogued_versions(engine_folder: str) -> list[str]:
    """The versions with a catalogue file under profiles/<engine_folder>/, oldest first."""
    versions = []
    for path in profile_path(engine_folder).glob("flags-*.json"):
        text = path.stem.removeprefix("flags-")
        try:
            Version(text)
        except InvalidVersion:
            continue
        versions.append(text)
    return sorted(versions, key=Version)


def pick_catalogue(version: str, available: Sequence[str], *, label: str, example: str) -> tuple[str, str | None]:
    """Which catalogued release reads `version`'s arguments, plus a note when another release stands in.

    A post or local build of a catalogued release (`0.5.23.post1`, `0.5.23+cu129`) uses the newest
    catalogue of the same release at or below it, with no note: a post release whose parser changed has
    its own catalogue, and one that did not change has none because the release's catalogue is exact
    for it. Any other uncatalogued version gets the nearest older catalogued release; a version older
    than every catalogue gets the oldest one. Both come with a note, because flags added or removed in
    between may then be judged wrongly.
    """
    try:
        wanted = Version(str(version))
    except InvalidVersion as exc:
        raise InputError(f"'{version}' is not a version number (write it like \"{example}\")") from exc
    if not available:
        raise InputError(f"no {label} flag catalogue is installed; reinstall kvcheck")
    parsed = {v: Version(v) for v in available}
    exact = [v for v in available if parsed[v] == wanted]
    if exact:
        return exact[0], None
    same_release = [
        v for v in available if parsed[v].release == wanted.release and not wanted.is_prerelease and parsed[v] < wanted
    ]
    if same_release:
        return same_release[-1], None
    older = [v for v in available if parsed[v] < wanted]
    if not older:
        chosen = available[0]
        return chosen, (
            f"{label} {version} is older than every flag catalogue kvcheck ships; arguments were "
            f"checked against {chosen}, the oldest, so a flag that {version} accepted and {chosen} "
            "does not is reported as unknown"
        )
    return older[-1], (
        f"no flag catalogue for {label} {version}; arguments were checked against {older[-1]}, "
        "the nearest older release"
    )


# The largest magnitude a number flag may have, integer or float: beyond any byte, token or GiB count an engine
# reads, and small enough that an engine's own arithmetic on it stays finite (vLLM's int(cpu_offload_gb * 1024**3)
# overflows a float from about 1.7e299 GiB, base.py:174 in 0.32.0) and that kvcheck's own (float() of an integer,
# SGLang's capture sizes) stays cheap.
FLOAT_FLAG_LIMIT = 1e18
INT_FLAG_LIMIT = 10**18


def _shown(value: int | float) -> str:
    """A flag's value for a message: an integer too long to read is told by its number of digits."""
    if isinstance(value, float) or abs(value) < 10**20:
        return repr(value)
    if value.bit_length() > 14_000:  # str() refuses integers of more than 4,300 digits
        return ("a negative integer" if value < 0 else "an integer") + " of over 4,000 digits"
    return ("a negative " if value < 0 else "a ") + f"{len(str(abs(value)))}-digit integer"


def _out_of_range(name: str, kind: str, value: int | float) -> FlagError:
    if isinstance(value, float) and math.isnan(value):
        return FlagError(f"'{name}' must be a finite number, not nan")
    side = f"no smaller than {-FLOAT_FLAG_LIMIT:g}" if value < 0 else f"no larger than {FLOAT_FLAG_LIMIT:g}"
    return FlagError(f"'{name}' must be {kind} {side}, not {_shown(value)}")


def bounded_int(name: str, value: int) -> int:
    """An integer flag's value, or FlagError where its magnitude is above 1e18: a 400-digit one was an
    OverflowError in the sizing's float arithmetic, and SGLang's capture sizes counted up to it."""
    if abs(value) > INT_FLAG_LIMIT:
        raise _out_of_range(name, "an integer", value)
    return value


def _finite(name: str, value: int | float) -> float:
    """A number flag's value as a float: bad input (FlagError) where it is infinite, not a number, or too large
    for a float or for the engine's arithmetic, rather than a traceback further on."""
    if isinstance(value, int) and abs(value) > INT_FLAG_LIMIT:
        raise _out_of_range(name, "a finite number", value)
    out = float(value)
    if not math.isfinite(out) or abs(out) > FLOAT_FLAG_LIMIT:
        raise _out_of_range(name, "a finite number", value)
    return out
