"""Bench: audit N loopback SGLang doubles (some slow) concurrently and one by one; print wall times.

Run by hand from the repository root (it is not a test; timings belong in docs/audit.md):

    python tests/bench/bench_audit.py                       # 300 servers, 10% answer after 1 s
    python tests/bench/bench_audit.py --latency-ms 20        # every answer 20 ms late, like a remote site
    python tests/bench/bench_audit.py --servers 100 --slow-fraction 0.2 --slow-s 0.5 --concurrency 64
"""

from __future__ import annotations

import argparse
import dataclasses
import resource
import sys
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO_ROOT))

from kvcheck.backends.audit import audit_endpoints  # noqa: E402
from kvcheck.model import Endpoint  # noqa: E402
from tests.audit.servers import FakeServer, server_info_payload, sglang_routes  # noqa: E402


def start_fleet(count: int, slow_fraction: float, slow_s: float, latency_s: float) -> list[FakeServer]:
    """`count` servers answering every request after `latency_s` (a network round trip); every
    k-th one answers /server_info after `slow_s` more seconds."""
    slow_every = round(1 / slow_fraction) if slow_fraction > 0 else 0
    servers = []
    for index in range(count):
        routes = sglang_routes(server_info_payload(max_total_num_tokens=1_100_000 + index))
        for path, reply in routes.items():
            routes[path] = dataclasses.replace(reply, delay_s=latency_s)
        if slow_every and index % slow_every == 0:
            routes["/server_info"] = dataclasses.replace(routes["/server_info"], delay_s=latency_s + slow_s)
        servers.append(FakeServer(routes))
    return servers


def run(endpoints: list[Endpoint], concurrency: int, timeout_s: float) -> tuple[float, int]:
    started = time.perf_counter()
    _, measurements = audit_endpoints(
        endpoints,
        context_length=None,
        min_headroom=1.0,
        timeout_s=timeout_s,
        retries=0,
        concurrency=concurrency,
        verify=True,
        token=None,
        progress=False,
    )
    elapsed = time.perf_counter() - started
    audited = sum(1 for m in measurements if m.pool_tokens is not None and not m.findings)
    return elapsed, audited


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--servers", type=int, default=300)
    parser.add_argument("--slow-fraction", type=float, default=0.1, help="share of servers that answer late")
    parser.add_argument("--slow-s", type=float, default=1.0, help="how late, seconds")
    parser.add_argument("--latency-ms", type=float, default=0.0, help="added to every answer (network RTT)")
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--timeout", type=float, default=5.0)
    parser.add_argument("--no-sequential", action="store_true", help="skip the one-by-one run")
    args = parser.parse_args()

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    need = args.servers * 4 + 64
    if soft < need:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(need, hard), hard))

    servers = start_fleet(args.servers, args.slow_fraction, args.slow_s, args.latency_ms / 1000)
    try:
        endpoints = [Endpoint(name=s.url, url=s.url) for s in servers]
        slow = sum(1 for s in servers if s.routes["/server_info"].delay_s > args.latency_ms / 1000)
        print(
            f"{len(servers)} loopback servers, {args.latency_ms:g} ms added to every answer, "
            f"{slow} answering /server_info {args.slow_s:g} s late"
        )
        elapsed, audited = run(endpoints, args.concurrency, args.timeout)
        print(f"concurrency {args.concurrency:>3}: {elapsed:6.2f} s wall, {audited}/{len(servers)} audited")
        if not args.no_sequential:
            seq_elapsed, seq_audited = run(endpoints, 1, args.timeout)
            print(f"sequential     : {seq_elapsed:6.2f} s wall, {seq_audited}/{len(servers)} audited")
            print(f"speed-up       : {seq_elapsed / elapsed:6.1f}x")
    finally:
        for server in servers:
            server.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
