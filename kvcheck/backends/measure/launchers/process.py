"""A local process group whose output kvcheck reads line by line, and which it can always end.

Used by the local launcher for the engine itself and by the Slurm launcher for the `srun` client
that forwards the engine's output. The process runs in its own session (own process group) so that
kvcheck can end the whole group, and so that SGLang's `SGLANG_KILLPG_ON_SCHEDULER_EXCEPTION` cannot
take kvcheck down with it (docs/measure.md, "Cleanup guarantees").
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import IO

_POLL_S = 0.02


def _group_members(pgid: int) -> list[tuple[int, str]] | None:
    """(pid, state) of every process in group `pgid` from /proc; None where /proc is not Linux's."""
    proc = Path("/proc")
    if not (proc / "self" / "stat").exists():
        return None
    members = []
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue  # exited while we looked
        # comm may contain spaces and parentheses: fields start after the last ')'
        fields = stat[stat.rfind(")") + 2 :].split()
        if len(fields) > 2 and int(fields[2]) == pgid:
            members.append((int(entry.name), fields[0]))
    return members


def group_alive(pgid: int) -> bool:
    """True while any process of the group is still running.

    Zombies (state Z/X) hold no memory and cannot be killed again; an orphaned zombie stays until
    its new parent reaps it, which is not ours to wait for.
    """
    members = _group_members(pgid)
    if members is not None:
        return any(state not in ("Z", "X") for _, state in members)
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def group_pids(pgid: int) -> list[int]:
    """Live members of the group (for messages); empty where /proc cannot tell."""
    return sorted(pid for pid, state in (_group_members(pgid) or []) if state not in ("Z", "X"))


# The longest engine output line kvcheck reads at once; the rest of a longer line is skipped.
MAX_LINE_BYTES = 1 << 20
# An engine that logs nonstop (18 MB/s seen) must not fill the disk: the log keeps its first
# LOG_HEAD_BYTES, then only the last LOG_TAIL_BYTES (in memory until the engine ends), with a line
# saying how much was left out between them. Every line still reaches the parser.
LOG_HEAD_BYTES = 64 << 20
LOG_TAIL_BYTES = 16 << 20


def open_log(path: Path) -> IO[str]:
    """The engine's log file, created or truncated without following a symlink planted in its place,
    readable by its owner only (an engine's output can hold secrets)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    os.fchmod(fd, 0o600)  # a file that existed keeps its mode otherwise
    return os.fdopen(fd, "w", encoding="utf-8", errors="replace")


class EngineProcess:
    """One engine launch: its process group, its merged stdout+stderr, and a guaranteed end."""

    def __init__(
        self,
        argv: tuple[str, ...],
        env: Mapping[str, str],
        *,
        log_path: Path,
        on_line: Callable[[str], None],
    ) -> None:
        self.argv = argv
        self.log_path = log_path
        self._on_line = on_line
        self._log = open_log(log_path)
        try:
            self._proc = subprocess.Popen(
                list(argv),
                env=dict(env),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                close_fds=True,  # the engine must never hold the watchdog's pipe (watchdog.py)
            )
        except OSError:
            self._log.close()
            raise
        self.pump_error: Exception | None = None  # a failure of kvcheck's own log parsing
        self.output_held = False  # set by stop(): a process outside the group still holds the output
        self.pid = self._proc.pid
        self.pgid = self.pid  # start_new_session: the engine leads its own session and group
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
        """End the whole process group: SIGTERM, then SIGKILL after `grace_s`; returns survivors' pids.

        Idempotent. After it returns the launcher is reaped and the log is complete and closed; the
        returned list is empty unless a process escaped even SIGKILL (uninterruptible sleep).
        """
        self._signal_group(signal.SIGTERM)
        if not self._wait_group(grace_s):
            self._signal_group(signal.SIGKILL)
            self._wait_group(10.0)
        try:
            self._proc.wait(timeout=10.0)
        except subprocess.TimeoutExpired:
            pass
        survivors = group_pids(self.pgid) if group_alive(self.pgid) else []
        self._reader.join(timeout=5.0)
        # Still open after the whole group is gone: a process that left the group (setsid) holds
        # the engine's output, and kvcheck cannot stop what it cannot see.
        self.output_held = self._reader.is_alive()
        if not self._log.closed:
            self._log.close()
        return survivors

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
