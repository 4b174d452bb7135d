"""The SGLang log lines the reader understands, as regexes, and the handler table's keys.

# Figures SGLang prints in "GB" are GiB (it divides by 1 << 30), so every *gib value is GiB.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

# ---------------------------------------------------------------------------------------------------
# Line shapes. Every pattern is anchored (match, not search) and only run on lines whose first four
# message characters select it.

TAG_RE = re.compile(r"([A-Z][A-Z_]*?)(\d+)")
# SGLang's own prefix; the leading "[" is optional because some quoted logs lost it.
PREFIX_RE = re.compile(
    r"\[?(?:\d{4}-\d{2}-\d{2} )?\d{2}:\d{2}:\d{2}(?:[.,]\d{1,6})?((?: [A-Z][A-Z_]*\d+)*)\] ?"
)
PREFIX_ANYWHERE_RE = re.compile(
    r"\[(?:\d{4}-\d{2}-\d{2} )?\d{2}:\d{2}:\d{2}(?:[.,]\d{1,6})?((?: [A-Z][A-Z_]*\d+)*)\] ?"
    r"|\[gpu(?:_id)?=(\d+)\] ?"
)
# The 0.1 and 0.2 releases: no time, only the scheduler's CUDA device (kept as the tag `GPU<n>`).
GPU_PREFIX_RE = re.compile(r"\[gpu(?:_id)?=(\d+)\] ?")
LEVEL_STARTS = ("DEBUG ", "INFO ", "WARNING ", "ERROR ", "CRITICAL ")
LEVEL_RE = re.compile(r"(?:DEBUG|INFO|WARNING|ERROR|CRITICAL) [\w.\-]+\.py:\d+: ")

# A decimal figure as Python's float() reads it: a damaged "7..52" is no figure rather than a crash.
_DECIMAL = r"(\d+\.?\d*|\.\d+)"
_GIB = _DECIMAL + r" ?GB"
AVAIL_RE = re.compile(r"avail mem=" + _GIB)
ELAPSED_RE = re.compile(r"elapsed=" + _DECIMAL + r" ?s")
TYPE_RE = re.compile(r"type=([\w.]+)")
WEIGHT_DTYPE_RE = re.compile(r"\bdtype=([\w.]+)")
QUANT_RE = re.compile(r"quant=([^,]+)")
MEM_USAGE_RE = re.compile(r"mem usage=(-?\d+\.?\d*|-?\.\d+) ?GB")  # CPU servers can print -0.00
KV_ALLOC_RE = re.compile(r"(?P<label>.*?)\s*KV Cache (?P<what>is allocated|VA upper bound)\.?(?P<rest>.*)")
KV_DTYPE_RE = re.compile(r"dtype: ([\w.]+)")
KV_TOKENS_RE = re.compile(r"#tokens: (\d+)")
KV_SIZE_RE = re.compile(r"\b(K|V|KV) size: " + _GIB)
SWA_POOL_RE = re.compile(r"Use sliding window memory pool\. full_layer_tokens=(\d+), swa_layer_tokens=(\d+)")
SWAKV_RE = re.compile(r"SWAKVPool mem usage: " + _GIB + r", swa size: (\d+), full size: (\d+)")
MAMBA_RE = re.compile(
    r"Mamba Cache is allocated\. max_mamba_cache_size: (\d+)(?:, conv_state size: " + _GIB + ")?(?:, ssm_state size: " + _GIB + ")?"
)
POOL_END_RE = re.compile(r"Memory pool end\. avail mem=" + _GIB)
GRAPH_RE = re.compile(r"Capture (?P<what>.*?)\s*(?:cuda|CUDA) graph (?P<event>begin|end)\b(?P<rest>.*)")
TIME_ELAPSED_RE = re.compile(r"Time elapsed: " + _DECIMAL + r" ?s")
POST_SPLIT_RE = re.compile(r"Post-capture KV sizing: full_layer_tokens=(\d+), swa_layer_tokens=(\d+)")
POST_ALLOC_RE = re.compile(r"Post-capture KV sizing: KV cache allocated\.(.*)")
POST_MRR_RE = re.compile(r"Post-capture KV sizing: max_running_requests (\d+) -> (\d+)")
CONTEXT_WARNING_RE = re.compile(r"KV pool holds (\d+) tokens, fewer than --context-length (\d+)")
FINAL_RE = re.compile(r"max_total_num_tokens=(\d+)(.*)")
FIELD_RE = re.compile(r"(\w+)=([^,]*)")
CLAMPED_RE = re.compile(r"max_total_tokens=(\d+) is larger than the profiled value (\d+)")
MRR_REDUCED_RE = re.compile(r"max_running_requests was reduced from the requested (\d+) to (\d+)")
UVICORN_RE = re.compile(r"(?:INFO:\s+)?Uvicorn running on (\S+)")
READY_TEXT = "The server is fired up and ready to roll"
KV_DTYPE_LINE_RE = re.compile(r"Using KV cache dtype: ([\w.]+)")
SCHEDULER_DIED_RE = re.compile(r"Rank (\d+) scheduler died during initialization")
EXCEPTION_RE = re.compile(
    r"(?:[A-Za-z_][\w]*\.)*([A-Za-z_]\w*(?:Error|Exception|Exit|Interrupt|Warning))(?::\s?(.*))?$"
)
VERSION_RE = re.compile(
    r"\bsglang(?:[ _-]?version)?\s*(?:==|:|=|\s+v(?=\d))\s*v?(\d+\.\d+\.\d+(?:\.?post\d+|rc\d+|\.dev\d+)?)",
    re.IGNORECASE,
)
COMMAND_RE = re.compile(r"(?:\S*python[\d.]*\s+-m\s+sglang\.[\w.]+|\S*sglang\s+serve)(?=\s|$)")

CHAINED_EXCEPTION = ("During handling of the above exception", "The above exception was the direct cause")

# The handler table: the first four characters of a message -> the LogReader method that reads it.
# LogReader builds its dispatch from this table, and read_stream() skips prefixed lines whose message
# starts with none of these keys nor a level word, so the two can never disagree.
HANDLERS: dict[str, str] = {
    "serv": "_on_server_args",
    "Load": "_on_weights",
    "KV C": "_on_kv_allocated",
    "KV p": "_on_context_warning",
    "Use ": "_on_swa_pool",
    "SWAK": "_on_swakv",
    "Mamb": "_on_mamba",
    "Memo": "_on_pool_end",
    "Capt": "_on_graph",
    "Post": "_on_post_capture",
    "max_": "_on_max",
    "INFO": "_on_uvicorn",
    "Uvic": "_on_uvicorn",
    "The ": "_on_ready",
    "Sche": "_on_scheduler_exception",
    "Rece": "_on_sigquit",
    "Rank": "_on_scheduler_died",
    "Usin": "_on_kv_dtype",
    "Trac": "_on_traceback",
}
# Handler keys plus the level words of releases that printed `WARNING file.py:N:` after the bracket.
HANDLER_KEYS = frozenset(HANDLERS) | frozenset(word[:4] for word in LEVEL_STARTS)

# Messages of these types stop SGLang's startup (docs/sglang-internals.md, Log lines: Failures): a
# boot showing one failed.
FATAL_TEXTS = (
    "Not enough memory",
    "Loaded weights leave no GPU memory",
    "OutOfMemoryError",
    "CUDA out of memory",
    "memory capacity is unbalanced",
    "cannot hold even one request",
    "leaves no room for the full KV pool",
    "Not enough GPU memory for hybrid",
    "too small to serve any requests",
    "Memory pool size is too small",
)

# Texts of an out-of-memory failure in SGLang's last lines (the allocator's and SGLang's own words).
OOM_TEXTS = (
    "OutOfMemoryError",
    "CUDA out of memory",
    "out of memory",
    "Not enough memory",
    "Loaded weights leave no GPU memory",
    "leaves no room for the full KV pool",
    "Not enough GPU memory for hybrid",
)
SIGKILL_STATUSES = (137, -9)
# uvicorn binds the HTTP port only after the pool is sized; when another process took the port meanwhile it
# logs this, and SGLang stays up serving nobody (0.5.23 on CPU: "ERROR:    [Errno 98] error while attempting
# to bind on address ('127.0.0.1', 40697): address already in use", then "Waiting for application shutdown."
# and nothing more). Errno 48 is macOS's.
BIND_FAILED_RE = re.compile(
    r"ERROR:\s+\[Errno (?:98|48)\] error while attempting to bind on address \(.*?, (\d{1,5})\): "
    r"address already in use"
)


def port_taken(line: str) -> int | None:
    """The port uvicorn could not bind, from one log line (bounded to its first 1,000 characters)."""
    match = BIND_FAILED_RE.search(line[:1000])
    return int(match.group(1)) if match else None


def exit_hint(returncode: int | None, lines: Sequence[str]) -> str | None:
    """The fix for an SGLang that exited before its pool was known. Status 137 is SGLang killing its
    own process tree after any scheduler exception, not by itself an out-of-memory exit: only the
    log's words say which."""
    if returncode == 2:
        return "the engine rejected its command line: check the role's args against the engine's --help"
    if any(text in line for line in lines for text in OOM_TEXTS):
        return ("the engine ran out of memory: raise mem-fraction-static, add GPUs (tp-size) or choose a "
                "smaller model or KV dtype")
    if returncode not in SIGKILL_STATUSES:
        return None
    if any("Traceback" in line or "Error" in line or "exception" in line for line in lines):
        return ("SGLang killed its own processes (status 137) after the exception quoted above: fix what "
                "it names (an argument, the model, the environment)")
    return ("killed by SIGKILL with no exception in its log: the host's out-of-memory killer (see dmesg "
            "or the container's OOMKilled status) or an operator; give the role more host memory")
