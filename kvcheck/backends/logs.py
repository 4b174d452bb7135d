"""Log backend: SGLang startup logs (files or stdin) -> one role per pool-owning rank group.

A role is one file's data-parallel rank: the TP ranks (and PP stages) of one DP rank share one pool
size, so the role takes the smallest figure among them, preferring the final `max_total_num_tokens=`
line over the sizing lines. A log without a DP tag is one role. The role's name is the file's name
and the tag of the rank whose line gave the figure, e.g. `prefill.log[TP0]`, `decode.log[DP3 TP3]`,
or just `server.log` for an untagged TP1 server; the path as given stays in the findings' locations
(two files of the same name in different folders keep their paths as names, so names stay unique).
"""

from __future__ import annotations

import errno
import gzip
import math
import os
import sys
import zlib
from collections.abc import Mapping, Sequence
from contextvars import ContextVar
from dataclasses import dataclass, replace
from fractions import Fraction
from typing import IO, Any

from kvcheck.engines import BUILTIN_ENGINES, engine_names, get_engine
from kvcheck.engines.base import FAILED_AFTER_SIZING, Engine, LogSummary, RankFigures
from kvcheck.errors import InputError
from kvcheck.io.streams import BinaryReadable, DeadlineStream
from kvcheck.io.textfile import open_regular_file
from kvcheck.model import Finding, Location, PoolMeasurement, RoleTarget
from kvcheck.policy.registry import finding
from kvcheck.redact import redact_args, redact_argv

STDIN = "-"
STDIN_NAME = "<stdin>"
STDIN_TIMEOUT_S = 120.0  # how long `kvcheck logs -` reads a pipe that does not end (--timeout)
# Error lines quoted in a role's details: the end of the engine's last traceback.
QUOTED_ERROR_LINES = 12
# Arguments kvcheck adds itself or that only locate the server; not part of a role's argv_args.
_LOCATION_FLAGS = frozenset({"model_path", "host", "port"})
_GZIP_MAGIC = b"\x1f\x8b"
# The log rules (KV309 no figure, KV312 provisional, KV313 no window, KV316 not a serving pool) are
# defined beside the engine's log reader; the registry finds them by code.
KV309, KV312, KV313, KV316 = "KV309", "KV312", "KV313", "KV316"


# The engine whose log is being read: each file's own (`_detect`), the registry's default until one is known.
_ENGINE: ContextVar[str] = ContextVar("kvcheck_logs_engine", default=get_engine().name)
DETECT_HEAD_BYTES = 1 << 20  # how much of a log decides which engine wrote it (when several are installed)


def _engine() -> Engine:
    """The engine that wrote the log being read: its rules read the figures, and its roles keep its name."""
    return get_engine(_ENGINE.get())


def read_logs(
    paths: Sequence[str], *, context_length: int | None, min_headroom: float = 1.0,
    stdin_timeout_s: float = STDIN_TIMEOUT_S,
) -> tuple[list[RoleTarget], list[PoolMeasurement]]:
    """Read every log and return one target and one measurement per role, in file and rank order.

    `context_length` is the window to check (else each log's own context_len); every file that
    cannot be read or holds no SGLang startup line is reported in one InputError (exit 2). Stdin is read
    until it ends or for `stdin_timeout_s`; a pipe still open then is judged on what it gave, with KV312.
    """
    if not paths:
        raise InputError("no log file given", hint="pass FILE... or - to read stdin")
    if context_length is not None and context_length < 1:
        raise InputError(f"--context-length must be a positive number of tokens, not {context_length}")
    if not min_headroom >= 1:  # below 1, a pool smaller than the window would pass
        raise InputError(f"--min-headroom must be at least 1, not {min_headroom}")
    logs, cut = _read_sglang_logs(paths, stdin_timeout_s)
    targets: list[RoleTarget] = []
    measurements: list[PoolMeasurement] = []
    labels = role_labels([name for name, _, _ in logs])
    for name, engine, summary in logs:
        token = _ENGINE.set(engine)
        try:
            for target, measurement in log_roles(
                name, summary, context_length=context_length, min_headroom=min_headroom, label=labels[name]
            ):
                if name in cut:
                    measurement = _cut_at_time_limit(measurement, name, summary, stdin_timeout_s)
                targets.append(target)
                measurements.append(measurement)
        finally:
            _ENGINE.reset(token)
    return targets, measurements


