"""An engine's command line read as its own argparse reads it, against one release's flag catalogue.

Engine-neutral (the catalogue carries the engine's name for messages). Every place kvcheck meets an
engine command line (a log's quoted launch command, a Kubernetes
container, a compose service, `kvcheck import --cmd`) parses it here, so aliases (`--tp`,
`--tensor-parallel-size`), unique-prefix abbreviations (`--mem-frac`), `--flag=value`, repeated flags
(the last one wins), switches and `--no-X` forms, removed and unknown flags mean the same thing
everywhere. Names come back in the catalogue's spelling without dashes (`tp-size`), each with the
index of the token it came from, so callers can point at the exact place in their file.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from kvcheck.engines.flags import Catalogue, Flag, FlagError, json_text, parse_human_readable_int

ProblemKind = Literal["unknown", "removed", "ambiguous", "value", "stray", "repeated", "switch"]

_NUMBER_RE = re.compile(r"^-\d+(?:\.\d*)?(?:[eE][-+]?\d+)?$|^-\.\d+$")


@dataclass(frozen=True)
class ParsedFlag:
    """One flag occurrence on the command line."""

    name: str  # canonical long name without dashes ("tp-size"); the spelled name for unknown flags
    key: str  # the engine's field name ("tp_size")
    spelled: str  # as written, without "=value" ("--tp")
    index: int  # token index of the flag in the argv given to parse_argv
    values: tuple[str, ...]  # the value tokens as written (inline "=value" included)
    value_indexes: tuple[int, ...]  # their token indexes (the flag's own index for "=value")
    value: Any  # typed as argparse would type it (True/False for switches); raw text if invalid
    flag: Flag | None  # None: not a flag of this release


@dataclass(frozen=True)
class ArgvProblem:
    """Something the engine's argparse would reject or silently change, at one token."""

    index: int
    kind: ProblemKind
    message: str


@dataclass(frozen=True)
class ParsedArgv:
    """A parsed command line: every flag occurrence in order, and the problems found."""

    occurrences: tuple[ParsedFlag, ...]
    problems: tuple[ArgvProblem, ...]

    @property
    def final(self) -> dict[str, ParsedFlag]:
        """Canonical name -> the occurrence that wins (argparse keeps the last one)."""
        out: dict[str, ParsedFlag] = {}
        for occurrence in self.occurrences:
            out.pop(occurrence.name, None)
            out[occurrence.name] = occurrence
        return out


def is_option(token: str) -> bool:
    """Whether argparse reads `token` as an option rather than a value (negative numbers are values)."""
    return token.startswith("-") and len(token) > 1 and not _NUMBER_RE.match(token) and token != "--"


@dataclass(frozen=True)
class _Index:
    names: dict[str, Flag]  # every option string (flag, aliases) -> flag
    negated: dict[str, Flag]  # "--no-X" -> flag X (BooleanOptionalAction)
    option_strings: tuple[str, ...]  # what argparse matches prefixes against, sorted


_INDEXES: dict[int, tuple[Catalogue, _Index]] = {}


def _index(catalogue: Catalogue) -> _Index:
    cached = _INDEXES.get(id(catalogue))
    if cached is not None and cached[0] is catalogue:
        return cached[1]
    names: dict[str, Flag] = {}
    negated: dict[str, Flag] = {}
    for flag in catalogue.flags:
        names[flag.name] = flag
        for alias in flag.aliases:
            names[alias] = flag
        if flag.boolean_optional:
            negated["--no-" + flag.name[2:]] = flag
    options = sorted({*names, *negated, "--help"})
    built = _Index(names, negated, tuple(options))
    _INDEXES[id(catalogue)] = (catalogue, built)
    return built


def _resolve(catalogue: Catalogue, spelled: str) -> tuple[Flag | None, bool, ArgvProblem | None, str]:
    """(flag, negated, problem, how) for one spelled option; flag None when argparse would refuse it."""
    index = _index(catalogue)
    if spelled in index.names:
        return index.names[spelled], False, None, "exact"
    if spelled in index.negated:
        return index.negated[spelled], True, None, "exact"
    matches = [o for o in index.option_strings if o.startswith(spelled)] if catalogue.allow_abbrev else []
    removed = catalogue.removed.get(spelled)
    if len(matches) == 1 and matches[0] != "--help":
        target = matches[0]
        flag = index.names.get(target) or index.negated[target]
        problem = None
        if removed is not None:
            problem = ArgvProblem(
                0,
                "removed",
                f"'{spelled}' was removed in {catalogue.label} {catalogue.version} (last in {removed.last_version}); "
                f"argparse now reads it as an abbreviation of '{target}'",
            )
        return flag, target in index.negated, problem, "abbrev"
    if removed is not None:
        text = f"'{spelled}' was removed in {catalogue.label} {catalogue.version} (last in {removed.last_version})"
        if removed.replacement:
            text += f"; use '{removed.replacement}'"
        return None, False, ArgvProblem(0, "removed", text), "removed"
    if len(matches) > 1:
        shown = ", ".join(matches[:6]) + (", ..." if len(matches) > 6 else "")
        return None, False, ArgvProblem(
            0, "ambiguous", f"'{spelled}' is an ambiguous abbreviation in {catalogue.label} {catalogue.version} "
            f"(matches {shown}); {catalogue.label} exits with status 2"
        ), "ambiguous"
    try:
        catalogue.resolve(spelled)  # for its "did you mean" text
    except FlagError as exc:
        text = str(exc)
    else:  # pragma: no cover - resolve() knows no more names than the index
        text = f"unknown {catalogue.label} flag '{spelled}'"
    return None, False, ArgvProblem(0, "unknown", text), "unknown"


