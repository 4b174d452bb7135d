"""The `server_args=ServerArgs(...)` line and quoted launch command lines, parsed without eval."""

from __future__ import annotations

import ast
import re
import shlex
from collections.abc import Iterator
from typing import Any

from kvcheck.engines.sglang.logs.patterns import COMMAND_RE
from kvcheck.io.pyast import literal_eval, parse_expression


def to_number(text: str) -> int | float | str | None:
    text = text.strip()
    if text.endswith(" GB"):
        text = text[:-3]
    if text in ("None", "null"):
        return None
    try:
        return int(text)
    except ValueError:
        pass
    try:
        return float(text)
    except ValueError:
        return text


def gib(match: re.Match[str] | None) -> float | None:
    return float(match.group(1)) if match else None


def parse_server_args(text: str) -> dict[str, Any]:
    """Parse `ServerArgs(a=1, ...)` or `{'a': 1, ...}` as logged; tolerate elisions and cut lines.

    Values that are not Python literals (objects, enums, cut-off text) are left out rather than
    guessed, so a missing key means "not stated", never a default.
    """
    text = text.strip()
    try:
        node = parse_expression(text)
    except (SyntaxError, ValueError, MemoryError, RecursionError):
        node = None
    if isinstance(node, ast.Dict):
        out: dict[str, Any] = {}
        for key, value in zip(node.keys, node.values, strict=True):
            if isinstance(key, ast.Constant) and isinstance(key.value, str):
                literal = _literal(value)
                if literal is not _NOT_LITERAL:
                    out[key.value] = literal
        return out
    if isinstance(node, ast.Call):
        out = {}
        for keyword in node.keywords:
            if keyword.arg is not None:
                literal = _literal(keyword.value)
                if literal is not _NOT_LITERAL:
                    out[keyword.arg] = literal
        return out
    return _parse_server_args_tolerant(text)


_NOT_LITERAL = object()


def _literal(node: ast.AST) -> Any:
    try:
        return literal_eval(node)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return _NOT_LITERAL


def _split_top_level(text: str) -> Iterator[str]:
    """Split on commas outside brackets and quotes; a cut-off tail comes out as the last piece."""
    depth = 0
    quote = ""
    start = 0
    escaped = False
    for i, ch in enumerate(text):
        if quote:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == quote:
                quote = ""
        elif ch in "'\"":
            quote = ch
        elif ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        elif ch == "," and depth == 0:
            yield text[start:i]
            start = i + 1
    yield text[start:]


_ITEM_RE = re.compile(r"\s*(?:'(\w+)'\s*:|\"(\w+)\"\s*:|(\w+)\s*=)\s*(.*)", re.DOTALL)


def _parse_server_args_tolerant(text: str) -> dict[str, Any]:
    body = text
    for opener, closer in (("ServerArgs(", ")"), ("{", "}")):
        if body.startswith(opener):
            body = body[len(opener) :]
            if body.endswith(closer):
                body = body[: -len(closer)]
            break
    out: dict[str, Any] = {}
    for piece in _split_top_level(body):
        match = _ITEM_RE.match(piece)
        if not match:
            continue
        key = match.group(1) or match.group(2) or match.group(3)
        try:
            out[key] = literal_eval(match.group(4).strip())
        except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
            continue
    return out


def parse_command_line(text: str) -> tuple[str, ...] | None:
    """The argv of an SGLang launch quoted in a log (`$ python3 -m sglang.launch_server ...`)."""
    match = COMMAND_RE.search(text)
    if not match:
        return None
    tail = text[match.start() :].replace("\\\n", " ")
    try:
        return tuple(shlex.split(tail))
    except ValueError:
        return tuple(tail.split())
