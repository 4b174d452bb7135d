"""A local process tree whose output kvcheck reads line by line, and which it can always end.

Used by the local launcher for the engine itself and by the Slurm launcher for the `srun` client
that forwards the engine's output. The process runs in its own session (own process group) so that
kvcheck can end the whole group, and so that SGLang's `SGLANG_KILLPG_ON_SCHEDULER_EXCEPTION` cannot
take kvcheck down with it; on Linux it runs below a subreaper (`reaper.py`), so that a process that
leaves the group, or is orphaned by a double fork, is still found and stopped with it
(docs/measure.md, "Cleanup guarantees").
"""

from __future__ import annotations

import errno
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import IO

from kvcheck.backends.measure.launchers import reaper
from kvcheck.backends.measure.launchers.watchdog import group_members, running

_POLL_S = 0.02
REAPER_KILL_WAIT_S = reaper.GIVE_UP_S + 2.0  # SIGUSR2 to SIGKILL of the group: the reaper's own wait, and 2 s


def group_alive(pgid: int) -> bool:
    """True while any process of the group is still running (zombies aside: `group_members`)."""
    if Path("/proc/self/stat").exists():
        return bool(group_members(pgid))
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def group_pids(pgid: int) -> list[int]:
    """Live members of the group (for messages); empty where /proc cannot tell."""
    return group_members(pgid) if Path("/proc/self/stat").exists() else []


# The longest engine output line kvcheck reads at once; the rest of a longer line is skipped.
MAX_LINE_BYTES = 1 << 20
# An engine that logs nonstop (18 MB/s seen) must not fill the disk: the log keeps its first
# LOG_HEAD_BYTES, then only the last LOG_TAIL_BYTES (in memory until the engine ends), with a line
# saying how much was left out between them. Every line still reaches the parser.
LOG_HEAD_BYTES = 64 << 20
LOG_TAIL_BYTES = 16 << 20


def create_log(path: Path) -> None:
    """Create the engine's log file, readable by its owner only (an engine's output can hold
    secrets); exclusively, so neither a file nor a symlink already there is written through."""
    os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600))


def open_log(path: Path) -> IO[str]:
    """The engine's log file that `create_log` (or mkstemp) made, opened without following a symlink
    planted in its place since; it stays the owner's only."""
    fd = os.open(path, os.O_WRONLY | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC)
    os.fchmod(fd, 0o600)
    return os.fdopen(fd, "w", encoding="utf-8", errors="replace")


def _check_program(argv: tuple[str, ...], env: Mapping[str, str]) -> None:
    """Raise the OSError starting `argv[0]` directly would raise: the reaper starts it, and its
    failure would otherwise read as an engine that exited with status 127."""
    program = argv[0] if argv else ""
    if shutil.which(program, path=env.get("PATH", os.defpath)) is not None:
        return
    if os.sep in program and os.path.exists(program):
        raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), program)
    raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), program)


def _reaper_argv(argv: tuple[str, ...], grace_s: float, report_fd: int) -> list[str]:
    """`argv` below the subreaper on Linux, `argv` itself where /proc is not Linux's."""
    if not Path("/proc/self/stat").exists():
        return list(argv)
    return [sys.executable, "-I", str(Path(reaper.__file__).resolve()), repr(float(grace_s)), str(report_fd),
            "--", *argv]