def _cut_at_time_limit(
    measurement: PoolMeasurement, name: str, summary: LogSummary, timeout_s: float
) -> PoolMeasurement:
    """KV312 for a role read from a pipe that was still open at the time limit, saying what was read.

    After the engine's ready line the startup was read whole and the figure is the one the server serves; it
    stays KV312 (a warning, so --strict fails it) because a later restart, with another pool, is in what was
    not read. Before it, the startup itself was cut. Readiness is the ready line itself, not the absence of
    every line the reader looks for (a log without its server_args line was called cut before readiness)."""
    ready = _engine().ready_line
    pool_tokens = measurement.pool_tokens
    line = measurement.details.get("figure_line")
    figure = (f"the pool figure ({pool_tokens:,} tokens{f', line {line}' if line is not None else ''}) was read"
              if pool_tokens is not None else "no pool figure was read")
    cut = f"{name} was still open after {timeout_s:g} s, so the stream was cut at the time limit after {summary.lines:,} lines"
    if summary.ready:
        text = (f"{figure} and the server said it was ready ('{ready}'); {cut}: a restart after that point, with "
                "another pool, would not be seen")
    else:
        text = (f"{cut}, before the server said it was ready ('{ready}'): {figure}"
                + (", but the startup was not read to its end" if pool_tokens is not None else ""))
    return replace(measurement, findings=(*measurement.findings, finding(
        KV312,
        measurement.role,
        text,
        hint="pipe a finished log (kubectl logs POD, without -f), or raise --timeout",
        location=Location(name),
    )))


def _read_sglang_logs(paths: Sequence[str], stdin_timeout_s: float) -> tuple[list[tuple[str, str, LogSummary]], set[str]]:
    """Each file's (display name, engine, summary), and the names read only up to the time limit; every file
    that is unreadable, repeated or not an engine's log is reported in one InputError."""
    if list(paths).count(STDIN) > 1:
        raise InputError("'-' (stdin) is given more than once")
    seen: set[str] = set()
    problems: list[str] = []
    logs: list[tuple[str, str, LogSummary]] = []
    cut: set[str] = set()
    for path in paths:
        name = STDIN_NAME if path == STDIN else path
        if path != STDIN:
            key = os.path.realpath(path)  # never raises, even on a symlink loop (read_log_file words that)
            if key in seen:
                problems.append(f"{path}: given more than once")
                continue
            seen.add(key)
        try:
            engine, summary, timed_out = _read_engine_log(path, stdin_timeout_s)
        except InputError as exc:
            problems.append(exc.message)
            continue
        # a pipe the time limit cut may not have shown its engine's lines yet: judged as a log not read to its
        # end (KV309, KV312: could not check), not refused as no engine's log
        problem = None if timed_out else _not_an_sglang_log(name, summary)
        if problem is not None:
            problems.append(problem)
            continue
        logs.append((name, engine, summary))
        if timed_out:
            cut.add(name)
    if problems:
        raise InputError(
            "\n".join(problems),
            hint="pass the engine's startup log as SGLang printed it (kubectl logs POD, docker logs, a file)",
        )
    return logs, cut


def _not_an_sglang_log(name: str, summary: LogSummary) -> str | None:
    if summary.lines == 0:
        return f"{name}: empty, not an SGLang log"
    if not summary.recognised:
        count = f"{summary.lines:,} line{'s' if summary.lines != 1 else ''}"
        return (
            f"{name}: not an SGLang log: none of its {count} is an SGLang startup line "
            "(server_args, 'Load weight', 'KV Cache is allocated', 'max_total_num_tokens=', ...)"
        )
    return None


def read_log_file(path: str) -> LogSummary:
    """Summarise one log (`-` for stdin; gzip-compressed files are read through); InputError if unreadable."""
    return read_engine_log(path)[1]


def read_engine_log(path: str, *, stdin_timeout_s: float = STDIN_TIMEOUT_S) -> tuple[str, LogSummary]:
    """(the engine that wrote it, its summary) for one log, `-` for stdin; InputError if unreadable."""
    engine, summary, _ = _read_engine_log(path, stdin_timeout_s)
    return engine, summary


