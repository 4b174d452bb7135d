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
"""

from __future__ import annotations

import ast
import codecs
import json
import re
import shlex
from collections import deque
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import IO, Any

from kvcheck.engines.sglang.serving import max_input_len

# Figures SGLang prints in "GB" are GiB (it divides by 1 << 30), so every *_gib value is GiB.

PHASES = ("starting", "loading_weights", "sizing_pool", "capturing_graphs", "ready")
FAILED = "failed"
_PHASE_ORDER = {name: i for i, name in enumerate(PHASES)}

# Traceback and error lines kept for quoting: enough for one traceback, constant memory.
MAX_ERROR_LINES = 40
# Warnings kept in the summary (one per rank is normal; a restart loop must not grow memory).
MAX_WARNINGS = 256
# Longest line the reader looks at; the rest of a longer line is dropped (binary junk, runaway prints).
MAX_LINE_CHARS = 1 << 20

_TAG_FIELDS = {"DP": "dp", "PP": "pp", "ATTN_CP": "attn_cp", "MOE_DP": "moe_dp", "TP": "tp", "EP": "ep"}
_TAG_ORDER = ("dp", "pp", "attn_cp", "moe_dp", "tp", "ep")
_TAG_NAMES = {v: k for k, v in _TAG_FIELDS.items()}


@dataclass(frozen=True)
class RankTag:
    """The rank tags of a scheduler's log prefix; None where SGLang printed no such tag.

    SGLang prints a tag only when that parallel width is above 1, so a TP1 server's lines carry
    none (`str(tag) == ""`). Under attention DP the DP tag is the attention-DP rank and the TP tag the
    global TP rank (`DP3 TP3 EP3`). Tags this reader does not know are kept in `extra`; so is
    `GPU`, the CUDA device that the 2024 releases' `[gpu=N]` prefix names instead of a TP rank.
    """

    dp: int | None = None
    pp: int | None = None
    attn_cp: int | None = None
    moe_dp: int | None = None
    tp: int | None = None
    ep: int | None = None
    extra: tuple[tuple[str, int], ...] = ()

    def __str__(self) -> str:
        parts = [
            f"{_TAG_NAMES[name]}{getattr(self, name)}"
            for name in _TAG_ORDER
            if getattr(self, name) is not None
        ]
        parts.extend(f"{name}{rank}" for name, rank in self.extra)
        return " ".join(parts)

    @property
    def sort_key(self) -> tuple[int, ...]:
        known = tuple(-1 if getattr(self, name) is None else getattr(self, name) for name in _TAG_ORDER)
        return known + tuple(rank for _, rank in self.extra)

    @classmethod
    def parse(cls, text: str) -> RankTag:
        """`" DP0 TP3"` -> RankTag(dp=0, tp=3); unknown tag names go to `extra`."""
        values: dict[str, int] = {}
        extra: list[tuple[str, int]] = []
        for name, rank in _TAG_RE.findall(text):
            attr = _TAG_FIELDS.get(name)
            if attr is None:
                extra.append((name, int(rank)))
            else:
                values[attr] = int(rank)
        return cls(**values, extra=tuple(extra))


UNTAGGED = RankTag()


@dataclass(frozen=True)
class LogEvent:
    """One recognised log line. `rank` is None for lines without SGLang's prefix (launcher prints,
    bare quotes); `line_no` is 1-based; `values` holds the parsed figures (units in the key names)."""

    kind: str
    rank: RankTag | None
    line_no: int
    text: str
    values: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class RankFigures:
    """What the log says about one scheduler rank's KV pool (token counts are per rank).

    `final_tokens` is the `max_total_num_tokens=` of the final line (what the server serves);
    `allocated_tokens` the `#tokens` of the rank's first target allocation line, which post-capture
    sizing can still shrink (`upper_bound`) and which for hybrid sliding-window models of some
    releases counts the SWA pool, not the full-attention pool (`full_layer_tokens`).
    """

    rank: RankTag
    final_tokens: int | None = None
    allocated_tokens: int | None = None
    upper_bound: bool = False
    post_capture_tokens: int | None = None
    full_layer_tokens: int | None = None
    swa_tokens: int | None = None
    draft_tokens: int | None = None
    context_len: int | None = None
    max_running_requests: int | None = None
    chunked_prefill_size: int | None = None
    max_prefill_tokens: int | None = None
    available_gpu_mem_gib: float | None = None
    kv_dtype: str | None = None
    kv_gib: float | None = None
    k_gib: float | None = None
    v_gib: float | None = None
    weights_gib: float | None = None
    avail_after_weights_gib: float | None = None
    pool_end_avail_gib: float | None = None
    mamba_cache_size: int | None = None
    context_warning_tokens: int | None = None
    final_line: int | None = None
    allocation_line: int | None = None
    figure_line: int | None = None

    @property
    def first_allocation_only(self) -> bool:
        """True when the figure comes from a sizing line, not the final or post-capture line."""
        return self.final_tokens is None and self.post_capture_tokens is None and self.best_tokens is not None

    @property
    def figure_source(self) -> str | None:
        """Which line the pool figure comes from: final, post_capture, swa_pool, allocation, upper_bound."""
        if self.final_tokens is not None:
            return "final"
        if self.post_capture_tokens is not None:
            return "post_capture"
        if self.full_layer_tokens is not None:
            return "swa_pool"
        if self.allocated_tokens is not None:
            return "upper_bound" if self.upper_bound else "allocation"
        return None

    @property
    def best_tokens(self) -> int | None:
        """The rank's pool for one full-length request: final line, else the best sizing line."""
        for value in (
            self.final_tokens,
            self.post_capture_tokens,
            self.full_layer_tokens,
            self.allocated_tokens,
        ):
            if value is not None:
                return value
        return None

    @property
    def max_req_input_len(self) -> int | None:
        """The longest prompt the scheduler admits, derived as SGLang does (tp_worker.py:568-575)."""
        tokens = self.best_tokens
        if tokens is None or self.context_len is None:
            return None
        return max_input_len(self.context_len, tokens)


@dataclass(frozen=True)
class LogSummary:
    """Everything the log established, per rank, plus what it lacks (`missing`, in words)."""

    ranks: tuple[RankFigures, ...]
    server_args: Mapping[str, Any] | None
    server_args_line: int | None
    command_line: tuple[str, ...] | None
    version: str | None
    warnings: tuple[LogEvent, ...]
    errors: tuple[str, ...]
    ready: bool
    phase: str
    missing: tuple[str, ...]
    lines: int
    startup_lines: int
    boots: int = 1
    failure: str | None = None

    @property
    def is_sglang(self) -> bool:
        """False when not one SGLang startup line was recognised (wrong file, another engine)."""
        return self.startup_lines > 0

    def pool_tokens(self) -> int | None:
        """The pool one request can use: the minimum over ranks (TP, PP stages, DP ranks) with a figure."""
        figures = [rank.best_tokens for rank in self.ranks if rank.best_tokens is not None]
        return min(figures) if figures else None


