"""vLLM's `vllm serve` flags per release, read from the catalogues in profiles/vllm/.

The catalogues are generated from each release's own argparse by tools/gen_vllm_catalogue.py. Lookup
is the shared argparse lookup (kvcheck.engines.flags), with vLLM's own value types: its
human_readable_int (`32k` = 32,000, `32K` = 32,768, decimals only with lower-case suffixes) and
`--max-model-len auto` (or -1: fit the window to the pool).
"""

from __future__ import annotations

import difflib
import json
import math
import re
from dataclasses import dataclass
from functools import cache
from typing import Any

from packaging.version import Version

from kvcheck.engines.flags import (
    FLOAT_FLAG_LIMIT,
    Catalogue,
    Flag,
    FlagError,
    bounded_int,
    catalogued_versions,
    flag_from_json,
    json_text,
    pick_catalogue,
    removed_from_json,
)
from kvcheck.engines.vllm import compilation, transfer
from kvcheck.errors import InputError
from kvcheck.io.jsontext import JsonRejected
from kvcheck.io.jsontext import loads as json_loads
from kvcheck.profiles import profile_path

CATALOGUE_SCHEMA = "kvcheck/vllm-flags/v1"
HUMAN_INT = "vllm_human_readable_int"
HUMAN_INT_OR_AUTO = "vllm_human_readable_int_or_auto"
LEVEL_OR_JSON = "vllm_level_or_json"  # CompilationConfig.from_cli, 0.9.0-0.9.1: "0"-"3" or JSON
LEVEL_OR_LITERAL = "vllm_level_or_literal"  # CompilationConfig.from_cli, 0.8.x: "0"-"3" or a Python literal
JSON_OBJECT_OR_TEXT = "vllm_json_object_or_str"  # union_dict_and_str (--hf-overrides): `{...}` is JSON, else text
AUTO = -1  # what vLLM stores for `--max-model-len auto`
DOTTED_KEYS_FROM = Version("0.9.0")  # FlexibleArgumentParser merges `--flag.key value` into the flag's JSON
# the types whose parser reads the JSON object the dotted keys are merged into (json.loads, from_cli's JSON,
# union_dict_and_str's `{...}`); another flag given one is exit 2 ("Value {...} cannot be converted")
DOTTED_TYPES = frozenset({"json", LEVEL_OR_JSON, JSON_OBJECT_OR_TEXT})

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
            scaled = float(number) * _DECIMAL[suffix]  # vLLM's own float arithmetic; a 400-digit number is inf
            if not math.isfinite(scaled):
                shown = repr(text) if len(text) <= 40 else f"a {len(number)}-character number with the suffix {suffix}"
                raise FlagError(f"'{name}' must be an integer no larger than {FLOAT_FLAG_LIMIT:g}, not {shown}")
            return int(scaled)
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


_BOUND_TEXT = {"gt": ">", "ge": ">=", "lt": "<", "le": "<="}
_BOUND_TEST = {"gt": lambda v, b: v > b, "ge": lambda v, b: v >= b, "lt": lambda v, b: v < b,
               "le": lambda v, b: v <= b}
MAX_LITERAL_CHARS = 64 * 1024  # a --compilation-config literal; ast.literal_eval is not run on more


def _python_literal(value: Any) -> str:
    """A value as a Python literal (`True`, `None`, `{'level': 3}`), what ast.literal_eval reads back."""
    if isinstance(value, dict):
        return "{" + ", ".join(f"{_python_literal(k)}: {_python_literal(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ", ".join(_python_literal(v) for v in value) + "]"
    return repr(value)


