"""The part of a POSIX shell that decides which argv a `sh -c` / `bash -c` string runs.

Enough of the shell to read the launch scripts deployment files carry: quoting, backslash-newline
continuations, `VAR=value` prefixes and assignments, `export`, `&&`/`||`/`;`/`|`/`&`/newline between
commands, comments, `$VAR`/`${VAR}`/`${VAR:-default}` expansion with field splitting of unquoted
results. Command substitution (`$(...)`, backticks) is never run: a word that needs one is marked
unresolved, naming it. Every word keeps the offset of its first character in the script, so a value
read from it can point at its column in the user's file.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field

_NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_ASSIGN_RE = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)=(.*)$", re.S)
_OPERATORS = ("&&", "||", ";;", ";", "|", "&", "\n")
# Words that only prefix the real command: `exec python ...`, `env A=1 python ...`, `nohup ...`.
_PREFIX_COMMANDS = frozenset({"exec", "env", "nohup", "time", "command", "stdbuf"})

Lookup = Callable[[str], "str | None"]


class ShellSyntaxError(ValueError):
    """A script the shell itself would refuse (an unterminated quote); `offset` is where."""

    def __init__(self, message: str, offset: int) -> None:
        super().__init__(message)
        self.offset = offset


@dataclass
class Word:
    """One word after quote removal and expansion."""

    text: str
    offset: int  # offset of the word's first character in the script
    unresolved: list[str] = field(default_factory=list)  # variables / substitutions left unexpanded
    variables: list[str] = field(default_factory=list)  # variables whose values the word holds


@dataclass
class Command:
    """One simple command: its leading assignments and its words."""

    assignments: dict[str, Word]
    words: list[Word]

    @property
    def argv(self) -> list[str]:
        return [w.text for w in self.words]


def _strip_continuations(script: str) -> tuple[str, list[int]]:
    """The script without backslash-newline pairs (outside single quotes), and each char's old offset."""
    out: list[str] = []
    origin: list[int] = []
    i, n = 0, len(script)
    quote = None
    while i < n:
        ch = script[i]
        if quote != "'" and ch == "\\" and i + 1 < n and script[i + 1] == "\n":
            i += 2
            continue
        if quote != "'" and ch == "\\" and i + 2 < n and script[i + 1] == "\r" and script[i + 2] == "\n":
            i += 3
            continue
        if ch == "'" and quote is None:
            quote = "'"
        elif ch == "'" and quote == "'":
            quote = None
        elif ch == '"' and quote is None:
            quote = '"'
        elif ch == '"' and quote == '"' and (i == 0 or script[i - 1] != "\\"):
            quote = None
        out.append(ch)
        origin.append(i)
        i += 1
    origin.append(n)
    return "".join(out), origin


