"""Boot one role's engine, read the pool it allocated, stop it: one measurement, every path closed.

The figures come from the engine's own startup log (read line by line as it arrives, with the role's
engine's `log_reader()`) and from the head node's server-info endpoint. Where the
engine runs (this host, a Slurm allocation) is the launcher's business (`launchers/`). The role is
done when the log says "The server is fired up and ready to roll!" (every scheduler has logged its pool
by then, and the pipe delivers lines in order), or, when the log shows no such line (`--log-level`
above info), once `/server_info` has answered for `ready_wait_s`. The engine is stopped as soon as the
figures are in (forced at once: it serves nobody, and SGLang's own SIGTERM path ends in SIGKILL 5 s
later), and on every other way out (exit, timeout, cancel, exception) with the whole grace.
"""

from __future__ import annotations

import dataclasses
import os
import re
import signal
import tempfile
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from kvcheck.backends.measure import rules as _rules  # noqa: F401  (registers KV3xx)
from kvcheck.backends.measure.figures import EngineReport, RankPool, judge_figures
from kvcheck.backends.measure.launchers.base import Launcher, LaunchError, LaunchRequest, RunningEngine
from kvcheck.backends.measure.launchers.process import create_log
from kvcheck.engines import get_engine
from kvcheck.engines.base import FAILED_AFTER_SIZING, LogEvent, LogSummary, ServerInfo
from kvcheck.errors import EndpointError, InputError
from kvcheck.model import Finding, PoolMeasurement, RoleTarget
from kvcheck.policy.registry import finding
from kvcheck.redact import REDACTED, is_secret_name

PHASE_TEXT = {
    "starting": "starting",
    "loading_weights": "loading weights",
    "sizing_pool": "sizing the KV pool",
    "capturing_graphs": "capturing CUDA graphs",
    "ready": "ready",
    "failed": "failed",
}
QUOTED_LINES = 8  # engine lines quoted in a KV301 message
QUOTED_CHARS = 400  # per quoted line
TAIL_LINES = 40  # raw lines kept for quoting when the reader recognised no error
BIND_ATTEMPTS = 3  # boots of one role when another process takes the HTTP port kvcheck chose for it


@dataclass(frozen=True)
class BootSettings:
    """How one role is booted; times in seconds."""

    timeout_s: float = 1800.0
    grace_s: float = 15.0
    logs_dir: Path | None = None
    dummy_weights: bool = False
    ready_wait_s: float = 10.0  # server answers but the log shows no ready line (--log-level warning)
    poll_s: float = 0.05
    server_poll_s: float = 1.0


def exit_text(returncode: int) -> str:
    """An exit status as a shell shows it: -9 -> "137 (killed by SIGKILL)"."""
    if returncode < 0:
        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            name = f"signal {-returncode}"
        return f"{128 - returncode} (killed by {name})"
    return str(returncode)


def _quote(lines: list[str], secrets: tuple[str, ...] = ()) -> str:
    kept = [line.strip()[:QUOTED_CHARS] for line in lines if line.strip()][-QUOTED_LINES:]
    text = "\n".join(f"    | {line}" for line in kept)
    for secret in secrets:  # values the manifest marks as secret, wherever the engine echoed them
        text = text.replace(secret, REDACTED)
    return text


def _safe_name(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]", "_", name) or "role"


def log_file_name(role: str) -> str:
    """The file a role's engine log gets in --logs-dir."""
    return f"{_safe_name(role)}.log"


def not_measured(target: RoleTarget, message: str, *, hint: str | None = None, **details: Any) -> PoolMeasurement:
    """The role's measurement when its engine gave no pool: one KV301 with the reason."""
    return PoolMeasurement(
        role=target.name,
        source="measure",
        pool_tokens=None,
        gpus=target.gpus or None,
        details=details,
        findings=(finding("KV301", target.name, message, hint=hint, location=target.location),),
    )


def refusal_measurement(launcher: Launcher, target: RoleTarget) -> PoolMeasurement | None:
    """The KV301 measurement of a role the launcher cannot run at all (`Launcher.refuse`), else None.

    A real run and `verify --dry-run` both ask this before anything starts, so they refuse alike.
    """
    refusal = launcher.refuse(target)
    if refusal is None:
        return None
    message, hint = refusal
    return not_measured(target, message, hint=hint)