@dataclass(frozen=True)
class VllmCatalogue(Catalogue):
    """A vLLM release's flags: the shared argparse rules plus vLLM's value types, and the bounds its config
    classes put on the fields the flags set (checked when `vllm serve` builds its config, before any model
    loads: a value outside them stops the start)."""

    def _coerce_one(self, flag: Flag, value: Any) -> Any:
        if flag.type in (HUMAN_INT, HUMAN_INT_OR_AUTO):
            if value is None:
                raise FlagError(f"'{flag.name[2:]}' needs a value (remove the key to use vLLM's default)")
            out = bounded_int(flag.name[2:], human_readable_int(flag.name[2:], value, auto=flag.type == HUMAN_INT_OR_AUTO))
        elif flag.type == "json" and isinstance(value, str) and value in ("", "None"):
            return None  # vLLM's optional_type: an empty or "None" value unsets a config
        elif flag.type in (LEVEL_OR_JSON, LEVEL_OR_LITERAL):
            config = self._level_or_config(flag, value)
            self._check_keys(flag, config)
            return config
        elif flag.type == JSON_OBJECT_OR_TEXT:
            out = self._object_or_text(flag, value)
        elif flag.type == "json" and flag.name == "--compilation-config" and (
                isinstance(value, int | float) or (isinstance(value, str) and value.strip().isdigit())):
            raise FlagError(self._no_bare_level(value))
        else:
            out = super()._coerce_one(flag, value)
        self._check_bounds(flag, out)
        self._check_keys(flag, out)
        return out

    def dotted_keys(self, flag: Flag) -> bool:
        """vLLM's FlexibleArgumentParser (vllm/utils/argparse_utils.py, from 0.9.0) turns every `--FLAG.KEY VALUE`
        into one `--FLAG JSON` appended after the other arguments; the flag's own parser then reads that JSON, which
        only the JSON-typed flags take."""
        return Version(self.version) >= DOTTED_KEYS_FROM and flag.type in DOTTED_TYPES

    def no_dotted_keys(self, flag: Flag) -> str:
        if Version(self.version) < DOTTED_KEYS_FROM:
            return (f"vLLM {self.version} has no dotted keys (they came in {DOTTED_KEYS_FROM}): argparse exits 2 on "
                    "it; pass the whole JSON value")
        return f"'{flag.name[2:]}' is not a JSON config flag, so it takes no dotted keys (vLLM exits with status 2)"

    def _check_keys(self, flag: Flag, value: Any) -> None:
        """A JSON config's keys against its class's fields (vLLM's configs forbid other keys, extra="forbid", so
        its parser exits 2 on `{"cudagraph_mod": ...}`), then the values vLLM's validators refuse."""
        if not isinstance(value, dict):
            return
        if flag.config_keys is not None:
            self._check_known_keys(flag, value)
        if flag.name == "--kv-transfer-config":  # its values are checked in every release, listed keys or not
            problem = transfer.value_problem(value, flag.config_keys[1] if flag.config_keys else None)
            if problem is not None:
                raise FlagError(f"'{flag.name[2:]}': {problem}; vLLM {self.version} refuses it before any model "
                                "loads")

    def _check_known_keys(self, flag: Flag, value: dict[str, Any]) -> None:
        assert flag.config_keys is not None
        config, keys = flag.config_keys
        for key in value:
            if key in keys:
                continue
            close = difflib.get_close_matches(str(key), keys, n=1, cutoff=0.6)
            hint = f" (did you mean '{close[0]}'?)" if close else ""
            raise FlagError(f"'{flag.name[2:]}': unknown key '{key}' for vLLM {self.version}'s {config}{hint}; "
                            "its parser exits 2 on it")
        if flag.name == "--compilation-config":
            problem = compilation.value_problem(value, keys)
            if problem is not None:
                raise FlagError(f"'{flag.name[2:]}': {problem} (vLLM {self.version}'s {config} refuses it before "
                                "any model loads)")

    def _check_bounds(self, flag: Flag, value: Any) -> None:
        """The bounds of the config field behind `flag` (pydantic's Field(gt=0, le=1), an enum's values)."""
        if not flag.bounds or value is None:
            return
        bounds = dict(flag.bounds)
        name, where = flag.name[2:], f"vLLM {self.version}'s {bounds.get('config', 'config')}"
        values = bounds.get("values")
        if values is not None:
            allowed = [str(v) for v in values]
            typed = value
            if all(isinstance(v, int) for v in values) and isinstance(value, str):
                try:
                    typed = int(value.strip())  # pydantic's lax mode reads "3" (and " 3") as the int 3
                except ValueError:
                    typed = value
            if typed not in values:
                raise FlagError(f"'{name}' must be one of {', '.join(allowed)} ({where}; vLLM refuses to start "
                                f"otherwise); got {value!r}")
        if not isinstance(value, int | float) or isinstance(value, bool):
            return
        failed = [f"{_BOUND_TEXT[k]} {bounds[k]}" for k in _BOUND_TEXT if k in bounds
                  and not _BOUND_TEST[k](value, bounds[k])]
        if failed:
            wanted = " and ".join(f"{_BOUND_TEXT[k]} {bounds[k]}" for k in _BOUND_TEXT if k in bounds)
            raise FlagError(f"'{name}' must be {wanted} ({where}; vLLM refuses to start otherwise); got {value!r}")

    def _o_form(self) -> str:
        """How `-O3` is written in a manifest for this release (what its FlexibleArgumentParser makes of it)."""
        if any(flag.name == "--optimization-level" for flag in self.flags):
            return "optimization-level: 3"
        return f"compilation-config: {{{o_flag_key(self.version)}: 3}}"

    def _no_bare_level(self, value: Any) -> str:
        return (f"'compilation-config' takes a JSON object in vLLM {self.version} (its parser refuses "
                f"--compilation-config {value}, exit 2); the optimization level -O{value} is written "
                f"`{self._o_form().replace('3', str(value))}`")

    def _level_or_config(self, flag: Flag, value: Any) -> dict[str, Any]:
        """CompilationConfig.from_cli of 0.8.0-0.9.1: a level "0"-"3", else the config as JSON (0.9.0-0.9.1)
        or as a Python literal (0.8.x). A level is kept as {"level": N}, what from_cli builds from it."""
        name = flag.name[2:]
        if isinstance(value, bool) or value is None:
            raise FlagError(f"'{name}' takes a level 0, 1, 2 or 3 or a config mapping, not {value!r}")
        if isinstance(value, int) or (isinstance(value, str) and value in ("0", "1", "2", "3")):
            if int(value) not in (0, 1, 2, 3):
                raise FlagError(f"'{name}': vLLM {self.version} takes a level 0, 1, 2 or 3 (or a config mapping), "
                                f"not {value!r}")
            return {"level": int(value)}
        if isinstance(value, dict):
            return value
        if not isinstance(value, str):
            raise FlagError(f"'{name}' takes a level 0, 1, 2 or 3 or a config mapping, not {value!r}")
        if flag.type == LEVEL_OR_JSON:
            parsed = json_text(name, value, f"must be a level 0-3 or JSON (vLLM {self.version})")
        else:
            parsed = _literal(name, self.version, value)
        if not isinstance(parsed, dict):
            raise FlagError(f"'{name}' must be a level 0, 1, 2 or 3 or a mapping (vLLM {self.version}), "
                            f"not {value!r}")
        return parsed

    def _object_or_text(self, flag: Flag, value: Any) -> Any:
        """vLLM's union_dict_and_str (--hf-overrides): text that looks like a JSON object (`{...}`) must be one
        (vLLM's parser exits 2 otherwise); the value is kept as written."""
        if isinstance(value, dict):
            return value
        if isinstance(value, bool) or not isinstance(value, str | int | float):
            raise FlagError(f"'{flag.name[2:]}' takes a mapping or text, not {value!r}")
        text = str(value)
        if not re.match(r"(?s)^\s*{.*}\s*$", text):
            return text
        try:
            json_loads(text)
        except json.JSONDecodeError as exc:
            raise FlagError(f"'{flag.name[2:]}' looks like a JSON object but is not valid JSON ({exc.msg}); vLLM "
                            f"{self.version}'s parser exits 2 on it") from exc
        except JsonRejected as exc:
            raise FlagError(f"'{flag.name[2:]}' cannot be read safely: {exc}") from exc
        return text  # checked, and kept as written (vLLM parses the same text)

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
        if flag.type in (LEVEL_OR_JSON, LEVEL_OR_LITERAL) and isinstance(value, dict):
            if list(value) == ["level"] and value["level"] in (0, 1, 2, 3):
                return [flag.name, str(value["level"])]
            if flag.type == LEVEL_OR_LITERAL:  # ast.literal_eval: True/None, not JSON's true/null
                return [flag.name, _python_literal(value)]
            return [flag.name, json.dumps(value, separators=(",", ":"))]
        if flag.type == JSON_OBJECT_OR_TEXT and isinstance(value, dict):
            return [flag.name, json.dumps(value, separators=(",", ":"))]
        return super().argv(flag, value)