class _Reader:
    def __init__(self, script: str, lookup: Lookup, variables: dict[str, str]) -> None:
        self.text, self.origin = _strip_continuations(script)
        self.lookup = lookup
        self.variables = variables  # assignments made by the script itself
        self.used: list[str] = []  # variables expanded, in order
        self.i = 0

    def value_of(self, name: str) -> str | None:
        if name in self.variables:
            return self.variables[name]
        return self.lookup(name)

    def commands(self) -> list[Command]:
        commands: list[Command] = []
        words: list[Word] = []
        text, n = self.text, len(self.text)
        while True:
            # skip blanks
            while self.i < n and text[self.i] in " \t\r":
                self.i += 1
            if self.i >= n:
                break
            ch = text[self.i]
            if ch == "#" and not words:
                while self.i < n and text[self.i] != "\n":
                    self.i += 1
                continue
            if ch == "#":
                while self.i < n and text[self.i] != "\n":
                    self.i += 1
                continue
            op = next((o for o in _OPERATORS if text.startswith(o, self.i)), None)
            if op is not None:
                self.i += len(op)
                if words:
                    commands.append(self._command(words))
                    words = []
                continue
            if ch in "()":  # subshell / grouping: read what is inside as commands of their own
                self.i += 1
                if words:
                    commands.append(self._command(words))
                    words = []
                continue
            if ch == "{" and not words and self.i + 1 < n and text[self.i + 1] in " \t\n":
                self.i += 1
                continue
            if ch == "}" and not words:
                self.i += 1
                continue
            for word in self._word():
                words.append(word)
        if words:
            commands.append(self._command(words))
        return commands

    def _command(self, words: list[Word]) -> Command:
        assignments: dict[str, Word] = {}
        rest = list(words)
        while rest and not rest[0].unresolved and _ASSIGN_RE.match(rest[0].text):
            name, value = _ASSIGN_RE.match(rest[0].text).groups()  # type: ignore[union-attr]
            assignments[name] = Word(value, rest[0].offset + len(name) + 1, rest[0].unresolved)
            rest.pop(0)
        if not rest:
            # a bare assignment sets a shell variable for the commands that follow
            for name, word in assignments.items():
                self.variables[name] = word.text
        elif rest[0].text == "export":
            for word in rest[1:]:
                match = _ASSIGN_RE.match(word.text)
                if match:
                    self.variables[match.group(1)] = match.group(2)
        return Command(assignments, rest)

    def _word(self) -> list[Word]:
        """Read one shell word; unquoted expansions may split it into several (field splitting)."""
        text, n = self.text, len(self.text)
        start = self.origin[self.i]
        pieces: list[Word] = [Word("", start)]
        quoted = False  # "" and '' are words of their own, even when empty

        def add(chunk: str, *, split: bool = False, at: int | None = None) -> None:
            if not split:
                pieces[-1].text += chunk
                return
            parts = re.split(r"([ \t\n]+)", chunk)
            for k, part in enumerate(parts):
                if k % 2 == 1:
                    if pieces[-1].text or pieces[-1].unresolved:
                        pieces.append(Word("", at if at is not None else start))
                    continue
                pieces[-1].text += part

        while self.i < n:
            ch = text[self.i]
            if ch in " \t\r" or any(text.startswith(o, self.i) for o in _OPERATORS) or ch in "()":
                break
            if ch == "\\":
                if self.i + 1 < n:
                    add(text[self.i + 1])
                self.i += 2
                continue
            if ch == "'":
                end = text.find("'", self.i + 1)
                if end < 0:
                    raise ShellSyntaxError("unterminated single quote", self.origin[self.i])
                add(text[self.i + 1 : end])
                quoted = True
                self.i = end + 1
                continue
            if ch == '"':
                quoted = True
                self.i += 1
                while True:
                    if self.i >= n:
                        raise ShellSyntaxError("unterminated double quote", start)
                    c = text[self.i]
                    if c == '"':
                        self.i += 1
                        break
                    if c == "\\" and self.i + 1 < n and text[self.i + 1] in '"\\$`':
                        add(text[self.i + 1])
                        self.i += 2
                        continue
                    if c in "$`":
                        before = len(self.used)
                        value, unresolved = self._expansion()
                        pieces[-1].unresolved.extend(unresolved)
                        pieces[-1].variables.extend(self.used[before:])
                        add(value)
                        continue
                    add(c)
                    self.i += 1
                continue
            if ch in "$`":
                at = self.origin[self.i]
                before = len(self.used)
                value, unresolved = self._expansion()
                pieces[-1].unresolved.extend(unresolved)
                pieces[-1].variables.extend(self.used[before:])
                add(value, split=True, at=at)
                continue
            add(ch)
            self.i += 1
        return [p for p in pieces if p.text or p.unresolved or (quoted and p is pieces[0])]

    def _expansion(self) -> tuple[str, list[str]]:
        """Expand `$...` or a backtick at self.i; unresolvable parts come back as their source text."""
        text, n = self.text, len(self.text)
        i = self.i
        if text[i] == "`":
            end = text.find("`", i + 1)
            end = n - 1 if end < 0 else end
            self.i = end + 1
            source = text[i : end + 1]
            return source, [source]
        if i + 1 >= n:
            self.i += 1
            return "$", []
        nxt = text[i + 1]
        if nxt == "(":
            depth, j = 0, i + 1
            while j < n:
                if text[j] == "(":
                    depth += 1
                elif text[j] == ")":
                    depth -= 1
                    if depth == 0:
                        break
                j += 1
            self.i = min(j + 1, n)
            source = text[i : self.i]
            return source, [source]
        if nxt == "{":
            end = text.find("}", i + 2)
            if end < 0:
                raise ShellSyntaxError("unterminated ${", self.origin[i])
            self.i = end + 1
            inner = text[i + 2 : end]
            match = re.fullmatch(r"([A-Za-z_][A-Za-z0-9_]*)(?:(:?[-=])(.*))?", inner, re.S)
            if not match:
                return text[i : end + 1], [text[i : end + 1]]
            name, operator, default = match.groups()
            value = self.value_of(name)
            if operator is not None and (value is None or (operator.startswith(":") and value == "")):
                return default, []
            if value is None:
                return text[i : end + 1], [name]
            self.used.append(name)
            return value, []
        match = _NAME_RE.match(text, i + 1)
        if match:
            self.i = match.end()
            value = self.value_of(match.group(0))
            if value is None:
                return text[i : match.end()], [match.group(0)]
            self.used.append(match.group(0))
            return value, []
        if nxt.isdigit() or nxt in "@*#?$!-":
            self.i = i + 2
            source = text[i : i + 2]
            return source, [source]
        self.i = i + 1
        return "$", []


def parse_script(script: str, lookup: Lookup) -> list[Command]:
    """The simple commands of a script, with variables expanded through `lookup` (None: not set)."""
    return _Reader(script, lookup, {}).commands()


def strip_prefixes(command: Command) -> list[Word]:
    """The command's words without `exec`, `env A=1`, `nohup` and similar prefixes."""
    words = list(command.words)
    while words and words[0].text.rsplit("/", 1)[-1] in _PREFIX_COMMANDS:
        words.pop(0)
        while words and (_ASSIGN_RE.match(words[0].text) or words[0].text.startswith("-")):
            words.pop(0)
    return words


SHELLS = frozenset({"sh", "bash", "dash", "zsh", "ash", "ksh"})


def shell_script(argv: list[str]) -> int | None:
    """Index of the script in `sh -c SCRIPT` / `bash -lc SCRIPT` argv, else None."""
    if not argv or argv[0].rsplit("/", 1)[-1] not in SHELLS:
        return None
    for i, word in enumerate(argv[1:], start=1):
        if word.startswith("-") and not word.startswith("--") and "c" in word[1:]:
            return i + 1 if i + 1 < len(argv) else None
        if not word.startswith("-"):
            return None
    return None
