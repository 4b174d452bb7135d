"""Degenerate logs: the bulk reader skips blank lines and repeated allocation lines in C or cheaply, and
must still read exactly what feeding every line reads. (Speed is measured by
tests/bench/bench_degenerate_logs.py, not asserted here.)"""

from __future__ import annotations

import gzip
import io

import pytest

from kvcheck.engines.sglang.logs.reader import LogReader
from tests.conftest import REPO_ROOT

LOG = (REPO_ROOT / "tests" / "data" / "logs" / "sglang-qwen35-9b-2x4090-tp2.log").read_text()
ALLOC = "[2026-04-14 16:08:49 TP0] KV Cache is allocated. #tokens: 327310, K size: 2.50 GB, V size: 2.50 GB\n"


def bulk(text: str):
    reader = LogReader()
    reader.read_stream(io.BytesIO(text.encode()), chunk_bytes=4096)
    return reader.summary()


def per_line(text: str):
    reader = LogReader()
    for line in text.splitlines(keepends=True):
        reader.feed(line)
    return reader.summary()


def with_timestamps(count: int) -> str:
    return "".join(ALLOC.replace("16:08:49", f"16:{i // 60 % 60:02d}:{i % 60:02d}") for i in range(count))


CASES = {
    "blank lines between every line": "\n\n \n".join(LOG.splitlines()) + "\n",
    "a million newlines then the log": "\n" * 1_000_000 + LOG,
    "one allocation line 5,000 times": LOG.replace(ALLOC, ALLOC * 5000, 1),
    "allocation lines with moving timestamps": LOG.replace(ALLOC, with_timestamps(3000), 1),
    "repeats, another rank, repeats": LOG.replace(ALLOC, ALLOC * 3 + ALLOC.replace("TP0", "TP1") + ALLOC * 3, 1),
    "repeats across a restart": LOG + LOG.replace(ALLOC, ALLOC * 50, 1),
    "a continued command line with blank lines": "python -m sglang.launch_server --model-path x \\\n\n  --tp 2\n" + LOG,
}


@pytest.mark.parametrize("text", CASES.values(), ids=CASES.keys())
def test_bulk_reading_equals_feeding_every_line(text):
    assert bulk(text) == per_line(text)


def test_a_gzip_of_newlines_is_counted_without_feeding_its_lines(tmp_path, monkeypatch):
    """64 MiB of newlines: counted in bulk, one line fed per 4 MiB chunk (the first, always fed), not 67 million
    (which took minutes). The time it takes is tests/bench/bench_degenerate_logs.py's, not a test's."""
    from kvcheck.backends.logs import read_log_file
    from kvcheck.engines.sglang.logs.bulk import READ_CHUNK_BYTES
    from kvcheck.engines.sglang.logs.reader import LogReader

    fed: list[bytes] = []
    real = LogReader._feed_raw
    monkeypatch.setattr(LogReader, "_feed_raw", lambda self, line: fed.append(line) or real(self, line))
    path = tmp_path / "newlines.log.gz"
    size = 64 * 2**20
    path.write_bytes(gzip.compress(b"\n" * size, compresslevel=9))  # 64 MiB of newlines, 64 KB on disk
    summary = read_log_file(str(path))
    assert summary.lines == size
    assert len(fed) == size // READ_CHUNK_BYTES + 1 and set(fed) == {b""}
