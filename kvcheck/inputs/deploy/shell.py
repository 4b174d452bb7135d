"""The part of a POSIX shell that decides which argv a `sh -c` / `bash -c` string runs.

Enough of the shell to read the launch scripts deployment files carry: quoting, backslash-newline
continuations, `VAR=value` prefixes and assignments, `export`, `&&`/`||`/`;`/`|`/`&`/newline between
commands, comments, `$VAR`/`${VAR}`/`${VAR:-default}` expansion with field splitting of unquoted
results, redirections (`> log 2>&1`, `&>>`, `<<<`; a here-document's body is skipped, never read
as commands), bash arrays (`args=( ... )`, `args+=( ... )`, `"${args[@]}"`, `${args[N]}`), and the
positional parameters of `sh -c SCRIPT NAME ARG...` (`"$@"`, `$1`...), each taken from its own
place in the file. A variable the script may or may not set (assigned after `&&`/`||`, in a pipe, a
compound command, a group, a function or a subshell; by `read`, `declare`, `unset`...; from an unknown
value; or read after `eval`/`source`) is unresolved, with the reason (`Word.why`): never the last value
read. Command substitution (`$(...)`, backticks) is never run: a word that needs one is marked
unresolved, naming it. Every word keeps the offset of its first character in the script, so a value
read from it can point at its column in the user's file. What the expansions produce (and the variables
each command is handed) is spent from the read's expansion budget (budget.py): a script that multiplies
a variable or an array stops with ShellBudgetError at the expansion that passed it.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field

from kvcheck.inputs.deploy.budget import (
    ENTRY_COST,
    VARIABLE_COST,
    ExpansionBudgetExceeded,
    ensure_budget,
    spend,
)

_NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_ASSIGN_RE = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)=(.*)$", re.S)
_ARRAY_START_RE = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)(\+?)=\(")
# words that are wholly a list: "$@", "${NAME[@]}" (quoted or not); ${NAME[N]} is one element
_LIST_WORD_RE = re.compile(r'("?)(?:\$@|\$\{@\}|\$\{([A-Za-z_][A-Za-z0-9_]*)\[[@*]\]\})\1')
_ELEMENT_RE = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)\[(\d+)\]")
# a redirection where a word starts: [fd] and its operator; the word after it is its target
_REDIRECT_RE = re.compile(r"(?:\d+|\{[A-Za-z_][A-Za-z0-9_]*\})?(?:<<<|<<-|<<|>>|>&|<&|>\||<>|>|<)|&>>|&>")
_OPERATORS = ("&&", "||", ";;", ";", "|", "&", "\n")
# Words that only prefix the real command: `exec python ...`, `env A=1 python ...`, `nohup ...`.
_PREFIX_COMMANDS = frozenset({"exec", "env", "nohup", "time", "command", "stdbuf"})

# Compound commands: what they run depends on a condition, a loop or a pattern, so a variable they assign may or
# may not be set after them (bash's value at the launch is not the last assignment read).
_OPENS = frozenset({"if", "while", "until", "for", "select", "case"})
_CLOSES = frozenset({"fi", "done", "esac"})
_CONTINUES = frozenset({"then", "else", "elif", "do", "!"})
# Commands that set the variables they name (`read MTT`, `declare -i N=4`, `unset X`, `printf -v V ...`)
_SETTERS = frozenset({"read", "mapfile", "readarray", "getopts", "unset", "declare", "typeset", "local",
                      "readonly", "let", "printf"})
# Commands that may set any variable: what they run is not in the script
_OPAQUE = frozenset({"eval", "source", "."})

_SOME_PATHS = "only on some paths (a condition, a loop, a branch, a subshell or a function)"

Lookup = Callable[[str], "str | None"]


class ShellSyntaxError(ValueError):
    """A script the shell itself would refuse (an unterminated quote); `offset` is where."""

    def __init__(self, message: str, offset: int) -> None:
        super().__init__(message)
        self.offset = offset


class ShellBudgetError(ShellSyntaxError):
    """The script's expansions passed the read's budget (budget.py); `offset` is the expansion that did."""


@dataclass
class Word:
    """One word after quote removal and expansion."""

    text: str
    offset: int  # offset of the word's first character in the script
    unresolved: list[str] = field(default_factory=list)  # variables / substitutions left unexpanded
    variables: list[str] = field(default_factory=list)  # variables whose values the word holds
    positional: int | None = None  # a whole positional parameter ($1 is 1): the word is that argument
    why: dict[str, str] = field(default_factory=dict)  # unresolved name -> why the script leaves it unknown


@dataclass
class Command:
    """One simple command: its leading assignments and its words."""

    assignments: dict[str, Word]
    words: list[Word]
    environment: dict[str, str] = field(default_factory=dict)  # what the script exported, plus the prefixes

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
    def __init__(
        self, script: str, lookup: Lookup, variables: dict[str, str], positional: list[str] | None = None
    ) -> None:
        self.text, self.origin = _strip_continuations(script)
        self.lookup = lookup
        self.variables = variables  # assignments made by the script itself
        self.exported: dict[str, str] = {}  # the variables the script exports to the commands it runs
        self.arrays: dict[str, list[Word]] = {}  # bash arrays the script assigns
        self.positional = positional  # $1..$N when the argv after the script is known, else None
        self.used: list[str] = []  # variables expanded, in order
        self.heredocs: list[tuple[str, bool]] = []  # here-documents whose bodies start at the next newline
        self.i = 0
        self.script = script
        self.unknown: dict[str, str] = {}  # variables the script may or may not set: name -> why
        self.opaque: str | None = None  # why no variable's value is known any more (after eval or source)
        self.depth = 0  # compound commands, groups and subshells the reader is inside
        self.parens = 0
        self.chained = False  # the command being read runs only on some paths (after && or ||, in a pipe)
        self.comments: list[int] = []  # where each comment's `#` is in the script as written

    def _spend(self, chars: int, at: int) -> None:
        """Spend from the expansion budget for what was produced at index `at` of the text."""
        try:
            spend(chars)
        except ExpansionBudgetExceeded as exc:
            raise ShellBudgetError(str(exc), self.origin[min(at, len(self.origin) - 1)]) from exc

    def value_of(self, name: str) -> str | None:
        if name in self.variables:
            return self.variables[name]
        if self.unknown_why(name) is not None:
            return None
        return self.lookup(name)

    def unknown_why(self, name: str) -> str | None:
        """Why the script leaves `name` unknown where it is read, if it does."""
        if name in self.variables:
            return None
        return self.unknown.get(name, self.opaque)

    def _line(self, offset: int) -> int:
        return self.script.count("\n", 0, offset) + 1

    def commands(self) -> list[Command]:
        commands: list[Command] = []
        words: list[Word] = []
        text, n = self.text, len(self.text)
        while True:
            self._skip_blanks()
            if self.i >= n:
                break
            ch = text[self.i]
            if ch == "#":  # a comment runs to the end of the line
                self.comments.append(self.origin[self.i])
                while self.i < n and text[self.i] != "\n":
                    self.i += 1
                continue
            redirect = _REDIRECT_RE.match(text, self.i)
            if redirect is not None:
                self._redirection(redirect)
                continue
            op = next((o for o in _OPERATORS if text.startswith(o, self.i)), None)
            if op is not None or ch in "()":  # ( ): subshell / grouping: what is inside are commands of their own
                self.i += len(op) if op is not None else 1
                if words:
                    # a command before `|` or `&` runs in a subshell: what it assigns stays there
                    commands.append(self._command(words, apart=op in ("|", "&")))
                self._operator(op, ch, flushed=bool(words))
                words = []
                if op == "\n" and self.heredocs:
                    self._skip_heredocs()
                continue
            if not words and self._at_group_brace(ch):
                self.depth += 1 if ch == "{" else -1 if self.depth else 0
                self.i += 1
                continue
            array = _ARRAY_START_RE.match(text, self.i)
            if array is not None and not words:
                self._array(array)
                continue
            words.extend(self._word())
        if words:
            commands.append(self._command(words))
        return commands

    def _redirection(self, match: re.Match[str]) -> None:
        """`> file`, `2>&1`, `<<EOF`...: not words of the command; a here-document's body is skipped."""
        operator = match.group(0).lstrip("0123456789")
        self.i = match.end()
        self._skip_blanks()
        if self.i >= len(self.text) or self.text[self.i] == "\n":
            raise ShellSyntaxError(f"{operator} without a target", self.origin[match.start()])
        target = self._word()
        if operator in ("<<", "<<-"):
            self.heredocs.append(("".join(w.text for w in target), operator == "<<-"))

    def _skip_heredocs(self) -> None:
        """At the start of the line after `<<WORD`: skip each pending body, up to its WORD line."""
        text, n = self.text, len(self.text)
        for delimiter, strip_tabs in self.heredocs:
            while self.i < n:
                end = text.find("\n", self.i)
                end = n if end < 0 else end
                line = text[self.i : end]
                self.i = min(end + 1, n)
                if (line.lstrip("\t") if strip_tabs else line) == delimiter:
                    break
        self.heredocs = []

    def _array(self, start: re.Match[str]) -> None:
        """`NAME=( word ... )` or `NAME+=( ... )`: the words up to `)`, across lines and comments."""
        name, append = start.group(1), bool(start.group(2))
        opened = self.origin[self.i]
        self.i = start.end()
        elements: list[Word] = []
        text, n = self.text, len(self.text)
        while True:
            while self.i < n and text[self.i] in " \t\r\n":
                self.i += 1
            if self.i >= n:
                raise ShellSyntaxError(f"unterminated array {name}=(", opened)
            if text[self.i] == "#":
                self.comments.append(self.origin[self.i])
                while self.i < n and text[self.i] != "\n":
                    self.i += 1
                continue
            if text[self.i] == ")":
                self.i += 1
                break
            before = self.i
            elements.extend(self._word())
            if self.i == before:  # an operator inside ( ): not an array a launch script writes
                raise ShellSyntaxError(f"unexpected {text[self.i]!r} in array {name}=(", self.origin[self.i])
        if append and name in self.arrays:
            self.arrays[name].extend(elements)  # in place: copying the array at each `+=` was quadratic
        elif append and self.unknown_why(name) is not None:
            return  # appended to an array the script may or may not have set: still unknown
        else:
            self.arrays[name] = elements
            self.unknown.pop(name, None)
        if self.chained or self.depth > 0:
            self.arrays.pop(name, None)
            self._forget(name, f"the array is assigned at line {self._line(self.origin[start.start()])} {_SOME_PATHS}")
        self.variables.pop(name, None)

    def _list_word(self) -> list[Word] | None:
        """At a word that is wholly "$@" or "${NAME[@]}": its words, each from its own place; else None."""
        match = _LIST_WORD_RE.match(self.text, self.i)
        if match is None:
            return None
        end = match.end()
        if end < len(self.text) and not (
            self.text[end] in " \t\r()" or any(self.text.startswith(o, end) for o in _OPERATORS)
        ):
            return None  # part of a longer word: left to the general rules (unresolved)
        name = match.group(2)
        if name is None and self.positional is None:
            return None
        self.i = end
        if name is None:
            assert self.positional is not None
            self._spend(sum(len(arg) + ENTRY_COST for arg in self.positional), match.start())
            return [Word(arg, self.origin[match.start()], positional=k) for k, arg in enumerate(self.positional, 1)]
        if name not in self.arrays:
            source = match.group(0)
            why = self.unknown_why(name)
            return [Word(source, self.origin[match.start()], unresolved=[name], why={name: why} if why else {})]
        items = self.arrays[name]
        self._spend(sum(len(w.text) + ENTRY_COST for w in items), match.start())
        return [Word(w.text, w.offset, list(w.unresolved), list(w.variables), w.positional) for w in items]

    def _skip_blanks(self) -> None:
        while self.i < len(self.text) and self.text[self.i] in " \t\r":
            self.i += 1

    def _at_group_brace(self, ch: str) -> bool:
        """`{ ` opening or `}` closing a command group, where a command would start."""
        text = self.text
        return (ch == "{" and self.i + 1 < len(text) and text[self.i + 1] in " \t\n") or ch == "}"

    def _operator(self, op: str | None, ch: str, *, flushed: bool) -> None:
        """After an operator (or a parenthesis): whether the next command runs only on some paths."""
        if op in ("&&", "||", "|"):
            self.chained = True
        elif op is not None and (flushed or op != "\n"):  # `a &&` NEWLINE `b`: b is still chained
            self.chained = False
        if op is None:
            self._paren(ch)

    def _paren(self, ch: str) -> None:
        """A subshell `( )` (or a case pattern's `)`): what it assigns is not the script's afterwards."""
        if ch == "(":
            self.parens += 1
            self.depth += 1
        elif self.parens:
            self.parens -= 1
            self.depth -= 1

    def _keywords(self, rest: list[Word]) -> list[Word]:
        """The command's words after the compound-command keywords that lead them, tracking the nesting."""
        while rest and not rest[0].unresolved and rest[0].text in _OPENS | _CLOSES | _CONTINUES:
            word = rest.pop(0).text
            if word in _CLOSES:
                self.depth = max(0, self.depth - 1)
            elif word in _OPENS:
                self.depth += 1
                if word in ("for", "select"):  # the loop variable; the rest is its list, not a command
                    if rest:
                        self._forget(rest[0].text, f"the {word} loop at line {self._line(rest[0].offset)} sets it")
                    return []
                if word == "case":
                    return []
        return rest

    def _forget(self, name: str, why: str) -> None:
        if _NAME_RE.fullmatch(name):
            self.variables.pop(name, None)
            self.exported.pop(name, None)
            self.unknown[name] = why

    def _sets_variables(self, rest: list[Word]) -> None:
        """`read`, `declare`, `unset` and the like set the names they are given; `eval` and `source` may set any."""
        command = rest[0].text
        where = f"line {self._line(rest[0].offset)}"
        if command in _OPAQUE:
            self.opaque = f"`{command}` at {where} may set any variable, and the script does not set it after that"
            for name in list(self.variables):
                self._forget(name, self.opaque)
            return
        for word in rest[1:]:
            name = word.text.split("=", 1)[0].split("[", 1)[0]
            if not word.text.startswith("-") and _NAME_RE.fullmatch(name):
                self._forget(name, f"`{command}` at {where} sets it")

    def _command(self, words: list[Word], apart: bool = False) -> Command:
        assignments: dict[str, Word] = {}
        rest = self._keywords(list(words))
        # run only on some paths, or in a subshell: an assignment here may or may not hold afterwards
        maybe = apart or self.chained or self.depth > 0
        if rest and not rest[0].unresolved and (rest[0].text in _SETTERS or rest[0].text in _OPAQUE):
            self._sets_variables(rest)
        if rest and all(_ASSIGN_RE.match(w.text) for w in rest):
            rest = self._unknown_values(rest)
            if not rest:
                return Command({}, [], {**self.exported})
        while rest and not rest[0].unresolved and (match := _ASSIGN_RE.match(rest[0].text)):
            name, value = match.groups()
            assignments[name] = Word(value, rest[0].offset + len(name) + 1, rest[0].unresolved)
            rest.pop(0)
        if not rest:
            # a bare assignment sets a shell variable for the commands that follow (an exported one stays so)
            for name, word in assignments.items():
                self._assign(name, word.text, word.offset, maybe=maybe, export=name in self.exported)
        elif rest[0].text == "export":
            for word in rest[1:]:
                match = _ASSIGN_RE.match(word.text)
                if match:
                    self._assign(match.group(1), match.group(2), word.offset, maybe=maybe, export=True)
                elif word.text in self.variables:
                    self.exported[word.text] = self.variables[word.text]
        # every command is handed the exported variables: a thousand exports and a million commands is work
        self._spend(VARIABLE_COST * (len(self.exported) + len(assignments) + 1), self.i)
        environment = {**self.exported, **{name: word.text for name, word in assignments.items()}}
        return Command(assignments, rest, environment)

    def _unknown_values(self, rest: list[Word]) -> list[Word]:
        """A bare assignment of a value the files do not give (`MTT=$v`): that variable is not known after it."""
        for word in [w for w in rest if w.unresolved]:
            names = ", ".join(f"${n}" if not n.startswith(("$", "`")) else n for n in word.unresolved)
            self._forget(word.text.split("=", 1)[0], f"it is assigned at line {self._line(word.offset)} from "
                                                     f"{names}, which is not known there")
        return [w for w in rest if not w.unresolved]

    def _assign(self, name: str, value: str, offset: int, *, maybe: bool, export: bool) -> None:
        if maybe:
            how = "exported" if export and name not in self.exported else "assigned"
            self._forget(name, f"it is {how} at line {self._line(offset)} {_SOME_PATHS}")
            return
        self.variables[name] = value
        self.unknown.pop(name, None)
        if export:
            self.exported[name] = value

    def _word(self) -> list[Word]:
        """Read one shell word; unquoted expansions may split it into several (field splitting)."""
        listed = self._list_word()
        if listed is not None:
            return listed
        text, n = self.text, len(self.text)
        start = self.origin[self.i]
        pieces: list[Word] = [Word("", start)]
        quoted = False  # "" and '' are words of their own, even when empty
        while self.i < n:
            ch = text[self.i]
            if ch in " \t\r<>" or any(text.startswith(o, self.i) for o in _OPERATORS) or ch in "()":
                break
            if ch == "\\":
                if self.i + 1 < n:
                    _add(pieces, text[self.i + 1])
                self.i += 2
            elif ch == "'":
                end = text.find("'", self.i + 1)
                if end < 0:
                    raise ShellSyntaxError("unterminated single quote", self.origin[self.i])
                _add(pieces, text[self.i + 1 : end])
                quoted = True
                self.i = end + 1
            elif ch == '"':
                quoted = True
                self._double_quoted(pieces, start)
            elif ch in "$`":
                at = self.origin[self.i]
                self._expand_into(pieces, split=True, at=at)
            else:
                _add(pieces, ch)
                self.i += 1
        return [p for p in pieces if p.text or p.unresolved or (quoted and p is pieces[0])]

    def _double_quoted(self, pieces: list[Word], start: int) -> None:
        """The inside of "...": backslash escapes and expansions, no field splitting."""
        text, n = self.text, len(self.text)
        self.i += 1
        while True:
            if self.i >= n:
                raise ShellSyntaxError("unterminated double quote", start)
            c = text[self.i]
            if c == '"':
                self.i += 1
                return
            if c == "\\" and self.i + 1 < n and text[self.i + 1] in '"\\$`':
                _add(pieces, text[self.i + 1])
                self.i += 2
            elif c in "$`":
                self._expand_into(pieces)
            else:
                _add(pieces, c)
                self.i += 1

    def _expand_into(self, pieces: list[Word], *, split: bool = False, at: int | None = None) -> None:
        """Expand at self.i into the word being read, noting the variables used and left unresolved."""
        before = len(self.used)
        start = self.i
        value, unresolved = self._expansion()
        self._spend(len(value) + len(unresolved), start)
        pieces[-1].unresolved.extend(unresolved)
        for name in unresolved:
            why = self.unknown_why(name)
            if why is not None:
                pieces[-1].why[name] = why
        pieces[-1].variables.extend(self.used[before:])
        _add(pieces, value, split=split, at=at if at is not None else pieces[0].offset)

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
        if nxt == "(":  # $( ... ): a command substitution is never run, so it stays unresolved
            self.i = min(_closing_paren(text, i + 1) + 1, n)
            source = text[i : self.i]
            return source, [source]
        if nxt == "{":
            return self._braced(i)
        match = _NAME_RE.match(text, i + 1)
        if match:
            self.i = match.end()
            value = self.value_of(match.group(0))
            if value is None:
                return text[i : match.end()], [match.group(0)]
            self.used.append(match.group(0))
            return value, []
        if nxt.isdigit() and nxt != "0" and self.positional is not None:
            self.i = i + 2
            k = int(nxt)
            return (self.positional[k - 1] if k <= len(self.positional) else ""), []
        if nxt.isdigit() or nxt in "@*#?$!-":
            self.i = i + 2
            source = text[i : i + 2]
            return source, [source]
        self.i = i + 1
        return "$", []

    def _braced(self, i: int) -> tuple[str, list[str]]:
        """${NAME}, ${NAME-default}, ${NAME:-default} (and = forms) at i."""
        text = self.text
        end = text.find("}", i + 2)
        if end < 0:
            raise ShellSyntaxError("unterminated ${", self.origin[i])
        self.i = end + 1
        inner = text[i + 2 : end]
        element = _ELEMENT_RE.fullmatch(inner)
        if element is not None and element.group(1) in self.arrays:
            items = self.arrays[element.group(1)]
            k = int(element.group(2))
            if k >= len(items):
                return "", []
            return items[k].text, list(items[k].unresolved)
        match = re.fullmatch(r"([A-Za-z_][A-Za-z0-9_]*)(?:(:?[-=])(.*))?", inner, re.S)
        if not match:
            return text[i : end + 1], [text[i : end + 1]]
        name, operator, default = match.groups()
        value = self.value_of(name)
        if value is None and self.unknown_why(name) is not None:
            return text[i : end + 1], [name]  # it may be set: neither its value nor the default is known
        if operator is not None and (value is None or (operator.startswith(":") and value == "")):
            return default, []
        if value is None:
            return text[i : end + 1], [name]
        self.used.append(name)
        return value, []