def typed_value(catalogue: Catalogue, flag: Flag, texts: Sequence[str]) -> Any:
    """The value argparse would produce from these tokens; FlagError when it would refuse them."""
    name = flag.name[2:]

    def one(text: str) -> Any:
        kind = flag.type
        try:
            if kind == "int":
                return int(text)
            if kind == "float":
                return float(text)
        except ValueError as exc:
            raise FlagError(f"'{name}' must be {'an integer' if kind == 'int' else 'a number'}, not {text!r}") from exc
        if kind == "human_readable_int":
            return parse_human_readable_int(name, text)
        if kind == "bool" and not flag.store_true:
            lowered = text.lower()
            if lowered in ("true", "1", "yes"):
                return True
            if lowered in ("false", "0", "no"):
                return False
            raise FlagError(f"'{name}' must be true or false, not {text!r}")
        if kind in ("json", "json_list_type"):
            return json_text(name, text)
        return text

    if flag.nargs in ("+", "*") or isinstance(flag.nargs, int):
        return catalogue.coerce(flag, [one(t) for t in texts])
    return catalogue.coerce(flag, one(texts[0]))


def _takes(flag: Flag) -> tuple[int, int | None]:
    """(least, most) value tokens the flag consumes."""
    if flag.store_true or flag.nargs == 0 or flag.boolean_optional:
        return 0, 0
    if flag.nargs == "+":
        return 1, None
    if flag.nargs == "*":
        return 0, None
    if flag.nargs == "?":
        return 0, 1
    if isinstance(flag.nargs, int):
        return flag.nargs, flag.nargs
    return 1, 1


def _take_values(argv: Sequence[str], i: int, most: int | None, values: list[str], value_indexes: list[int]) -> int:
    """Append the words from argv[i] up to the next option (at most `most` in all); the next index."""
    while (most is None or len(values) < most) and i < len(argv) and not is_option(argv[i]):
        values.append(argv[i])
        value_indexes.append(i)
        i += 1
    return i


def _flag_value(
    catalogue: Catalogue,
    flag: Flag,
    spelled: str,
    flag_index: int,
    values: list[str],
    value_indexes: list[int],
    *,
    inline: bool,
    negated: bool,
    problems: list[ArgvProblem],
) -> Any:
    """A known flag's value as the engine would type it: a switch's truth, or its words typed; a problem
    (a switch given a value, too few values, a value of the wrong type) is appended to `problems`."""
    least, most = _takes(flag)
    if most == 0:
        if inline:
            problems.append(
                ArgvProblem(flag_index, "switch", f"'{spelled}' is a switch and takes no value (argparse exits 2)")
            )
        return not negated
    if len(values) < least:
        problems.append(
            ArgvProblem(flag_index, "value", f"'{spelled}' expects {'a value' if least == 1 else f'{least} values'}")
        )
        return None
    try:
        return typed_value(catalogue, flag, values) if values else None
    except FlagError as exc:
        problems.append(ArgvProblem(value_indexes[0] if value_indexes else flag_index, "value", str(exc)))
        return values[0] if len(values) == 1 else list(values)


def parse_argv(argv: Sequence[str], catalogue: Catalogue, *, start: int = 0) -> ParsedArgv:
    """Parse the server arguments argv[start:] as the engine's argparse would, against `catalogue`.

    Token indexes in the result are indexes into `argv`. Unknown flags keep the words that follow
    them up to the next option as their values, so one unknown flag does not turn its value into a
    stray word as well.
    """
    occurrences: list[ParsedFlag] = []
    problems: list[ArgvProblem] = []
    seen: dict[str, int] = {}
    i = start
    n = len(argv)
    while i < n:
        token = argv[i]
        if token == "--":
            for j in range(i + 1, n):
                problems.append(ArgvProblem(j, "stray", f"unexpected argument '{argv[j]}' after '--'"))
            break
        if not is_option(token):
            problems.append(ArgvProblem(i, "stray", f"unexpected argument '{token}' (not a value of any flag)"))
            i += 1
            continue
        spelled, eq, inline = token.partition("=")
        flag_index = i
        i += 1
        if not spelled.startswith("--"):
            problems.append(ArgvProblem(flag_index, "unknown", f"unknown option '{spelled}' ({catalogue.label} has no short options)"))
            continue
        flag, negated, problem, _ = _resolve(catalogue, spelled)
        if problem is not None:
            problems.append(ArgvProblem(flag_index, problem.kind, problem.message))
        # the value tokens
        values: list[str] = []
        value_indexes: list[int] = []
        if eq:
            values.append(inline)
            value_indexes.append(flag_index)
        if flag is None:
            if not eq:
                i = _take_values(argv, i, None, values, value_indexes)
            bare = spelled[2:]
            value: Any = (values[0] if len(values) == 1 else list(values)) if values else True
            occurrences.append(
                ParsedFlag(bare, bare.replace("-", "_"), spelled, flag_index, tuple(values), tuple(value_indexes), value, None)
            )
            continue
        if not eq:
            i = _take_values(argv, i, _takes(flag)[1], values, value_indexes)
        canonical = flag.name[2:]
        value = _flag_value(catalogue, flag, spelled, flag_index, values, value_indexes,
                            inline=bool(eq), negated=negated, problems=problems)
        if canonical in seen:
            problems.append(
                ArgvProblem(
                    flag_index,
                    "repeated",
                    f"'{canonical}' is also set by token {seen[canonical]}; {catalogue.label} keeps this later one",
                )
            )
        seen[canonical] = flag_index
        occurrences.append(
            ParsedFlag(canonical, flag.key, spelled, flag_index, tuple(values), tuple(value_indexes), value, flag)
        )
    return ParsedArgv(tuple(occurrences), tuple(problems))
