"""Reading deployment files: bounded, safely parsed YAML streams that keep every value's file:line:column."""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kvcheck.errors import InputError
from kvcheck.inputs.textfile import read_text_file
from kvcheck.inputs.yamlpos import Path_, YamlDocument, load_yaml_documents
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
        """Where character `offset` of the text value at `path` is written (literal blocks, one-line scalars)."""
        positions = self.yaml.positions
        where = positions.values.get(path)
        if where is None:
            return self.at(path)
        line, column = where
        style = positions.styles.get(path, "")
        value = _get(self.data, path)
        if not isinstance(value, str):
            return Location(self.source.name, line, column)
        before = value[:offset]
        if style in ("|", ">"):
            return self._in_block(line + 1, offset)
        if "\n" in before or "\\" in value and style == '"':
            return Location(self.source.name, line, column)
        quote = 1 if style in ("'", '"') else 0
        return Location(self.source.name, line, column + quote + offset)

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
        if b"\x00" in raw:
            raise InputError(f"{STDIN_NAME}: binary data, not a deployment file")
        try:
            text = raw.decode("utf-8-sig")
        except UnicodeDecodeError as exc:
            raise InputError(f"{STDIN_NAME}: is not UTF-8 text (byte {exc.start})") from exc
        return SourceFile(STDIN_NAME, text)
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
