"""docker compose's variable interpolation, as the compose specification defines it.

Compose fills `$VAR`, `${VAR}`, `${VAR:-default}`, `${VAR-default}`, `${VAR:?error}`, `${VAR?error}`,
`${VAR:+other}` and `${VAR+other}` in the file's values from the shell that runs `docker compose` and from
a `.env` file beside the compose file (the shell wins); `$$` is a literal `$`. The service's own
`environment:` is the container's, not the file's: it never fills the file (a shell started inside the
container, `sh -c "... $$PORT"`, sees it). A variable set nowhere kvcheck can see is kept as written and
named (KV317), never replaced by compose's empty string. Every substitution spends from the read's
expansion budget (budget.py): a `.env` whose values double each other stays bounded.
"""

from __future__ import annotations

import os
import re
from bisect import bisect_left
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from kvcheck.errors import InputError
from kvcheck.inputs.deploy import budget
from kvcheck.inputs.deploy.server import Sourced
from kvcheck.io.textfile import read_text_file
from kvcheck.model import Location

MAX_DOTENV_BYTES = 1024 * 1024
_NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_BRACED_RE = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)(?:(:?[-?+])(.*))?\Z", re.S)
_DOTENV_LINE_RE = re.compile(r"\s*(?:export\s+)?([A-Za-z_][A-Za-z0-9_.-]*)\s*=\s*(.*)\Z", re.S)

Lookup = Callable[[str], Sourced | None]


class InterpolationError(ValueError):
    """A `${...}` compose itself refuses (no name, unclosed, `:?` with its message); `offset`: where."""

    def __init__(self, message: str, offset: int) -> None:
        super().__init__(message)
        self.offset = offset


@dataclass
class Interpolated:
    """The text compose would use, each character's offset in the text as written, and the variables."""

    text: str
    origin: list[int]  # origin[i]: offset in the written text of output character i
    used: list[tuple[int, str, Sourced]] = field(default_factory=list)  # (output offset, name, value)
    unresolved: list[tuple[int, str]] = field(default_factory=list)  # (output offset, name), kept as written

    def names_between(self, start: int, end: int) -> tuple[list[str], list[tuple[str, Sourced]]]:
        """The variables unresolved and used whose expansion starts in output characters [start, end)
        (both lists are in output order: a bisection, so a command of many words stays linear-ish)."""
        missing = self.unresolved[bisect_left(self.unresolved, start, key=lambda x: x[0]):
                                  bisect_left(self.unresolved, end, key=lambda x: x[0])]
        used = self.used[bisect_left(self.used, start, key=lambda x: x[0]):
                         bisect_left(self.used, end, key=lambda x: x[0])]
        return [name for _, name in missing], [(name, value) for _, name, value in used]


class _Out:
    """The output being built, in chunks (one string grown character by character is quadratic)."""

    def __init__(self) -> None:
        self.chunks: list[str] = []
        self.length = 0
        self.origin: list[int] = []
        self.used: list[tuple[int, str, Sourced]] = []
        self.unresolved: list[tuple[int, str]] = []

    def add(self, text: str, at: int | list[int]) -> None:
        self.chunks.append(text)
        self.origin.extend([at] * len(text) if isinstance(at, int) else at)
        self.length += len(text)


def _closing_brace(text: str, start: int) -> int:
    """Index of the `}` that closes the `${` whose contents start at `start` (nested `${...}` allowed)."""
    depth, i = 1, start
    while i < len(text):
        if text.startswith("$$", i):
            i += 2
            continue
        if text.startswith("${", i):
            depth += 1
            i += 2
            continue
        if text[i] == "}":
            depth -= 1
            if depth == 0:
                return i
        i += 1
    raise InterpolationError("unclosed ${: compose refuses the file (write $$ for a literal $)", start - 2)


