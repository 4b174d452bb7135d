"""The smallest stream kvcheck's readers accept: anything with read(size), so files, pipes and gzip all fit."""

from __future__ import annotations

import io
import os
import queue
import stat
import threading
import time
from pathlib import Path
from typing import Any, Protocol


def redirected_file(stream: Any) -> Path | None:
    """The regular file `stream` writes to where the shell redirected it (`> gate/m.yaml`), as the system names
    it (/proc/self/fd on Linux); None for a pipe, a terminal, a stream without a descriptor, a deleted file, or
    a system that does not say."""
    try:
        fd = stream.fileno()
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        target = Path(os.readlink(f"/proc/self/fd/{fd}"))
    except (AttributeError, OSError, ValueError):  # io.UnsupportedOperation is both of the last two
        return None
    return target if target.is_absolute() and target.is_file() else None


class BinaryReadable(Protocol):
    """What a chunked reader needs of a stream: a file, a pipe or a gzip.GzipFile."""

    def read(self, size: int, /) -> bytes: ...


class DeadlineStream:
    """A pipe read until its end or a deadline, whichever comes first (`kvcheck logs -` on `kubectl logs -f`).

    A thread does the blocking reads (`os.read` on the pipe's descriptor: whatever one read gives; not the
    buffered object, whose lock a thread still blocked in it would hold at interpreter exit) and hands the chunks over a
    small queue, so the reader waits on the queue with a timeout instead of on the pipe; memory stays one chunk
    per queue slot. At the deadline `read` answers b"" (end of stream) and `timed_out` is set; the thread, still
    blocked on the pipe, is a daemon and ends with the process.
    """

    CHUNK = 1 << 16
    QUEUED = 8

    def __init__(self, stream: Any, timeout_s: float) -> None:
        self._queue: queue.Queue[bytes | BaseException] = queue.Queue(maxsize=self.QUEUED)
        self._deadline = time.monotonic() + timeout_s
        self._pending = b""
        self._ended = False
        self.timed_out = False
        read = _raw_reader(stream)

        def pump() -> None:
            try:
                while chunk := read(self.CHUNK):
                    self._queue.put(chunk)
                self._queue.put(b"")
            except BaseException as exc:  # noqa: BLE001 - handed to the reading thread, raised there
                self._queue.put(exc)

        threading.Thread(target=pump, name="kvcheck-stdin", daemon=True).start()

    def _next(self) -> bytes:
        if self._ended:
            return b""
        # a pipe that never pauses (`yes`, a chatty follow) keeps the queue full, so get() alone would never time
        # out: the deadline is looked at before each chunk as well
        left_s = self._deadline - time.monotonic()
        try:
            item = self._queue.get(timeout=left_s) if left_s > 0 else None
        except queue.Empty:
            item = None
        if item is None:
            self.timed_out = self._ended = True
            return b""
        if isinstance(item, BaseException):
            self._ended = True
            raise item
        if not item:
            self._ended = True
        return item

    def peek(self, size: int = 1, /) -> bytes:
        """At least `size` bytes ahead without consuming them (fewer at the end of the stream or the deadline)."""
        while len(self._pending) < size and (chunk := self._next()):
            self._pending += chunk
        return self._pending

    def read(self, size: int, /) -> bytes:
        if not self._pending:
            self._pending = self._next()
        taken, self._pending = self._pending[:size], self._pending[size:]
        return taken


def _raw_reader(stream: Any) -> Any:
    """read(size) on the stream's file descriptor when it has one, else its own read1 or read."""
    try:
        fd = stream.fileno()
    except (AttributeError, OSError, io.UnsupportedOperation):
        return getattr(stream, "read1", None) or stream.read
    return lambda size: os.read(fd, size)