class RoleBoot:
    """One role's measurement; `run()` returns its PoolMeasurement and leaves no process behind."""

    def __init__(
        self,
        target: RoleTarget,
        settings: BootSettings,
        *,
        cancel: threading.Event | None = None,
        on_phase: Callable[[str], None] | None = None,
        on_start: Callable[[], None] | None = None,
        launcher: Launcher | None = None,
    ) -> None:
        if launcher is None:
            from kvcheck.backends.measure.launchers.local import LocalLauncher

            launcher = LocalLauncher(gpu_check=False)
        self.target = target
        self.settings = settings
        self.launcher = launcher
        self._cancel = cancel or threading.Event()
        self._on_phase = on_phase or (lambda text: None)
        self._on_start = on_start or (lambda: None)
        self._engine = get_engine(target.engine)
        self._reader = self._engine.log_reader()
        self._lock = threading.Lock()
        self._tail: deque[str] = deque(maxlen=TAIL_LINES)
        self._ready = threading.Event()
        self._phase = "starting"
        self._last_phase: str | None = None  # the launcher's own phase (queued), while it has one
        self._port_taken: tuple[int, str] | None = None  # (port, line): the HTTP server could not bind

    def _fresh_log_state(self) -> None:
        """Forget a boot that is being retried: its log, phase and readiness say nothing of the next."""
        with self._lock:
            self._reader = self._engine.log_reader()
            self._tail.clear()
            self._port_taken = None
        self._ready.clear()
        self._phase = "starting"
        self._last_phase = None

    # -- the log, as it arrives ------------------------------------------------------------------

    def _on_line(self, line: str) -> None:
        with self._lock:
            events = self._reader.feed(line)
            phase = self._reader.phase
            self._tail.append(line)
            if self._port_taken is None and phase != "ready" and (port := self._engine.port_taken(line)):
                self._port_taken = (port, line)
        if any(event.kind == "ready" for event in events):
            self._ready.set()
        if phase != self._phase:
            self._phase = phase
            self._on_phase(PHASE_TEXT.get(phase, phase))

    def _launcher_phase(self, engine: RunningEngine) -> None:
        """Show the launcher's phase (a job waiting in a queue) until the engine's log takes over."""
        phase = engine.phase()
        if phase != self._last_phase:
            self._last_phase = phase
            self._on_phase(phase if phase is not None else PHASE_TEXT.get(self._phase, self._phase))

    def _secrets(self) -> tuple[str, ...]:
        """Secret values the manifest hands the engine (env and args with secret-looking names)."""
        values = [v for k, v in self.target.env.items() if is_secret_name(k)]
        values += [str(v) for k, v in self.target.args.items() if is_secret_name(k) and v not in (None, True, False)]
        return tuple(sorted({v for v in values if len(v) >= 4}, key=lambda v: (-len(v), v)))

    def _log_is_quiet(self) -> bool:
        """True when the engine's log carries none of its info-level startup lines."""
        with self._lock:
            summary = self._reader.summary()
        return not summary.ranks and summary.server_args is None

    def _summary(self) -> LogSummary:
        with self._lock:
            return self._reader.summary()

    # -- one boot --------------------------------------------------------------------------------

    def _fail(self, message: str, *, hint: str | None = None, **details: Any) -> PoolMeasurement:
        return not_measured(self.target, message, hint=hint, **details)

    def run(self) -> PoolMeasurement:
        target = self.target
        refused = refusal_measurement(self.launcher, target)
        if refused is not None:
            return refused
        taken: list[int] = []
        for boot in range(1, BIND_ATTEMPTS + 1):
            log_path, keep_log = self._log_path(again=boot > 1)
            booted = self._boot(log_path, keep_log)
            if isinstance(booted, PoolMeasurement):
                return booted
            engine, outcome, server, server_error, survivors, details = booted
            port = self._port_taken[0] if self._port_taken is not None else None
            # another process took the HTTP port kvcheck chose between its choice and the engine's bind: the
            # boot is retried on a fresh port; a port the manifest pinned is not retried (it stays taken), nor a
            # boot that left a process running (a survivor, or one outside the group holding its output): its
            # KV301 is told only when that boot is the last
            if (outcome == "port_taken" and port is not None and port == engine.http_port
                    and self.launcher.picks_ports and boot < BIND_ATTEMPTS and not survivors
                    and not engine.output_held):
                taken.append(port)
                self._on_phase(f"port {port} was taken before the engine bound it; booting again")
                self._fresh_log_state()
                continue
            break
        if taken:
            details["ports_taken"] = taken
        return self._finish(engine, outcome, server, server_error, survivors, details)

    def _boot(
        self, log_path: Path, keep_log: bool
    ) -> PoolMeasurement | tuple[RunningEngine, str, ServerInfo | None, str | None, str | None, dict[str, Any]]:
        """Start the engine, wait for its figures, stop it: what the watch saw, or the launch's failure."""
        request = LaunchRequest(
            target=self.target,
            log_path=log_path,
            on_line=self._on_line,
            timeout_s=self.settings.timeout_s,
            grace_s=self.settings.grace_s,
            dummy_weights=self.settings.dummy_weights,
            temporary_log=not keep_log,
        )
        try:
            engine = self.launcher.start(request)
        except LaunchError as exc:
            if not keep_log:
                log_path.unlink(missing_ok=True)
            return self._launch_failed(exc, log_path if keep_log else None)
        except BaseException:
            if not keep_log:
                log_path.unlink(missing_ok=True)
            raise
        details: dict[str, Any] = {
            "log_file": str(log_path) if keep_log else None,
            **engine.details,
            "dummy_weights": self.settings.dummy_weights,
        }
        self._on_start()
        outcome = "error"
        server: ServerInfo | None = None
        server_error: str | None = None
        try:
            outcome, server, server_error = self._watch(engine)
            if outcome == "ready" and server is None:
                server, server_error = self._server_info(engine, retries=2)
        finally:
            # Figures in: the engine serves nobody, so it is forced down at once (its launcher's
            # measured grace); on every other way out it gets the whole grace to stop by itself.
            measured = outcome in ("ready", "server_only")
            grace_s = min(engine.measured_grace_s, self.settings.grace_s) if measured else self.settings.grace_s
            survivors = engine.stop(grace_s)
            details["boot_s"] = round(time.monotonic() - engine.started_at, 3)
            if not keep_log:
                log_path.unlink(missing_ok=True)
        if engine.pump_error is not None:
            # kvcheck failed to read its own engine's log: a bug (exit 4), never a verdict on the role
            raise RuntimeError(
                f"reading role {self.target.name}'s engine log failed: {engine.pump_error!r}"
            ) from engine.pump_error
        return engine, outcome, server, server_error, survivors, details

    def _finish(
        self, engine: RunningEngine, outcome: str, server: ServerInfo | None, server_error: str | None,
        survivors: str | None, details: dict[str, Any],
    ) -> PoolMeasurement:
        """The measurement of the last boot, with KV301 for whatever outlived it."""
        target = self.target
        summary = self._summary()
        details.update(engine.details)  # what the launcher learnt while it ran (job ids, nodes)
        details.update(
            phase=PHASE_TEXT.get(summary.phase, summary.phase)
            if outcome in ("ready", "server_only")
            else self._last_phase or PHASE_TEXT.get(self._phase, self._phase),
            exit_status=engine.returncode,
        )
        measurement = self._measurement(outcome, engine, summary, server, server_error, details)
        measurement = self._replace(measurement, argv=engine.argv)
        if engine.output_held:
            measurement = self._replace(
                measurement,
                findings=(
                    *measurement.findings,
                    finding(
                        "KV301",
                        target.name,
                        "a process outside the engine's process group (started with setsid) still holds the "
                        "engine's output after the group was stopped; kvcheck could not stop it, and it may "
                        "hold GPU memory",
                        hint="find it with `ps -eo pid,sid,cmd` and stop it; engine.command must not detach "
                        "processes from its group",
                    ),
                ),
            )
        if survivors:
            measurement = self._replace(
                measurement,
                findings=(
                    *measurement.findings,
                    finding(
                        "KV301",
                        target.name,
                        survivors,
                        hint="check the host (nvidia-smi, ps -o stat,pid,cmd) before measuring again",
                    ),
                ),
            )
        return measurement

    def _refused(self, refusal: LogEvent, summary: LogSummary, details: dict[str, Any]) -> PoolMeasurement:
        """An engine that measured its own pool, found one request of its context length too large for
        it and exited (vLLM's startup check): a measured verdict, KV109 with the engine's own words, and
        the pool it stated judged by the policy (KV101), never "could not measure"."""
        pool = int(refusal.values["pool_tokens"])
        context = int(refusal.values["context_len"])
        details["refused_at_boot"] = True
        return PoolMeasurement(
            role=self.target.name,
            source="measure",
            pool_tokens=pool,
            max_input_tokens=self._engine.max_input_len(context, pool),
            context_len=context,
            engine_version=summary.version,
            resolved_args=dict(summary.server_args or {}),
            gpus=self.target.gpus or None,
            details=details,
            findings=(
                finding(
                    "KV109",
                    self.target.name,
                    f"{self._engine.label} refused to start: one request of its context length ({context:,} "
                    f"tokens) does not fit the KV cache it allocated, which holds {pool:,}; it said:\n"
                    + _quote([refusal.text], self._secrets()),
                    hint=f"lower the context length to at most {pool:,} tokens, or give the KV cache more memory",
                    location=self.target.location,
                ),
            ),
        )

    def _launch_failed(self, exc: LaunchError, kept_log: Path | None) -> PoolMeasurement:
        details = {
            "log_file": str(kept_log) if kept_log is not None else None,
            **exc.details,
            "dummy_weights": self.settings.dummy_weights,
        }
        return self._replace(self._fail(exc.message, hint=exc.hint), argv=exc.argv, details=details)

    def _replace(self, measurement: PoolMeasurement, **changes: Any) -> PoolMeasurement:
        if "details" in changes:
            changes["details"] = {**measurement.details, **changes["details"]}
        return dataclasses.replace(measurement, **changes)

    def _log_path(self, *, again: bool = False) -> tuple[Path, bool]:
        """The role's log: kept as RUN/<role>.log with --logs-dir, else a temporary file.

        RUN is this run's own folder in --logs-dir (`make_run_folder`); the file is created there
        exclusively, never through a link, readable by its owner only."""
        run_dir = self.settings.logs_dir
        if run_dir is not None:
            path = run_dir / log_file_name(self.target.name)
            if again:  # a boot retried on another port writes over the boot it replaces
                return path, True
            try:
                create_log(path)
            except OSError as exc:
                raise InputError(
                    f"--logs-dir {run_dir}: cannot write {path.name}: {exc.strerror or exc}",
                    hint="pass a folder kvcheck may create and write",
                ) from exc
            return path, True
        fd, name = tempfile.mkstemp(prefix=f"kvcheck-{_safe_name(self.target.name)}-", suffix=".log")
        os.close(fd)
        return Path(name), False

    def _server_info(
        self, engine: RunningEngine, *, retries: int, timeout_s: float = 10.0
    ) -> tuple[ServerInfo | None, str | None]:
        """Ask the head node's server; an explicit transport keeps HTTP(S)_PROXY from routing it away.

        An answer that is not from this boot's engine (another server took the port while the engine
        was still loading) is refused: it would be another deployment's pool.
        """
        try:
            url = engine.base_url()
            if url is None:
                return None, "the engine's address is not known yet"
            with self._engine.server_client(
                url,
                timeout_s=timeout_s,
                retries=retries,
                backoff_s=0.2,
                transport=httpx.HTTPTransport(),
            ) as client:
                info = client.server_info()
        except EndpointError as exc:
            return None, exc.message
        port = engine.http_port
        foreign = self._foreign(info, port)
        if foreign:
            return None, f"the server answering on port {port} is not this role's engine ({foreign})"
        return info, None

    def _foreign(self, info: ServerInfo, port: int) -> str | None:
        """Why a server-info answer cannot be this boot's engine, or None when it matches."""
        args = info.resolved_args
        served_port = args.get("port")
        if served_port is not None and str(served_port) != str(port):
            return f"it serves port {served_port}"
        model = args.get("model_path")
        wanted = self.target.model_path
        if model is not None and wanted is not None and str(model) != str(wanted):
            return f"it serves {model}, not {wanted}"
        for name in ("tp_size", "pp_size"):
            ours = self.target.args.get(name)
            theirs = args.get(name)
            if ours is not None and theirs is not None and str(ours) != str(theirs):
                return f"its {name} is {theirs}, not {ours}"
        return None

    def _watch(self, engine: RunningEngine) -> tuple[str, ServerInfo | None, str | None]:
        """Wait for the figures; returns (outcome, server info, why server info failed).

        outcome: ready, server_only (server answered, no ready line in the log), exited, timeout,
        cancelled, port_taken (the engine's HTTP server could not bind its port and serves nobody).
        """
        settings = self.settings
        deadline = engine.started_at + settings.timeout_s
        next_poll = engine.started_at + settings.server_poll_s
        server: ServerInfo | None = None
        server_error: str | None = None
        answered_at: float | None = None
        while True:
            if self._ready.is_set():
                return "ready", server, server_error
            if self._cancel.is_set():
                return "cancelled", server, server_error
            if engine.poll() is not None:
                return "exited", server, server_error
            if self._port_taken is not None:
                return "port_taken", server, server_error
            self._launcher_phase(engine)
            now = time.monotonic()
            if now >= deadline:
                return "timeout", server, server_error
            if now >= next_poll:
                info, error = self._server_info(engine, retries=0, timeout_s=max(0.5, min(2.0, deadline - now)))
                if info is not None and engine.poll() is None:
                    server, answered_at = info, answered_at or now
                else:
                    server_error = error
                next_poll = time.monotonic() + settings.server_poll_s
            # The shortcut without a ready line is for engines whose log is quiet (--log-level warning);
            # an engine that logs at info must say it is ready (warm-up can still fail after sizing).
            if answered_at is not None and now - answered_at >= settings.ready_wait_s and self._log_is_quiet():
                return "server_only", server, server_error
            self._ready.wait(settings.poll_s)

    @staticmethod
    def _exit_text(status: str, phase: str, summary: LogSummary, details: dict[str, Any]) -> str:
        """What an engine that exited before it was ready had done: a pool it printed first is not a serving
        pool (the `logs` reader's KV316, in the same words), never judged; the role stays an error."""
        reported = summary.reported_pool()
        if reported is None:
            return f"the engine exited with status {status} before reporting its pool (phase: {phase})"
        tokens, line = reported
        details["unserved_pool_tokens"] = tokens
        where = f", line {line}" if line is not None else ""
        # the failure itself is in the quoted last lines (redacted there)
        return (
            f"the engine exited with status {status} after reporting its pool ({tokens:,} tokens{where}), before "
            f"it was ready (phase: {phase}): the pool figure is not a serving pool: {FAILED_AFTER_SIZING}"
        )

    def _measurement(
        self,
        outcome: str,
        engine: RunningEngine,
        summary: LogSummary,
        server: ServerInfo | None,
        server_error: str | None,
        details: dict[str, Any],
    ) -> PoolMeasurement:
        target = self.target
        phase = details["phase"]
        where = f" (engine log: {details['log_file']})" if details.get("log_file") else ""
        keep = "" if details.get("log_file") else " (keep the whole log with --logs-dir DIR)"
        refused = engine.failure() if outcome == "exited" else None
        if refused is not None:  # the launcher (a scheduler) ended the role before the engine ran
            refusal_message, refusal_hint = refused
            return self._replace(self._fail(refusal_message, hint=refusal_hint), details=details)
        refusal = next((e for e in summary.warnings if e.kind == "pool_refusal"), None)
        if outcome == "exited" and refusal is not None:
            return self._refused(refusal, summary, details)
        if outcome == "exited":
            status = exit_text(engine.returncode if engine.returncode is not None else -9)
            lines = list(summary.errors) or list(self._tail)
            quoted = _quote(lines, self._secrets())
            hint = self._engine.exit_hint(engine.returncode, [*lines, *self._tail])
            return self._replace(
                self._fail(
                    self._exit_text(status, phase, summary, details)
                    + engine.exit_note()
                    + (f"; its last lines:\n{quoted}" if quoted else "; it printed nothing")
                    + where,
                    hint=(hint or "read the engine's error above and fix the arguments or the host") + keep,
                ),
                details=details,
            )
        if outcome == "port_taken" and self._port_taken is not None:
            port, line = self._port_taken
            tried = details.get("ports_taken") or []
            boots = f" ({len(tried) + 1} boots, on ports {', '.join(map(str, [*tried, port]))})" if tried else ""
            return self._replace(
                self._fail(
                    f"the engine's HTTP server could not listen on port {port}: another process holds it "
                    f"(address already in use){boots}; the engine stayed up serving nobody and was stopped "
                    f"(phase: {phase}); it said:\n{_quote([line], self._secrets())}" + where,
                    hint="a port the manifest sets (args port) must be free on the host; otherwise another "
                    "program is taking ports as fast as kvcheck picks them: find it with `ss -ltnp`" + keep,
                ),
                details=details,
            )
        if outcome == "timeout":
            quoted = _quote(list(self._tail), self._secrets())
            return self._replace(
                self._fail(
                    f"the engine did not report its pool within {self.settings.timeout_s:g} s (phase: {phase})"
                    + (f"; its last lines:\n{quoted}" if quoted else "; it printed nothing")
                    + where,
                    hint="raise --timeout for models that load slowly; a phase that never advances is a hang"
                    + keep,
                ),
                details=details,
            )
        if outcome == "cancelled":
            return self._replace(
                self._fail(f"interrupted while the engine was in phase: {phase}; the engine was stopped"),
                details=details,
            )
        below = sorted(
            (event for event in summary.warnings if event.kind == "context_warning"),
            key=lambda event: event.rank.sort_key if event.rank is not None else (),
        )
        warnings = tuple(
            f"[{event.rank}] {event.text}" if event.rank and str(event.rank) else event.text
            for event in below
        )
        # each rank's final pool: its final line, or its sizing line where sizing and final lines agree (a TP rank
        # that allocated less and printed no final line is a rank of its own, not passed over)
        ranks = tuple(
            RankPool(rank=str(rank.rank), pool_tokens=tokens, context_len=rank.context_len)
            for rank in summary.ranks
            if summary.is_final(rank) and (tokens := rank.best_tokens) is not None  # best: the final line first
        )
        details["kv_allocated_tokens"] = {
            str(rank.rank) or "TP0": rank.allocated_tokens
            for rank in summary.ranks
            if rank.allocated_tokens is not None
        }
        if outcome == "server_only":
            details["ready_line"] = False
        report = EngineReport(
            ranks=ranks,
            below_context_pools=tuple(
                int(event.values["pool_tokens"]) for event in below if event.values.get("pool_tokens") is not None
            ),
            server=server,
            server_error=server_error,
            below_context_warnings=warnings,
            extra=details,
        )
        figures = judge_figures(target, report)
        findings: list[Finding] = list(figures.findings)
        # a server that states no arguments (vLLM's) leaves the log's: what its `non-default args:` line said
        resolved = dict(server.resolved_args) if server is not None and server.resolved_args \
            else dict(summary.server_args or {})
        # the engine's own cap on requests at once: each rank's log line and the server's answer, the smallest
        caps = [rank.max_running_requests for rank in summary.ranks if rank.max_running_requests is not None]
        if server is not None and server.max_running_requests is not None:
            caps.append(server.max_running_requests)
        return PoolMeasurement(
            role=target.name,
            source="measure",
            pool_tokens=figures.pool_tokens,
            max_input_tokens=figures.max_input_tokens,
            context_len=figures.context_len,
            engine_version=figures.engine_version,
            max_running_requests=min(caps) if caps else None,
            resolved_args=resolved,
            gpus=target.gpus or None,
            details=dict(figures.details),
            findings=tuple(findings),
        )
