"""Untrusted text made safe to show: every control character written as an escape.

Names, messages and values from files and servers reach terminals, YAML comments, CI annotations and
reports; a newline there can start a new key or annotation, an escape sequence can rewrite a terminal,
and a bidi control can make text read otherwise than it runs. Bottom layer: imports nothing of kvcheck.
"""

from __future__ import annotations

import re

# Control characters, lone surrogates, non-characters, and the Unicode controls that reorder or break lines
# where a reader does not expect it: bidi embeddings and isolates (U+202A-U+202E, U+2066-U+2069, "Trojan
# Source") and the line and paragraph separators YAML and JavaScript read as line breaks (U+2028, U+2029).
_UNPRINTABLE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069\ud800-\udfff\ufffe\uffff]")


def printable(text: str) -> str:
    """`text` with every control character shown as an escape (`\x1b`, `\r`); tabs and newlines stay."""
    if not _UNPRINTABLE.search(text):
        return text
    return _UNPRINTABLE.sub(lambda m: "\\r" if m.group() == "\r" else f"\\x{ord(m.group()):02x}"
                            if ord(m.group()) < 0x100 else f"\\u{ord(m.group()):04x}", text)


def one_line(text: str) -> str:
    """`text` as printable() makes it, with newlines shown as `\n` too (names, table cells)."""
    return printable(text).replace("\n", "\\n")


_COMMAND_LINE = re.compile(r"^([ \t]*)::", re.M)


def no_workflow_commands(text: str) -> str:
    """`text` with a backslash before any line's leading `::`: a CI runner (GitHub Actions) reads a line that
    starts with `::` on stdout or stderr as a workflow command, and kvcheck's human-readable lines never
    start so, so such a line came from an untrusted name or path that carried a newline."""
    return _COMMAND_LINE.sub(lambda m: f"{m.group(1)}\\::", text)
