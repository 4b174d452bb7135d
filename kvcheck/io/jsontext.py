"""JSON that kvcheck reads from outside (server answers, Hub configs, engine flag values), bounded.

Python's `json.loads` has no bound of its own: 5,000 open brackets in a manifest's flag value end in a
RecursionError (a traceback, exit 4), and 30 MiB of `{},{},...` take 1.6 GiB as Python objects. Every
JSON text kvcheck did not write goes through `parse_json` (or `loads`, its drop-in for `json.loads`).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

MAX_JSON_DEPTH = 64  # SGLang's answers nest 4 or 5 levels deep; engine config flags 2 or 3
# JSON values one document may hold: a server info for a thousand DP ranks holds ~100,000. Counted before
# parsing (commas and brackets, C speed), since Python builds ~64 bytes per value: 30 MiB of `{},{},...`
# would otherwise take 1.6 GiB before any check could look at it.
MAX_JSON_VALUES = 1 << 18


class JsonRejected(ValueError):
    """A JSON document kvcheck will not interpret: not JSON, nested too deep, a duplicate key, a huge number."""



def parse_json(body: bytes | str, *, max_depth: int = MAX_JSON_DEPTH, max_values: int = MAX_JSON_VALUES) -> Any:
    """JSON with a nesting limit, a bound on its values and without duplicate keys; JsonRejected says why not.

    The values are bounded before parsing: every value but the first follows a comma or opens an array
    or object, so commas plus brackets (in strings too: an over-count, never an under-count) bound
    them, and memory and every later pass over the result with them. The C decoder raises
    RecursionError near Python's recursion limit, before it could exhaust the stack; a shallower
    document is then walked iteratively against `max_depth`, so that readers of the result may recurse
    freely.
    """
    if isinstance(body, str):
        marks = body.count(",") + body.count("[") + body.count("{")
    else:
        marks = body.count(b",") + body.count(b"[") + body.count(b"{")
    if marks >= max_values:
        raise JsonRejected(f"more than {max_values:,} values in one document ({marks:,} commas and brackets)")
    try:
        value = json.loads(body, object_pairs_hook=_no_duplicates)
    except RecursionError as exc:
        raise JsonRejected(f"nested deeper than {max_depth} levels") from exc
    except json.JSONDecodeError as exc:
        raise JsonRejected(f"not JSON ({exc.msg} at line {exc.lineno} column {exc.colno})") from exc
    except UnicodeDecodeError as exc:
        raise JsonRejected(f"not JSON (not UTF-8 text: byte {exc.start})") from exc
    except ValueError as exc:  # Python's limit on integer digits, or a hook's refusal
        if isinstance(exc, JsonRejected):
            raise
        raise JsonRejected(f"a number too long to be a figure ({exc})") from exc
    _check_depth(value, max_depth)
    return value


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out = dict(pairs)
    if len(out) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                values = [repr(v)[:40] for k, v in pairs if k == key]
                raise JsonRejected(f"the key {key[:80]!r} is given {len(values)} times in one object "
                                   f"({', then '.join(values)}): ambiguous")
            seen.add(key)
    return out


def _check_depth(value: Any, max_depth: int) -> None:
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        node, depth = stack.pop()
        if isinstance(node, dict):
            children: Iterable[Any] = node.values()
        elif isinstance(node, list):
            children = node
        else:
            continue
        if depth > max_depth:
            raise JsonRejected(f"nested deeper than {max_depth} levels")
        stack.extend((child, depth + 1) for child in children if isinstance(child, dict | list))


def loads(text: str | bytes) -> Any:
    """`json.loads` with parse_json's bounds: json.JSONDecodeError for text that is not JSON (with the
    message users know), JsonRejected for JSON kvcheck will not read (nested past 64 levels, too many
    values, a key given twice, a number too long to be a figure)."""
    try:
        return parse_json(text)
    except JsonRejected as exc:
        if str(exc).startswith("not JSON ("):
            json.loads(text)  # raises the decoder's own error: the text failed to decode, not a bound
        raise


__all__ = ["MAX_JSON_DEPTH", "MAX_JSON_VALUES", "JsonRejected", "loads", "parse_json"]
