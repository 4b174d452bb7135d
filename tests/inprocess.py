"""Run the kvcheck command inside the test process, as `python -m kvcheck` would run it, in ~1/25 of the time.

A CLI process costs 0.7 to 0.9 s (interpreter start plus kvcheck's imports); this runs the same click
command (`kvcheck.cli.main` in standalone mode, so click's own error and exit handling runs) with the
process's view of the world put in place for the call and taken back after it: argv, the working
folder, the environment, stdin, stdout and stderr as pipes (not terminals, no file descriptor, so
terminal-size and colour detection answer as they do for a piped process), the signal handlers and
kvcheck's per-process state (profile folders, caches keyed by file stamps, handed-out ports, the
watchdog). Tests that need a real process (signals, closed pipes, the watchdog outliving kvcheck, a
terminal) use `run_kvcheck_process` in tests/conftest.py.
"""

from __future__ import annotations

import contextlib
import faulthandler
import io
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

# What click calls the program when it runs as `python -m kvcheck` (its usage and error lines say it).
PROG_NAME = "python -m kvcheck"

# The handlers a kvcheck run may install (measure mode's stopping signals, the engine double's reaping).
_SIGNALS = tuple(
    getattr(signal, name) for name in ("SIGTERM", "SIGHUP", "SIGQUIT", "SIGINT", "SIGPIPE", "SIGCHLD", "SIGUSR2")
    if hasattr(signal, name)
)

# Module-level state a kvcheck process holds for its lifetime, by attribute name wherever it lives
# (names, not module paths, so code moving between modules keeps being reset):
# mappings and sets emptied after every run ...
_PER_PROCESS_COLLECTIONS = ("_MODEL_CACHE", "_HUB_CACHE", "_ports_handed_out", "_EXTRA_DIRS", "_CUSTOM")
# ... functools caches keyed by paths and file stamps (an edited file within one mtime tick, a folder
# of profiles rewritten by the next test) ...
_FILE_CACHES = ("_load_file", "_load_dir", "default_profiles")
# ... and functions that forget a session's registrations.
_SESSION_RESETS = ("reset_session",)

# Watchdog processes started by in-process runs; each exits when its pipe closes (after a run).
_watchdogs: list[subprocess.Popen[bytes]] = []


def _kvcheck_modules() -> list[Any]:
    return [m for name, m in list(sys.modules.items()) if m is not None and (name == "kvcheck" or name.startswith("kvcheck."))]


def _close_watchdog() -> None:
    """kvcheck's exit closes the watchdog's pipe (end of file: it stops what is still listed and exits)."""
    watchdog = sys.modules.get("kvcheck.backends.measure.launchers.watchdog")
    cls = getattr(watchdog, "Watchdog", None)
    if cls is None:
        return
    with cls._lock:
        if cls._writer is not None:
            with contextlib.suppress(OSError):
                cls._writer.close()
        if cls._proc is not None:
            _watchdogs.append(cls._proc)
        cls._writer = None
        cls._proc = None
    _watchdogs[:] = [proc for proc in _watchdogs if proc.poll() is None]  # reap the ones that ended


def reset_kvcheck_state() -> None:
    """Forget what one kvcheck process would have taken to its grave (a fresh process starts empty)."""
    _close_watchdog()
    for module in _kvcheck_modules():
        for name in _PER_PROCESS_COLLECTIONS:
            value = getattr(module, name, None)
            if isinstance(value, dict | set | list):
                value.clear()
        for name in _FILE_CACHES:
            clear = getattr(getattr(module, name, None), "cache_clear", None)
            if callable(clear):
                clear()
        for name in _SESSION_RESETS:
            reset = getattr(module, name, None)
            if callable(reset):
                reset()


@contextlib.contextmanager
def _environment(env: Mapping[str, str]) -> Iterator[None]:
    saved = dict(os.environ)
    os.environ.clear()
    os.environ.update(env)
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)


