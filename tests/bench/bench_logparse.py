"""Throughput of the SGLang log reader against a bare Python line loop (run by hand, not by pytest).

    python tests/bench/bench_logparse.py [--mb 300] [--prefix none|kubectl]

Writes a realistic log to a temporary file: a TP8 0.5.23 startup, then request logs (prefill and
decode batches of every rank, uvicorn access lines), with a traceback now and then, until the file
holds --mb megabytes. Reports MB/s, best of --repeat runs on the same file, for `for line in f: pass`
(text and binary), for feeding every line to `LogReader.feed` (the per-line path the measure backend
uses while an engine boots, and what `kvcheck logs` did before the bulk reader) and for
`kvcheck.engines.sglang.logs.read_log` (the bulk reader behind `kvcheck logs`); checks that both
paths give the same summary and the figures written, and says how many lines reached the parser.
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from kvcheck.engines.sglang.logs.reader import LogReader  # noqa: E402

TP = 8
POOL_TOKENS = 947824


def startup_lines() -> list[str]:
    lines = [
        "[2026-01-05 10:00:01] server_args={'model_path': 'meta-llama/Llama-3.1-70B-Instruct', 'tp_size': 8, "
        "'mem_fraction_static': 0.812, 'chunked_prefill_size': 8192, 'context_length': 131072}"
    ]
    for tp in range(TP):
        lines += [
            f"[2026-01-05 10:00:10 TP{tp}] Load weight begin. avail mem=78.95 GB",
            f"[2026-01-05 10:00:31 TP{tp}] Load weight end. elapsed=20.84 s, type=LlamaForCausalLM, avail mem=61.43 GB, mem usage=17.52 GB.",
            f"[2026-01-05 10:00:33 TP{tp}] KV Cache is allocated. dtype: torch.bfloat16, #tokens: {POOL_TOKENS}, K size: 18.08 GB, V size: 18.08 GB",
            f"[2026-01-05 10:00:33 TP{tp}] Memory pool end. avail mem=13.55 GB",
            f"[2026-01-05 10:01:17 TP{tp}] Capture target decode CUDA graph end. bs=[1, 2, 4, 8], elapsed=12.40 s, mem usage=0.52 GB, avail mem=12.42 GB.",
        ]
    lines += [
        f"[2026-01-05 10:01:20 TP0] max_total_num_tokens={POOL_TOKENS}, chunked_prefill_size=8192, max_prefill_tokens=16384, "
        "max_running_requests=3702, context_len=131072, available_gpu_mem=12.37 GB",
        "[2026-01-05 10:01:22] INFO:     Uvicorn running on http://127.0.0.1:30000 (Press CTRL+C to quit)",
        "[2026-01-05 10:01:25] The server is fired up and ready to roll!",
    ]
    return lines


def request_lines(rng: random.Random) -> list[str]:
    second = rng.randrange(60)
    tp = rng.randrange(TP)
    kind = rng.random()
    if kind < 0.45:
        return [
            f"[2026-01-05 11:{second:02d}:{second:02d} TP{tp}] Decode batch. #running-req: {rng.randrange(300)}, "
            f"#token: {rng.randrange(900000)}, token usage: 0.{rng.randrange(100):02d}, cuda graph: True, "
            f"gen throughput (token/s): {rng.random() * 9000:.2f}, #queue-req: {rng.randrange(20)},"
        ]
    if kind < 0.80:
        return [
            f"[2026-01-05 11:{second:02d}:{second:02d} TP{tp}] Prefill batch. #new-seq: {rng.randrange(8)}, "
            f"#new-token: {rng.randrange(16384)}, #cached-token: {rng.randrange(9000)}, token usage: 0.{rng.randrange(100):02d}, "
            f"#running-req: {rng.randrange(300)}, #queue-req: {rng.randrange(20)},"
        ]
    if kind < 0.9995:
        return [
            f"[2026-01-05 11:{second:02d}:{second:02d}] INFO:     10.0.{rng.randrange(255)}.{rng.randrange(255)}:"
            f'{rng.randrange(65535)} - "POST /v1/chat/completions HTTP/1.1" 200 OK'
        ]
    return [
        f"[2026-01-05 11:{second:02d}:{second:02d}] ERROR:    Exception in ASGI application",
        "Traceback (most recent call last):",
        '  File "/usr/lib/python3/dist-packages/uvicorn/protocols/http/httptools_impl.py", line 409, in run_asgi',
        "    result = await app(  # type: ignore[func-returns-value]",
        "ValueError: Input length (140000 tokens) exceeds the maximum allowed length (131066 tokens).",
    ]


def write_log(path: Path, megabytes: int, prefix: str) -> int:
    rng = random.Random(20260105)
    target = megabytes * 1_000_000
    written = 0
    stamp = "2026-01-05T11:00:00.123456789Z " if prefix == "kubectl" else ""
    with path.open("w", encoding="utf-8") as out:
        block = []
        for line in startup_lines():
            block.append(stamp + line + "\n")
        while written < target:
            for line in request_lines(rng):
                block.append(stamp + line + "\n")
            if len(block) >= 4096:
                text = "".join(block)
                out.write(text)
                written += len(text)
                block = []
        out.write("".join(block))
    return path.stat().st_size


def best_of(repeat: int, func) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        func()
        times.append(time.perf_counter() - start)
    return min(times)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=int, default=300, help="size of the generated log in MB (10^6 bytes)")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument(
        "--prefix", choices=("none", "kubectl"), default="none", help="kubectl: --timestamps on every line"
    )
    options = parser.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "sglang.log"
        size = write_log(path, options.mb, options.prefix)
        megabytes = size / 1e6

        def bare_text() -> None:
            with path.open(encoding="utf-8", errors="replace") as f:
                for _line in f:
                    pass

        def bare_binary() -> None:
            with path.open("rb") as f:
                for _line in f:
                    pass

        readers: dict[str, LogReader] = {}

        def per_line() -> None:
            readers["per_line"] = LogReader()
            with path.open("rb") as f:
                readers["per_line"].feed_many(f)

        def bulk() -> None:
            readers["bulk"] = LogReader()
            with path.open("rb") as f:
                readers["bulk"].read_stream(f)

        results = {
            "for line in f (text)": best_of(options.repeat, bare_text),
            "for line in f (binary)": best_of(options.repeat, bare_binary),
            "LogReader.feed per line": best_of(options.repeat, per_line),
            "logparse.read_log (bulk)": best_of(options.repeat, bulk),
        }
        summary = readers["bulk"].summary()
        assert summary == readers["per_line"].summary(), "the bulk reader disagrees with the per-line path"
        assert summary.pool_tokens() == POOL_TOKENS, summary.pool_tokens()
        assert len(summary.ranks) == TP and summary.ready

    print(
        f"log: {megabytes:.0f} MB, {summary.lines:,} lines, prefix={options.prefix}, python {sys.version.split()[0]}, "
        f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}; the bulk reader parsed "
        f"{readers['bulk'].parsed_lines:,} lines"
    )
    base = results["for line in f (text)"]
    for name, seconds in results.items():
        print(
            f"  {name:26s} {megabytes / seconds:8.0f} MB/s  {seconds:6.2f} s  ({seconds / base:4.1f}x the text loop)"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
