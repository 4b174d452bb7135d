"""Python literals in engine logs (SGLang's `server_args=ServerArgs(...)`, vLLM's `non-default args:
{...}`), parsed one thread at a time.

CPython 3.11's AST constructor keeps its recursion-depth bookkeeping per interpreter, not per thread
(gh-106905): two threads parsing at once (the log pumps of two roles booted side by side) can raise
`SystemError: AST constructor recursion depth mismatch`. Every `ast.parse` and `ast.literal_eval` in
kvcheck goes through this module's lock; the texts are bounded by their readers, so the lock is held
for at most milliseconds.
"""

from __future__ import annotations

import ast
import threading
from typing import Any

_LOCK = threading.Lock()


def parse_expression(text: str) -> ast.expr:
    """`ast.parse(text, mode="eval").body`, serialised (SyntaxError, ValueError, RecursionError as ast raises them)."""
    with _LOCK:
        return ast.parse(text, mode="eval").body


def literal_eval(value: str | ast.AST) -> Any:
    """`ast.literal_eval(value)`, serialised."""
    with _LOCK:
        return ast.literal_eval(value)
