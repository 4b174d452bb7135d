"""Bulk reading: find, in C, the few lines of a long log that feed() could do anything with."""

from __future__ import annotations

import re
from collections.abc import Iterable

from kvcheck.engines.sglang.logs.patterns import HANDLER_KEYS
from kvcheck.engines.sglang.logs.values import MAX_LINE_CHARS

# -- bulk reading (LogReader.read_stream) -------------------------------------------------------------
# A long log is nearly all request logs. read_stream() finds, per chunk of a few MiB and in C (one regex
# search, a few bytes.find), the lines feed() could do anything with, and feeds only those:
#
# * a line that does not start with a prefix *template*: the exact characters before the message
#   (kubectl's and the runtime's prefixes, SGLang's `[date time TAGS] `) of a line already fed, with
#   every ASCII digit free. split_prefix() reads nothing past those characters and tells digits apart
#   from nothing else, so every line matching a template splits where that line did;
# * a line whose message starts with a handler key or a level word (_SKIP_KEYS_RE; `INFO:` of
#   uvicorn's access log is not one unless the line names Uvicorn);
# * a line holding a needle feed() looks for anywhere (NEEDLES), an ESC, or a CR inside it;
# * the line after one that leaves the reader waiting for the next line (an exception just ended,
#   a command line continued with a backslash).
#
# Feeding a line that needs nothing is harmless (it is what feed() does with every line), so each rule
# needs only to find every line that matters; test_logparse.py checks the result equals feeding every line.

# Bytes read at a time; a chunk is cut at its last newline, so no line is ever split.
READ_CHUNK_BYTES = 4 << 20
# A UTF-8 character takes at most 4 bytes, so decoding this many bytes of a longer line gives the same
# first MAX_LINE_CHARS characters as decoding all of it (feed() keeps no more).
MAX_LINE_BYTES = 4 * MAX_LINE_CHARS
# Prefix templates kept per reader, and the longest one (bytes): bounded regex, bounded work per line.
MAX_TEMPLATES = 64
MAX_TEMPLATE_BYTES = 256
DIGITS_AS_ZERO = bytes.maketrans(b"123456789", b"000000000")
# Message starts feed() acts on: its handler keys and the level words (all in HANDLER_KEYS).
_SKIP_KEYS_RE = b"|".join(re.escape(key.encode()) for key in sorted(HANDLER_KEYS - {"INFO"})) + rb"|INFO(?!:)"
# Text feed() looks for anywhere in a prefixed line ("KV Cache", " hit an exception", Uvicorn's
# startup line behind "INFO:") or that changes how the line reads (ESC: ANSI codes), each with the
# index of a byte request logs hardly hold: memchr finds that byte ~20x faster than bytes.find the text.
NEEDLES = ((b"KV Cache", 1), (b" hit an exception", 9), (b"Uvicorn", 0), (b"\x1b", 0))
# A false hit of a needle's rare byte costs a Python step, worth bytes.find scanning this many bytes:
# find_needle() falls back to bytes.find once false hits are denser than that (plus a few).
_FALSE_HIT_BYTES = 512
# A carriage return inside a line (a redrawn progress bar); one just before the newline is CRLF.
INNER_CR_RE = re.compile(rb"\r(?!\r*\n)")
# A blank line (spaces, tabs, CRs at most) changes nothing feed() keeps unless a command line is being
# continued, when every line is fed anyway ("forced"): neither regex points at one. A log of nothing but
# newlines is then counted in C instead of fed line by line.
_NOT_BLANK = rb"(?![ \t\r]*(?:\n|$))"
EVERY_LINE_RE = re.compile(rb"\n" + _NOT_BLANK)
# A chunk where one line in DENSE_SHARE or more needs parsing (after DENSE_AFTER_LINES of them) has
# its remaining lines fed one by one: the search would find nearly every line anyway.
DENSE_AFTER_LINES = 256
DENSE_SHARE = 4


def find_needle(data: bytes, needle: bytes, rare: int, pos: int, end: int) -> int:
    """`data.find(needle, pos, end)`, located by the needle's rare byte while that byte stays rare."""
    byte = needle[rare : rare + 1]
    hit = data.find(byte, pos + rare, end)
    false_hits = 0
    while hit != -1:
        start = hit - rare
        if data.startswith(needle, start):
            return start if start + len(needle) <= end else -1
        false_hits += 1
        if false_hits > 8 + (hit - pos) // _FALSE_HIT_BYTES:
            return data.find(needle, start + 1, end)
        hit = data.find(byte, hit + 1, end)
    return -1


def _template_token(byte: int) -> bytes:
    return rb"[0-9]" if 48 <= byte <= 57 else re.escape(bytes((byte,)))


def odd_line_regex(templates: Iterable[bytes]) -> re.Pattern[bytes]:
    """A regex matching the newline before each line the templates do not vouch for.

    A line is vouched for when it starts with a template and its message with no handler key.

    The templates (digits written as 0) are merged into a trie so a line is compared once per byte.
    """
    trie: dict[bytes, dict] = {}
    for template in templates:
        node = trie
        for byte in template:
            node = node.setdefault(_template_token(byte), {})
        node[b""] = {}
    if not trie:
        return EVERY_LINE_RE

    def emit(node: dict[bytes, dict]) -> bytes:
        parts: list[bytes] = []
        while len(node) == 1:
            token, child = next(iter(node.items()))
            if not token:
                return b"".join(parts)
            parts.append(token)
            node = child
        branches = b"|".join(token + emit(child) if token else b"" for token, child in node.items())
        return b"".join(parts) + b"(?:" + branches + b")"

    return re.compile(rb"\n" + _NOT_BLANK + rb"(?!" + emit(trie) + rb"(?!" + _SKIP_KEYS_RE + rb"))")
