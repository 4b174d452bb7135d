"""A `vllm serve` command line read as vLLM's FlexibleArgumentParser reads it.

vLLM rewrites the command line before argparse sees it (vllm/utils/argparse_utils.py, 0.32.0):
underscores in a flag's name become dashes (`--max_model_len`), `-O3` is `--optimization-level 3`,
and dotted keys of JSON config flags are merged into one JSON value
(`--kv-transfer-config.kv_role kv_producer --kv-transfer-config.kv_connector NixlConnector`, list
items with `+`). The model is `vllm serve`'s positional argument (or `--model`, which vLLM moves to
the front). This module applies the same rewrites, then the shared argparse reading
(kvcheck.engines.argv), and maps every index back to the token as written, so a finding points at
the user's own text. Short aliases (`-tp 2`, `-dp`, `-q`) resolve to their long flag.

`--config FILE` stays a flag here: the deployment readers read the file (kvcheck/inputs/deploy), each key
checked with `VllmCatalogue.config_file_value`. vLLM loads it before argparse runs and only when `--config`
and its path are two words, once (`_config_problems`). tests/engines/real/test_vllm_argv_real.py compares
this reading with the real 0.32.0 parser's.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any

from packaging.version import Version

from kvcheck.engines.argv import ArgvProblem, ParsedArgv, ParsedFlag, is_option, parse_argv, typed_value
from kvcheck.engines.flags import Catalogue, Flag, FlagError, merge_dotted
from kvcheck.engines.vllm.catalogue import DOTTED_KEYS_FROM, human_readable_int, o_flag_key
from kvcheck.io.jsontext import MAX_JSON_DEPTH, JsonRejected
from kvcheck.io.jsontext import loads as json_loads

# `python -m vllm.entrypoints.openai.api_server` (the pre-`vllm serve` entry point, still shipped)
_MODULE_RE = re.compile(r"^vllm\.entrypoints\.(?:openai\.)?api_server$")
_UNDERSCORES = re.compile(r"(?<=--)[^.]*")


def launch_index(argv: Sequence[str]) -> int | None:
    """Index of the first server argument after `vllm serve` (its model), `-m vllm.entrypoints.openai.api_server`
    or `-m dynamo.vllm` (NVIDIA Dynamo's worker, which takes vLLM's flags plus its own)."""
    for i, word in enumerate(argv):
        if word.rsplit("/", 1)[-1] == "vllm" and i + 1 < len(argv) and argv[i + 1] == "serve":
            return i + 2
        if word == "-m" and i + 1 < len(argv):
            if _MODULE_RE.match(argv[i + 1]) or argv[i + 1] == "dynamo.vllm":  # NVIDIA Dynamo's vLLM worker
                return i + 2
            if argv[i + 1] == "vllm.entrypoints.cli.main" and i + 2 < len(argv) and argv[i + 2] == "serve":
                return i + 3
    return None


def _dashes(token: str) -> str:
    """`--max_model_len=4k` -> `--max-model-len=4k`; the part after the first `.` keeps its underscores."""
    key, eq, value = token.partition("=")
    return _UNDERSCORES.sub(lambda m: m.group(0).replace("_", "-"), key, count=1) + eq + value


def _dotted_value(text: str) -> Any:
    """A dotted key's value as vLLM reads it: JSON, else a human-readable integer, else the text."""
    try:
        return json_loads(text)
    except json.JSONDecodeError:
        pass
    except JsonRejected as exc:
        raise ValueError(f"cannot be read safely: {exc}") from exc
    try:
        return human_readable_int("", text)
    except ValueError:
        return text


class _Rewritten:
    """The tokens argparse sees after vLLM's rewrites, with the index of the token each came from."""

    def __init__(self, catalogue: Catalogue) -> None:
        self.tokens: list[str] = []
        self.origin: list[int] = []
        # flag -> (index of its first dotted key, spelled, merged value, the indexes of every key's value token)
        self.dotted: dict[str, tuple[int, str, dict[str, Any], list[int]]] = {}
        self.problems: list[ArgvProblem] = []
        self._short = {alias: flag.name for flag in catalogue.flags for alias in flag.aliases
                       if not alias.startswith("--")}

    def add(self, token: str, index: int) -> None:
        self.tokens.append(token)
        self.origin.append(index)

    def long_name(self, spelled: str) -> str:
        return self._short.get(spelled, spelled)


