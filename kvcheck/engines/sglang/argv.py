"""How an SGLang server is launched: where its server arguments start on a command line."""

from __future__ import annotations

import re
from collections.abc import Sequence

# `python -m sglang.launch_server`, `python -m sglang.launch_server_grpc`, `-m dynamo.sglang`, ...
_MODULE_RE = re.compile(r"^(?:sglang(?:\.[\w.]+)?|dynamo\.sglang(?:\.[\w.]+)?)$")


def launch_index(argv: Sequence[str]) -> int | None:
    """Index of the first server argument after `python -m sglang.X`, `-m dynamo.sglang` or `sglang serve`."""
    for i, word in enumerate(argv):
        if word == "-m" and i + 1 < len(argv) and _MODULE_RE.match(argv[i + 1]):
            return i + 2
        if word.rsplit("/", 1)[-1] == "sglang" and i + 1 < len(argv) and argv[i + 1] == "serve":
            return i + 2
    return None
