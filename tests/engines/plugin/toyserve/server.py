#!/usr/bin/env python3
"""The ToyServe server: prints its pool and serves it over HTTP until SIGTERM (a double of a real engine).

    toyserve.server --model M --pool-tokens N [--context-length L] [--role prefill|decode] --host H --port P

Log lines: `toyserve: loading M`, `toyserve: pool_tokens=N context_len=L`, `toyserve: ready`; an
over-large pool (TOYSERVE_OOM=1) prints `toyserve: error: out of memory` and exits 137.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def main() -> int:
    parser = argparse.ArgumentParser(prog="toyserve")
    parser.add_argument("--model", required=True)
    parser.add_argument("--pool-tokens", type=int, required=True)
    parser.add_argument("--context-length", type=int, default=8192)
    parser.add_argument("--role", choices=["prefill", "decode"])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args()
    print(f"toyserve: loading {args.model}", file=sys.stderr, flush=True)
    if os.environ.get("TOYSERVE_OOM"):
        print("toyserve: error: out of memory", file=sys.stderr, flush=True)
        return 137
    info = {"engine": "toyserve", "version": "1.0", "model": args.model, "pool_tokens": args.pool_tokens,
            "context_len": args.context_length, "role": args.role, "port": args.port}

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - http.server's name
            body = json.dumps(info).encode() if self.path == "/toyserve/info" else b"{}"
            self.send_response(200 if self.path in ("/toyserve/info", "/health") else 404)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *values: object) -> None:  # noqa: A002 - http.server's name
            return

    server = ThreadingHTTPServer((args.host, args.port), Handler)
    signal.signal(signal.SIGTERM, lambda *_: os._exit(0))  # nothing to drain: a measured role stops at once
    print(f"toyserve: pool_tokens={args.pool_tokens} context_len={args.context_length}", file=sys.stderr,
          flush=True)
    print("toyserve: ready", file=sys.stderr, flush=True)
    server.serve_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main())
