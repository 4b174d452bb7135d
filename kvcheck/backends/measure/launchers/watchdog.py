"""Engines die with kvcheck, however it dies (SIGKILL included): a small watchdog process.

kvcheck starts it before its first local engine (`Watchdog.start`), in its own session (a Ctrl-C
to kvcheck's group does not reach it), with stdin the read end of a pipe whose write end only
kvcheck holds (the pipe is close-on-exec and every engine is started with close_fds, so no engine
holds it). kvcheck writes one line per engine process group it starts and one when it has stopped
it:

    start <pgid> <leader start time> <temporary log path, or ->
    stop <pgid>
    slurm <job name> <JSON: the PATH and SLURM_CONF of Slurm's client commands>
    slurm-done <job name>

End of file on stdin means kvcheck is gone (every descriptor closes when a process dies, SIGKILL
included). The watchdog then sends SIGTERM to every group still listed; after GRACE_S, SIGUSR2 to
each group's leader, the subreaper kvcheck starts the engine under (`reaper.py`: it SIGKILLs every
process the engine started, in the group or outside it, and exits when none is left), and SIGKILL to
what is left of the groups; it removes the listed temporary logs, and exits. Slurm jobs still listed
get `scancel --signal=TERM --name=<job>` at once and `scancel --name=<job>` after GRACE_S unless they
have left the queue by then (a job name is unique to one kvcheck run and role, so this never touches
another job). With nothing listed it exits at once.
A group is signalled only while its leader is the process kvcheck started (same start time in
/proc/<pid>/stat, field 22) or is gone with members of the group left behind: a process group id
stays taken while any member lives, so such members are kvcheck's engines, never a later process
that happens to reuse the number.

This file imports only the standard library and is run by path (`python -I watchdog.py`), so the
watchdog starts in milliseconds and loads none of kvcheck.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import IO

GRACE_S = 5.0  # SIGTERM to SIGKILL once kvcheck is gone (SGLang drains in well under this)
REAPER_WAIT_S = 12.0  # SIGUSR2 to SIGKILL of the group: the reaper's own 10 s for a stuck process, and 2 s
_POLL_S = 0.05


def _stat_fields(pid: int) -> list[str] | None:
    """/proc/<pid>/stat from field 3 (state) on; None if there is no such process."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # comm may contain spaces and parentheses: fields start after the last ')'
    return stat[stat.rfind(")") + 2 :].split()


def start_time(pid: int) -> str:
    """The process's start time in clock ticks since boot (field 22), "-" where /proc cannot tell."""
    fields = _stat_fields(pid)
    return fields[19] if fields is not None and len(fields) > 19 else "-"


def group_members(pgid: int) -> list[int]:
    """The pids of group `pgid` that still run, from /proc (zombies hold nothing and cannot be killed
    again; an orphaned zombie stays until its new parent reaps it)."""
    members = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        fields = _stat_fields(int(entry.name))  # None: it exited while we looked
        if fields is not None and len(fields) > 2 and int(fields[2]) == pgid and fields[0] not in "ZX":
            members.append(int(entry.name))
    return sorted(members)


def _group_alive(pgid: int) -> bool:
    return bool(group_members(pgid))


def running(pid: int) -> bool:
    """True while `pid` runs (not a zombie)."""
    fields = _stat_fields(pid)
    return fields is not None and fields[0] not in "ZX"


def _still_ours(pgid: int, started: str) -> bool:
    """The group kvcheck started, not a later one reusing its number (see the module docstring)."""
    now = start_time(pgid)
    if now == "-":  # the leader is gone: any member left is one of ours
        return _group_alive(pgid)
    return started == "-" or now == started


def _signal(pgids: list[int], signum: int) -> None:
    for pgid in pgids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pgid, signum)