class _Interpolator:
    def __init__(self, lookup: Lookup) -> None:
        self.lookup = lookup

    def run(self, text: str, base: int, out: _Out) -> None:
        """Append the interpolation of `text` (written at offset `base`) to `out`."""
        i = 0
        while i < len(text):
            char = text[i]
            if char != "$" or i + 1 == len(text):
                self._emit(out, char, base + i)
                i += 1
                continue
            nxt = text[i + 1]
            if nxt == "$":
                self._emit(out, "$", base + i)
                i += 2
            elif nxt == "{":
                end = _closing_brace(text, i + 2)
                self._braced(text[i + 2 : end], base + i, base + i + 2, text[i : end + 1], out)
                i = end + 1
            elif match := _NAME_RE.match(text, i + 1):
                self._variable(match.group(), None, "", base + i, 0, text[i : match.end()], out)
                i = match.end()
            else:  # `$` before anything else is kept, as compose keeps it
                self._emit(out, char, base + i)
                i += 1

    def _braced(self, inner: str, at: int, inner_at: int, written: str, out: _Out) -> None:
        match = _BRACED_RE.match(inner)
        if match is None:
            raise InterpolationError(f"invalid interpolation {written!r}: compose refuses the file (a ${{...}} holds "
                                     "a variable name, optionally with :-, -, :?, ?, :+ or +)", at)
        name, op, rest = match.group(1), match.group(2), match.group(3) or ""
        self._variable(name, op, rest, at, inner_at + match.start(3) if op else 0, written, out)

    def _variable(self, name: str, op: str | None, rest: str, at: int, rest_at: int, written: str,
                  out: _Out) -> None:
        value = self.lookup(name)
        is_set = value is not None
        filled = is_set and str(value.value) != "" if value is not None else False
        if op in (":-", "-"):
            if (filled if op == ":-" else is_set) and value is not None:
                self._substitute(out, name, value, at)
            else:
                self.run(rest, rest_at, out)
            return
        if op in (":+", "+"):
            if filled if op == ":+" else is_set:
                self.run(rest, rest_at, out)
            return
        if value is None or (op == ":?" and not filled):
            # not set where kvcheck can look: kept as written and named (the deploying shell may set it)
            # as `${NAME}` (not the whole `${NAME?message}`): one word, as its value would have been
            out.unresolved.append((out.length, name))
            out.add(f"${{{name}}}" if op else written, at)
            return
        self._substitute(out, name, value, at)

    def _substitute(self, out: _Out, name: str, value: Sourced, at: int) -> None:
        text = str(value.value)
        budget.spend(len(text) + budget.VARIABLE_COST)
        out.used.append((out.length, name, value))
        out.add(text, at)

    @staticmethod
    def _emit(out: _Out, char: str, at: int) -> None:
        out.add(char, at)


def interpolate(text: str, lookup: Lookup) -> Interpolated:
    """`text` as compose fills it; InterpolationError for what compose refuses, and the budget's
    ExpansionBudgetExceeded past the read's budget."""
    out = _Out()
    with budget.ensure_budget(len(text)):
        _Interpolator(lookup).run(text, 0, out)
    out.origin.append(len(text))  # the end, for spans that end with the text
    return Interpolated("".join(out.chunks), out.origin, out.used, out.unresolved)


def _dotenv_value(raw: str, lookup: Lookup, where: Location) -> str:
    """One `.env` value: 'single quotes' literal, "double quotes" with escapes and interpolation, bare
    text up to a ` #` comment, interpolated."""
    raw = raw.strip()
    if raw.startswith("'"):
        end = raw.find("'", 1)
        if end < 0:
            raise InputError(f"{where.render()}: unclosed ' in the .env value")
        return raw[1:end]
    if raw.startswith('"'):
        match = re.match(r'"((?:[^"\\]|\\.)*)"', raw, re.S)
        if match is None:
            raise InputError(f'{where.render()}: unclosed " in the .env value')
        body = re.sub(r"\\(.)", lambda m: {"n": "\n", "t": "\t"}.get(m.group(1), m.group(1)), match.group(1))
    else:
        body = re.split(r"\s#", raw, maxsplit=1)[0].strip()
    try:
        return interpolate(body, lookup).text
    except (InterpolationError, budget.ExpansionBudgetExceeded) as exc:
        raise InputError(f"{where.render()}: {exc}") from None


def read_dotenv(path: Path, display: str) -> dict[str, Sourced]:
    """The variables of a compose `.env` file (KEY=VALUE lines, `export` and comments allowed); a value
    may use the variables above it and the shell's."""
    text = read_text_file(path, display, kind=".env file", max_bytes=MAX_DOTENV_BYTES)
    values: dict[str, Sourced] = {}

    def lookup(name: str) -> Sourced | None:
        if name in os.environ:
            return Sourced(os.environ[name], None, "the environment")
        return values.get(name)

    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        match = _DOTENV_LINE_RE.match(line)
        where = Location(display, number, 1)
        if match is None:
            raise InputError(f"{where.render()}: not a KEY=VALUE line: compose refuses this .env file")
        values[match.group(1)] = Sourced(_dotenv_value(match.group(2), lookup, where), where, ".env")
    return values


def compose_lookup(compose_file: str, *, stdin: bool) -> tuple[Lookup, str]:
    """What fills a compose file's variables: the process environment, then the `.env` beside the file
    (none for stdin); and the reason to give for a variable neither sets."""
    dotenv: Mapping[str, Sourced] = {}
    folder_env = None if stdin else Path(compose_file).parent / ".env"
    has_dotenv = folder_env is not None and folder_env.is_file()
    if folder_env is not None and has_dotenv:
        current = budget.current()
        cache = current.shared if current is not None else {}
        key = ("compose-dotenv", str(folder_env.resolve()))
        if key not in cache:
            cache[key] = read_dotenv(folder_env, str(folder_env))
        dotenv = cache[key]

    def lookup(name: str) -> Sourced | None:
        if name in os.environ:
            return Sourced(os.environ[name], None, "the environment")
        return dotenv.get(name)

    if has_dotenv:
        return lookup, f"compose fills it from the shell or {folder_env}, and neither kvcheck's environment nor that file sets it"
    return lookup, ("compose fills it from the shell or a .env file beside the compose file; kvcheck's environment "
                    "does not set it and there is no such .env")
