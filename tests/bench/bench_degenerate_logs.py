"""The log reader on degenerate input, against a bare Python line loop (run by hand, not by pytest).

    python tests/bench/bench_degenerate_logs.py [--mb 64] [--repeat 3]

Hostile or broken logs must not make `kvcheck logs` slow: issue 14 measured 18 to 60 times a bare
loop on these shapes, and a 1 MB gzip of newlines did not finish in 300 s. For each input this prints
MB/s of `for line in f: pass` over the (decompressed) bytes, of `kvcheck.backends.logs.read_log_file`
(the path `kvcheck logs FILE` takes: gzip detection, bulk reader) and of feeding every line to
`LogReader.feed` (the per-line path measure mode uses), and the ratio of each to the bare loop. The
bound the issue sets is 5x for the reader `kvcheck logs` runs.

Inputs: newline-only lines; the same allocation line repeated (every line reaches the parser); a
gzip file of newlines (about 1 MB compressed); a file of one endless line with no newline.
"""

from __future__ import annotations

import argparse
import gzip
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from kvcheck.backends.logs import read_log_file  # noqa: E402
from kvcheck.engines.sglang.logs.reader import LogReader  # noqa: E402
from kvcheck.errors import InputError  # noqa: E402

ALLOC = b"[2026-01-05 10:00:45 TP0] KV Cache is allocated. #tokens: 947824, K size: 14.46 GB, V size: 14.46 GB\n"


def inputs(folder: Path, mb: int) -> dict[str, tuple[Path, bytes]]:
    size = mb * 2**20
    newlines = b"\n" * size
    alloc = ALLOC * (size // len(ALLOC))
    endless = b"x" * size
    files = {}
    for name, data in (("newlines", newlines), ("allocation lines", alloc), ("one endless line", endless)):
        path = folder / name.replace(" ", "-")
        path.write_bytes(data)
        files[name] = (path, data)
    gz = folder / "newlines.gz"
    gz.write_bytes(gzip.compress(b"\n" * (1024 * 2**20), compresslevel=9))  # 1 GiB of newlines, ~1 MB
    files["gzip of newlines (1 GiB inside)"] = (gz, b"")
    return files


def best(fn, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        fn()
        times.append(time.perf_counter() - started)
    return min(times)


def bare_loop(path: Path) -> None:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rb") as stream:
        for _line in stream:
            pass


def bulk(path: Path) -> None:
    try:
        read_log_file(str(path))
    except InputError:
        pass  # "not an SGLang log" is raised by read_logs, not here; kept for safety


def per_line(path: Path) -> None:
    reader = LogReader()
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rb") as stream:
        for line in stream:
            reader.feed(line)
    reader.summary()


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--mb", type=int, default=64)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--per-line", action="store_true", help="also time LogReader.feed line by line")
    options = parser.parse_args()
    worst = 0.0
    with tempfile.TemporaryDirectory() as folder:
        for name, (path, _) in inputs(Path(folder), options.mb).items():
            decoded = 1024 * 2**20 if path.suffix == ".gz" else path.stat().st_size
            loop_s = best(lambda path=path: bare_loop(path), options.repeat)
            bulk_s = best(lambda path=path: bulk(path), options.repeat)
            ratio = bulk_s / loop_s
            worst = max(worst, ratio)
            line = (f"{name:34} bare loop {decoded / loop_s / 2**20:8.0f} MB/s   kvcheck logs "
                    f"{decoded / bulk_s / 2**20:8.0f} MB/s  ({ratio:4.1f}x the bare loop)")
            if options.per_line:
                feed_s = best(lambda path=path: per_line(path), 1)
                line += f"   per-line feed {decoded / feed_s / 2**20:6.0f} MB/s ({feed_s / loop_s:4.1f}x)"
            print(line, flush=True)
    print(f"worst: {worst:.1f}x the bare loop (bound: 5x)")
    return 0 if worst <= 5 else 1


if __name__ == "__main__":
    raise SystemExit(main())