def _rewrite(argv: Sequence[str], start: int, catalogue: Catalogue) -> _Rewritten:  # noqa: C901  (one pass, as vLLM's)
    out = _Rewritten(catalogue)
    skip: set[int] = set()
    for i in range(start, len(argv)):
        if i in skip:
            continue
        token = argv[i]
        if token.startswith("-O") and not token.startswith("-O.") and (token != "-O" or (
                i + 1 < len(argv) and argv[i + 1] in {"0", "1", "2", "3"})):
            token = _o_flag(token, catalogue)
            if token.startswith("--"):  # --optimization-level / --compilation-config, then the level
                out.add(token, i)
                if argv[i] != "-O":
                    out.add(argv[i][3:] if argv[i][2:3] == "=" else argv[i][2:], i)
                continue
        if token.startswith("-") and "." in token.split("=", 1)[0] and is_option(token.split("=", 1)[0]):
            if Version(catalogue.version) < DOTTED_KEYS_FROM:
                out.problems.append(ArgvProblem(i, "value", f"'{token.split('=', 1)[0]}': vLLM {catalogue.version} "
                                                f"has no dotted keys (they came in {DOTTED_KEYS_FROM}): argparse exits "
                                                "2 on it; pass the whole JSON value"))
                if "=" not in token and i + 1 < len(argv) and not is_option(argv[i + 1]):
                    skip.add(i + 1)  # its value: argparse lists both as unrecognized, one problem here
                continue
            key, eq, value = _dashes(token).partition("=") if token.startswith("--") else token.partition("=")
            value_at = i
            if not eq:
                if i + 1 >= len(argv):
                    out.problems.append(ArgvProblem(i, "value", f"'{token}' expects a value"))
                    continue
                value = argv[i + 1]
                value_at = i + 1
                skip.add(i + 1)
            as_list = key.endswith("+")
            base, *keys = key.removesuffix("+").split(".")
            if not keys or not all(keys):
                out.problems.append(ArgvProblem(i, "value", f"'{token}': a dotted key needs a name after each '.'"))
                continue
            if len(keys) >= MAX_JSON_DEPTH:  # the mapping it builds would be JSON past kvcheck's bounds
                out.problems.append(ArgvProblem(i, "value", f"'{token[:80]}...': {len(keys)} nested keys; "
                                                f"kvcheck reads at most {MAX_JSON_DEPTH - 1}"))
                continue
            parsed = json.dumps(value.split(",")) if as_list else None
            item = json.loads(parsed) if parsed is not None else _dotted_value(value)
            name = out.long_name(base)
            first, spelled, merged, values = out.dotted.get(name, (i, token.split("=", 1)[0], {}, []))
            merge_dotted(merged, keys, item)
            out.dotted[name] = (first, spelled, merged, [*values, value_at])
            continue
        if token.startswith("--"):
            out.add(_dashes(token), i)
            continue
        if token.startswith("-") and is_option(token):
            spelled, eq, value = token.partition("=")
            out.add(out.long_name(spelled) + eq + value, i)
            continue
        out.add(token, i)
    return out


def _o_flag(token: str, catalogue: Catalogue) -> str:
    """What the release's FlexibleArgumentParser makes of `-O3`, `-O=3` or `-O` (followed by the level):
    `--optimization-level` (0.12.0 on); `-O.level=3` / `-O.mode=3`, a dotted key of --compilation-config
    (0.9.2-0.11.x, returned as that dotted token); before 0.9.2 argparse's `-O` alias of --compilation-config,
    whose from_cli reads the bare level."""
    if any(flag.name == "--optimization-level" for flag in catalogue.flags):
        return "--optimization-level"
    if Version(catalogue.version) < Version("0.9.2"):
        return "--compilation-config"
    key = o_flag_key(catalogue.version)
    if token == "-O":
        return f"-O.{key}"
    return f"-O.{key}=" + (token[3:] if token[2:3] == "=" else token[2:])