def _add(pieces: list[Word], chunk: str, *, split: bool = False, at: int | None = None) -> None:
    """Append text to the word being read; with `split`, blanks in it start new words (field splitting)."""
    if not split:
        pieces[-1].text += chunk
        return
    parts = re.split(r"([ \t\n]+)", chunk)
    for k, part in enumerate(parts):
        if k % 2 == 1:
            if pieces[-1].text or pieces[-1].unresolved:
                pieces.append(Word("", at if at is not None else pieces[0].offset))
            continue
        pieces[-1].text += part


def _closing_paren(text: str, j: int) -> int:
    """The index of the ")" that closes the "(" at `j` (len(text) when none does)."""
    depth = 0
    while j < len(text):
        if text[j] == "(":
            depth += 1
        elif text[j] == ")":
            depth -= 1
            if depth == 0:
                break
        j += 1
    return j


# What makes "$@" mean something other than the script's own arguments: a function (inside it,
# "$@" is the function's), `shift`, and `set` with arguments (`set -- ...` replaces them; `set -e`,
# `set -o pipefail` do not).
_FUNCTION_OR_SHIFT = re.compile(r"(?:^|[\s;&|(){}])(?:function\s+[A-Za-z_]|[A-Za-z_][\w-]*\s*\(\s*\)|shift\b)")
_SET = re.compile(r"(?:^|[\s;&|(){}])set[ \t]+([^\n;&|]*)")


