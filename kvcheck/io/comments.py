"""Where a file's comments are: the `#` that starts a comment on each line, as YAML or a shell reads it.

Inline suppressions (`# kvcheck: ignore ...`) must come from comments only. A `#` inside a quoted YAML value
(`served-model-name: "a # kvcheck: ignore KV101"`), a YAML block scalar or a quoted shell word is data: read
as a comment, any string a deployment carries could switch the gate off.
"""

from __future__ import annotations

import re

import yaml

_SHELL_SUFFIXES = (".sh", ".bash", ".sbatch", ".slurm", ".zsh")
_WORD_BREAK = " \t;&|()"
_HEREDOC = re.compile(r"<<(-?)\s*(['\"]?)([A-Za-z_][A-Za-z0-9_]*)\2")


def is_shell(text: str, filename: str) -> bool:
    """A shell script (a Slurm batch script): its suffix, a `#!` first line or `#SBATCH` lines."""
    if filename.lower().endswith(_SHELL_SUFFIXES) or text.startswith("#!"):
        return True
    return any(line.startswith("#SBATCH") for line in text.splitlines())


def comment_columns(text: str, filename: str) -> dict[int, int]:
    """{line number (1-based): the column (0-based) of the `#` that starts that line's comment}."""
    if not is_shell(text, filename):
        found = _yaml_comments(text)
        if found is not None:
            return found
    return _shell_comments(text)


def _yaml_comments(text: str) -> dict[int, int] | None:
    """Comments of a YAML text (None: it does not scan as YAML): a `#` at a line's start or after
    whitespace, outside every scalar (quoted, plain or block) the scanner reads."""
    spans: list[tuple[int, int]] = []
    try:
        for token in yaml.scan(text, Loader=yaml.SafeLoader):
            if isinstance(token, yaml.ScalarToken):
                spans.append((token.start_mark.index, token.end_mark.index))
    except yaml.YAMLError:
        return None
    spans.sort()
    found: dict[int, int] = {}
    offset = 0
    span = 0
    for number, line in enumerate(text.splitlines(keepends=True), start=1):
        column = 0
        while True:
            column = line.find("#", column)
            if column < 0:
                break
            index = offset + column
            while span < len(spans) and spans[span][1] <= index:
                span += 1
            inside = span < len(spans) and spans[span][0] <= index < spans[span][1]
            if not inside and (column == 0 or line[column - 1] in " \t"):
                found[number] = column
                break
            column += 1
        offset += len(line)
    return found


def _shell_comments(text: str) -> dict[int, int]:
    """Comments of a shell script: a `#` that starts a word outside quotes and here-documents."""
    found: dict[int, int] = {}
    lexer = _ShellLine()
    active: list[tuple[str, bool]] = []  # the here-documents whose bodies come next: (delimiter, tabs stripped)
    for number, line in enumerate(text.splitlines(), start=1):
        if active:
            delimiter, strip_tabs = active[0]
            if (line.lstrip("\t") if strip_tabs else line) == delimiter:
                active.pop(0)
            continue
        column = lexer.comment(line)
        if column is not None:
            found[number] = column
        if lexer.heredocs and not lexer.quoted:
            active, lexer.heredocs = lexer.heredocs, []
    return found


class _ShellLine:
    """The quoting state a shell carries from line to line, and the here-documents a line opens."""

    def __init__(self) -> None:
        self.single = False
        self.double = False
        self.heredocs: list[tuple[str, bool]] = []

    @property
    def quoted(self) -> bool:
        return self.single or self.double

    def comment(self, line: str) -> int | None:
        """The column of the `#` that starts this line's comment, if any."""
        i = 0
        word_start = not self.quoted  # an unquoted, unescaped break just before this character
        while i < len(line):
            c = line[i]
            starts, word_start = word_start, False
            if self.single:
                self.single = c != "'"
            elif self.double:
                i += self._in_double(c)
            elif c == "#" and starts:
                return i
            elif c == "<" and line.startswith("<<", i) and not line.startswith("<<<", i):
                i = self._heredoc(line, i)
                continue
            else:
                i += self._unquoted(c)
                word_start = c in _WORD_BREAK
            i += 1
        return None

    def _in_double(self, c: str) -> int:
        """Characters to skip after `c` inside double quotes (the one an escape covers)."""
        if c == '"':
            self.double = False
        return 1 if c == "\\" else 0

    def _unquoted(self, c: str) -> int:
        self.single = c == "'"
        self.double = c == '"'
        return 1 if c == "\\" else 0

    def _heredoc(self, line: str, i: int) -> int:
        match = _HEREDOC.match(line, i)
        if match is None:
            return i + 1
        self.heredocs.append((match.group(3), match.group(1) == "-"))
        return match.end()