def _read_engine_log(path: str, stdin_timeout_s: float) -> tuple[str, LogSummary, bool]:
    """read_engine_log, and whether stdin was still open at its time limit (what came after is unread)."""
    name = STDIN_NAME if path == STDIN else path
    try:
        if path == STDIN:
            if sys.stdin is None:
                raise InputError("stdin is closed: there is no log to read from '-'")
            if sys.stdin.isatty():
                raise InputError(
                    "stdin is a terminal, not a log",
                    hint="pipe a log into it: kubectl logs POD | kvcheck logs - --context-length N",
                )
            # a pipe may never end (kubectl logs -f): read until its end or the time limit
            piped = DeadlineStream(sys.stdin.buffer, stdin_timeout_s)
            return (*_summarise(piped, name), piped.timed_out)
        with open_regular_file(path, name, kind="log file") as stream:  # not /dev/zero, a FIFO, a folder
            return (*_summarise(stream, name), False)
    except FileNotFoundError as exc:
        raise InputError(f"{name}: no such file") from exc
    except IsADirectoryError as exc:
        raise InputError(f"{name}: is a folder, not a log file") from exc
    except PermissionError as exc:
        raise InputError(f"{name}: permission denied") from exc
    except (gzip.BadGzipFile, EOFError, zlib.error) as exc:
        raise InputError(f"{name}: damaged gzip file ({exc})") from exc
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise InputError(f"{name}: a loop of symbolic links, not a log file") from exc
        raise InputError(f"{name}: cannot read: {exc.strerror or exc}") from exc


def _summarise(stream: IO[bytes] | DeadlineStream, name: str) -> tuple[str, LogSummary]:
    head = _peek(stream)
    source: BinaryReadable = stream
    if head.startswith(_GZIP_MAGIC):
        unpacked = gzip.GzipFile(fileobj=stream, mode="rb")  # type: ignore[arg-type]  # read() is all it uses
        source = _CutAtDeadline(unpacked, stream) if isinstance(stream, DeadlineStream) else unpacked
    engine, source = _detect(source)
    reader = get_engine(engine).log_reader()
    reader.read_stream(source)
    return engine, reader.summary()


def _detect(source: BinaryReadable) -> tuple[str, BinaryReadable]:
    """Which installed engine wrote the log, from its first DETECT_HEAD_BYTES; the stream, unconsumed.

    The engine whose reader recognises the most startup lines in the head wins (built-in ones first on a tie);
    with one engine installed nothing is read ahead. None recognising it leaves the default engine, whose
    reader then says what it lacks. A count, not the first reader to recognise anything: lines any engine may
    print (a `torch.OutOfMemoryError`) count as startup lines for a reader that quotes them, and one such line
    made a vLLM log, banner, prefixes and pool line included, an SGLang log with no pool figure.
    """
    names = engine_names()
    default = get_engine().name
    if names == [default]:
        return default, source
    head = b""
    while len(head) < DETECT_HEAD_BYTES and (chunk := source.read(DETECT_HEAD_BYTES - len(head))):
        head += chunk
    best, best_lines = default, 0
    for name in sorted(names, key=lambda n: (n not in BUILTIN_ENGINES, n)):
        reader = get_engine(name).log_reader()
        reader.feed_many(head.splitlines())
        lines = reader.summary().startup_lines
        if lines > best_lines:
            best, best_lines = name, lines
    return best, _Prefixed(head, source)


class _CutAtDeadline:
    """A gzip stream read from a pipe: where the time limit cut the pipe, what decompressed so far is the
    log's end, not a damaged file (KV312 says what was not read)."""

    def __init__(self, unpacked: gzip.GzipFile, piped: DeadlineStream) -> None:
        self._unpacked = unpacked
        self._piped = piped

    def read(self, size: int, /) -> bytes:
        try:
            # read1: one read of the pipe a call; read() fills `size` over several and drops them all when
            # the last one finds the cut
            return self._unpacked.read1(size)
        except EOFError:
            if self._piped.timed_out:
                return b""
            raise


class _Prefixed:
    """A stream that first gives back the bytes read ahead of it (a BinaryReadable)."""

    def __init__(self, head: bytes, rest: BinaryReadable) -> None:
        self._head = head
        self._rest = rest

    def read(self, size: int, /) -> bytes:
        if self._head:
            taken, self._head = self._head[:size], self._head[size:]
            return taken
        return self._rest.read(size)