def _wait(pgids: list[int], timeout_s: float, *, alive: Callable[[int], bool] = _group_alive) -> list[int]:
    """Wait until `alive` is false for every one of `pgids`, at most `timeout_s`; those still alive."""
    deadline = time.monotonic() + timeout_s
    while pgids and time.monotonic() < deadline:
        pgids = [pgid for pgid in pgids if alive(pgid)]
        if pgids:
            time.sleep(_POLL_S)
    return [pgid for pgid in pgids if alive(pgid)]


def end_groups(groups: dict[int, str], grace_s: float = GRACE_S) -> None:
    """SIGTERM every group still ours; after `grace_s`, SIGUSR2 to each group's leader (the reaper
    above the engine SIGKILLs every descendant, in the group or not, and exits when none is left),
    then SIGKILL to what is left of the groups; wait until none runs."""
    ours = [pgid for pgid, started in groups.items() if _still_ours(pgid, started)]
    _signal(ours, signal.SIGTERM)
    ours = _wait(ours, grace_s)
    leaders = [pgid for pgid in ours if groups[pgid] != "-" and start_time(pgid) == groups[pgid]]
    for pgid in leaders:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pgid, signal.SIGUSR2)
    _wait(leaders, REAPER_WAIT_S, alive=lambda pgid: start_time(pgid) == groups[pgid] and running(pgid))
    ours = [pgid for pgid in ours if _group_alive(pgid)]
    _signal(ours, signal.SIGKILL)
    deadline = time.monotonic() + 10.0
    while ours and time.monotonic() < deadline:
        ours = [pgid for pgid in ours if _group_alive(pgid)]
        if ours:
            time.sleep(_POLL_S)


