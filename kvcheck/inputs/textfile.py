"""Reading a small user-supplied text file (manifest, fleet file) with input errors, never tracebacks."""

from __future__ import annotations

from pathlib import Path

from kvcheck.errors import InputError


def read_text_file(path: Path, display: str, *, kind: str, max_bytes: int) -> str:
    """The file's UTF-8 text; InputError (exit 2) naming the file when it is missing, binary or huge."""
    try:
        raw = path.read_bytes()
    except FileNotFoundError as exc:
        raise InputError(f"{display}: no such {kind}") from exc
    except IsADirectoryError as exc:
        raise InputError(f"{display}: is a directory, not a {kind}") from exc
    except OSError as exc:
        raise InputError(f"{display}: cannot read: {exc.strerror}") from exc
    if len(raw) > max_bytes:
        raise InputError(f"{display}: {len(raw):,} bytes is too large for a {kind}")
    if b"\x00" in raw:
        raise InputError(f"{display}: is a binary file, not a {kind}")
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise InputError(f"{display}: is not UTF-8 text (byte {exc.start})") from exc