# ---------------------------------------------------------------------------------------------------
# Line shapes. Every pattern is anchored (match, not search) and only run on lines whose first four
# message characters select it.

_TAG_RE = re.compile(r"([A-Z][A-Z_]*?)(\d+)")
_ANSI_RE = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b[@-Z\\-_]")
# kubectl logs --prefix: "[pod/name/container] "
_KUBECTL_PREFIX_RE = re.compile(r"\[[a-z]+/[^\]\s]+\] ")
# kubectl logs --timestamps, docker logs -t, CRI files under /var/log/pods ("... stdout F ").
_RFC3339_RE = re.compile(
    r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(?:[.,]\d+)?(?:Z|[+-]\d{2}:?\d{2})? (?:(?:stdout|stderr) [FP] )?"
)
# SGLang's own prefix; the leading "[" is optional because some quoted logs lost it.
_PREFIX_RE = re.compile(
    r"\[?(?:\d{4}-\d{2}-\d{2} )?\d{2}:\d{2}:\d{2}(?:[.,]\d{1,6})?((?: [A-Z][A-Z_]*\d+)*)\] ?"
)
_PREFIX_ANYWHERE_RE = re.compile(
    r"\[(?:\d{4}-\d{2}-\d{2} )?\d{2}:\d{2}:\d{2}(?:[.,]\d{1,6})?((?: [A-Z][A-Z_]*\d+)*)\] ?"
    r"|\[gpu(?:_id)?=(\d+)\] ?"
)
# The 0.1 and 0.2 releases: no time, only the scheduler's CUDA device (kept as the tag `GPU<n>`).
_GPU_PREFIX_RE = re.compile(r"\[gpu(?:_id)?=(\d+)\] ?")
_LEVEL_STARTS = ("DEBUG ", "INFO ", "WARNING ", "ERROR ", "CRITICAL ")
_LEVEL_RE = re.compile(r"(?:DEBUG|INFO|WARNING|ERROR|CRITICAL) [\w.\-]+\.py:\d+: ")

# A decimal figure as Python's float() reads it: a damaged "7..52" is no figure rather than a crash.
_DECIMAL = r"(\d+\.?\d*|\.\d+)"
_GIB = _DECIMAL + r" ?GB"
_AVAIL_RE = re.compile(r"avail mem=" + _GIB)
_ELAPSED_RE = re.compile(r"elapsed=" + _DECIMAL + r" ?s")
_TYPE_RE = re.compile(r"type=([\w.]+)")
_WEIGHT_DTYPE_RE = re.compile(r"\bdtype=([\w.]+)")
_QUANT_RE = re.compile(r"quant=([^,]+)")
_MEM_USAGE_RE = re.compile(r"mem usage=" + _GIB)
_KV_ALLOC_RE = re.compile(r"(?P<label>.*?)\s*KV Cache (?P<what>is allocated|VA upper bound)\.?(?P<rest>.*)")
_KV_DTYPE_RE = re.compile(r"dtype: ([\w.]+)")
_KV_TOKENS_RE = re.compile(r"#tokens: (\d+)")
_KV_SIZE_RE = re.compile(r"\b(K|V|KV) size: " + _GIB)
_SWA_POOL_RE = re.compile(r"Use sliding window memory pool\. full_layer_tokens=(\d+), swa_layer_tokens=(\d+)")
_SWAKV_RE = re.compile(r"SWAKVPool mem usage: " + _GIB + r", swa size: (\d+), full size: (\d+)")
_MAMBA_RE = re.compile(
    r"Mamba Cache is allocated\. max_mamba_cache_size: (\d+)(?:, conv_state size: " + _GIB + ")?(?:, ssm_state size: " + _GIB + ")?"
)
_POOL_END_RE = re.compile(r"Memory pool end\. avail mem=" + _GIB)
_GRAPH_RE = re.compile(r"Capture (?P<what>.*?)\s*(?:cuda|CUDA) graph (?P<event>begin|end)\b(?P<rest>.*)")
_TIME_ELAPSED_RE = re.compile(r"Time elapsed: " + _DECIMAL + r" ?s")
_POST_SPLIT_RE = re.compile(r"Post-capture KV sizing: full_layer_tokens=(\d+), swa_layer_tokens=(\d+)")
_POST_ALLOC_RE = re.compile(r"Post-capture KV sizing: KV cache allocated\.(.*)")
_POST_MRR_RE = re.compile(r"Post-capture KV sizing: max_running_requests (\d+) -> (\d+)")
_CONTEXT_WARNING_RE = re.compile(r"KV pool holds (\d+) tokens, fewer than --context-length (\d+)")
_FINAL_RE = re.compile(r"max_total_num_tokens=(\d+)(.*)")
_FIELD_RE = re.compile(r"(\w+)=([^,]*)")
_CLAMPED_RE = re.compile(r"max_total_tokens=(\d+) is larger than the profiled value (\d+)")
_MRR_REDUCED_RE = re.compile(r"max_running_requests was reduced from the requested (\d+) to (\d+)")
_UVICORN_RE = re.compile(r"(?:INFO:\s+)?Uvicorn running on (\S+)")
_READY_TEXT = "The server is fired up and ready to roll"
_KV_DTYPE_LINE_RE = re.compile(r"Using KV cache dtype: ([\w.]+)")
_SCHEDULER_DIED_RE = re.compile(r"Rank (\d+) scheduler died during initialization")
_EXCEPTION_RE = re.compile(
    r"(?:[A-Za-z_][\w]*\.)*([A-Za-z_]\w*(?:Error|Exception|Exit|Interrupt|Warning))(?::\s?(.*))?$"
)
_VERSION_RE = re.compile(
    r"\bsglang(?:[ _-]?version)?\s*(?:==|:|=|\s+v(?=\d))\s*v?(\d+\.\d+\.\d+(?:\.?post\d+|rc\d+|\.dev\d+)?)",
    re.IGNORECASE,
)
_COMMAND_RE = re.compile(r"(?:\S*python[\d.]*\s+-m\s+sglang\.[\w.]+|\S*sglang\s+serve)(?=\s|$)")

_CHAINED_EXCEPTION = ("During handling of the above exception", "The above exception was the direct cause")