def _peek(stream: IO[bytes] | DeadlineStream) -> bytes:
    """The first bytes of a stream without consuming them (files seek back, pipes peek)."""
    if isinstance(stream, DeadlineStream):
        return stream.peek(2)[:2]
    if stream.seekable():
        head = stream.read(2)
        stream.seek(0)
        return head
    peek = getattr(stream, "peek", None)
    return peek(2)[:2] if peek is not None else b""


# ---------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Group:
    """The ranks of one data-parallel rank (None: the log has no DP tag) and the figure they give."""

    dp: int | None
    ranks: tuple[RankFigures, ...]

    def chosen(self, summary: LogSummary) -> RankFigures | None:
        """The rank whose line gives the group's pool: the smallest final figure (a rank's final line, or its
        sizing line where the log shows sizing and final lines agree: a TP rank whose allocation is smaller is
        not passed over), else the smallest best."""
        finals = [r for r in self.ranks if summary.is_final(r)]
        candidates = finals or [r for r in self.ranks if r.best_tokens is not None]
        if not candidates:
            return None
        return min(candidates, key=lambda r: (r.best_tokens, r.rank.sort_key))


def _groups(summary: LogSummary) -> list[_Group]:
    by_dp: dict[int | None, list[RankFigures]] = {}
    for rank in summary.ranks:
        by_dp.setdefault(rank.rank.dp, []).append(rank)
    return [
        _Group(dp, tuple(ranks))
        for dp, ranks in sorted(by_dp.items(), key=lambda kv: -1 if kv[0] is None else kv[0])
    ]


def role_labels(names: Sequence[str]) -> dict[str, str]:
    """The name each log's roles go by: the file's name, or the path as given when two files share it."""
    base = {name: os.path.basename(name) or name for name in names}
    counts: dict[str, int] = {}
    for short in base.values():
        counts[short] = counts.get(short, 0) + 1
    return {name: short if counts[short] == 1 else name for name, short in base.items()}


def log_roles(
    name: str, summary: LogSummary, *, context_length: int | None, min_headroom: float, label: str | None = None
) -> list[tuple[RoleTarget, PoolMeasurement]]:
    """The roles of one summarised log (one per DP rank; one role with no figure when it has none).

    `name` is the path as given (findings' locations); `label` what the roles are called (default: it).
    """
    args, args_source = _engine_args(summary)
    engine_context = _engine_context(summary, args)
    groups = _groups(summary) or [_Group(None, ())]
    out = []
    for group in groups:
        out.append(
            _role(
                name,
                summary,
                group,
                label=label or name,
                args=args,
                args_source=args_source,
                engine_context=engine_context,
                context_length=context_length,
                min_headroom=min_headroom,
            )
        )
    return out


