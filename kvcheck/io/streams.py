"""The smallest stream kvcheck's readers accept: anything with read(size), so files, pipes and gzip all fit."""

from __future__ import annotations

from typing import Protocol


class BinaryReadable(Protocol):
    """What a chunked reader needs of a stream: a file, a pipe or a gzip.GzipFile."""

    def read(self, size: int, /) -> bytes: ...
