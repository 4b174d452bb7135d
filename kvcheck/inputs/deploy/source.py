"""Reading deployment files: bounded, safely parsed YAML streams that keep every value's file:line:column."""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kvcheck.errors import InputError
from kvcheck.io.textfile import decode_text, read_text_file
from kvcheck.io.yamlpos import Path_, YamlDocument, load_yaml_documents
from kvcheck.model import Location

STDIN = "-"
STDIN_NAME = "<stdin>"
# Helm output for a whole platform can run to a few MiB; more than this is not a deployment file.
MAX_DEPLOY_BYTES = 16 * 1024 * 1024
MAX_DOCUMENTS = 5000
_CONFLICT_RE = re.compile(r"^(<{7}|={7}|>{7}|\|{7})(?: |$)", re.M)


@dataclass
class SourceFile:
    """One input file (or stdin) as text, split into lines for column arithmetic."""

    name: str  # as shown in messages: the path as given, or <stdin>
    text: str

    def __post_init__(self) -> None:
        self.lines = self.text.splitlines()
        self._line_starts: list[int] | None = None

    def line_start(self, line: int) -> int:
        """Index in `text` of 1-based `line`'s first character (lines end at '\\n', as YAML counts them)."""
        if self._line_starts is None:
            self._line_starts = [0] + [i + 1 for i, c in enumerate(self.text) if c == "\n"]
        return self._line_starts[min(line, len(self._line_starts)) - 1]


@dataclass
class Doc:
    """One YAML document of a source file, with position lookups into that file."""

    source: SourceFile
    yaml: YamlDocument
    index: int  # position of the document in its file, 0-based

    @property
    def data(self) -> Any:
        return self.yaml.data

    def at(self, path: Path_, *, key: bool = False) -> Location:
        """Where the value (or key) at `path` is written, else the nearest enclosing place."""
        positions = self.yaml.positions
        where = positions.of_key(path) if key else positions.of_value(path)
        if where is None:
            return Location(self.source.name, self.yaml.line)
        return Location(self.source.name, *where)

    def inside(self, path: Path_, offset: int) -> Location:
        """Where character `offset` of the text value at `path` is written (block scalars, one-line
        scalars, and flow scalars folded or `\\`-continued over several lines)."""
        positions = self.yaml.positions
        where = positions.values.get(path)
        if where is None:
            return self.at(path)
        line, column = where
        style = positions.styles.get(path, "")
        value = _get(self.data, path)
        if not isinstance(value, str):
            return Location(self.source.name, line, column)
        if style in ("|", ">"):
            return self._in_block(line + 1, offset)
        quote = 1 if style in ("'", '"') else 0
        start = column - 1 + quote
        if self.source.lines[line - 1][start : start + len(value)] == value:  # written on one line, verbatim
            return Location(self.source.name, line, start + offset + 1)
        return self._in_flow(line, column, start, value, offset)

    def _in_flow(self, line: int, column: int, start: int, value: str, offset: int) -> Location:
        """A plain or quoted scalar written over several lines (folded, or `\\` continued): the word at
        `offset` is written verbatim (folding only touches the spaces between words), so it is the
        same occurrence of that word in the source, counted from the scalar's start."""
        rest = value[offset:]
        word = rest.split(None, 1)[0] if rest.strip() and not rest[0].isspace() else ""
        if not word or any(c in word for c in "\\\"'"):
            return Location(self.source.name, line, column)
        nth = _occurrences(value[:offset], word)
        text = self.source.text
        at = self.source.line_start(line) + start  # the scalar's first character
        limit = at + 2 * len(value) + 256  # the scalar's own text, folded or continued
        for _ in range(nth + 1):
            found = text.find(word, at, limit)
            if found < 0:
                return Location(self.source.name, line, column)
            at = found + len(word)
        found = at - len(word)
        number = text.count("\n", 0, found) + 1
        return Location(self.source.name, number, found - (text.rfind("\n", 0, found) + 1) + 1)

    def _in_block(self, first_line: int, offset: int) -> Location:
        """Walk a block scalar's content lines: a literal keeps each line break, a folded one turns
        it into one space; either way every line accounts for its text plus one character."""
        lines = self.source.lines
        indent = _block_indent(lines, first_line)
        consumed = 0
        number = first_line
        while number <= len(lines):
            text = lines[number - 1]
            if text.strip() and len(text) - len(text.lstrip(" ")) < indent:
                break  # the block ended
            content = text[indent:]
            if offset <= consumed + len(content):
                return Location(self.source.name, number, indent + (offset - consumed) + 1)
            consumed += len(content) + 1
            number += 1
        return Location(self.source.name, first_line, indent + 1)


def _occurrences(text: str, word: str) -> int:
    """Non-overlapping occurrences of `word` in `text`, as str.find walks them."""
    count, at = 0, text.find(word)
    while at >= 0:
        count += 1
        at = text.find(word, at + len(word))
    return count


def _block_indent(lines: list[str], line: int) -> int:
    """Indentation of a literal block's content (its first non-blank line at or after `line`)."""
    for text in lines[line - 1 :]:
        if text.strip():
            return len(text) - len(text.lstrip(" "))
    return 0


def _get(data: Any, path: Path_) -> Any:
    for part in path:
        try:
            data = data[part]
        except (KeyError, IndexError, TypeError):
            return None
    return data


def read_source(path: str) -> SourceFile:
    """One file's text (`-` reads stdin), bounded; InputError (exit 2) when missing, binary or huge."""
    if path == STDIN:
        if sys.stdin is None:
            raise InputError("stdin is closed: there is nothing to read from '-'")
        if sys.stdin.isatty():
            raise InputError(
                "stdin is a terminal, not a deployment file",
                hint="pipe the rendered objects into it: helm template . | kvcheck import -",
            )
        raw = sys.stdin.buffer.read(MAX_DEPLOY_BYTES + 1)
        if len(raw) > MAX_DEPLOY_BYTES:
            raise InputError(f"{STDIN_NAME}: more than {MAX_DEPLOY_BYTES:,} bytes is too large for deployment files")
        return SourceFile(STDIN_NAME, decode_text(raw, STDIN_NAME, kind="deployment file"))
    name = display_name(path)
    return SourceFile(name, read_text_file(Path(path), name, kind="deployment file", max_bytes=MAX_DEPLOY_BYTES))


def display_name(path: str) -> str:
    """The path as locations show it: relative to the working directory when the file is below it."""
    candidate = Path(path)
    if candidate.is_absolute():
        try:
            return str(candidate.relative_to(Path.cwd()))
        except ValueError:
            return path
    return path


def parse_documents(source: SourceFile) -> list[Doc]:
    """The YAML documents of a file; merge-conflict markers and syntax errors are InputErrors with file:line."""
    marker = _CONFLICT_RE.search(source.text)
    if marker is not None:
        line = source.text.count("\n", 0, marker.start()) + 1
        raise InputError(
            f"{source.name}:{line}:1: merge-conflict marker '{marker.group(1)}': resolve the conflict first"
        )
    documents = load_yaml_documents(source.text, source.name)
    if len(documents) > MAX_DOCUMENTS:
        raise InputError(f"{source.name}: {len(documents):,} YAML documents; at most {MAX_DOCUMENTS:,} are read")
    return [Doc(source, document, i) for i, document in enumerate(documents)]
