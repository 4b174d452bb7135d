"""LogReader: the incremental reader, one handler per kind of SGLang line, in constant memory."""

from __future__ import annotations

import math
import re
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, fields
from itertools import groupby
from typing import Any

from kvcheck.engines.base import FAILED, PHASE_ORDER, PHASES, LogEvent, RankFigures, RankTag
from kvcheck.engines.sglang.logs.bulk import (
    DENSE_AFTER_LINES,
    DENSE_SHARE,
    DIGITS_AS_ZERO,
    EVERY_LINE_RE,
    INNER_CR_RE,
    MAX_LINE_BYTES,
    MAX_TEMPLATE_BYTES,
    MAX_TEMPLATES,
    NEEDLES,
    READ_CHUNK_BYTES,
    find_needle,
    odd_line_regex,
)
from kvcheck.engines.sglang.logs.lines import split_prefix
from kvcheck.engines.sglang.logs.patterns import (
    AVAIL_RE,
    CHAINED_EXCEPTION,
    CLAMPED_RE,
    COMMAND_RE,
    CONTEXT_WARNING_RE,
    ELAPSED_RE,
    EXCEPTION_RE,
    FATAL_TEXTS,
    FIELD_RE,
    FINAL_RE,
    GRAPH_RE,
    HANDLERS,
    KV_ALLOC_RE,
    KV_DTYPE_LINE_RE,
    KV_DTYPE_RE,
    KV_SIZE_RE,
    KV_TOKENS_RE,
    LEVEL_RE,
    LEVEL_STARTS,
    MAMBA_RE,
    MEM_USAGE_RE,
    MRR_REDUCED_RE,
    POOL_END_RE,
    POST_ALLOC_RE,
    POST_MRR_RE,
    POST_SPLIT_RE,
    QUANT_RE,
    READY_TEXT,
    SCHEDULER_DIED_RE,
    SWA_POOL_RE,
    SWAKV_RE,
    TIME_ELAPSED_RE,
    TYPE_RE,
    UVICORN_RE,
    VERSION_RE,
    WEIGHT_DTYPE_RE,
)
from kvcheck.engines.sglang.logs.serverargs import gib, parse_command_line, parse_server_args, to_number
from kvcheck.engines.sglang.logs.values import (
    MAX_ERROR_LINES,
    MAX_LINE_CHARS,
    MAX_WARNINGS,
    UNTAGGED,
    SglangLogSummary,
    SglangRankFigures,
    parse_rank_tag,
)
from kvcheck.engines.sglang.serving import MAX_TOKEN_FIGURE
from kvcheck.io.streams import BinaryReadable

# The lines of a multi-line exception message kept after its first (the quote KV301 gives is 8 lines), and
# the length a failure's text grows to with them.
MAX_CONTINUATION_LINES = 6
MAX_FAILURE_CHARS = 2000
_SGLANG_FRAME = "/sglang/"  # a traceback frame in SGLang's package (site-packages/sglang/srt/...)
# a line handler: (the line's rank tag, its message) -> its events, or a false value when it is not that line
_Handler = Callable[[RankTag | None, str], 'list[LogEvent] | None']

# ---------------------------------------------------------------------------------------------------


# Reading-only state of a rank: how many allocation lines were seen, and lines that only choose
# figure_line. Every other field of _Rank is a field of RankFigures (a test keeps the two equal).
_NUMBER_GOES_ON = frozenset("0123456789.eE")
TIMESTAMP_RE = re.compile(rb"\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d(?:[.,]\d+)?(?:Z|[+-]\d\d:?\d\d)?")  # after a token figure's digits: it was not an integer
MAX_DAMAGED_NOTES = 8

_READING_STATE = ("allocation_count", "post_capture_line", "swa_line")


