"""vLLM's startup log, read line by line (a BootLogReader): the pool, the window, refusals, readiness.

The lines are vLLM 0.32.0's (V1 engine), measured on its CPU backend and read in its source
(docs/vllm.md), and the wordings of older releases read in each release's source (docs/logs.md has the
table): V1 from 0.7 (`# GPU blocks: N`, then `GPU KV cache size: N tokens` with the concurrency on its own
line until 0.29) and V0 (`# cuda blocks: N, # CPU blocks: M`, its refusal `The model's max seq len (L) is
larger than the maximum number of tokens that can be stored in KV cache (M)`). Every line may carry the
process prefix vLLM's multiprocessing adds, such as `(APIServer pid=12)`, `(EngineCore_DP1 pid=40)`
(`EngineCore_1` in 0.8-0.9), `(Worker_TP0 pid=41)`, `(VllmWorker rank=0 pid=41)`, `(VllmWorkerProcess
pid=41)`, a Kubernetes timestamp before it, then `INFO 12-01 23:46:05 [file.py:2327]` (`file.py:2327]`
before 0.8). What is read:

- `non-default args: {...}` (the API server's arguments, field names) and the banner's version;
- `Using max model len L`, and `Auto-fit max_model_len: reduced from A to B ...` (`--max-model-len auto`);
- the pool: `CPU KV cache size: N tokens, Maximum concurrency for L tokens per request: X.XXx`
  (`GPU` on CUDA). N is derived (blocks / ceil(L / block) x L), not what one request can use: that is
  (num_blocks - 1) x block_size, one block being vLLM's null block. The reader gives N - block_size,
  which equals it when L is a multiple of the block and is below it otherwise (fail closed);
- the refusal `ValueError: To serve at least one request with the model's max seq len (L) ... the
  estimated maximum model length is N.`: vLLM measured its pool and found it below L. The reader
  gives N as the pool (vLLM's own bound for one request, null block counted) and a `pool_refusal`
  event, so that measure and logs judge it (KV109, KV101) instead of "could not measure";
- V0's pool `# cuda blocks: N, # CPU blocks: M`: one request holds (N - int(0.01 N)) x block_size
  tokens (V0 keeps 1% of the blocks free as a watermark), and V0's refusal gives vLLM's own bound M;
  V0's window is its config line's `max_seq_len` when no other line states it;
- `Application startup complete.` (uvicorn, the server answers from then on) as ready; tracebacks
  and `EngineCore failed to start.` as failures. A V1 refusal without vLLM's estimate (0.8.x lost it)
  is a failure, quoted: it proves the pool is short but gives no figure.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from typing import Any

from kvcheck.engines.base import FAILED, PHASE_ORDER, LogEvent, LogSummary, RankFigures, RankTag
from kvcheck.engines.vllm.serving import DEFAULT_BLOCK_SIZE, MAX_TOKEN_FIGURE
from kvcheck.io.logwrap import unwrap
from kvcheck.io.pyast import literal_eval, parse_expression
from kvcheck.io.streams import BinaryReadable

MAX_LINE_CHARS = 64 * 1024  # a longer line is cut before it is read (config dumps run to ~8 k)
MAX_ARGS_CHARS = 32 * 1024  # a `non-default args` dict longer than this is not parsed
KEPT_ERRORS = 40
KEPT_WARNINGS = 50
# V0's block size when the arguments do not state it: 16 on CUDA and ROCm, and on CPU without IPEX (with IPEX
# 128: then the pool read is below the real one, which fails closed)
V0_BLOCK_SIZE = 16

# `(EngineCore_DP1 pid=40)`, `(Worker_DP0_PCP0_TP1 pid=41)`, `(EngineCore_0 pid=40)` (0.8-0.9: the index is the
# DP rank), `(VllmWorker rank=0 pid=41)` (0.8-0.10), `(VllmWorkerProcess pid=41)` (V0),
# `(RayWorkerWrapper pid=41, ip=10.0.0.2)` (Ray)
_RANK_TAGS = r"(?:DP|PCP|DCP|TP|PP|EP)\d+"
_PREFIX = re.compile(rf"^\((?P<proc>[A-Za-z][\w-]*?)(?:_(?P<tags>{_RANK_TAGS}(?:_{_RANK_TAGS})*)|_(?P<dp>\d+))?"
                     r"(?:-(?P<index>\d+))?(?: rank=\d+)? pid=\d+(?:, ip=[\w.:-]+)?\)\s?")
# `[file.py:123] ` from 0.8; older releases wrote `file.py:123] `.
_LEVEL = re.compile(r"^(?P<level>DEBUG|INFO|WARNING|ERROR|CRITICAL) \d\d-\d\d \d\d:\d\d:\d\d(?:\.\d+)? "
                    r"\[?[\w./-]+:\d+\] ")
_TAG = re.compile(r"(DP|TP|PP|EP)(\d+)")

_NUM = r"(\d[\d,]*)"
# The lines that give a figure are matched where vLLM's own message starts (behind the process prefix, level and
# `[file.py:N]`), never inside another message: a request log (`--enable-log-requests`) quotes prompts and stop
# strings, which may hold any of these wordings.
# 0.32.0 states both on one line; earlier V1 releases printed the concurrency on the next line.
_POOL = re.compile(rf"^(?P<device>[A-Z]+)(?: \+ host)? KV cache size: {_NUM} tokens(?:, Maximum concurrency for "
                   rf"{_NUM} tokens per request: (?P<conc>[\d.]+)x)?")
_CONCURRENCY = re.compile(rf"^Maximum concurrency for {_NUM} tokens per request: ([\d.]+)x")
# "models's" until 0.21, "model's" from 0.22
_REFUSAL = re.compile(r"^ValueError: To serve at least one request with the models?'s max seq len \((\d+)\)")
# V0's refusal: vLLM's own bound is blocks x block_size (// pipeline stages)
_V0_REFUSAL = re.compile(r"^(?:ValueError: )?The model's max seq len \((\d+)\) is larger than the maximum number of tokens that can be "
                         r"stored in KV cache \((\d+)\)")
# V0's pool: `# cuda blocks: 7191, # CPU blocks: 512` (later V0: the platform's device name), `# GPU blocks: N, # CPU
# blocks: M` (earlier); V1 before 0.7.3 logged `# GPU blocks: N` alone.
_V0_BLOCKS = re.compile(r"^(?:# )?(?P<device>[A-Za-z]+) blocks: (?P<blocks>\d+), # CPU blocks: \d+")
_V1_BLOCKS = re.compile(r"^# GPU blocks: (?P<blocks>\d+)$")
_V0_KV_GIB = re.compile(r"(?:the rest of the memory reserved for KV Cache is ([\d.]+) ?GiB|"
                        r"^Memory profiling results: .*\bkv_cache_size=([\d.]+)GiB)")
_V0_WEIGHTS_GIB = re.compile(r"(?:^Loading model weights took ([\d.]+) GB|^model weights take ([\d.]+)GiB)")
_ESTIMATED = re.compile(r"the estimated maximum model length is (\d+)")
_AUTO_FIT = re.compile(r"^Auto-fit max_model_len: reduced from (\d+) to (\d+)")
_AUTO_FITS = re.compile(r"^Auto-fit max_model_len: full model context length (\d+) fits")
_MAX_LEN = re.compile(r"^Using max model len (\d+)")
_NON_DEFAULT = re.compile(r"^non-default args: (\{.*\})\s*$")
_BANNER_VERSION = re.compile(r"\bversion (\d+\.\d+\.\d+[\w.+-]*)\s*$")
# `Initializing a V1 LLM engine (v0.32.0)`, `Initializing a V0 LLM engine (v0.8.5)`, `Initializing an LLM engine
# (v0.6.3)` (before 0.8; before 0.3 without the version)
_ENGINE_VERSION = re.compile(r"^Initializing (?:a V(?P<engine>[01]) |an )LLM engine(?: \(v(\d+\.\d+\.\d+[\w.+-]*)\))? "
                             r"with config: (.*)$")
_SERVER_VERSION = re.compile(r"^vLLM API server version (\d+\.\d+\.\d+[\w.+-]*)")
_CONFIG_KEY = re.compile(r"\b(max_seq_len|device_config|tensor_parallel_size|pipeline_parallel_size|"
                         r"data_parallel_size|kv_cache_dtype|enable_prefix_caching)=([^,]+)")
_KV_GIB = re.compile(r"^(?:Available KV cache memory: ([\d.]+) GiB|Explicitly set \(([\d.]+)/[\d.]+\) GiB for KV cache)")
_WEIGHTS_GIB = re.compile(r"^Model loading took ([\d.]+) GiB")
_OVERRIDE = re.compile(r"num_gpu_blocks_override=(\d+)")
_EXCEPTION = re.compile(r"^(?:[A-Za-z_][\w.]*(?:Error|Exception|Exit)|KeyboardInterrupt|SystemExit)(?::|$)")

_READY = re.compile(r"^(?:INFO:\s+)?Application startup complete\.$")  # uvicorn's, unprefixed
_UVICORN_STOP = re.compile(r"^INFO:\s+Shutting down$")
# What vLLM prints around the real cause of a failed start.
_WRAPPERS = ("EngineCore failed to start", "Engine core initialization failed")


def _is_wrapper(text: str) -> bool:
    return any(wrapper in text for wrapper in _WRAPPERS)


@dataclass
class _Rank:
    tag: RankTag
    pool_tokens: int | None = None
    logged_tokens: int | None = None
    context_len: int | None = None
    concurrency: float | None = None
    figure_line: int | None = None
    refused: bool = False


@dataclass
class _State:
    lines: int = 0
    startup: int = 0
    boots: int = 0
    phase: str = "starting"
    ready: bool = False
    version: str | None = None
    args: dict[str, Any] | None = None
    args_line: int | None = None
    config: dict[str, str] = field(default_factory=dict)
    max_model_len: int | None = None
    auto_fit: tuple[int, int] | None = None
    kv_gib: float | None = None
    weights_gib: float | None = None
    ranks: dict[int | None, _Rank] = field(default_factory=dict)
    warnings: list[LogEvent] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    failure: str | None = None
    failed_after_ready: bool = False
    damaged: list[str] = field(default_factory=list)
    pending_refusal: tuple[int, int, str] | None = None  # (L, line, text) until the estimated length is read
    stopping: bool = False  # vLLM logged its shutdown: what fails after that is the stop, not the server
    last: str = ""  # the stream's last non-empty message, quoted for a pod that printed none of vLLM's lines
    boot_counted: bool = False  # a line that opens a start was read for this one (boots counts it)


def _finished(s: _State) -> bool:
    """The start being read has ended one way or another: a later opening line is a restart."""
    return s.ready or s.failure is not None or s.stopping or s.phase == FAILED or s.pending_refusal is not None


def _split(raw: str) -> tuple[str | None, RankTag | None, str | None, str, bool]:
    """(kubectl's pod/container source, rank tag, level, message, had a vLLM prefix) of one line, behind the
    wrapping kubectl, the container runtime and Docker's json-file driver put around it (kvcheck.io.logwrap)."""
    tag: RankTag | None = None
    prefixed = False
    shown, offset, source, _ = unwrap(raw)
    text = shown[offset:]
    match = _PREFIX.match(text)
    if match:
        prefixed = True
        values = {name.lower(): int(rank) for name, rank in _TAG.findall(match["tags"] or "")}
        if match["dp"] is not None and match["proc"] == "EngineCore":
            values["dp"] = int(match["dp"])  # 0.8-0.9 named a data-parallel engine EngineCore_N
        tag = RankTag(dp=values.get("dp"), pp=values.get("pp"), tp=values.get("tp"), ep=values.get("ep"))
        text = text[match.end():]
    level = None
    lmatch = _LEVEL.match(text)
    if lmatch:
        level = lmatch["level"]
        text = text[lmatch.end():]
    return source, tag, level, text, prefixed or lmatch is not None


def _count(text: str) -> int | None:
    value = int(text.replace(",", ""))
    return value if value <= MAX_TOKEN_FIGURE else None


class _ConfigsAsDicts(ast.NodeTransformer):
    """`KVTransferConfig(kv_role='kv_producer', ...)` (how 0.32.0 prints a JSON config flag it parsed) as the
    dict of its keywords; any other call stays, and literal_eval refuses it."""

    def visit_Call(self, node: ast.Call) -> ast.AST:  # noqa: N802 (ast's spelling)
        self.generic_visit(node)
        if isinstance(node.func, ast.Name) and node.func.id.endswith("Config") and not node.args \
                and all(k.arg is not None for k in node.keywords):
            return ast.Dict(keys=[ast.Constant(k.arg) for k in node.keywords], values=[k.value for k in node.keywords])
        return node


def _literal_args(text: str) -> dict[str, Any] | None:
    """The `non-default args` dict (a Python repr, config objects as their keywords); None when it is not
    plain literals."""
    if len(text) > MAX_ARGS_CHARS:
        return None
    try:
        value = literal_eval(_ConfigsAsDicts().visit(parse_expression(text)))
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return None
    return value if isinstance(value, dict) and all(isinstance(k, str) for k in value) else None


class VllmLogReader:
    """vLLM's startup lines, read incrementally in constant memory (a BootLogReader)."""

    def __init__(self) -> None:
        self._s = _State()
        # One state per stream: `kubectl logs --prefix` interleaves pods (`[pod/vllm-b/vllm] ...`), each its own
        # server; a boot in one pod is no restart of another, and every pod is judged (summary() keeps the worst).
        self._pods: dict[str | None, _State] = {None: self._s}
        self._lines = 0
        self._source: str | None = None

    @property
    def phase(self) -> str:
        return _merged_phase([s.phase for s in self._pods.values() if _counts(s)] or [self._s.phase])

    @property
    def lines(self) -> int:
        return self._lines

    @property
    def parsed_lines(self) -> int:
        return self._lines

    def feed_many(self, lines: Iterable[str | bytes]) -> None:
        for line in lines:
            self.feed(line)

    def read_stream(self, stream: BinaryReadable) -> None:
        buffered = b""
        skipping = False  # inside an endless line whose head was read: drop it up to its newline
        while chunk := stream.read(1 << 16):
            if skipping:
                end = chunk.find(b"\n")
                if end < 0:
                    continue
                chunk, skipping = chunk[end + 1:], False
            buffered += chunk
            *complete, buffered = buffered.split(b"\n")
            self.feed_many(complete)
            if len(buffered) > MAX_LINE_CHARS:  # memory stays bounded: one line is read up to its cap
                self.feed(buffered[:MAX_LINE_CHARS])
                buffered, skipping = b"", True
        if buffered:
            self.feed(buffered)

    def _advance(self, phase: str) -> None:
        s = self._s
        if s.phase != FAILED and PHASE_ORDER.get(phase, 0) > PHASE_ORDER.get(s.phase, 0):
            s.phase = phase

    def _rank(self, tag: RankTag | None) -> _Rank:
        dp = tag.dp if tag is not None else None
        if dp not in self._s.ranks:
            self._s.ranks[dp] = _Rank(tag=RankTag(dp=dp))
        return self._s.ranks[dp]

    def feed(self, line: str | bytes) -> list[LogEvent]:  # noqa: C901  (one dispatch over vLLM's lines)
        raw = line.decode("utf-8", "replace") if isinstance(line, bytes) else line
        raw = raw[:MAX_LINE_CHARS].rstrip("\r\n")
        self._lines += 1
        n = self._lines
        source, tag, level, text, vllm_line = _split(raw)
        text = text.strip()
        if source not in self._pods:
            self._pods[source] = _State()
        self._s = s = self._pods[source]
        self._source = source
        s.lines = n
        if text:
            s.last = text[:400]
        events: list[LogEvent] = []

        def event(kind: str, **values: Any) -> None:
            events.append(LogEvent(kind, tag, n, text[:400], values))

        if match := _NON_DEFAULT.match(text):
            s = self._boot(n, restart=bool(s.ranks) or _finished(s))
            s.args = _literal_args(match[1])
            s.args_line = n
            s.startup += 1
            event("server_args")
        elif match := _POOL.match(text):
            logged = _count(match[2])
            length = _count(match[3]) if match[3] is not None else None
            rank = self._rank(tag)
            if logged is None or length == 0 or (match[3] is not None and length is None):
                s.damaged.append(f"line {n}: {text[:200]}")
            else:
                block = self._block_size(match["device"])
                rank.logged_tokens, rank.context_len = logged, length
                rank.pool_tokens = max(logged - block, 0)
                rank.concurrency = float(match["conc"]) if match["conc"] else None
                rank.figure_line = n
            s.startup += 1
            self._advance("sizing_pool")
            event("pool", pool_tokens=rank.pool_tokens, logged_tokens=logged, context_len=length)
        elif (match := _CONCURRENCY.match(text)) and s.ranks:
            rank = self._rank(tag)
            if rank.context_len is None:
                rank.context_len, rank.concurrency = _count(match[1]), float(match[2])
            s.startup += 1
        elif match := _REFUSAL.match(text):
            s.startup += 1
            if s.pending_refusal is None and not any(r.refused for r in s.ranks.values()):
                s.pending_refusal = (int(match[1]), n, text[:600])
            self._refusal_length(text, tag, n, events)
            self._fail(text)
        elif s.pending_refusal is not None and _ESTIMATED.search(text):
            self._refusal_length(text, tag, n, events)
        elif match := _AUTO_FIT.match(text):
            s.auto_fit = (int(match[1]), int(match[2]))
            s.max_model_len = int(match[2])
            s.startup += 1
            event("auto_fit", advertised_tokens=int(match[1]), context_len=int(match[2]))
            s.warnings.insert(0, events[-1])  # what a reader of the report must see first
        elif match := _AUTO_FITS.match(text):
            s.startup += 1
            event("auto_fit_full", context_len=int(match[1]))
        elif match := _MAX_LEN.match(text):
            s.max_model_len = int(match[1])
            s.startup += 1
            event("max_model_len", context_len=int(match[1]))
        elif match := _ENGINE_VERSION.match(text):
            # each data-parallel engine prints its own: a restart only where this engine already sized its pool
            s = self._boot(n, restart=(tag.dp if tag is not None else None) in s.ranks or _finished(s))
            s.version = s.version or match[2]
            s.config.update({k: v.strip() for k, v in _CONFIG_KEY.findall(match[3])})
            s.startup += 1
            event("engine_config")
        elif (match := _V0_BLOCKS.match(text)) or (match := _V1_BLOCKS.match(text)):
            self._blocks_line(match, tag, n, v0="device" in match.groupdict(), events=events, text=text)
        elif match := _V0_REFUSAL.match(text):
            s.startup += 1
            stored = _count(match[2])
            rank = self._rank(tag)
            if stored is None:
                s.damaged.append(f"line {n}: {text[:200]}")
            elif not any(r.refused for r in s.ranks.values()):
                length = int(match[1])
                rank.pool_tokens, rank.context_len, rank.figure_line, rank.refused = stored, length, n, True
                refusal = LogEvent("pool_refusal", tag, n, text[:600], {"pool_tokens": stored, "context_len": length})
                events.append(refusal)
                s.warnings.insert(0, refusal)
                s.failure = None
            s.phase = FAILED
        elif match := _V0_KV_GIB.search(text):
            s.kv_gib = float(match[1] or match[2])
            if weights := _V0_WEIGHTS_GIB.match(text):  # 0.8's V0: both on one line
                s.weights_gib = float(weights[1] or weights[2])
            s.startup += 1
            self._advance("sizing_pool")
        elif match := _V0_WEIGHTS_GIB.match(text):
            s.weights_gib = float(match[1] or match[2])
            s.startup += 1
        elif (match := _SERVER_VERSION.match(text)) or (vllm_line and (match := _BANNER_VERSION.search(text))):
            s = self._boot(n, restart=bool(s.ranks) or _finished(s))  # the API server's banner opens a start
            s.version = s.version or match[1]
            s.startup += 1
        elif vllm_line and "Starting to load model" in text:
            s.startup += 1
            self._advance("loading_weights")
            event("loading")
        elif vllm_line and (match := _WEIGHTS_GIB.match(text)):
            s.weights_gib = float(match[1])
            s.startup += 1
        elif match := _KV_GIB.match(text):
            s.kv_gib = float(match[1] or match[2])
            s.startup += 1
            self._advance("sizing_pool")
        elif vllm_line and ("Capturing CUDA graph" in text or "Warming up model" in text):
            s.startup += 1
            self._advance("capturing_graphs")
        elif vllm_line and (match := _OVERRIDE.search(text)):
            s.startup += 1
            event("blocks_override", num_gpu_blocks=int(match[1]))
            s.warnings.insert(0, events[-1])
        elif _READY.match(text) and (s.ranks or s.startup):
            s.ready = True
            self._advance("ready")
            event("ready")
        elif (vllm_line and text.startswith("[shutdown]")) or _UVICORN_STOP.match(text):
            # 0.32.0 tags its shutdown lines; while it stops, its API server may log EngineDeadError
            # (seen on a SIGTERM from kvcheck after the figures were in): not a crash of the server
            s.stopping = True
        elif vllm_line and "EngineCore failed to start" in text:
            s.startup += 1
            self._fail(text)
        elif _EXCEPTION.match(text) and (s.startup or vllm_line):
            self._fail(text)
        if level == "WARNING" and not events and len(s.warnings) < KEPT_WARNINGS:
            s.warnings.append(LogEvent("warning", tag, n, text[:400]))
        if level in ("ERROR", "CRITICAL") or _EXCEPTION.match(text):
            s.errors.append(text[:400])
            del s.errors[:-KEPT_ERRORS]
        return events

    def _boot(self, n: int, *, restart: bool) -> _State:
        """A line that opens an engine start (the banner, `non-default args:`, the engine's config line; releases
        before 0.9 print no `non-default args:`). After a start that sized its pool, was ready, failed or stopped
        it is a restart in the same stream: the new start's figures replace the old ones, and what the old one
        did (its shutdown included) no longer colours the new one."""
        s = self._s
        if restart:
            s = _State(lines=n, startup=s.startup, boots=s.boots)
            self._s = self._pods[self._source] = s
        if not s.boot_counted:
            s.boots += 1
            s.boot_counted = True
        return s

    def _block_size(self, device: str) -> int:
        args = self._s.args or {}
        stated = args.get("block_size")
        if isinstance(stated, int) and not isinstance(stated, bool) and stated > 0:
            return stated
        if device == "V0":
            return V0_BLOCK_SIZE
        return DEFAULT_BLOCK_SIZE["cuda" if device == "GPU" else "cpu"]

    def _blocks_line(self, match: re.Match[str], tag: RankTag | None, n: int, *, v0: bool, events: list[LogEvent],
                     text: str) -> None:
        """`# cuda blocks: N, # CPU blocks: M` (V0) or `# GPU blocks: N` (V1 before 0.7.3): the pool in blocks.

        V0 admits a request only while `watermark` (1%) of the blocks stays free (BlockSpaceManager: a prompt
        needing more than N - int(0.01 N) blocks is never scheduled), so one request holds at most
        (N - int(0.01 N)) x block_size tokens; V1 keeps one null block: (N - 1) x block_size.
        """
        s = self._s
        blocks = _count(match["blocks"])
        rank = self._rank(tag)
        s.startup += 1
        self._advance("sizing_pool")
        if blocks is None:
            s.damaged.append(f"line {n}: {text[:200]}")
            return
        block = self._block_size("V0" if v0 else "GPU")
        reserved = int(0.01 * blocks) if v0 else 1
        logged = blocks * block
        rank.logged_tokens, rank.pool_tokens, rank.figure_line = logged, max(blocks - reserved, 0) * block, n
        if logged > MAX_TOKEN_FIGURE:
            s.damaged.append(f"line {n}: {text[:200]}")
            rank.logged_tokens = rank.pool_tokens = None
            return
        events.append(LogEvent("pool", tag, n, text[:400], {"pool_tokens": rank.pool_tokens, "logged_tokens": logged,
                                                           "num_blocks": blocks, "block_size": block}))

    def _refusal_length(self, text: str, tag: RankTag | None, n: int, events: list[LogEvent]) -> None:
        s = self._s
        match = _ESTIMATED.search(text)
        if match is None or s.pending_refusal is None:
            return
        length, _, _ = s.pending_refusal
        s.pending_refusal = None
        estimated = _count(match[1])
        if estimated is None:
            s.damaged.append(f"line {n}: {text[:200]}")
            return
        rank = self._rank(tag)
        rank.pool_tokens, rank.context_len, rank.figure_line, rank.refused = estimated, length, n, True
        refusal = LogEvent("pool_refusal", tag, n, text[:600], {"pool_tokens": estimated, "context_len": length})
        events.append(refusal)
        s.warnings.insert(0, refusal)
        s.failure = None  # vLLM's "EngineCore failed to start." came first: the refusal is a measured pool
        s.phase = FAILED

    def _fail(self, text: str) -> None:
        """Record a failure line; the root cause wins over vLLM's wrappers that follow it."""
        s = self._s
        if any(r.refused for r in s.ranks.values()) or s.pending_refusal is not None:
            s.phase = FAILED  # the refusal is a measured pool, not a failure to measure
            return
        if s.stopping:
            return
        if s.failure is None or (_is_wrapper(s.failure) and not _is_wrapper(text)):
            s.failure = text[:400]
        s.failed_after_ready = s.ready
        if not s.ready:
            s.phase = FAILED

    def summary(self) -> LogSummary:
        """The log's summary; a `kubectl logs --prefix` stream of several pods gives each pod's figures and the
        worst of their states (any pod's failure, ready only when every pod is)."""
        pods = [(source, s) for source, s in self._pods.items() if _counts(s)]
        # a pod of the same container as a judged one that printed none of vLLM's lines died before its first
        # (a traceback at argument parsing, no GPU): it is judged too, as a failure to start, never dropped
        servers = {_container(source) for source, _ in pods if source is not None}
        silent = [(source, s) for source, s in self._pods.items()
                  if source is not None and not _counts(s) and s.last and _container(source) in servers]
        if len(pods) + len(silent) <= 1:
            return _summary(pods[0][1] if pods else self._s, self._lines)
        summaries = [_summary(s, self._lines, source) for source, s in pods]
        summaries += [replace(_summary(s, self._lines, source), phase=FAILED,
                              failure=f"[{source}] the pod printed none of vLLM's startup lines: {s.last}")
                      for source, s in silent]
        return _merge(summaries, self._lines)


def _counts(s: _State) -> bool:
    """A stream that holds any of vLLM's startup lines (a pod's stream of only other output is not judged)."""
    return bool(s.startup or s.ranks or s.failure)


def _container(source: str) -> str:
    """The container of kubectl's `pod/NAME/CONTAINER` source (a sidecar's stream is another container's)."""
    return source.rsplit("/", 1)[-1]


def _merged_phase(phases: list[str]) -> str:
    """Several pods' phases as one: failed when any failed, else the least advanced."""
    return FAILED if FAILED in phases else min(phases, key=lambda phase: PHASE_ORDER.get(phase, 0))


def _expected_dp_ranks(args: dict[str, Any] | None) -> range:
    """The data-parallel engines this log's server runs (`data_parallel_size`), when they all log to it: not
    when the server is one rank of a wider deployment (`--data-parallel-rank`, external or hybrid load
    balancing, `--data-parallel-size-local`, `--headless`), whose other ranks log elsewhere."""
    args = args or {}
    size = args.get("data_parallel_size")
    if not isinstance(size, int) or isinstance(size, bool) or size < 2:
        return range(0)
    local = ("data_parallel_rank", "data_parallel_size_local", "data_parallel_start_rank", "data_parallel_external_lb",
             "data_parallel_hybrid_lb", "headless")
    if any(args.get(key) is not None and args.get(key) is not False for key in local):  # rank 0 is a rank
        return range(0)
    return range(size)


def _summary(s: _State, lines: int, source: str | None = None) -> LogSummary:
    """One stream's summary; `source` (kubectl's pod) names its failure and missing lines when there are several."""
    ranks = tuple(
        RankFigures(
            rank=rank.tag,
            final_tokens=rank.pool_tokens,
            context_len=rank.context_len,
            kv_gib=s.kv_gib,
            weights_gib=s.weights_gib,
            figure_line=rank.figure_line,
            final_line=rank.figure_line,
        )
        for _, rank in sorted(s.ranks.items(), key=lambda kv: -1 if kv[0] is None else kv[0])
        if rank.pool_tokens is not None
    )
    # A data-parallel engine that printed no figure is a role with none (KV309), never dropped: every DP
    # engine serves requests, so the smallest pool among them is what a request may land on.
    sized = {rank.rank.dp for rank in ranks}
    expected = set(_expected_dp_ranks(s.args)) | {dp for dp in s.ranks if dp is not None}
    if ranks and expected:
        ranks += tuple(RankFigures(rank=RankTag(dp=dp)) for dp in sorted(expected - sized))
        ranks = tuple(sorted(ranks, key=lambda r: -1 if r.rank.dp is None else r.rank.dp))
    window = s.max_model_len
    if window is None and (stated := s.config.get("max_seq_len", "")).isdigit():
        window = int(stated)  # the engine's config line (V0 logs of before 0.10 have no `Using max model len`)
    if window is not None:
        ranks = tuple(r if r.context_len is not None else replace(r, context_len=window) for r in ranks)
    failure = s.failure
    if failure is None and s.pending_refusal is not None:
        # a V1 refusal without vLLM's estimate (0.8.x lost it: "Based on the available memory, Try ..."): it
        # proves the pool is below the window but gives no figure, so it is a failure to measure, quoted
        failure = s.pending_refusal[2]
    if failure is not None and source is not None:
        failure = f"[{source}] {failure}"  # which pod of a kubectl --prefix stream
    missing = []
    if not ranks:
        missing.append("the pool line (CPU/GPU KV cache size: N tokens, Maximum concurrency for L tokens ...)")
    if s.args is None:
        missing.append("the API server's 'non-default args:' line")
    args = dict(s.args) if s.args is not None else None
    if args is not None:
        model = args.get("model_tag") or args.get("model")
        if isinstance(model, str):
            args.setdefault("model_path", model)
        device = s.config.get("device_config")
        if device and device != "cuda":  # the engine's config line names the device (0.32.0 has no flag)
            args.setdefault("device", device)
    return LogSummary(
        ranks=ranks,
        server_args=args,
        server_args_line=s.args_line,
        command_line=None,
        version=s.version,
        warnings=tuple(s.warnings),
        errors=tuple(s.errors),
        ready=s.ready,
        phase=s.phase,
        missing=tuple(missing),
        lines=s.lines,
        startup_lines=s.startup,
        boots=max(s.boots, 1),
        failure=failure,
        failed_after_ready=s.failed_after_ready,
        damaged=tuple(s.damaged),
    )


def _merge(pods: list[LogSummary], lines: int) -> LogSummary:
    """Several pods' summaries (`kubectl logs --prefix`) as one that fails closed: every pod's pool figures (the
    role takes the smallest), the first failure (one before ready first), ready only when every pod was."""
    failed = [p for p in pods if p.failure is not None]
    failed.sort(key=lambda p: p.failed_after_ready)
    first = failed[0] if failed else None
    with_args = next((p for p in pods if p.server_args is not None), pods[0])
    return LogSummary(
        ranks=tuple(rank for p in pods for rank in p.ranks),
        server_args=with_args.server_args,
        server_args_line=with_args.server_args_line,
        command_line=None,
        version=with_args.version or next((p.version for p in pods if p.version), None),
        warnings=tuple(w for p in pods for w in p.warnings)[:KEPT_WARNINGS],
        errors=tuple(e for p in pods for e in p.errors)[-KEPT_ERRORS:],
        ready=all(p.ready for p in pods),
        phase=_merged_phase([p.phase for p in pods]),
        missing=tuple(dict.fromkeys(m for p in pods for m in p.missing)),
        lines=lines,
        startup_lines=sum(p.startup_lines for p in pods),
        boots=max(p.boots for p in pods),
        failure=first.failure if first is not None else None,
        failed_after_ready=first.failed_after_ready if first is not None else False,
        damaged=tuple(d for p in pods for d in p.damaged),
    )
