"""Reading a small user-supplied text file (manifest, fleet file) with input errors, never tracebacks.

The file is opened before anything is read, so that what it is decides how it is read: only a
regular file (or a link to one) is read, its size is checked against the cap before reading, and the
read itself stops one byte past the cap (a file growing meanwhile is still refused). `/dev/zero`, a
FIFO with no writer, a socket or a folder is refused at once, without blocking; a symlink loop is an
input error like any unreadable path.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path
from typing import BinaryIO

from kvcheck.errors import InputError

# Every regular file this process opened as input, by (device, inode) -> the name it was given as: a
# report file (--output, --report) must never replace one (kvcheck/report/outputs.py).
_FILES_READ: dict[tuple[int, int], str] = {}


def files_read() -> dict[tuple[int, int], str]:
    """The input files read so far, by (device, inode), with the name each was read as."""
    return dict(_FILES_READ)


def open_regular_file(path: Path | str, display: str, *, kind: str) -> BinaryIO:
    """`path` opened for reading if it is a regular file (or a link to one); InputError (exit 2) when it
    is something else. OSError (missing, denied, a symlink loop) is the caller's to word.

    O_NONBLOCK makes opening a FIFO return at once (instead of waiting for a writer that may never
    come); it is cleared again once the file is known to be regular.
    """
    fd = os.open(path, os.O_RDONLY | os.O_NOCTTY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    try:
        found = os.fstat(fd)
        mode = found.st_mode
        if stat.S_ISDIR(mode):
            raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), str(path))
        if not stat.S_ISREG(mode):
            raise InputError(f"{display}: is {_what(mode)}, not a regular file; a {kind} must be a file")
        os.set_blocking(fd, True)
        _FILES_READ.setdefault((found.st_dev, found.st_ino), display)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def read_bounded(path: Path | str, display: str, *, kind: str, max_bytes: int) -> bytes:
    """The bytes of a regular file of at most `max_bytes`; InputError when it is not one or is larger."""
    try:
        with open_regular_file(path, display, kind=kind) as stream:
            size = os.fstat(stream.fileno()).st_size
            if size > max_bytes:
                raise InputError(f"{display}: {size:,} bytes is too large for a {kind}")
            raw = stream.read(max_bytes + 1)
    except FileNotFoundError as exc:
        raise InputError(f"{display}: no such {kind}") from exc
    except IsADirectoryError as exc:
        raise InputError(f"{display}: is a folder, not a {kind}") from exc
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise InputError(f"{display}: a loop of symbolic links, not a {kind}") from exc
        raise InputError(f"{display}: cannot read: {exc.strerror or exc}") from exc
    if len(raw) > max_bytes:
        raise InputError(f"{display}: more than {max_bytes:,} bytes is too large for a {kind}")
    return raw


def read_text_file(path: Path, display: str, *, kind: str, max_bytes: int) -> str:
    """The file's UTF-8 text; InputError (exit 2) naming the file when it is missing, binary or huge."""
    return decode_text(read_bounded(path, display, kind=kind, max_bytes=max_bytes), display, kind=kind)


def decode_text(raw: bytes, display: str, *, kind: str) -> str:
    """Bytes read from a file or stdin as UTF-8 text; InputError (exit 2) for UTF-16/32, binary or other
    encodings, each named."""
    encoding = _unicode_bom(raw)
    if encoding is not None:  # Windows editors and PowerShell's `>` write these; their NULs are not binary
        raise InputError(
            f"{display}: is {encoding} text (it starts with a {encoding} byte-order mark); a {kind} must be UTF-8",
            hint=f"save it as UTF-8 (iconv -f {encoding} -t UTF-8 FILE > NEW, or your editor's encoding menu)",
        )
    if b"\x00" in raw:
        raise InputError(f"{display}: is a binary file, not a {kind}")
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise InputError(f"{display}: is not UTF-8 text (byte {exc.start})") from exc


def _unicode_bom(raw: bytes) -> str | None:
    """The encoding a UTF-16 or UTF-32 byte-order mark at the start names, if there is one."""
    if raw.startswith((b"\xff\xfe\x00\x00", b"\x00\x00\xfe\xff")):
        return "UTF-32"
    if raw.startswith((b"\xff\xfe", b"\xfe\xff")):
        return "UTF-16"
    return None


def describe(path: Path) -> str | None:
    """What is at `path` when it is not a regular file (None: a regular file, or a link to one): "no such file",
    "a folder", "a character device"... (a symlink loop and a path that cannot be read are said so too)."""
    try:
        mode = path.stat().st_mode
    except FileNotFoundError:
        return "no such file"
    except OSError as exc:
        return "a loop of symbolic links" if exc.errno == errno.ELOOP else f"unreadable ({exc.strerror or exc})"
    return None if stat.S_ISREG(mode) else _what(mode)


def _what(mode: int) -> str:
    if stat.S_ISDIR(mode):
        return "a folder"
    if stat.S_ISFIFO(mode):
        return "a FIFO (named pipe)"
    if stat.S_ISCHR(mode):
        return "a character device"
    if stat.S_ISBLK(mode):
        return "a block device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "not a regular file"