@dataclass(slots=True)
class _Rank:
    """Mutable per-rank state while reading; frozen into RankFigures by LogReader.summary()."""

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
    weights_note: str | None = None
    avail_after_weights_gib: float | None = None
    pool_end_avail_gib: float | None = None
    mamba_cache_size: int | None = None
    context_warning_tokens: int | None = None
    final_line: int | None = None
    allocation_line: int | None = None
    allocation_count: int = 0
    post_capture_line: int | None = None
    swa_line: int | None = None

    def freeze(self, tag: RankTag) -> SglangRankFigures:
        figure_line = self.final_line
        if figure_line is None:
            figure_line = self.post_capture_line
        if figure_line is None and self.full_layer_tokens is not None:
            figure_line = self.swa_line
        if figure_line is None:
            figure_line = self.allocation_line
        values = {f.name: getattr(self, f.name) for f in fields(self) if f.name not in _READING_STATE}
        return SglangRankFigures(rank=tag, figure_line=figure_line, **values)

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
        self._continuation_lines = 0  # lines of the last unprefixed exception's message after its first
        self._failure_continues = False  # the failure is that exception's: its message lines extend it
        self._uncaught = False  # the traceback being read reached a module's top level (`in <module>`)
        self._ready = False
        self._failure: str | None = None
        self._sglang_traceback = False  # the traceback being read runs through SGLang's own modules
        self._failed_after_ready = False  # the failure came while serving, after the ready line
        self._failure_awaits_exception = False
        self._damaged: list[str] = []
        self._last_allocation: bytes | None = None  # the last allocation line read in bulk, timestamp cut
        self._last_allocation_raw: bytes | None = None
        self._allocation_repeats = 0
        self._allocation_evidence = 0  # pool figures no server can hold, with their lines
        self._boots = 1
        # Set by every _feed(): see split_prefix(); read_stream() learns prefix templates from it.
        self._plain_start: int | None = None
        self._templates: set[bytes] = set()
        self._odd_re = EVERY_LINE_RE
        self._handlers: dict[str, _Handler] = {key: getattr(self, method) for key, method in HANDLERS.items()}

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

    def read_stream(self, stream: BinaryReadable, *, chunk_bytes: int = READ_CHUNK_BYTES) -> None:
        """Read a whole binary stream (file, pipe, gzip) in chunks, feeding only the lines that can matter.

        Gives the same summary as feeding every line (see the bulk-reading notes above MAX_LINE_BYTES);
        memory: one chunk plus at most MAX_LINE_BYTES of an unfinished line.
        """
        head: bytearray | None = None  # the unfinished line, cut at MAX_LINE_BYTES
        while True:
            data = stream.read(chunk_bytes)
            if not data:
                break
            start = 0
            if head is not None:
                newline = data.find(b"\n")
                room = MAX_LINE_BYTES - len(head)
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
                head = bytearray(data[start : start + MAX_LINE_BYTES])
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
        needle_at = [-1] * (len(NEEDLES) + 1)  # the next hit of each needle, the last the inner CR
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
                for i, (needle, rare) in enumerate(NEEDLES):
                    found = needle_at[i]
                    if found < pos:
                        found = find_needle(data, needle, rare, pos, end)
                        needle_at[i] = found = end if found == -1 else found
                    hit = min(hit, found)
                found = needle_at[-1]
                if found < pos:
                    found = data.find(b"\r", pos, end)
                    if found != -1:
                        match = INNER_CR_RE.search(data, found, end)
                        found = match.start() if match else -1
                    needle_at[-1] = found = end if found == -1 else found
                hit = min(hit, found)
                if hit >= end:
                    break
                at = data.rfind(b"\n", pos - 1, hit) + 1
            newline = data.find(b"\n", at, end)
            line_no += data.count(b"\n", counted, at)
            self._line_no = line_no
            line = data[at : min(newline, at + MAX_LINE_BYTES)]
            if forced or not self._repeated_allocation(line):
                feed(line)
            else:
                self._line_no += 1
            line_no += 1
            counted = pos = newline + 1
            forced = self._command_parts is not None or self._after_exception
            if self._odd_re is not odd_re:
                odd_re, odd_at = self._odd_re, -1
            fed += 1
            if fed >= DENSE_AFTER_LINES and fed * DENSE_SHARE > line_no - first_line_no:
                # Most lines need parsing (ANSI colours, Docker's JSON): searching costs more than it saves.
                self._feed_dense(data, pos, end)
                return
        self._line_no = line_no + data.count(b"\n", counted, end)

    def _feed_dense(self, data: bytes, pos: int, end: int) -> None:
        """Feed the lines of `data[pos:end]` one by one, but for blank lines and repeated allocation lines.

        Runs of identical lines are grouped in C (itertools.groupby): once one line of a run is known to
        change nothing, the rest of the run is counted, not looked at.
        """
        feed = self._feed_raw
        for line, group in groupby(data[pos : end - 1].split(b"\n") if pos < end else ()):
            count, done = len(list(group)), 0
            while done < count:
                done += 1
                if self._command_parts is not None or self._after_exception:
                    feed(line[:MAX_LINE_BYTES])
                    continue
                blank = not line.strip()
                if not blank and not self._repeated_allocation(line):
                    feed(line[:MAX_LINE_BYTES])
                    continue
                self._line_no += 1  # a blank line or a repeat: nothing feed() keeps would change
                if done < count and (blank or self._allocation_repeats >= 2):
                    rest, done = count - done, count  # the same line again and again: count them
                    self._line_no += rest
                    if not blank:
                        self._allocation_repeats += rest
                        self._startup_lines += self._allocation_evidence * rest

    def _repeated_allocation(self, line: bytes) -> bool:
        """Whether `line` repeats, a third time or more and timestamps aside, the allocation line before it.

        The allocation handler keeps the first figure and a same-size second one (a draft pool); a third
        identical line only raises a count nothing reads, so a log repeating one allocation line a
        million times (issue 14) is counted, not parsed a million times.
        """
        if line == self._last_allocation_raw:  # the common repeat: byte for byte, no regex needed
            return self._repeat()
        if b"KV Cache is allocated" not in line:
            return False
        self._last_allocation_raw = line
        key = TIMESTAMP_RE.sub(b"", line[:MAX_LINE_BYTES], count=1)
        if key == self._last_allocation:
            return self._repeat()
        self._last_allocation, self._allocation_repeats = key, 0
        return False

    def _repeat(self) -> bool:
        self._allocation_repeats += 1
        if self._allocation_repeats < 2:
            return False
        self._startup_lines += self._allocation_evidence  # as feeding it would have counted
        return True

    def _feed_raw(self, raw: bytes) -> None:
        """Feed one raw line and learn its prefix template (see split_prefix) for the lines to come."""
        if raw != self._last_allocation_raw:  # any other line (a restart, another rank) ends a run of repeats
            self._last_allocation_raw = self._last_allocation = None
            self._feed(raw)
        else:  # what a repeat of this line adds to the startup-line count, for the repeats skipped
            before = self._startup_lines
            self._feed(raw)
            self._allocation_evidence = self._startup_lines - before
        start = self._plain_start
        if start is None or start > MAX_TEMPLATE_BYTES or len(self._templates) >= MAX_TEMPLATES:
            return
        template = raw[:start]
        if template.endswith(b"] ") and template.isascii():
            key = template.translate(DIGITS_AS_ZERO)
            if key not in self._templates:
                self._templates.add(key)
                self._odd_re = odd_line_regex(sorted(self._templates))

    def summary(self) -> SglangLogSummary:
        ranks = tuple(
            state.freeze(tag)
            for tag, state in sorted(self._ranks.items(), key=lambda item: item[0].sort_key)
            if state.has_figures or state.context_len is not None
        )
        if self._command_parts:  # a continued command line the log cut off
            self._command = parse_command_line(" ".join(self._command_parts)) or self._command
        return SglangLogSummary(
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
            failed_after_ready=self._failed_after_ready,
            damaged=tuple(self._damaged),
        )

    def _figure(self, match: re.Match[str], group: int) -> int | None:
        """A token figure the log states, or None (and a note) when no server can hold it.

        `#tokens: 1e400` would read as 1, `99999999999999999999` as a pool that does not exist: a figure
        of more than 10 digits, above MAX_TOKEN_FIGURE, or running on into a fraction or exponent is
        damage or forgery, and the rank it belongs to is not checked (KV309).
        """
        text = match.group(group)
        after = match.string[match.end(group) : match.end(group) + 1]
        if len(text) <= 10 and after not in _NUMBER_GOES_ON and int(text) <= MAX_TOKEN_FIGURE:
            return int(text)
        if len(self._damaged) < MAX_DAMAGED_NOTES:
            shown = text if len(text) <= 24 else f"{text[:12]}... ({len(text)} digits)"
            shown += f"{after}..." if after in _NUMBER_GOES_ON else ""
            self._damaged.append(f"line {self._line_no}: {shown} is not a token count a server can hold "
                                 f"(0 to {MAX_TOKEN_FIGURE:,})")
        return None

    # -- line handling -------------------------------------------------------------------------------

    def _feed(self, line: str | bytes) -> list[LogEvent] | tuple[LogEvent, ...]:
        self._line_no += 1
        self._parsed_lines += 1
        if isinstance(line, bytes):
            line = line.decode("utf-8", "replace")
        if len(line) > MAX_LINE_CHARS:
            line = line[:MAX_LINE_CHARS]
        line, tags, start, self._plain_start = split_prefix(line)
        if tags is None:
            return self._unprefixed(line)

        rank = self._tags.get(tags)
        if rank is None:
            rank = self._tags[tags] = parse_rank_tag(tags)
        message = line[start:]
        if self._command_parts is not None:
            self._finish_command()
        # Other ranks keep logging while one prints a traceback, so a prefixed line does not end it.
        self._after_exception = False
        if message.startswith(LEVEL_STARTS):
            level = LEVEL_RE.match(message)
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
            return self._continue_command(self._command_parts, line)
        stripped = line.strip()
        if not stripped:
            return _NO_EVENTS
        if self._in_traceback:
            return self._traceback_line(line, stripped)
        if self._after_exception:
            self._after_exception = False
            if stripped.startswith(CHAINED_EXCEPTION):
                self._errors.append(stripped)
                self._after_exception = True
                return _NO_EVENTS
            if self._continues_exception(stripped):
                return _NO_EVENTS
        handler = self._handlers.get(stripped[:4])
        if handler is not None:
            events = handler(None, stripped)
            if events:
                return events
        if "KV Cache" in stripped:
            return self._on_kv_allocated(None, stripped) or _NO_EVENTS
        if "sglang" in stripped or "SGLang" in stripped:
            command = parse_command_line(stripped) if COMMAND_RE.search(stripped) else None
            if command is not None:
                return self._command_line(command, stripped)
            self._check_version(stripped)
        return self._bare_exception(stripped)

    def _continues_exception(self, stripped: str) -> bool:
        """An unprefixed line right after an exception line that is the next line of its message (`(1) a
        tokenizers library serialization file,`): kept with it, in the errors and in the failure it set."""
        if (self._continuation_lines >= MAX_CONTINUATION_LINES or stripped.startswith("Traceback")
                or stripped.startswith(("File ", "[")) or EXCEPTION_RE.match(stripped)):
            return False
        self._continuation_lines += 1
        self._errors.append(stripped)
        if self._failure_continues and self._failure is not None:
            self._failure = f"{self._failure} {stripped}"[:MAX_FAILURE_CHARS]
        self._after_exception = True
        return True

    def _bare_exception(self, stripped: str) -> list[LogEvent] | tuple[LogEvent, ...]:
        """An exception line printed without a traceback before it (`ValueError: ...`)."""
        if "Error" in stripped or "Exception" in stripped:
            match = EXCEPTION_RE.match(stripped)
            if match:
                self._after_exception = True
                return self._exception_event(None, stripped, match)
        return _NO_EVENTS

    def _continue_command(self, parts: list[str], line: str) -> tuple[LogEvent, ...]:
        """The next line of a quoted command line continued with backslashes."""
        parts.append(line.rstrip("\\ "))
        if not line.rstrip().endswith("\\"):
            self._finish_command()
        return _NO_EVENTS

    def _traceback_line(self, line: str, stripped: str) -> list[LogEvent] | tuple[LogEvent, ...]:
        """A line inside a traceback: a frame, a chained traceback's start, or the exception it ends with."""
        if line[:1] in (" ", "\t"):
            self._errors.append(line)
            if stripped.startswith("File "):
                self._sglang_traceback = self._sglang_traceback or _SGLANG_FRAME in line
                self._uncaught = self._uncaught or stripped.endswith(", in <module>")
            return _NO_EVENTS
        if stripped.startswith("Traceback (most recent call last)"):
            self._errors.append(stripped)
            self._sglang_traceback = self._uncaught = False
            return _NO_EVENTS
        match = EXCEPTION_RE.match(stripped)
        if match:
            self._in_traceback = False
            self._after_exception = True
            return self._exception_event(None, stripped, match)
        self._errors.append(stripped)  # continuation of a multi-line exception message
        return _NO_EVENTS

    def _command_line(self, command: tuple[str, ...], stripped: str) -> list[LogEvent] | tuple[LogEvent, ...]:
        """A quoted SGLang command line; one ending in a backslash continues on the next lines."""
        if stripped.endswith("\\"):
            self._command_parts = [stripped.rstrip("\\ ")]
            return _NO_EVENTS
        return self._set_command(command, stripped)

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
            match = VERSION_RE.search(text)
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
        if phase == FAILED or PHASE_ORDER[phase] > PHASE_ORDER[self._phase]:
            previous, self._phase = self._phase, phase
            events.append(LogEvent("phase", rank, self._line_no, phase, {"from": previous, "to": phase}))

    def _fail(self, reason: str, rank: RankTag | None, events: list[LogEvent]) -> None:
        if self._failure is None:
            self._failure = reason
            self._failed_after_ready = self._ready
            # "Scheduler hit an exception: Traceback ...": the exception line that ends it says what happened
            self._failure_awaits_exception = "Traceback" in reason
        self._advance(FAILED, rank, events)

    # -- handlers: each returns events, or an empty value when the line is not what its start suggested

    def _on_server_args(self, rank: RankTag | None, message: str) -> list[LogEvent] | None:
        if not message.startswith("server_args="):
            return None
        # a restart: a boot that finished (ready or failed), or one that had begun loading weights and was cut
        # short without a word (killed). Another node's server_args comes before any weights load (distributed
        # init waits for every node), so a multi-node stream stays one boot.
        if self._server_args is not None and (self._ready or self._phase != PHASES[0]):
            self._new_boot()
        parsed = parse_server_args(message[len("server_args=") :])
        self._server_args = parsed
        self._server_args_line = self._line_no
        events = self._event("server_args", rank, message, {"args": parsed})
        return events

    def _new_boot(self) -> None:
        """A second server_args line after a boot that finished or got past its start: the engine restarted in the
        same stream."""
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
                {"avail_mem_gib": gib(AVAIL_RE.search(message))},
                "loading_weights",
            )
        if not message.startswith("Load weight end"):
            return None
        elapsed = ELAPSED_RE.search(message)
        model_class = TYPE_RE.search(message)
        dtype = WEIGHT_DTYPE_RE.search(message)
        quant = QUANT_RE.search(message)
        weights_gib = gib(MEM_USAGE_RE.search(message))
        note = None
        if weights_gib is not None and math.copysign(1.0, weights_gib) < 0:  # CPU: `mem usage=-0.00 GB`
            note = f"the log states mem usage={weights_gib:.2f} GB (below zero); read as 0"
            weights_gib = 0.0
        avail_gib = gib(AVAIL_RE.search(message))
        values = {
            "elapsed_s": float(elapsed.group(1)) if elapsed else None,
            "model_class": model_class.group(1) if model_class else None,
            "dtype": dtype.group(1) if dtype else None,
            "quant": quant.group(1).strip() if quant else None,
            "avail_mem_gib": avail_gib,
            "mem_usage_gib": weights_gib,
        }
        _, state = self._rank_state(rank)
        state.weights_gib = weights_gib
        state.weights_note = note
        state.avail_after_weights_gib = avail_gib
        return self._event("weights_end", rank, message, values, "sizing_pool")

    def _on_kv_allocated(self, rank: RankTag | None, message: str) -> list[LogEvent] | None:
        match = KV_ALLOC_RE.match(message)
        if not match:
            return None
        rest = match.group("rest")
        upper_bound = match.group("what") == "VA upper bound"
        tokens_match = KV_TOKENS_RE.search(rest)
        dtype_match = KV_DTYPE_RE.search(rest)
        sizes = {name: float(value) for name, value in KV_SIZE_RE.findall(rest)}
        if tokens_match is None and not sizes:
            return None
        tokens = self._figure(tokens_match, 1) if tokens_match else None
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
        match = CONTEXT_WARNING_RE.match(message)
        if not match:
            return None
        pool_tokens, context_length = self._figure(match, 1), int(match.group(2))
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
        match = SWA_POOL_RE.match(message)
        if not match:
            return None
        full, swa = self._figure(match, 1), self._figure(match, 2)
        _, state = self._rank_state(rank)
        state.full_layer_tokens, state.swa_tokens, state.swa_line = full, swa, self._line_no
        return self._event(
            "swa_pool", rank, message, {"full_layer_tokens": full, "swa_layer_tokens": swa}, "sizing_pool"
        )

    def _on_swakv(self, rank: RankTag | None, message: str) -> list[LogEvent] | None:
        match = SWAKV_RE.match(message)
        if not match:
            return None
        mem_gib, swa, full = float(match.group(1)), self._figure(match, 2), self._figure(match, 3)
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
        match = MAMBA_RE.match(message)
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
        match = POOL_END_RE.match(message)
        if not match:
            return None
        _, state = self._rank_state(rank)
        avail_gib = float(match.group(1))
        # A speculative draft's pool prints its own pool-end line after the target's: keep the target's.
        if state.draft_tokens is None or state.pool_end_avail_gib is None:
            state.pool_end_avail_gib = avail_gib
        return self._event("pool_end", rank, message, {"avail_mem_gib": avail_gib}, "sizing_pool")

    def _on_graph(self, rank: RankTag | None, message: str) -> list[LogEvent] | None:
        match = GRAPH_RE.match(message)
        if not match:
            return None
        rest = match.group("rest")
        elapsed = ELAPSED_RE.search(rest) or TIME_ELAPSED_RE.search(rest)
        values = {
            "graph": match.group("what").strip() or "decode",
            "avail_mem_gib": gib(AVAIL_RE.search(rest)),
            "mem_usage_gib": gib(MEM_USAGE_RE.search(rest)),
            "elapsed_s": float(elapsed.group(1)) if elapsed else None,
        }
        if match.group("event") == "begin":
            return self._event("graph_capture_begin", rank, message, values, "capturing_graphs")
        return self._event("graph_capture_end", rank, message, values, "capturing_graphs")

    def _on_post_capture(self, rank: RankTag | None, message: str) -> list[LogEvent] | None:
        if not message.startswith("Post-capture KV sizing:"):
            return None
        _, state = self._rank_state(rank)
        split = POST_SPLIT_RE.match(message)
        if split:
            full, swa = self._figure(split, 1), self._figure(split, 2)
            state.post_capture_tokens, state.swa_tokens = full, swa
            state.post_capture_line = self._line_no
            return self._event("post_capture_kv", rank, message, {"tokens": full, "swa_layer_tokens": swa})
        alloc = POST_ALLOC_RE.match(message)
        if alloc:
            rest = alloc.group(1)
            tokens_match = KV_TOKENS_RE.search(rest)
            if tokens_match is None:
                return None
            tokens = self._figure(tokens_match, 1)
            if state.post_capture_tokens is None or state.swa_tokens is None:
                state.post_capture_tokens = tokens
                state.post_capture_line = self._line_no
            sizes = {name: float(value) for name, value in KV_SIZE_RE.findall(rest)}
            dtype = KV_DTYPE_RE.search(rest)
            values = {
                "tokens": tokens,
                "kv_gib": sizes.get("KV"),
                "dtype": dtype.group(1) if dtype else None,
                "avail_mem_gib": gib(AVAIL_RE.search(rest)),
            }
            return self._event("post_capture_kv", rank, message, values)
        reduced = POST_MRR_RE.match(message)
        if reduced:
            values = {"requested": int(reduced.group(1)), "max_running_requests": int(reduced.group(2))}
            return self._event("max_running_requests_reduced", rank, message, values)
        return None

    def _on_max(self, rank: RankTag | None, message: str) -> list[LogEvent] | None:
        final = FINAL_RE.match(message)
        if final:
            return self._on_final(rank, message, self._figure(final, 1), final.group(2))
        clamped = CLAMPED_RE.match(message)
        if clamped:
            values = {"max_total_tokens": int(clamped.group(1)), "profiled_tokens": int(clamped.group(2))}
            return self._event("max_total_tokens_clamped", rank, message, values)
        reduced = MRR_REDUCED_RE.match(message)
        if reduced:
            values = {"requested": int(reduced.group(1)), "max_running_requests": int(reduced.group(2))}
            return self._event("max_running_requests_reduced", rank, message, values)
        return None

    def _on_final(self, rank: RankTag | None, message: str, tokens: int | None, rest: str) -> list[LogEvent]:
        fields = {key: to_number(value) for key, value in FIELD_RE.findall(rest)}
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
        match = UVICORN_RE.match(message)
        if not match:
            return None
        # Any uvicorn app prints this line: it does not make a file an SGLang log.
        return self._event("uvicorn_running", rank, message, {"url": match.group(1)}, evidence=False)

    def _on_ready(self, rank: RankTag | None, message: str) -> list[LogEvent] | None:
        if not message.startswith(READY_TEXT):
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
        if not SCHEDULER_DIED_RE.match(message):
            return None
        self._errors.append(message)
        events = self._event("error", rank, message, {"exception": None, "message": message, "fatal": True})
        self._fail(message, rank, events)
        return events

    def _on_kv_dtype(self, rank: RankTag | None, message: str) -> list[LogEvent] | None:
        match = KV_DTYPE_LINE_RE.match(message)
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
        self._uncaught = False
        self._errors.append(message)
        return [
            LogEvent(
                "error", rank, self._line_no, message, {"exception": None, "message": message, "fatal": False}
            )
        ]

    def _on_exception_text(self, rank: RankTag | None, message: str) -> list[LogEvent] | None:
        match = EXCEPTION_RE.match(message)
        if not match:
            return None
        return self._exception_event(rank, message, match)

    def _exception_event(self, rank: RankTag | None, text: str, match: re.Match[str]) -> list[LogEvent]:
        """An exception line; fatal (phase failed) when its text is one of SGLang's startup failures."""
        self._errors.append(text)
        self._continuation_lines = 0
        self._failure_continues = False  # the failure this exception sets, or ends, takes its message's lines
        if self._failure_awaits_exception and self._failure is not None:
            head = self._failure.split("Traceback", 1)[0].rstrip(" :")
            self._failure = f"{head}: {text}" if head else text
            self._failure_awaits_exception = False
            self._failure_continues = True
        # SGLang's own traceback before any startup line: the start was refused while its arguments resolved;
        # one that reached the launcher's top level (`launch_server.py ... in <module>`) ended the server
        refused = self._sglang_traceback and rank is None and (self._startup_lines == 0 or self._uncaught)
        self._uncaught = False
        fatal = self._phase != "ready" and (refused or any(marker in text for marker in FATAL_TEXTS))
        values = {"exception": match.group(1), "message": match.group(2), "fatal": fatal}
        events = [LogEvent("error", rank, self._line_no, text, values)]
        if fatal:
            self._startup_lines += 1
            self._failure_continues = self._failure_continues or self._failure is None
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
