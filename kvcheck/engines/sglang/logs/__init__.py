"""Read SGLang startup logs line by line: pool, context and limits per rank, in constant memory.

The same reader serves `kvcheck logs` (a file or stdin, possibly gigabytes of request logs after the
startup lines) and the measure backend (an engine's output fed while it boots). It understands the
formats SGLang printed from mid 2024 to mid 2026 (docs/sglang-internals.md, Log lines):

* prefix `[YYYY-MM-DD HH:MM:SS{.mmm}{ DPd}{ PPp}{ ATTN_CPc}{ MOE_DPm}{ TPt}{ EPe}] ` (older releases:
  no date; some sources lose the leading `[`), optionally followed by `WARNING server_args.py:1245: `;
  the 0.1 and 0.2 releases of 2024 printed only the CUDA device instead: `[gpu_id=N] ` or `[gpu=N] `;
* whatever `kubectl logs --prefix/--timestamps`, the CRI log format or Docker's json-file driver put
  before it; ANSI colour codes; CRLF and carriage-return progress bars;
* allocation lines with and without `#tokens` and `dtype:`, MLA's single `KV size`, the post-capture
  `KV Cache VA upper bound`, the final `max_total_num_tokens=...` line with or without its later fields.

`feed()` parses one line at a time (the measure backend, while an engine boots); `read_stream()` reads
a whole log in chunks and parses only the lines that can matter, found in C, so skipping request logs
costs a few times what reading them does (see the notes above READ_CHUNK_BYTES; docs/logs.md has figures).

The package's modules, in the order a line meets them: lines.py (prefixes and decoding), bulk.py (which
lines of a long log need parsing), reader.py (LogReader and its handlers, keyed by patterns.py's
table), serverargs.py (the server_args line and quoted command lines), values.py (what comes out).
"""

from __future__ import annotations

from typing import IO

from kvcheck.engines.sglang.logs.reader import LogReader
from kvcheck.engines.sglang.logs.values import SglangLogSummary


def read_log(stream: IO[bytes]) -> SglangLogSummary:
    """Read a whole binary stream and summarise it."""
    reader = LogReader()
    reader.read_stream(stream)
    return reader.summary()