def _slurm(argv: list[str], env: dict[str, str]) -> str:
    """Run one of Slurm's client commands (scancel, squeue); its output, "" when it cannot run."""
    try:
        done = subprocess.run(argv, env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                              timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return done.stdout.strip()


def _job_env(given: dict[str, str]) -> dict[str, str]:
    """The environment for Slurm's client commands: the watchdog's own without a surrounding job's
    SLURM_* (they would redirect them), and the PATH and SLURM_CONF the launcher used."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
    env.update({k: v for k, v in given.items() if k in ("PATH", "SLURM_CONF")})
    return env


def signal_jobs(jobs: dict[str, dict[str, str]]) -> None:
    """SIGTERM to the steps of every listed Slurm job, by its unique name (pending ones included)."""
    for name, env in jobs.items():
        _slurm(["scancel", "--signal=TERM", f"--name={name}"], _job_env(env))


def cancel_jobs(jobs: dict[str, dict[str, str]], grace_s: float = GRACE_S, started: float | None = None) -> None:
    """After the grace (counted from `started`), scancel every listed job still in the queue."""
    deadline = (started if started is not None else time.monotonic()) + grace_s
    left = dict(jobs)
    while left and time.monotonic() < deadline:
        left = {name: env for name, env in left.items()
                if _slurm(["squeue", "-h", f"--name={name}", "-o", "%i"], _job_env(env))}
        if left:
            time.sleep(0.5)
    for name, env in left.items():
        _slurm(["scancel", f"--name={name}"], _job_env(env))


def serve(stream: IO[str], grace_s: float = GRACE_S) -> None:
    """Read kvcheck's lines until end of file, then end what is still listed and remove its logs."""
    groups: dict[int, str] = {}
    logs: dict[int, str] = {}
    jobs: dict[str, dict[str, str]] = {}
    for line in stream:
        words = line.split(" ", 3)
        try:
            if words[0] == "slurm" and len(words) >= 3:
                _, name, given = line.rstrip("\n").split(" ", 2)
                env = json.loads(given)
                jobs[name] = {str(k): str(v) for k, v in env.items()} if isinstance(env, dict) else {}
            elif words[0] == "slurm-done" and len(words) == 2:
                jobs.pop(words[1].rstrip("\n"), None)
            elif words[0] == "start" and len(words) == 4:
                pgid = int(words[1])
                groups[pgid] = words[2]
                log = words[3].rstrip("\n")
                if log != "-":
                    logs[pgid] = log
            elif words[0] == "stop" and len(words) == 2:
                pgid = int(words[1])
                groups.pop(pgid, None)
                logs.pop(pgid, None)  # kvcheck removes its own log after a normal stop
        except ValueError:
            continue  # never from kvcheck; a bad line must not keep the others from being ended
    started = time.monotonic()
    if jobs:
        signal_jobs(jobs)
    if groups:
        end_groups(groups, grace_s)
    if jobs:
        cancel_jobs(jobs, grace_s, started)
    for log in logs.values():
        with contextlib.suppress(OSError):
            os.unlink(log)


def main() -> None:
    # kvcheck's terminal and Ctrl-C are not the watchdog's business: only end of file ends it
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    grace_s = float(sys.argv[1]) if len(sys.argv) > 1 else GRACE_S
    serve(sys.stdin, grace_s)


class Watchdog:
    """kvcheck's side: starts the watchdog once per kvcheck process and tells it about each group."""

    _lock = threading.Lock()
    _writer: IO[str] | None = None
    _proc: subprocess.Popen[bytes] | None = None

    @classmethod
    def _ensure(cls) -> IO[str] | None:
        if cls._writer is not None and cls._proc is not None and cls._proc.poll() is None:
            return cls._writer
        if cls._writer is not None:  # it died (killed by someone): start another
            with contextlib.suppress(OSError):
                cls._writer.close()
            cls._writer = None
        if not Path("/proc/self/stat").exists():
            return None  # not Linux: no watchdog (docs/measure.md)
        read_fd, write_fd = os.pipe()  # both close-on-exec: no other child inherits them
        try:
            cls._proc = subprocess.Popen(
                [sys.executable, "-I", str(Path(__file__).resolve())],
                stdin=read_fd,
                # it outlives kvcheck by up to its grace: holding kvcheck's stderr would keep a pipe
                # reading kvcheck's output (`kvcheck ... 2>&1 | tee`, a CI step) open that long
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                start_new_session=True,
                close_fds=True,
            )
        except OSError:
            os.close(write_fd)
            return None
        finally:
            os.close(read_fd)
        cls._writer = os.fdopen(write_fd, "w", encoding="utf-8", errors="replace")
        return cls._writer

    @classmethod
    def _send(cls, line: str) -> None:
        with cls._lock:
            writer = cls._ensure()
            if writer is None:
                return
            try:
                writer.write(line + "\n")
                writer.flush()
            except OSError:  # the watchdog died between the check and the write
                with contextlib.suppress(OSError):
                    writer.close()
                cls._writer = None

    @classmethod
    def prepare(cls) -> None:
        """Start the watchdog now, before the first engine, so registering one costs only a write."""
        with cls._lock:
            cls._ensure()

    @classmethod
    def started(cls, pgid: int, temporary_log: Path | None) -> None:
        """Register a group just started; `temporary_log` is removed if kvcheck dies before it."""
        log = str(temporary_log) if temporary_log is not None else "-"
        if "\n" in log:
            log = "-"  # cannot be framed on one line; mkstemp names never hold one
        cls._send(f"start {pgid} {start_time(pgid)} {log}")

    @classmethod
    def stopped(cls, pgid: int) -> None:
        """kvcheck ended the group itself: the watchdog forgets it."""
        cls._send(f"stop {pgid}")

    @classmethod
    def slurm_started(cls, name: str, env: Mapping[str, str]) -> None:
        """Register a Slurm job by its unique name, before it is submitted; `env` gives the PATH and
        SLURM_CONF its client commands use."""
        if " " in name or "\n" in name:
            return  # job_name() never makes one; it could not be framed on one line
        given = {k: env[k] for k in ("PATH", "SLURM_CONF") if k in env}
        cls._send(f"slurm {name} {json.dumps(given)}")

    @classmethod
    def slurm_stopped(cls, name: str) -> None:
        """kvcheck cancelled the job itself and saw it leave the queue: the watchdog forgets it."""
        cls._send(f"slurm-done {name}")


if __name__ == "__main__":
    main()