@contextlib.contextmanager
def _signal_handlers() -> Iterator[None]:
    if threading.current_thread() is not threading.main_thread():
        yield  # only the main thread may set handlers; kvcheck installs none elsewhere either
        return
    saved = {signum: signal.getsignal(signum) for signum in _SIGNALS}
    mask = signal.pthread_sigmask(signal.SIG_BLOCK, [])
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)
        for signum, handler in saved.items():
            if handler is not None:
                signal.signal(signum, handler)


class _Pipe(io.TextIOWrapper):
    """A text stream over bytes with no file descriptor, like a pipe's end seen from Python."""

    def __init__(self, raw: io.BytesIO, errors: str) -> None:
        super().__init__(raw, encoding="utf-8", errors=errors, write_through=True)


@contextlib.contextmanager
def _streams(stdin: str | bytes | None) -> Iterator[tuple[io.BytesIO, io.BytesIO]]:
    """stdin (empty when not given), stdout and stderr as a child process's pipes would be."""
    names = ("stdin", "stdout", "stderr", "__stdin__", "__stdout__", "__stderr__")
    saved = {name: getattr(sys, name) for name in names}
    out, err = io.BytesIO(), io.BytesIO()
    streams = {
        "stdin": _Pipe(io.BytesIO(stdin.encode("utf-8") if isinstance(stdin, str) else stdin or b""), "strict"),
        "stdout": _Pipe(out, "strict"),  # Python's own choices for a piped stdout and stderr
        "stderr": _Pipe(err, "backslashreplace"),
    }
    for name, stream in streams.items():
        setattr(sys, name, stream)
        setattr(sys, f"__{name}__", stream)  # shutil.get_terminal_size and rich look here
    try:
        yield out, err
    finally:
        for stream in streams.values():
            with contextlib.suppress(ValueError, OSError):
                stream.flush()
        for name, value in saved.items():
            setattr(sys, name, value)


def decode_like_subprocess(data: bytes) -> str:
    """What subprocess.run(text=True) gives for a child's output: UTF-8 with universal newlines."""
    return data.decode("utf-8").replace("\r\n", "\n").replace("\r", "\n")


def _exit_status(exc: SystemExit) -> tuple[int, str]:
    """The interpreter's rule for SystemExit: None is 0, an int is itself, anything else is printed, 1."""
    if exc.code is None:
        return 0, ""
    if isinstance(exc.code, int):
        return exc.code & 0xFF if exc.code >= 0 else exc.code % 256, ""
    return 1, f"{exc.code}\n"


def run_in_process(args: tuple[str, ...], cwd: Path, env: Mapping[str, str], stdin: str | bytes | None,
                   timeout: float) -> tuple[int, bytes, bytes]:
    """(exit code, stdout, stderr) of `python -m kvcheck ARGS` run here; a run past `timeout` ends pytest."""
    from kvcheck.cli import main

    saved_cwd, saved_argv = os.getcwd(), sys.argv
    reset_kvcheck_state()
    faulthandler.dump_traceback_later(timeout, exit=True)  # a hang shows where, instead of blocking CI
    code, tail = 0, ""
    try:
        with _environment(env), _signal_handlers(), _streams(stdin) as (out, err):
            os.chdir(cwd)
            sys.argv = [str(Path(sys.modules["kvcheck"].__file__ or "kvcheck").with_name("__main__.py")), *args]
            try:
                main.main(args=list(args), prog_name=PROG_NAME, standalone_mode=True)
            except SystemExit as exc:
                code, tail = _exit_status(exc)
            if tail:
                sys.stderr.write(tail)
            sys.stdout.flush()
            sys.stderr.flush()
            stdout, stderr = out.getvalue(), err.getvalue()
    finally:
        faulthandler.cancel_dump_traceback_later()
        os.chdir(saved_cwd)
        sys.argv = saved_argv
        reset_kvcheck_state()
    return code, stdout, stderr