def _config_problems(argv: Sequence[str], start: int) -> list[ArgvProblem]:
    """vLLM loads `--config FILE` before argparse runs, and only in that spelling (`"--config" in args`,
    vllm/utils/argparse_utils.py): `--config=FILE` parses and the file is never read; a second --config
    stops vLLM ("More than one config file specified!")."""
    out = []
    seen = False
    for i in range(start, len(argv)):
        if argv[i].startswith("--config="):
            out.append(ArgvProblem(i, "value", f"'{argv[i]}': vLLM reads a config file only from '--config FILE' "
                                   "(two words); with '=' it parses the flag and never reads the file"))
        elif argv[i] == "--config":
            if seen:
                out.append(ArgvProblem(i, "value", "a second --config: vLLM allows one and stops "
                                       "('More than one config file specified!')"))
            seen = True
    return out


def _unknown_dotted(catalogue: Catalogue, name: str, spelled: str) -> str:
    """vLLM refuses a dotted key of a flag it does not have (exit 2): say so, with the JSON flag meant."""
    import difflib

    json_flags = [flag.name for flag in catalogue.flags if catalogue.dotted_keys(flag)]
    close = difflib.get_close_matches(name, json_flags, n=1, cutoff=0.6)
    hint = f" (did you mean '{close[0][2:]}'?)" if close else ""
    return f"unknown vLLM flag '{name.lstrip('-')}' in '{spelled}' ({catalogue.label} {catalogue.version}){hint}"


def _resolve_flag(catalogue: Catalogue, name: str) -> Flag | None:
    for flag in catalogue.flags:
        if flag.name == name or name in flag.aliases:
            return flag
    return None


def parse_vllm_argv(argv: Sequence[str], catalogue: Catalogue, *, start: int = 0) -> ParsedArgv:
    """Parse argv[start:] (`vllm serve`'s arguments, the model first or not at all) as vLLM would."""
    rewritten = _rewrite(argv, start, catalogue)
    tokens, origin = rewritten.tokens, rewritten.origin
    occurrences: list[ParsedFlag] = []
    first = 0
    model_flag = _resolve_flag(catalogue, "--model")
    if tokens and not is_option(tokens[0]) and model_flag is not None:  # `vllm serve MODEL ...`
        occurrences.append(ParsedFlag("model", "model", tokens[0], origin[0], (tokens[0],), (origin[0],),
                                      tokens[0], model_flag))
        first = 1
    parsed = parse_argv(tokens, catalogue, start=first)

    def back(index: int) -> int:
        return origin[index] if 0 <= index < len(origin) else (origin[-1] if origin else start)

    for occ in parsed.occurrences:
        occurrences.append(ParsedFlag(occ.name, occ.key, argv[back(occ.index)].split("=", 1)[0], back(occ.index),
                                      occ.values, tuple(back(v) for v in occ.value_indexes), occ.value, occ.flag))
    problems = [ArgvProblem(back(p.index), p.kind, p.message) for p in parsed.problems]
    problems += rewritten.problems
    problems += _config_problems(argv, start)
    for name, (index, spelled, merged, value_at) in rewritten.dotted.items():
        flag = _resolve_flag(catalogue, name)
        if flag is None:
            problems.append(ArgvProblem(index, "unknown", _unknown_dotted(catalogue, name, spelled)))
            continue
        if not catalogue.dotted_keys(flag):
            problems.append(ArgvProblem(index, "value", f"'{spelled}': {catalogue.no_dotted_keys(flag)}"))
            continue
        # vLLM appends the merged dict after every other argument: it replaces a JSON value given whole,
        # and its config class judges it as it judges that value (keys, and the values kvcheck sizes from)
        text = json.dumps(merged)
        try:
            typed = typed_value(catalogue, flag, (text,))
        except FlagError as exc:
            problems.append(ArgvProblem(index, "value", f"'{spelled}': {exc}"))
            typed = merged
        # every key's value token, so a value left unresolved in any of them is seen (KV317)
        occurrences.append(ParsedFlag(flag.name[2:], flag.key, spelled, index, (text,), tuple(value_at), typed, flag))
    problems.sort(key=lambda p: p.index)
    return ParsedArgv(tuple(occurrences), tuple(problems))