def _literal(name: str, version: str, text: str) -> Any:
    """ast.literal_eval, as CompilationConfig.from_cli of 0.8.x reads its value (bounded; through the
    AST lock, kvcheck/io/pyast.py)."""
    from kvcheck.io.pyast import literal_eval

    if len(text) > MAX_LITERAL_CHARS:
        raise FlagError(f"'{name}': {len(text):,} characters is longer than kvcheck reads ({MAX_LITERAL_CHARS:,})")
    try:
        return literal_eval(text)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError) as exc:
        raise FlagError(f"'{name}' must be a level 0-3 or a Python literal mapping (vLLM {version} reads it with "
                        f"ast.literal_eval, so JSON's true/false/null are refused; write True/False/None): "
                        f"{type(exc).__name__}") from None


def o_flag_key(version: str) -> str:
    """The compilation-config key `-O3` sets in releases without --optimization-level (their
    FlexibleArgumentParser, vllm/utils.py and vllm/utils/argparse_utils.py): `-O.level=N` from 0.9.2,
    `-O.mode=N` from 0.11.1 (0.12.0 added --optimization-level); before 0.9.2 argparse's own `-O` alias passes
    N to CompilationConfig.from_cli, which reads it as the level."""
    return "mode" if Version(version) >= Version("0.11.1") else "level"


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