def _role(
    name: str,
    summary: LogSummary,
    group: _Group,
    *,
    label: str,
    args: Mapping[str, Any],
    args_source: str | None,
    engine_context: int | None,
    context_length: int | None,
    min_headroom: float,
) -> tuple[RoleTarget, PoolMeasurement]:
    chosen = group.chosen(summary)
    tag = str(chosen.rank) if chosen is not None else (f"DP{group.dp}" if group.dp is not None else "")
    role = f"{label}[{tag}]" if tag else label
    group_context = next((r.context_len for r in group.ranks if r.context_len is not None), None)
    engine_ctx = group_context if group_context is not None else engine_context
    window = context_length if context_length is not None else engine_ctx
    pool_tokens = chosen.best_tokens if chosen is not None and not summary.damaged else None
    figure_line = chosen.figure_line if chosen is not None else None
    location = Location(name, figure_line)
    max_input = None
    if pool_tokens is not None and engine_ctx is not None:
        # the role's real bound: a decode role's reservation lowers it below the engine's own figure
        max_input = _engine().max_input_len(engine_ctx, pool_tokens, args, summary.version)

    findings: list[Finding] = []
    if pool_tokens is None:
        text = "the log holds no KV pool figure"
        text += f" for {tag}" if tag else ""
        if summary.damaged:  # a forged or damaged figure: none of this log's figures is trusted
            text = f"the log's pool figures cannot be trusted: {summary.damaged[0]}"
            text += f" (and {len(summary.damaged) - 1} more)" if len(summary.damaged) > 1 else ""
        elif summary.failure:
            text += f"; the engine failed: {summary.failure}"
        elif summary.missing:
            text += f" ({summary.missing[0]})"
        findings.append(
            finding(
                KV309,
                role,
                text,
                hint="pass the whole startup log (from the container's start), or audit the live server",
                location=Location(name),
            )
        )
    unusable = _unusable_reasons(summary, chosen) if chosen is not None else []
    if unusable and _bound_falls_short(summary, chosen, pool_tokens, window, min_headroom):
        unusable = []  # an upper bound below the window: the real pool is smaller still, KV101 judges it
    if unusable:
        findings.append(
            finding(
                KV316,
                role,
                f"the pool figure ({pool_tokens:,} tokens, line {figure_line}) is not a serving pool: "
                + "; ".join(unusable),
                hint=f"pass the log of a boot that reached '{_engine().ready_line}', or audit the running server",
                location=location,
            )
        )
    if summary.failure and summary.failed_after_ready and pool_tokens is not None:
        findings.append(
            finding(
                KV316,
                role,
                f"the engine failed while serving, after it was ready: {summary.failure}; the pool it sized "
                "at boot is judged",
                hint="the crash is not a sizing failure: read the traceback, and check the pool again after "
                "the fix",
                location=location,
                severity="warning",
            )
        )
    # the engine sized its pool, found one request of its own context length too large for it and exited: the
    # server never served, whatever window is judged (measure mode's KV109, from the same log line)
    refusal = next((w for w in summary.warnings if w.kind == "pool_refusal"
                    and (w.rank is None or w.rank.dp == group.dp)), None)
    if refusal is not None and pool_tokens is not None and not unusable:
        refused_len = int(refusal.values["context_len"])
        findings.append(
            finding(
                "KV109",
                role,
                f"{_engine().label} refused to start: one request of its context length ({refused_len:,} tokens) "
                f"does not fit the KV cache it allocated, which holds {int(refusal.values['pool_tokens']):,}; "
                f"it said:\n  {refusal.text}",
                hint=f"lower the context length to at most {int(refusal.values['pool_tokens']):,} tokens, or give "
                "the KV cache more memory",
                location=Location(name, refusal.line_no),
            )
        )
    reasons = _provisional_reasons(summary, chosen) if chosen is not None else []
    if reasons and not unusable:
        findings.append(
            finding(
                KV312,
                role,
                f"the pool figure ({pool_tokens:,} tokens, line {figure_line}) is provisional: "
                + "; ".join(reasons),
                hint=f"pass the complete startup log, up to '{_engine().ready_line}'",
                location=location,
            )
        )
    if window is None and not (pool_tokens is None and summary.failure):  # a failed boot has nothing to check
        findings.append(
            finding(
                KV313,
                role,
                "no context length to check the pool against: the log states no context_len "
                "and --context-length was not given",
                hint=f"pass the window you advertise: kvcheck logs {name} --context-length N",
                location=Location(name),
            )
        )

    arg_line = summary.server_args_line if args_source == "server_args" else None
    arg_locations = {key: Location(name, arg_line) for key in args} if arg_line is not None else {}
    argv = summary.command_line
    target = RoleTarget(
        name=role,
        # 0 only when no window is known at all; KV313 then makes the role an error, never a pass.
        context_length=window if window is not None else 0,
        min_headroom=min_headroom,
        engine_version=summary.version,
        args=dict(args),
        argv_args=_argv_args(argv),
        model_path=_text(args.get("model_path")),
        engine_command=_launcher(argv),
        engine=_engine().name,
        location=location,
        arg_locations=arg_locations,
    )
    measurement = PoolMeasurement(
        role=role,
        source="log",
        # a figure that is not a serving pool (KV316) is evidence, never judged: one figure, one verdict
        pool_tokens=None if unusable else pool_tokens,
        max_input_tokens=None if unusable else max_input,
        context_len=engine_ctx,
        engine_version=summary.version,
        max_running_requests=chosen.max_running_requests if chosen is not None else None,
        resolved_args=dict(args),
        argv=tuple(redact_argv(argv)) if argv is not None else None,
        details=_details(name, summary, group, chosen, args_source),
        findings=tuple(findings),
    )
    return target, measurement


