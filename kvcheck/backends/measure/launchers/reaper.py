"""Every process an engine starts stays within kvcheck's reach: a small subreaper above the engine.

An engine's process group is not enough: a process may leave it (`setsid`), close the engine's
output and keep a port and GPU memory after the group is gone; and a double fork hands the
grandchild to init at once, before anyone could see whose it was. So kvcheck starts each engine
through this file, which makes itself a child subreaper (`prctl(PR_SET_CHILD_SUBREAPER)`): any
process below it whose parent dies is re-parented to it instead of to init. Every process the engine
ever starts therefore stays a descendant of the reaper until it exits, whatever session or group it
moves to, and the reaper finds them all by walking /proc's parent links.

The reaper and the engine share one process group, the one kvcheck signals:

* SIGTERM (kvcheck's `killpg`, or its watchdog's): the group's members got it already; the reaper
  sends it on to every descendant outside the group.
* SIGUSR2 (kvcheck's or the watchdog's last word, after the grace): SIGKILL to every descendant, in
  the group or not.
* The engine exits by itself: whatever it left running gets SIGTERM, then SIGKILL after the grace
  given on the command line.

The reaper reaps every orphan handed to it, exits only when no descendant is left (or 10 s after
SIGKILL, for a process stuck in the kernel), and then exits as the engine did: the same status, or
the same signal, so kvcheck reads the engine's own end. It loads none of kvcheck (stdlib only, run
by path with `python -I`), and passes the engine its environment, descriptors and a clean signal
state, as starting the engine directly would.

    python -I reaper.py GRACE_S REPORT_FD -- PROGRAM [ARG...]

REPORT_FD is a pipe kvcheck reads after the reaper has exited: the pids of processes that outlived
SIGKILL (stuck in the kernel) when the reaper gave up waiting for them, so kvcheck can name them.
"""

from __future__ import annotations

import ctypes
import os
import resource
import signal
import sys
import time
from pathlib import Path

PR_SET_CHILD_SUBREAPER = 36  # <linux/prctl.h>
GIVE_UP_S = 10.0  # after SIGKILL: a process in uninterruptible sleep may never go
PIPE_REPORT_MAX = 4096  # bytes of pids written to kvcheck, read after the reaper exits
_HANDLED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGUSR2, signal.SIGCHLD)
# Python ignores these at start; the engine gets them at their defaults, as subprocess's
# restore_signals gives them (the signals above are only blocked here, and the engine's mask is
# empty; Python's own handlers end with the exec)
_DEFAULTS = (signal.SIGPIPE, signal.SIGXFSZ)


def become_subreaper() -> bool:
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return bool(libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0)
    except (OSError, AttributeError):
        return False


def descendants(root: int) -> dict[int, tuple[int, str]]:
    """Every process below `root`: pid -> (process group, state), from /proc's parent links."""
    children: dict[int, list[int]] = {}
    info: dict[int, tuple[int, str]] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat", "rb") as stat:
                raw = stat.read()
        except OSError:
            continue  # exited while we looked
        # comm may hold spaces and parentheses: the fields start after the last ')'
        fields = raw[raw.rfind(b")") + 2 :].split()
        if len(fields) < 3:
            continue
        pid = int(entry.name)
        children.setdefault(int(fields[1]), []).append(pid)
        info[pid] = (int(fields[2]), fields[0].decode("ascii", "replace"))
    found: dict[int, tuple[int, str]] = {}
    stack = list(children.get(root, ()))
    while stack:
        pid = stack.pop()
        if pid in found or pid not in info:
            continue
        found[pid] = info[pid]
        stack.extend(children.get(pid, ()))
    return found


def _live(found: dict[int, tuple[int, str]]) -> dict[int, tuple[int, str]]:
    return {pid: v for pid, v in found.items() if v[1] not in ("Z", "X")}


def _signal(pids: list[int], signum: int) -> None:
    for pid in pids:
        try:
            os.kill(pid, signum)
        except (ProcessLookupError, PermissionError):
            pass