class EngineProcess:
    """One engine launch: its process group, its merged stdout+stderr, and a guaranteed end."""

    def __init__(
        self,
        argv: tuple[str, ...],
        env: Mapping[str, str],
        *,
        log_path: Path,
        on_line: Callable[[str], None],
        grace_s: float = 15.0,
    ) -> None:
        self.argv = argv
        self.log_path = log_path
        self._on_line = on_line
        _check_program(argv, env)
        # the reaper names processes that outlived SIGKILL on its own pipe, which the engine never
        # holds (the reaper makes it close-on-exec), so no engine output can forge the list
        self._report, report_w = os.pipe()
        launch = _reaper_argv(argv, grace_s, report_w)
        self.reaped = launch != list(argv)
        try:
            self._log = open_log(log_path)
            try:
                self._proc = subprocess.Popen(
                    launch,
                    env=dict(env),
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                    close_fds=True,  # the engine must never hold the watchdog's pipe (watchdog.py)
                    pass_fds=(report_w,) if self.reaped else (),
                )
            except OSError:
                self._log.close()
                raise
        except OSError:
            os.close(self._report)
            raise
        finally:
            os.close(report_w)
        self.pump_error: Exception | None = None  # a failure of kvcheck's own log parsing
        self.output_held = False  # set by stop(): a process outside the group still holds the output
        self.pid = self._proc.pid
        self.pgid = self.pid  # start_new_session: the reaper (or the engine) leads its own session and group
        self.started_at = time.monotonic()
        self._reader = threading.Thread(target=self._pump, name=f"kvcheck-log-{self.pid}", daemon=True)
        self._reader.start()

    def _pump(self) -> None:
        """Copy every line to the log file and to the parser as it arrives, until all writers close.

        Lines are read at most MAX_LINE_BYTES at a time (an engine printing without newlines cannot
        exhaust memory), and a failure in the parser never stops the draining: the engine must not
        block or die on a full pipe because of kvcheck, and the failure is kept for `pump_error`.
        """
        stream = self._proc.stdout
        if stream is None:  # pragma: no cover - Popen was given stdout=PIPE
            raise RuntimeError("engine output is not captured")
        written = 0  # bytes of the log's head on disk
        tail: deque[str] = deque()  # past the head: the last lines, LOG_TAIL_BYTES at most
        tail_bytes = left_out = 0
        try:
            skipping = False  # inside an over-long line whose head was already handed on
            while raw := stream.readline(MAX_LINE_BYTES):
                ends = raw.endswith(b"\n")
                if skipping:
                    skipping = not ends
                    continue
                skipping = not ends and len(raw) >= MAX_LINE_BYTES
                line = raw.decode("utf-8", "replace").rstrip("\r\n")
                if written < LOG_HEAD_BYTES:
                    written += len(line) + 1
                    self._write_log(line + "\n")
                else:
                    tail.append(line)
                    tail_bytes += len(line) + 1
                    while tail_bytes > LOG_TAIL_BYTES:
                        tail_bytes -= len(tail.popleft()) + 1
                        left_out += 1
                if self.pump_error is None:
                    try:
                        self._on_line(line)
                    except Exception as exc:  # noqa: BLE001 - reported by the role, never swallowed
                        self.pump_error = exc
        finally:
            if tail:
                if left_out:
                    self._write_log(f"[kvcheck: {left_out:,} lines of engine output left out here: the log keeps "
                                    f"its first {LOG_HEAD_BYTES >> 20} MiB and last {LOG_TAIL_BYTES >> 20} MiB]\n")
                self._write_log("".join(line + "\n" for line in tail))
            stream.close()

    def _write_log(self, text: str) -> None:
        try:
            self._log.write(text)
            self._log.flush()
        except ValueError:
            pass  # stop() gave up waiting for a writer that escaped SIGKILL and closed the log

    def poll(self) -> int | None:
        """The launcher's exit status (negative: killed by that signal), None while it runs."""
        return self._proc.poll()

    @property
    def returncode(self) -> int | None:
        return self._proc.returncode

    def stop(self, grace_s: float) -> list[int]:
        """End the engine and everything it started: SIGTERM, then SIGKILL after `grace_s`; returns
        survivors' pids. `grace_s` 0 skips the SIGTERM: SIGKILL to every process at once (a measured
        role, which serves nothing and whose own SIGTERM path would only end in SIGKILL 5 s later).

        The group gets SIGTERM, and the reaper hands it on to the engine's processes outside the
        group. After `grace_s` the reaper is told to SIGKILL every one of them (SIGUSR2); it exits
        when none is left, and the group, reaper included, gets SIGKILL if it has not gone by then.
        Idempotent. After it returns the launcher is reaped and the log is complete and closed; the
        returned list is empty unless a process escaped even SIGKILL (uninterruptible sleep).
        """
        if grace_s > 0:
            self._signal_group(signal.SIGTERM)
        if not self._wait_group(grace_s):
            if self.reaped and self._proc.poll() is None:
                self._proc.send_signal(signal.SIGUSR2)  # poll() first: never a pid reused since
                try:
                    self._proc.wait(timeout=REAPER_KILL_WAIT_S)  # it exits once nothing it reaps is left
                except subprocess.TimeoutExpired:
                    pass
            self._signal_group(signal.SIGKILL)
            self._wait_group(10.0)
        try:
            self._proc.wait(timeout=10.0)
        except subprocess.TimeoutExpired:
            pass
        survivors = group_pids(self.pgid) if group_alive(self.pgid) else []
        survivors = sorted({*survivors, *(pid for pid in self._reported_stuck() if running(pid))})
        self._reader.join(timeout=5.0)
        # Still open after the whole group is gone: a process that left the group (setsid) holds
        # the engine's output, and kvcheck cannot stop what it cannot see.
        self.output_held = self._reader.is_alive()
        if not self._log.closed:
            self._log.close()
        return survivors

    def _reported_stuck(self) -> list[int]:
        """The pids the reaper gave up on (it writes them as it exits); read once, then closed."""
        if self._report < 0:
            return []
        text = b""
        if self._proc.returncode is not None:  # the reaper has exited: its end of the pipe is closed
            os.set_blocking(self._report, False)
            try:
                text = os.read(self._report, 1 << 16)
            except BlockingIOError:  # never expected: the engine's side is close-on-exec
                pass
        os.close(self._report)
        self._report = -1
        return [int(word) for word in text.split() if word.isdigit()]

    def _signal_group(self, signum: int) -> None:
        try:
            os.killpg(self.pgid, signum)
        except ProcessLookupError:
            pass

    def _wait_group(self, timeout_s: float) -> bool:
        """Reap the launcher and wait until no process of the group runs; False on timeout."""
        deadline = time.monotonic() + timeout_s
        while True:
            self._proc.poll()
            if not group_alive(self.pgid):
                return True
            if time.monotonic() >= deadline:
                return False
            time.sleep(_POLL_S)