def _bound_falls_short(
    summary: LogSummary, chosen: RankFigures | None, pool_tokens: int | None, window: int | None, min_headroom: float
) -> bool:
    """True when the figure is only an upper bound of a pool that boot went on to serve, and already below
    what the window needs: the served pool can only be smaller, so the role is known to fall short."""
    if chosen is None or pool_tokens is None or window is None or summary.failure:
        return False
    required = math.ceil(Fraction(str(min_headroom)) * window)  # as RoleTarget.required_tokens
    return chosen.figure_source == "upper_bound" and pool_tokens < required


def _unusable_reasons(summary: LogSummary, chosen: RankFigures) -> list[str]:
    """Why a figure cannot stand for the pool a server serves (KV316): fail closed on these."""
    reasons = []
    if chosen.figure_source == "upper_bound":
        reasons.append(
            "it is the 'KV Cache VA upper bound' of post-capture sizing and the log has no line with the "
            "resized pool (post-capture sizing only shrinks it)"
        )
    if summary.failed_before_ready:
        reasons.append(f"{FAILED_AFTER_SIZING}: {summary.failure}")
    return reasons


def _provisional_reasons(summary: LogSummary, chosen: RankFigures) -> list[str]:
    reasons = []
    source = chosen.figure_source
    if source in ("allocation", "swa_pool") and not summary.allocation_is_final:
        reasons.append(
            "it comes from the first allocation line; the log has no final max_total_num_tokens line, which "
            "states the pool the server serves (post-capture sizing or DCP can change it)"
        )
    if not summary.failure and not summary.ready:
        reasons.append(f"the log ends before the server reported ready (last phase: {summary.phase})")
    return reasons


def _details(
    name: str, summary: LogSummary, group: _Group, chosen: RankFigures | None, args_source: str | None
) -> dict[str, Any]:
    details: dict[str, Any] = {
        "file": name,
        "figure_source": chosen.figure_source if chosen is not None else None,
        "figure_line": chosen.figure_line if chosen is not None else None,
        "ranks": [_rank_dict(rank) for rank in group.ranks],
        "phase": summary.phase,
        "ready": summary.ready,
        "missing": list(summary.missing),
        "args_source": args_source,
    }
    if summary.server_args_line is not None:
        details["server_args_line"] = summary.server_args_line
    warnings = [w for w in summary.warnings if w.rank is None or w.rank.dp == group.dp]
    if warnings:
        details["engine_warnings"] = [f"line {w.line_no}: {w.text}" for w in warnings[:4]]
    if summary.errors:
        details["errors"] = list(summary.errors[-QUOTED_ERROR_LINES:])
    if summary.failure:
        details["failure"] = summary.failure
    if summary.boots > 1:
        details["boots"] = summary.boots
        details["note"] = f"the log holds {summary.boots} engine starts; the figures are from the last"
    return details


def _rank_dict(rank: RankFigures) -> dict[str, Any]:
    out: dict[str, Any] = {
        "rank": str(rank.rank),
        "pool_tokens": rank.best_tokens,
        "figure_source": rank.figure_source,
        "final_tokens": rank.final_tokens,
        "allocated_tokens": rank.allocated_tokens,
        "context_len": rank.context_len,
        "max_req_input_len": _max_req_input_len(rank),
    }
    optional = {
        "upper_bound": rank.upper_bound or None,
        "post_capture_tokens": rank.post_capture_tokens,
        "full_layer_tokens": rank.full_layer_tokens,
        "swa_tokens": rank.swa_tokens,
        "draft_tokens": rank.draft_tokens,
        "max_running_requests": rank.max_running_requests,
        "chunked_prefill_size": rank.chunked_prefill_size,
        "kv_dtype": rank.kv_dtype,
        "kv_gib": rank.kv_gib,
        "weights_gib": rank.weights_gib,
        "weights_note": rank.weights_note,
        "available_gpu_mem_gib": rank.available_gpu_mem_gib,
        "context_warning_tokens": rank.context_warning_tokens,
    }
    out.update({key: value for key, value in optional.items() if value is not None})
    return out