def _rebinds_positional(script: str) -> bool:
    if _FUNCTION_OR_SHIFT.search(script):
        return True
    for match in _SET.finditer(script):
        words = match.group(1).split()
        words = words[: next((k for k, w in enumerate(words) if w.startswith("#")), len(words))]  # a comment
        while words and words[0][:1] in "-+" and words[0] != "--":
            option = words.pop(0)
            if option in ("-o", "+o") and words:
                words.pop(0)
        if words:  # `--` or an argument: the positional parameters are replaced
            return True
    return False


def parse_script(script: str, lookup: Lookup, positional: list[str] | None = None) -> list[Command]:
    """The simple commands of a script, with variables expanded through `lookup` (None: not set).

    `positional`: $1..$N, the words after `sh -c SCRIPT NAME`, when they are known (None: "$@" and
    $1... stay unresolved). A script with a function, `set` with arguments or `shift` rebinds them,
    so there they stay unresolved too: never a guess."""
    if positional is not None and _rebinds_positional(script):
        positional = None
    with ensure_budget(len(script) + sum(len(arg) for arg in positional or ())):
        return _Reader(script, lookup, {}, positional).commands()


def comment_offsets(script: str) -> list[int]:
    """Where the script's comments start (the offset of each `#`), as the reader above finds them: a `#` that
    starts a word outside quotes and here-document bodies. A script that stops parsing (an unterminated quote)
    has the comments found before that point."""
    reader = _Reader(script, lambda _name: None, {})
    try:
        with ensure_budget(len(script)):
            reader.commands()
    except ShellSyntaxError:
        pass
    return reader.comments


