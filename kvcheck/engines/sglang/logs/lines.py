"""Line splitting: SGLang's prefix behind kvcheck.io.logwrap's unwrapping (kubectl, CRI, Docker JSON), decoding."""

from __future__ import annotations

import codecs
from collections.abc import Iterator
from typing import IO

from kvcheck.engines.sglang.logs.patterns import GPU_PREFIX_RE, PREFIX_ANYWHERE_RE, PREFIX_RE
from kvcheck.engines.sglang.logs.values import MAX_LINE_CHARS
from kvcheck.io.logwrap import unwrap


def split_prefix(line: str) -> tuple[str, str | None, int, int | None]:  # noqa: C901 - per-line hot path
    """Find SGLang's prefix behind whatever the container and the terminal put before it.

    Returns `(shown, tags, start, plain_start)`: `shown` is the line as a terminal shows it (no
    newline, CR-redrawn progress bars, ANSI codes or Docker's JSON wrapper); `tags` the rank tags of
    the prefix (`" DP0 TP3"`), None for a line without one; `shown[start:]` the message. `plain_start`
    is `start` when the line needed no undecorating and the prefix was found at its start (behind
    kubectl's and the container runtime's prefixes), else None: only then do the characters before
    `start` alone decide how the line splits, which LogReader.read_stream() relies on.

    Kept whole on purpose: it runs on every line of multi-gigabyte logs, and each branch is a cheap
    character test guarding one regex, in the order the prefixes nest.
    """
    line, offset, _, plain = unwrap(line)  # kubectl's, the runtime's and the terminal's wrapping (shared)
    first = line[offset : offset + 1]
    match = PREFIX_RE.match(line, offset) if (first == "[" or first.isdigit()) else None
    if match is not None:
        return line, match.group(1), match.end(), match.end() if plain else None
    if first == "[" and line[offset + 1 : offset + 4] == "gpu":
        match = GPU_PREFIX_RE.match(line, offset)
        if match is not None:
            return line, f" GPU{match.group(1)}", match.end(), match.end() if plain else None
    if line.find("] ", offset) != -1:
        match = PREFIX_ANYWHERE_RE.search(line, offset)
        if match is not None:
            tags = match.group(1) if match.group(2) is None else f" GPU{match.group(2)}"
            return line, tags, match.end(), None
    return line[offset:], None, 0, None


def _text_blocks(stream: IO[bytes], chunk_bytes: int) -> Iterator[str]:
    """Decoded text in blocks of whole lines (the last may lack its newline); constant memory.

    Bad UTF-8 is replaced, not fatal. A line longer than MAX_LINE_CHARS is cut to that length, so a
    file without newlines cannot exhaust memory.
    """
    decoder = codecs.getincrementaldecoder("utf-8")("replace")
    carry = ""  # the unfinished last line, at most MAX_LINE_CHARS
    dropping = False  # the unfinished line is already overlong: drop text until its newline
    while True:
        chunk = stream.read(chunk_bytes)
        if not chunk:
            break
        text = decoder.decode(chunk)
        last = text.rfind("\n")
        if last == -1:
            if not dropping:
                carry += text
                if len(carry) > MAX_LINE_CHARS:
                    carry, dropping = carry[:MAX_LINE_CHARS], True
            continue
        first = text.find("\n")
        if not dropping:
            carry = (carry + text[:first])[:MAX_LINE_CHARS]
        yield carry + text[first : last + 1]
        carry, dropping = text[last + 1 :], False
        if len(carry) > MAX_LINE_CHARS:
            carry, dropping = carry[:MAX_LINE_CHARS], True
    tail = decoder.decode(b"", final=True)
    if tail and not dropping:
        carry = (carry + tail)[:MAX_LINE_CHARS]
    if carry:
        yield carry


def iter_log_lines(stream: IO[bytes], *, chunk_bytes: int = 1 << 20) -> Iterator[str]:
    """Lines of a binary stream without their newline (carriage returns kept); see _text_blocks."""
    for block in _text_blocks(stream, chunk_bytes):
        lines = block.split("\n")
        if block.endswith("\n"):
            lines.pop()
        yield from lines