def _max_req_input_len(rank: RankFigures) -> int | None:
    """The engine's own max_req_input_len for the rank (the plain server's bound, as the engine derives
    and reports it); None without pool or context. The role's real bound is the role's max_input_tokens."""
    tokens = rank.best_tokens
    if tokens is None or rank.context_len is None:
        return None
    return _engine().max_input_len(rank.context_len, tokens)


# -- engine arguments ---------------------------------------------------------------------------------


def _engine_args(summary: LogSummary) -> tuple[dict[str, Any], str | None]:
    """server_args as logged, else the arguments of the quoted command line, secrets redacted."""
    if summary.server_args is not None:
        return redact_args(summary.server_args), "server_args"
    if summary.command_line is not None:
        return redact_args(args_from_argv(summary.command_line, version=summary.version)), "command_line"
    return {}, None


def _engine_context(summary: LogSummary, args: Mapping[str, Any]) -> int | None:
    """The engine's context_len: any rank's final line or warning, else the --context-length it was given."""
    for rank in summary.ranks:
        if rank.context_len is not None:
            return rank.context_len
    value = args.get("context_length")
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def _launch_index(argv: Sequence[str]) -> int | None:
    """Index of the first server argument after `python -m sglang.X` or `sglang serve`."""
    return _engine().launch_index(argv)


def _launcher(argv: Sequence[str] | None) -> tuple[str, ...]:
    if argv is None:
        return _engine().default_command
    index = _launch_index(argv)
    return tuple(argv[:index]) if index is not None else _engine().default_command


def _argv_args(argv: Sequence[str] | None) -> tuple[str, ...]:
    """The quoted command's server flags without model path, host and port (RoleTarget.argv_args)."""
    if argv is None:
        return ()
    index = _launch_index(argv)
    if index is None:
        return ()
    out: list[str] = []
    words = list(argv[index:])
    i = 0
    while i < len(words):
        word = words[i]
        key = word[2:].split("=", 1)[0].replace("-", "_") if word.startswith("--") else None
        takes_value = "=" not in word and i + 1 < len(words) and not words[i + 1].startswith("--")
        if key in _LOCATION_FLAGS or key == "model":
            i += 2 if takes_value else 1
            continue
        out.append(word)
        i += 1
    return tuple(redact_argv(out))


def args_from_argv(argv: Sequence[str], *, version: str | None) -> dict[str, Any]:
    """Engine arguments (field names, typed) from a quoted launch command, read with a flag catalogue.

    The catalogue is the log's version's, else the newest kvcheck ships: it resolves abbreviations
    (`--tp` -> tp_size) and types values. Flags it does not know keep their spelled name and text.
    """
    from kvcheck.engines.argv import parse_argv
    from kvcheck.engines.flags import Catalogue

    engine = _engine()
    catalogue: Catalogue | None = None
    try:
        if version is not None:
            catalogue = engine.catalogue(version)[0]
        else:
            versions = engine.catalogue_versions()
            catalogue = engine.catalogue(versions[-1])[0] if versions else None
    except InputError:
        catalogue = None
    if catalogue is None:
        # no release's flags are known: every flag keeps its spelled name and guessed type
        catalogue = Catalogue(version=version or "unknown", flags=(), removed={}, label=engine.label)
    index = _launch_index(argv)
    if index is None:
        return {}
    args: dict[str, Any] = {}
    for occurrence in parse_argv(argv, catalogue, start=index).occurrences:
        flag, values = occurrence.flag, list(occurrence.values)
        if occurrence.key in ("model_path", "model"):
            if values:
                args["model_path"] = values[0]
            continue
        if flag is None:
            args[occurrence.key] = _guess(values)
        elif flag.store_true or flag.nargs == 0 or flag.boolean_optional:
            args[flag.key] = occurrence.value
        elif flag.nargs in ("+", "*") or isinstance(flag.nargs, int):
            args[flag.key] = [_typed(flag.type, v) for v in values]
        elif values:
            args[flag.key] = _typed(flag.type, values[0])
    return args


def _typed(kind: str, text: str) -> Any:
    try:
        if kind == "int":
            return int(text)
        if kind == "float":
            return float(text)
    except ValueError:
        return text
    return text


def _guess(values: list[str]) -> Any:
    if not values:
        return True
    if len(values) > 1:
        return values
    text = values[0]
    for kind in ("int", "float"):
        typed = _typed(kind, text)
        if not isinstance(typed, str):
            return typed
    return text


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None