def strip_prefixes(command: Command) -> list[Word]:
    """The command's words without `exec`, `env A=1`, `nohup` and similar prefixes."""
    return _walk_prefixes(command)[0]


def launch_environment(command: Command) -> dict[str, str]:
    """The variables the command's program is handed: what the script exported, its `VAR=value` prefixes,
    and the assignments of an `env` prefix (`env A=1 python ...`; `env -i` starts from nothing, `env -u NAME`
    drops NAME). An `env` assignment whose value is not known is left out, as the prefixes' are."""
    return _walk_prefixes(command)[1]


def _walk_prefixes(command: Command) -> tuple[list[Word], dict[str, str]]:
    """One pass over the command's prefix commands (`exec`, `env`, `nohup`, ...): the words left after them, and
    the environment the program gets. An option of `env` that takes an operand (`-u NAME`, `--unset NAME`)
    consumes it, so the operand is never taken for the program."""
    environment = dict(command.environment)
    words = list(command.words)
    i = 0
    while i < len(words) and (prefix := words[i].text.rsplit("/", 1)[-1]) in _PREFIX_COMMANDS:
        i += 1
        while i < len(words) and (_ASSIGN_RE.match(words[i].text) or words[i].text.startswith("-")):
            word = words[i]
            i += 1
            if prefix != "env":
                continue
            if word.text in ("-i", "-", "--ignore-environment"):
                environment.clear()
            elif word.text in ("-u", "--unset", "-C", "--chdir") and i < len(words):
                if word.text in ("-u", "--unset"):
                    environment.pop(words[i].text, None)
                i += 1
            elif word.text.startswith("--unset="):
                environment.pop(word.text.split("=", 1)[1], None)
            elif not word.unresolved and (match := _ASSIGN_RE.match(word.text)):
                environment[match.group(1)] = match.group(2)
    return words[i:], environment


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