# First four characters of every message a handler reads, plus the level words of releases that
# printed `WARNING file.py:N:` after the bracket; LogReader.read_stream() skips other prefixed lines.
_HANDLER_KEYS = frozenset(
    {
        "serv",
        "Load",
        "KV C",
        "KV p",
        "Use ",
        "SWAK",
        "Mamb",
        "Memo",
        "Capt",
        "Post",
        "max_",
        "INFO",
        "Uvic",
        "The ",
        "Sche",
        "Rece",
        "Rank",
        "Usin",
        "Trac",
        "DEBU",
        "WARN",
        "ERRO",
        "CRIT",
    }
)

# Messages of these types stop SGLang's startup (docs/sglang-internals.md, Log lines: Failures): a
# boot showing one failed.
_FATAL_TEXTS = (
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


# -- bulk reading (LogReader.read_stream) -------------------------------------------------------------
# A long log is nearly all request logs. read_stream() finds, per chunk of a few MiB and in C (one regex
# search, a few bytes.find), the lines feed() could do anything with, and feeds only those:
#
# * a line that does not start with a prefix *template*: the exact characters before the message
#   (kubectl's and the runtime's prefixes, SGLang's `[date time TAGS] `) of a line already fed, with
#   every ASCII digit free. _split_prefix() reads nothing past those characters and tells digits apart
#   from nothing else, so every line matching a template splits where that line did;
# * a line whose message starts with a handler key or a level word (_SKIP_KEYS_RE; `INFO:` of
#   uvicorn's access log is not one unless the line names Uvicorn);
# * a line holding a needle feed() looks for anywhere (_NEEDLES), an ESC, or a CR inside it;
# * the line after one that leaves the reader waiting for the next line (an exception just ended,
#   a command line continued with a backslash).
#
# Feeding a line that needs nothing is harmless (it is what feed() does with every line), so each rule
# needs only to find every line that matters; test_logparse.py checks the result equals feeding every line.

# Bytes read at a time; a chunk is cut at its last newline, so no line is ever split.
READ_CHUNK_BYTES = 4 << 20
# A UTF-8 character takes at most 4 bytes, so decoding this many bytes of a longer line gives the same
# first MAX_LINE_CHARS characters as decoding all of it (feed() keeps no more).
_MAX_LINE_BYTES = 4 * MAX_LINE_CHARS
# Prefix templates kept per reader, and the longest one (bytes): bounded regex, bounded work per line.
_MAX_TEMPLATES = 64
_MAX_TEMPLATE_BYTES = 256
_DIGITS_AS_ZERO = bytes.maketrans(b"123456789", b"000000000")
# Message starts feed() acts on: its handler keys and the level words (all in _HANDLER_KEYS).
_SKIP_KEYS_RE = b"|".join(re.escape(key.encode()) for key in sorted(_HANDLER_KEYS - {"INFO"})) + rb"|INFO(?!:)"
# Text feed() looks for anywhere in a prefixed line ("KV Cache", " hit an exception", Uvicorn's
# startup line behind "INFO:") or that changes how the line reads (ESC: ANSI codes), each with the
# index of a byte request logs hardly hold: memchr finds that byte ~20x faster than bytes.find the text.
_NEEDLES = ((b"KV Cache", 1), (b" hit an exception", 9), (b"Uvicorn", 0), (b"\x1b", 0))
# A false hit of a needle's rare byte costs a Python step, worth bytes.find scanning this many bytes:
# _find_needle() falls back to bytes.find once false hits are denser than that (plus a few).
_FALSE_HIT_BYTES = 512
# A carriage return inside a line (a redrawn progress bar); one just before the newline is CRLF.
_INNER_CR_RE = re.compile(rb"\r(?!\r*\n)")
_EVERY_LINE_RE = re.compile(rb"\n")
# A chunk where one line in _DENSE_SHARE or more needs parsing (after _DENSE_AFTER_LINES of them) has
# its remaining lines fed one by one: the search would find nearly every line anyway.
_DENSE_AFTER_LINES = 256
_DENSE_SHARE = 4


def _find_needle(data: bytes, needle: bytes, rare: int, pos: int, end: int) -> int:
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


def _odd_line_regex(templates: Iterable[bytes]) -> re.Pattern[bytes]:
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
        return _EVERY_LINE_RE

    def emit(node: dict[bytes, dict]) -> bytes:
        parts = []
        while len(node) == 1:
            token, child = next(iter(node.items()))
            if not token:
                return b"".join(parts)
            parts.append(token)
            node = child
        branches = b"|".join(token + emit(child) if token else b"" for token, child in node.items())
        return b"".join(parts) + b"(?:" + branches + b")"

    return re.compile(rb"\n(?!" + emit(trie) + rb"(?!" + _SKIP_KEYS_RE + rb"))")


def _to_number(text: str) -> int | float | str | None:
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


def _gib(match: re.Match[str] | None) -> float | None:
    return float(match.group(1)) if match else None


def parse_server_args(text: str) -> dict[str, Any]:
    """Parse `ServerArgs(a=1, ...)` or `{'a': 1, ...}` as logged; tolerate elisions and cut lines.

    Values that are not Python literals (objects, enums, cut-off text) are left out rather than
    guessed, so a missing key means "not stated", never a default.
    """
    text = text.strip()
    try:
        node = ast.parse(text, mode="eval").body
    except SyntaxError:
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
        return ast.literal_eval(node)
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
            out[key] = ast.literal_eval(match.group(4).strip())
        except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
            continue
    return out


def parse_command_line(text: str) -> tuple[str, ...] | None:
    """The argv of an SGLang launch quoted in a log (`$ python3 -m sglang.launch_server ...`)."""
    match = _COMMAND_RE.search(text)
    if not match:
        return None
    tail = text[match.start() :].replace("\\\n", " ")
    try:
        return tuple(shlex.split(tail))
    except ValueError:
        return tuple(tail.split())


# ---------------------------------------------------------------------------------------------------


class _Rank:
    """Mutable per-rank state while reading; frozen into RankFigures by LogReader.summary()."""

    __slots__ = (
        "allocation_count",
        "allocated_tokens",
        "allocation_line",
        "avail_after_weights_gib",
        "available_gpu_mem_gib",
        "chunked_prefill_size",
        "context_len",
        "context_warning_tokens",
        "draft_tokens",
        "final_line",
        "final_tokens",
        "full_layer_tokens",
        "k_gib",
        "kv_dtype",
        "kv_gib",
        "mamba_cache_size",
        "max_prefill_tokens",
        "max_running_requests",
        "pool_end_avail_gib",
        "post_capture_line",
        "post_capture_tokens",
        "swa_line",
        "swa_tokens",
        "upper_bound",
        "v_gib",
        "weights_gib",
    )

    def __init__(self) -> None:
        for name in self.__slots__:
            setattr(self, name, None)
        self.allocation_count = 0
        self.upper_bound = False

    def freeze(self, tag: RankTag) -> RankFigures:
        figure_line = self.final_line
        if figure_line is None:
            figure_line = self.post_capture_line
        if figure_line is None and self.full_layer_tokens is not None:
            figure_line = self.swa_line
        if figure_line is None:
            figure_line = self.allocation_line
        context_len = self.context_len
        return RankFigures(
            rank=tag,
            final_tokens=self.final_tokens,
            allocated_tokens=self.allocated_tokens,
            upper_bound=bool(self.upper_bound),
            post_capture_tokens=self.post_capture_tokens,
            full_layer_tokens=self.full_layer_tokens,
            swa_tokens=self.swa_tokens,
            draft_tokens=self.draft_tokens,
            context_len=context_len,
            max_running_requests=self.max_running_requests,
            chunked_prefill_size=self.chunked_prefill_size,
            max_prefill_tokens=self.max_prefill_tokens,
            available_gpu_mem_gib=self.available_gpu_mem_gib,
            kv_dtype=self.kv_dtype,
            kv_gib=self.kv_gib,
            k_gib=self.k_gib,
            v_gib=self.v_gib,
            weights_gib=self.weights_gib,
            avail_after_weights_gib=self.avail_after_weights_gib,
            pool_end_avail_gib=self.pool_end_avail_gib,
            mamba_cache_size=self.mamba_cache_size,
            context_warning_tokens=self.context_warning_tokens,
            final_line=self.final_line,
            allocation_line=self.allocation_line,
            figure_line=figure_line,
        )

    @property
    def has_figures(self) -> bool:
        return any(
            value is not None
            for value in (
                self.final_tokens,
                self.allocated_tokens,
                self.post_capture_tokens,
                self.full_layer_tokens,
            )
        )


_NO_EVENTS: tuple[LogEvent, ...] = ()


class LogReader:
    """Incremental SGLang log reader: `feed()` one raw line at a time, `summary()` at any point.

    Memory stays constant however long the log is: per-rank figures, the last MAX_ERROR_LINES
    traceback/error lines, at most MAX_WARNINGS warnings, and the parsed server_args.
    """

    def __init__(self) -> None:
        self._line_no = 0
        self._parsed_lines = 0
        self._startup_lines = 0
        self._phase = PHASES[0]
        self._ranks: dict[RankTag, _Rank] = {}
        self._tags: dict[str, RankTag] = {"": UNTAGGED}
        self._server_args: dict[str, Any] | None = None
        self._server_args_line: int | None = None
        self._command: tuple[str, ...] | None = None
        self._command_parts: list[str] | None = None
        self._version: str | None = None
        self._warnings: deque[LogEvent] = deque(maxlen=MAX_WARNINGS)
        self._errors: deque[str] = deque(maxlen=MAX_ERROR_LINES)
        self._in_traceback = False
        self._after_exception = False
        self._ready = False
        self._failure: str | None = None
        self._boots = 1
        # Set by every _feed(): see _split_prefix(); read_stream() learns prefix templates from it.
        self._plain_start: int | None = None
        self._templates: set[bytes] = set()
        self._odd_re = _EVERY_LINE_RE
        self._handlers = {
            "serv": self._on_server_args,
            "Load": self._on_weights,
            "KV C": self._on_kv_allocated,
            "KV p": self._on_context_warning,
            "Use ": self._on_swa_pool,
            "SWAK": self._on_swakv,
            "Mamb": self._on_mamba,
            "Memo": self._on_pool_end,
            "Capt": self._on_graph,
            "Post": self._on_post_capture,
            "max_": self._on_max,
            "INFO": self._on_uvicorn,
            "Uvic": self._on_uvicorn,
            "The ": self._on_ready,
            "Sche": self._on_scheduler_exception,
            "Rece": self._on_sigquit,
            "Rank": self._on_scheduler_died,
            "Usin": self._on_kv_dtype,
            "Trac": self._on_traceback,
        }

    # -- public ------------------------------------------------------------------------------------

    @property
    def phase(self) -> str:
        """starting, loading_weights, sizing_pool, capturing_graphs, ready, or failed."""
        return self._phase

    @property
    def lines(self) -> int:
        return self._line_no

    @property
    def parsed_lines(self) -> int:
        """Lines that went through the line parser; read_stream() skips the rest (request logs)."""
        return self._parsed_lines

    def feed(self, line: str | bytes) -> list[LogEvent]:
        """Read one raw line (with or without its newline); return the events it produced."""
        return list(self._feed(line))

    def feed_many(self, lines: Iterable[str | bytes]) -> None:
        """Read many lines, discarding the events."""
        feed = self._feed
        for line in lines:
            feed(line)

    def read_stream(self, stream: IO[bytes], *, chunk_bytes: int = READ_CHUNK_BYTES) -> None:
        """Read a whole binary stream (file, pipe, gzip) in chunks, feeding only the lines that can matter.

        Gives the same summary as feeding every line (see the bulk-reading notes above _MAX_LINE_BYTES);
        memory: one chunk plus at most _MAX_LINE_BYTES of an unfinished line.
        """
        head: bytearray | None = None  # the unfinished line, cut at _MAX_LINE_BYTES
        while True:
            data = stream.read(chunk_bytes)
            if not data:
                break
            start = 0
            if head is not None:
                newline = data.find(b"\n")
                room = _MAX_LINE_BYTES - len(head)
                if newline == -1:
                    if room > 0:
                        head += data[:room]
                    continue
                if room > 0:
                    head += data[: min(newline, room)]
                self._feed_raw(bytes(head))
                head = None
                start = newline + 1
            last = data.rfind(b"\n", start)
            if last != -1:
                self._scan(data, start, last + 1)
                start = last + 1
            if start < len(data):
                head = bytearray(data[start : start + _MAX_LINE_BYTES])
        if head is not None:
            self._feed_raw(bytes(head))

    def _scan(self, data: bytes, start: int, end: int) -> None:
        """Feed the lines of `data[start:end]` (whole lines; `end` is just past a newline) that can matter.

        The first line is always fed (no newline before it to search from), then each line the odd-line
        regex or a needle points at, and every line after one that leaves the reader mid-record.
        Skipped lines only advance the line count.
        """
        feed = self._feed_raw
        odd_re = self._odd_re
        line_no = self._line_no  # lines before `counted`
        counted = pos = start
        odd_at = -1  # the next line no template vouches for (valid while >= pos and odd_re unchanged)
        needle_at = [-1] * (len(_NEEDLES) + 1)  # the next hit of each needle, the last the inner CR
        forced = True
        fed, first_line_no = 0, line_no
        while pos < end:
            if forced:
                at = pos
            else:
                if odd_at < pos:
                    match = odd_re.search(data, pos - 1, end - 1)
                    odd_at = match.end() if match else end
                hit = odd_at
                for i, (needle, rare) in enumerate(_NEEDLES):
                    found = needle_at[i]
                    if found < pos:
                        found = _find_needle(data, needle, rare, pos, end)
                        needle_at[i] = found = end if found == -1 else found
                    hit = min(hit, found)
                found = needle_at[-1]
                if found < pos:
                    found = data.find(b"\r", pos, end)
                    if found != -1:
                        match = _INNER_CR_RE.search(data, found, end)
                        found = match.start() if match else -1
                    needle_at[-1] = found = end if found == -1 else found
                hit = min(hit, found)
                if hit >= end:
                    break
                at = data.rfind(b"\n", pos - 1, hit) + 1
            newline = data.find(b"\n", at, end)
            line_no += data.count(b"\n", counted, at)
            self._line_no = line_no
            feed(data[at : min(newline, at + _MAX_LINE_BYTES)])
            line_no += 1
            counted = pos = newline + 1
            forced = self._command_parts is not None or self._after_exception
            if self._odd_re is not odd_re:
                odd_re, odd_at = self._odd_re, -1
            fed += 1
            if fed >= _DENSE_AFTER_LINES and fed * _DENSE_SHARE > line_no - first_line_no:
                # Most lines need parsing (ANSI colours, Docker's JSON): searching costs more than it saves.
                for line in data[pos : end - 1].split(b"\n") if pos < end else ():
                    feed(line[:_MAX_LINE_BYTES])
                return
        self._line_no = line_no + data.count(b"\n", counted, end)

    def _feed_raw(self, raw: bytes) -> None:
        """Feed one raw line and learn its prefix template (see _split_prefix) for the lines to come."""
        self._feed(raw)
        start = self._plain_start
        if start is None or start > _MAX_TEMPLATE_BYTES or len(self._templates) >= _MAX_TEMPLATES:
            return
        template = raw[:start]
        if template.endswith(b"] ") and template.isascii():
            key = template.translate(_DIGITS_AS_ZERO)
            if key not in self._templates:
                self._templates.add(key)
                self._odd_re = _odd_line_regex(sorted(self._templates))

    def summary(self) -> LogSummary:
        ranks = tuple(
            state.freeze(tag)
            for tag, state in sorted(self._ranks.items(), key=lambda item: item[0].sort_key)
            if state.has_figures or state.context_len is not None
        )
        if self._command_parts:  # a continued command line the log cut off
            self._command = parse_command_line(" ".join(self._command_parts)) or self._command
        return LogSummary(
            ranks=ranks,
            server_args=dict(self._server_args) if self._server_args is not None else None,
            server_args_line=self._server_args_line,
            command_line=self._command,
            version=self._version,
            warnings=tuple(self._warnings),
            errors=tuple(self._errors),
            ready=self._ready,
            phase=self._phase,
            missing=self._missing(ranks),
            lines=self._line_no,
            startup_lines=self._startup_lines,
            boots=self._boots,
            failure=self._failure,
        )

    # -- line handling -------------------------------------------------------------------------------

    def _feed(self, line: str | bytes) -> list[LogEvent] | tuple[LogEvent, ...]:
        self._line_no += 1
        self._parsed_lines += 1
        if isinstance(line, bytes):
            line = line.decode("utf-8", "replace")
        if len(line) > MAX_LINE_CHARS:
            line = line[:MAX_LINE_CHARS]
        line, tags, start, self._plain_start = _split_prefix(line)
        if tags is None:
            return self._unprefixed(line)

        rank = self._tags.get(tags)
        if rank is None:
            rank = self._tags[tags] = RankTag.parse(tags)
        message = line[start:]
        if self._command_parts is not None:
            self._finish_command()
        # Other ranks keep logging while one prints a traceback, so a prefixed line does not end it.
        self._after_exception = False
        if message.startswith(_LEVEL_STARTS):
            level = _LEVEL_RE.match(message)
            if level:
                message = message[level.end() :]
        handler = self._handlers.get(message[:4])
        if handler is not None:
            events = handler(rank, message)
            if events:
                return events
        if "KV Cache" in message:  # allocation lines some pools print behind a label
            return self._on_kv_allocated(rank, message) or _NO_EVENTS
        if " hit an exception" in message:  # DetokenizerManager, DataParallelController, ...
            return self._on_manager_exception(rank, message)
        return _NO_EVENTS

    def _unprefixed(self, line: str) -> list[LogEvent] | tuple[LogEvent, ...]:
        """Lines without SGLang's prefix: tracebacks, launcher prints, quoted command lines."""
        if self._command_parts is not None:
            self._command_parts.append(line.rstrip("\\ "))
            if not line.rstrip().endswith("\\"):
                self._finish_command()
            return _NO_EVENTS
        stripped = line.strip()
        if not stripped:
            return _NO_EVENTS
        if self._in_traceback:
            if line[:1] in (" ", "\t"):
                self._errors.append(line)
                return _NO_EVENTS
            if stripped.startswith("Traceback (most recent call last)"):
                self._errors.append(stripped)
                return _NO_EVENTS
            match = _EXCEPTION_RE.match(stripped)
            if match:
                self._in_traceback = False
                self._after_exception = True
                return self._exception_event(None, stripped, match)
            self._errors.append(stripped)  # continuation of a multi-line exception message
            return _NO_EVENTS
        if self._after_exception:
            self._after_exception = False
            if stripped.startswith(_CHAINED_EXCEPTION):
                self._errors.append(stripped)
                self._after_exception = True
                return _NO_EVENTS
        handler = self._handlers.get(stripped[:4])
        if handler is not None:
            events = handler(None, stripped)
            if events:
                return events
        if "KV Cache" in stripped:
            return self._on_kv_allocated(None, stripped) or _NO_EVENTS
        if "sglang" in stripped or "SGLang" in stripped:
            command = parse_command_line(stripped) if _COMMAND_RE.search(stripped) else None
            if command is not None:
                if stripped.endswith("\\"):
                    self._command_parts = [stripped.rstrip("\\ ")]
                    return _NO_EVENTS
                return self._set_command(command, stripped)
            self._check_version(stripped)
        if "Error" in stripped or "Exception" in stripped:
            match = _EXCEPTION_RE.match(stripped)
            if match:
                self._after_exception = True
                return self._exception_event(None, stripped, match)
        return _NO_EVENTS

    def _finish_command(self) -> None:
        parts = self._command_parts or []
        self._command_parts = None
        command = parse_command_line(" ".join(parts))
        if command is not None:
            self._set_command(command, " ".join(parts))

    def _set_command(self, command: tuple[str, ...], text: str) -> list[LogEvent]:
        if self._command is None:
            self._command = command
        return [LogEvent("command_line", None, self._line_no, text, {"argv": command})]

    def _check_version(self, text: str) -> None:
        if self._version is None:
            match = _VERSION_RE.search(text)
            if match:
                self._version = match.group(1)

    # -- helpers -----------------------------------------------------------------------------------

    def _rank_state(self, rank: RankTag | None) -> tuple[RankTag, _Rank]:
        """Lines without a prefix belong to the only rank seen so far, else to the untagged rank."""
        if rank is None:
            rank = next(iter(self._ranks)) if len(self._ranks) == 1 else UNTAGGED
        state = self._ranks.get(rank)
        if state is None:
            state = self._ranks[rank] = _Rank()
        return rank, state

    def _event(
        self,
        kind: str,
        rank: RankTag | None,
        text: str,
        values: dict[str, Any],
        phase: str | None = None,
        *,
        evidence: bool = True,
    ) -> list[LogEvent]:
        """One event (plus a phase event when it moves the phase); `evidence`: a line only SGLang prints."""
        if evidence:
            self._startup_lines += 1
        events = [LogEvent(kind, rank, self._line_no, text, values)]
        if phase is not None:
            self._advance(phase, rank, events)
        return events

    def _advance(self, phase: str, rank: RankTag | None, events: list[LogEvent]) -> None:
        """Move the phase forward only: ranks interleave, so one rank's late weight line is no step back."""
        if self._phase == FAILED:
            return
        if phase == FAILED or _PHASE_ORDER[phase] > _PHASE_ORDER[self._phase]:
            previous, self._phase = self._phase, phase
            events.append(LogEvent("phase", rank, self._line_no, phase, {"from": previous, "to": phase}))

    def _fail(self, reason: str, rank: RankTag | None, events: list[LogEvent]) -> None:
        if self._failure is None:
            self._failure = reason
        self._advance(FAILED, rank, events)

    # -- handlers: each returns events, or an empty value when the line is not what its start suggested

    def _on_server_args(self, rank: RankTag | None, message: str) -> list[LogEvent] | None:
        if not message.startswith("server_args="):
            return None
        if self._server_args is not None and (self._ready or self._phase == FAILED):
            self._new_boot()
        parsed = parse_server_args(message[len("server_args=") :])
        self._server_args = parsed
        self._server_args_line = self._line_no
        events = self._event("server_args", rank, message, {"args": parsed})
        return events

    def _new_boot(self) -> None:
        """A second server_args line after a finished boot: the engine restarted in the same stream."""
        self._boots += 1
        self._ranks.clear()
        self._warnings.clear()
        self._ready = False
        self._failure = None
        self._phase = PHASES[0]

    def _on_weights(self, rank: RankTag | None, message: str) -> list[LogEvent] | None:
        if message.startswith("Load weight begin"):
            return self._event(
                "weights_begin",
                rank,
                message,
                {"avail_mem_gib": _gib(_AVAIL_RE.search(message))},
                "loading_weights",
            )
        if not message.startswith("Load weight end"):
            return None
        elapsed = _ELAPSED_RE.search(message)
        model_class = _TYPE_RE.search(message)
        dtype = _WEIGHT_DTYPE_RE.search(message)
        quant = _QUANT_RE.search(message)
        values = {
            "elapsed_s": float(elapsed.group(1)) if elapsed else None,
            "model_class": model_class.group(1) if model_class else None,
            "dtype": dtype.group(1) if dtype else None,
            "quant": quant.group(1).strip() if quant else None,
            "avail_mem_gib": _gib(_AVAIL_RE.search(message)),
            "mem_usage_gib": _gib(_MEM_USAGE_RE.search(message)),
        }
        _, state = self._rank_state(rank)
        state.weights_gib = values["mem_usage_gib"]
        state.avail_after_weights_gib = values["avail_mem_gib"]
        return self._event("weights_end", rank, message, values, "sizing_pool")

    def _on_kv_allocated(self, rank: RankTag | None, message: str) -> list[LogEvent] | None:
        match = _KV_ALLOC_RE.match(message)
        if not match:
            return None
        rest = match.group("rest")
        upper_bound = match.group("what") == "VA upper bound"
        tokens_match = _KV_TOKENS_RE.search(rest)
        dtype_match = _KV_DTYPE_RE.search(rest)
        sizes = {name: float(value) for name, value in _KV_SIZE_RE.findall(rest)}
        if tokens_match is None and not sizes:
            return None
        tokens = int(tokens_match.group(1)) if tokens_match else None
        k_gib, v_gib, kv_gib = sizes.get("K"), sizes.get("V"), sizes.get("KV")
        if kv_gib is None and k_gib is not None and v_gib is not None:
            kv_gib = round(k_gib + v_gib, 2)
        tag, state = self._rank_state(rank)
        # A second allocation of the same size on a rank is the speculative draft's pool (it reuses the
        # target's token count); hybrid SWA pools print sub-pools of other sizes.
        draft = (
            state.allocation_count > 0
            and not upper_bound
            and state.swa_tokens is None
            and state.post_capture_tokens is None
            and tokens == state.allocated_tokens
        )
        state.allocation_count += 1
        if draft:
            state.draft_tokens = tokens
        elif state.allocation_count == 1:
            state.allocated_tokens = tokens
            state.allocation_line = self._line_no
            state.upper_bound = upper_bound
            state.kv_dtype = dtype_match.group(1) if dtype_match else state.kv_dtype
            state.k_gib, state.v_gib, state.kv_gib = k_gib, v_gib, kv_gib
        values = {
            "tokens": tokens,
            "k_gib": k_gib,
            "v_gib": v_gib,
            "kv_gib": kv_gib,
            "dtype": dtype_match.group(1) if dtype_match else None,
            "upper_bound": upper_bound,
            "draft": draft,
            "label": match.group("label").strip() or None,
        }
        return self._event("kv_allocated", rank, message, values, "sizing_pool")

    def _on_context_warning(self, rank: RankTag | None, message: str) -> list[LogEvent] | None:
        match = _CONTEXT_WARNING_RE.match(message)
        if not match:
            return None
        pool_tokens, context_length = int(match.group(1)), int(match.group(2))
        _, state = self._rank_state(rank)
        state.context_warning_tokens = pool_tokens
        if state.context_len is None:
            state.context_len = context_length
        events = self._event(
            "context_warning", rank, message, {"pool_tokens": pool_tokens, "context_length": context_length}
        )
        self._warnings.append(events[0])
        return events

    def _on_swa_pool(self, rank: RankTag | None, message: str) -> list[LogEvent] | None:
        match = _SWA_POOL_RE.match(message)
        if not match:
            return None
        full, swa = int(match.group(1)), int(match.group(2))
        _, state = self._rank_state(rank)
        state.full_layer_tokens, state.swa_tokens, state.swa_line = full, swa, self._line_no
        return self._event(
            "swa_pool", rank, message, {"full_layer_tokens": full, "swa_layer_tokens": swa}, "sizing_pool"
        )

    def _on_swakv(self, rank: RankTag | None, message: str) -> list[LogEvent] | None:
        match = _SWAKV_RE.match(message)
        if not match:
            return None
        mem_gib, swa, full = float(match.group(1)), int(match.group(2)), int(match.group(3))
        _, state = self._rank_state(rank)
        if state.full_layer_tokens is None:
            state.full_layer_tokens, state.swa_tokens, state.swa_line = full, swa, self._line_no
            if state.draft_tokens is not None and swa == full:
                # The pool's two sub-pools had the same size: the second allocation line was the
                # sliding-window sub-pool, not a draft pool (drafts allocate after this summary line).
                state.draft_tokens = None
        values = {"mem_usage_gib": mem_gib, "full_layer_tokens": full, "swa_layer_tokens": swa}
        return self._event("swa_pool", rank, message, values, "sizing_pool")

    def _on_mamba(self, rank: RankTag | None, message: str) -> list[LogEvent] | None:
        match = _MAMBA_RE.match(message)
        if not match:
            return None
        _, state = self._rank_state(rank)
        state.mamba_cache_size = int(match.group(1))
        values = {
            "max_mamba_cache_size": state.mamba_cache_size,
            "conv_state_gib": float(match.group(2)) if match.group(2) else None,
            "ssm_state_gib": float(match.group(3)) if match.group(3) else None,
        }
        return self._event("mamba_cache", rank, message, values, "sizing_pool")

    def _on_pool_end(self, rank: RankTag | None, message: str) -> list[LogEvent] | None:
        match = _POOL_END_RE.match(message)
        if not match:
            return None
        _, state = self._rank_state(rank)
        avail_gib = float(match.group(1))
        # A speculative draft's pool prints its own pool-end line after the target's: keep the target's.
        if state.draft_tokens is None or state.pool_end_avail_gib is None:
            state.pool_end_avail_gib = avail_gib
        return self._event("pool_end", rank, message, {"avail_mem_gib": avail_gib}, "sizing_pool")

    def _on_graph(self, rank: RankTag | None, message: str) -> list[LogEvent] | None:
        match = _GRAPH_RE.match(message)
        if not match:
            return None
        rest = match.group("rest")
        elapsed = _ELAPSED_RE.search(rest) or _TIME_ELAPSED_RE.search(rest)
        values = {
            "graph": match.group("what").strip() or "decode",
            "avail_mem_gib": _gib(_AVAIL_RE.search(rest)),
            "mem_usage_gib": _gib(_MEM_USAGE_RE.search(rest)),
            "elapsed_s": float(elapsed.group(1)) if elapsed else None,
        }
        if match.group("event") == "begin":
            return self._event("graph_capture_begin", rank, message, values, "capturing_graphs")
        return self._event("graph_capture_end", rank, message, values, "capturing_graphs")

    def _on_post_capture(self, rank: RankTag | None, message: str) -> list[LogEvent] | None:
        if not message.startswith("Post-capture KV sizing:"):
            return None
        _, state = self._rank_state(rank)
        split = _POST_SPLIT_RE.match(message)
        if split:
            full, swa = int(split.group(1)), int(split.group(2))
            state.post_capture_tokens, state.swa_tokens = full, swa
            state.post_capture_line = self._line_no
            return self._event("post_capture_kv", rank, message, {"tokens": full, "swa_layer_tokens": swa})
        alloc = _POST_ALLOC_RE.match(message)
        if alloc:
            rest = alloc.group(1)
            tokens_match = _KV_TOKENS_RE.search(rest)
            if tokens_match is None:
                return None
            tokens = int(tokens_match.group(1))
            if state.post_capture_tokens is None or state.swa_tokens is None:
                state.post_capture_tokens = tokens
                state.post_capture_line = self._line_no
            sizes = {name: float(value) for name, value in _KV_SIZE_RE.findall(rest)}
            dtype = _KV_DTYPE_RE.search(rest)
            values = {
                "tokens": tokens,
                "kv_gib": sizes.get("KV"),
                "dtype": dtype.group(1) if dtype else None,
                "avail_mem_gib": _gib(_AVAIL_RE.search(rest)),
            }
            return self._event("post_capture_kv", rank, message, values)
        reduced = _POST_MRR_RE.match(message)
        if reduced:
            values = {"requested": int(reduced.group(1)), "max_running_requests": int(reduced.group(2))}
            return self._event("max_running_requests_reduced", rank, message, values)
        return None

    def _on_max(self, rank: RankTag | None, message: str) -> list[LogEvent] | None:
        final = _FINAL_RE.match(message)
        if final:
            return self._on_final(rank, message, int(final.group(1)), final.group(2))
        clamped = _CLAMPED_RE.match(message)
        if clamped:
            values = {"max_total_tokens": int(clamped.group(1)), "profiled_tokens": int(clamped.group(2))}
            return self._event("max_total_tokens_clamped", rank, message, values)
        reduced = _MRR_REDUCED_RE.match(message)
        if reduced:
            values = {"requested": int(reduced.group(1)), "max_running_requests": int(reduced.group(2))}
            return self._event("max_running_requests_reduced", rank, message, values)
        return None

    def _on_final(self, rank: RankTag | None, message: str, tokens: int, rest: str) -> list[LogEvent]:
        fields = {key: _to_number(value) for key, value in _FIELD_RE.findall(rest)}
        available = fields.get("available_gpu_mem", fields.get("available_cpu_mem"))
        values: dict[str, Any] = {
            "max_total_num_tokens": tokens,
            "chunked_prefill_size": fields.get("chunked_prefill_size"),
            "max_prefill_tokens": fields.get("max_prefill_tokens"),
            "max_running_requests": fields.get("max_running_requests"),
            "context_len": fields.get("context_len"),
            "available_gpu_mem_gib": available if isinstance(available, float | int) else None,
        }
        _, state = self._rank_state(rank)
        state.final_tokens = tokens
        state.final_line = self._line_no
        for key in ("chunked_prefill_size", "max_prefill_tokens", "max_running_requests", "context_len"):
            value = values[key]
            if isinstance(value, int):
                setattr(state, key, value)
        state.available_gpu_mem_gib = values["available_gpu_mem_gib"]
        return self._event("final_pool", rank, message, values)

    def _on_uvicorn(self, rank: RankTag | None, message: str) -> list[LogEvent] | None:
        match = _UVICORN_RE.match(message)
        if not match:
            return None
        # Any uvicorn app prints this line: it does not make a file an SGLang log.
        return self._event("uvicorn_running", rank, message, {"url": match.group(1)}, evidence=False)

    def _on_ready(self, rank: RankTag | None, message: str) -> list[LogEvent] | None:
        if not message.startswith(_READY_TEXT):
            return None
        self._ready = True
        return self._event("ready", rank, message, {}, "ready")

    def _on_scheduler_exception(self, rank: RankTag | None, message: str) -> list[LogEvent] | None:
        if not message.startswith("Scheduler hit an exception"):
            return None
        self._errors.append(message)
        self._in_traceback = "Traceback" in message
        events = self._event("scheduler_exception", rank, message, {})
        self._fail(message, rank, events)
        return events

    def _on_manager_exception(self, rank: RankTag | None, message: str) -> list[LogEvent]:
        self._errors.append(message)
        self._in_traceback = "Traceback" in message
        events = self._event("error", rank, message, {"exception": None, "message": message, "fatal": True})
        self._fail(message, rank, events)
        return events

    def _on_sigquit(self, rank: RankTag | None, message: str) -> list[LogEvent] | None:
        if not message.startswith("Received sigquit from a child process"):
            return None
        self._errors.append(message)
        events = self._event("error", rank, message, {"exception": None, "message": message, "fatal": True})
        self._fail(message, rank, events)
        return events

    def _on_scheduler_died(self, rank: RankTag | None, message: str) -> list[LogEvent] | None:
        if not _SCHEDULER_DIED_RE.match(message):
            return None
        self._errors.append(message)
        events = self._event("error", rank, message, {"exception": None, "message": message, "fatal": True})
        self._fail(message, rank, events)
        return events

    def _on_kv_dtype(self, rank: RankTag | None, message: str) -> list[LogEvent] | None:
        match = _KV_DTYPE_LINE_RE.match(message)
        if not match:
            return None
        _, state = self._rank_state(rank)
        if state.kv_dtype is None:
            state.kv_dtype = match.group(1)
        return self._event("kv_dtype", rank, message, {"dtype": match.group(1)})

    def _on_traceback(self, rank: RankTag | None, message: str) -> list[LogEvent] | None:
        if not message.startswith("Traceback (most recent call last)"):
            return None
        self._in_traceback = True
        self._errors.append(message)
        return [
            LogEvent(
                "error", rank, self._line_no, message, {"exception": None, "message": message, "fatal": False}
            )
        ]

    def _on_exception_text(self, rank: RankTag | None, message: str) -> list[LogEvent] | None:
        match = _EXCEPTION_RE.match(message)
        if not match:
            return None
        return self._exception_event(rank, message, match)

    def _exception_event(self, rank: RankTag | None, text: str, match: re.Match[str]) -> list[LogEvent]:
        """An exception line; fatal (phase failed) when its text is one of SGLang's startup failures."""
        self._errors.append(text)
        fatal = self._phase != "ready" and any(marker in text for marker in _FATAL_TEXTS)
        values = {"exception": match.group(1), "message": match.group(2), "fatal": fatal}
        events = [LogEvent("error", rank, self._line_no, text, values)]
        if fatal:
            self._startup_lines += 1
            self._fail(text, rank, events)
        return events

    # -- summary -----------------------------------------------------------------------------------

    def _missing(self, ranks: tuple[RankFigures, ...]) -> tuple[str, ...]:
        missing = []
        if self._server_args is None:
            missing.append("no server_args line (engine arguments unknown)")
        if not any(rank.best_tokens is not None for rank in ranks):
            missing.append("no pool figure (no KV cache allocation or max_total_num_tokens line)")
        if not any(rank.final_tokens is not None for rank in ranks):
            missing.append("no final max_total_num_tokens line")
        if any(
            rank.upper_bound and rank.final_tokens is None and rank.post_capture_tokens is None
            for rank in ranks
        ):
            missing.append("no post-capture KV sizing line after the 'KV Cache VA upper bound' line")
        if not any(rank.context_len is not None for rank in ranks):
            missing.append("no context_len")
        if not self._ready:
            missing.append("no 'The server is fired up and ready to roll!' line")
        return tuple(missing)


def _unwrap_json(line: str) -> str:
    """Docker's json-file driver: {"log": "...\\n", "stream": "stderr", "time": "..."}."""
    try:
        record = json.loads(line)
    except ValueError:
        return line
    if isinstance(record, dict) and isinstance(record.get("log"), str):
        return record["log"].rstrip("\r\n")
    return line


def _split_prefix(line: str) -> tuple[str, str | None, int, int | None]:
    """Find SGLang's prefix behind whatever the container and the terminal put before it.

    Returns `(shown, tags, start, plain_start)`: `shown` is the line as a terminal shows it (no
    newline, CR-redrawn progress bars, ANSI codes or Docker's JSON wrapper); `tags` the rank tags of
    the prefix (`" DP0 TP3"`), None for a line without one; `shown[start:]` the message. `plain_start`
    is `start` when the line needed no undecorating and the prefix was found at its start (behind
    kubectl's and the container runtime's prefixes), else None: only then do the characters before
    `start` alone decide how the line splits, which LogReader.read_stream() relies on.
    """
    line = line.rstrip("\r\n")
    plain = True
    if "\r" in line:  # progress bars redraw with CR: the last segment is what the terminal showed
        line = line.rsplit("\r", 1)[-1]
        plain = False
    if "\x1b" in line:
        line = _ANSI_RE.sub("", line)
        plain = False
    if line[:2] == '{"':
        line = _unwrap_json(line)
        plain = False
    offset = 0
    first = line[:1]
    if first == "[" and not line[1:2].isdigit():
        match = _KUBECTL_PREFIX_RE.match(line)
        if match:
            offset = match.end()
            first = line[offset : offset + 1]
    if first.isdigit() and line[offset + 10 : offset + 11] == "T":
        match = _RFC3339_RE.match(line, offset)
        if match:
            offset = match.end()
            first = line[offset : offset + 1]
    match = _PREFIX_RE.match(line, offset) if (first == "[" or first.isdigit()) else None
    if match is not None:
        return line, match.group(1), match.end(), match.end() if plain else None
    if first == "[" and line[offset + 1 : offset + 4] == "gpu":
        match = _GPU_PREFIX_RE.match(line, offset)
        if match is not None:
            return line, f" GPU{match.group(1)}", match.end(), match.end() if plain else None
    if line.find("] ", offset) != -1:
        match = _PREFIX_ANYWHERE_RE.search(line, offset)
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


def read_log(stream: IO[bytes]) -> LogSummary:
    """Read a whole binary stream and summarise it."""
    reader = LogReader()
    reader.read_stream(stream)
    return reader.summary()