class Reaper:
    """The loop: reap, signal, and decide when the engine's whole tree is gone."""

    def __init__(self, engine: int, grace_s: float) -> None:
        self.me = os.getpid()
        self.group = os.getpgrp()
        self.engine = engine
        self.grace_s = grace_s
        self.status: int | None = None  # the engine's wait status once it has exited
        self.kill_at: float | None = None  # when what is left gets SIGKILL
        self.give_up_at: float | None = None  # after SIGKILL: when to stop waiting

    def reap(self) -> None:
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            if pid == self.engine:
                self.status = status

    def terminate(self, *, outside_group_only: bool) -> None:
        live = _live(descendants(self.me))
        _signal([pid for pid, (pgid, _) in live.items() if not outside_group_only or pgid != self.group],
                signal.SIGTERM)

    def kill(self) -> None:
        _signal(list(_live(descendants(self.me))), signal.SIGKILL)
        self.kill_at = None
        if self.give_up_at is None:
            self.give_up_at = time.monotonic() + GIVE_UP_S

    def on_signal(self, signum: int) -> None:
        if signum == signal.SIGUSR2:
            self.kill()
        elif signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            self.terminate(outside_group_only=True)

    def step(self) -> bool:
        """One turn after the reaping; True when the reaper should exit."""
        now = time.monotonic()
        if self.status is not None:
            if not _live(descendants(self.me)):
                return True
            if self.kill_at is None and self.give_up_at is None:
                # the engine exited by itself and left processes behind: end them as kvcheck would
                self.terminate(outside_group_only=False)
                self.kill_at = now + self.grace_s
        if self.kill_at is not None and now >= self.kill_at:
            self.kill()
        return self.give_up_at is not None and now >= self.give_up_at

    def run(self) -> None:
        while True:
            self.reap()
            if self.step():
                return
            # a SIGCHLD, a signal from kvcheck, or a look every half second (a grandchild's exit
            # sends no SIGCHLD here until it is ours); every 20 ms once SIGKILL is sent, so that the
            # reaper (and the stop of a measured role, which waits for it) ends as soon as they are gone
            signum = signal.sigtimedwait(_HANDLED, 0.02 if self.give_up_at is not None else 0.5)
            if signum is not None:
                self.on_signal(signum.si_signo)


def exit_as(status: int | None) -> None:
    """End this process as the engine ended: its exit status, or death by its signal."""
    if status is None:
        os._exit(125)  # gave up waiting for a descendant stuck in the kernel before the engine ended
    if os.WIFSIGNALED(status):
        signum = os.WTERMSIG(status)
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))  # the engine's core dump, if any, is its own
        if signum not in (signal.SIGKILL, signal.SIGSTOP):  # those two are always at their default
            signal.signal(signum, signal.SIG_DFL)
            signal.pthread_sigmask(signal.SIG_UNBLOCK, [signum])
        os.kill(os.getpid(), signum)
        os._exit(128 + signum)  # a signal whose default is not to terminate
    os._exit(os.waitstatus_to_exitcode(status))


def main(argv: list[str]) -> None:
    if len(argv) < 4 or argv[2] != "--":
        sys.stderr.write("usage: reaper.py GRACE_S REPORT_FD -- PROGRAM [ARG...]\n")
        os._exit(2)
    grace_s, report_fd, command = float(argv[0]), int(argv[1]), argv[3:]
    os.set_inheritable(report_fd, False)  # the engine never holds it: only the reaper reports
    if not Path("/proc/self/stat").exists() or not become_subreaper():
        os.execvp(command[0], command)  # no subreaper here: run the engine as it would run without us
    signal.pthread_sigmask(signal.SIG_BLOCK, _HANDLED)
    engine = os.fork()  # this process has one thread: fork then exec, as subprocess does
    if engine == 0:
        try:
            for signum in _DEFAULTS:
                signal.signal(signum, signal.SIG_DFL)
            signal.pthread_sigmask(signal.SIG_SETMASK, [])
            os.execvp(command[0], command)
        except OSError as exc:  # kvcheck checked the program first; this is a race with its removal
            os.write(2, f"kvcheck: could not start the engine: {exc.strerror or exc} ({command[0]})\n".encode())
        os._exit(127)
    reaper = Reaper(engine, grace_s)
    reaper.run()
    stuck = sorted(_live(descendants(reaper.me)))  # it gave up on them: kvcheck reports them (KV301)
    try:
        report = " ".join(map(str, stuck))[:PIPE_REPORT_MAX]  # within a pipe's buffer: never blocks
        os.write(report_fd, (report[: report.rfind(" ")] if len(report) == PIPE_REPORT_MAX else report).encode())
    except OSError:
        pass  # kvcheck is gone; the watchdog has the group
    os.close(report_fd)
    exit_as(reaper.status)


if __name__ == "__main__":
    main(sys.argv[1:])
