"""Measure what one probe run puts on the wire for a given window and pool (run by hand; no network).

    PYTHONPATH=. python tests/probe/bench_payload.py --context-length 1048576 --pool 681280

Prints each planned request's JSON body size and the total, plus the time to build the bodies, so
docs/probe.md can state the load a production run adds (figures there come from this script).
"""

from __future__ import annotations

import argparse
import json
import time

from kvcheck.commands.probe import plan_probe
from kvcheck.probe.options import ProbeOptions
from kvcheck.probe.prompts import text_prompt, token_prompt
from kvcheck.probe.wire import request_body


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--context-length", type=int, required=True)
    parser.add_argument("--pool", type=int, required=True)
    args = parser.parse_args()
    plan = plan_probe(ProbeOptions(url="http://probe.invalid", context_length=args.context_length,
                                   pool_tokens=args.pool, dry_run=True, seed=0))
    started = time.perf_counter()
    total = 0
    prefill_tokens = 0
    for r in plan.requests:
        owner = plan.owners[r.owner]
        prompt = text_prompt(owner) if r.prompt_kind == "text" else token_prompt(
            owner, r.prompt_tokens, token_id=plan.filler_token_id)
        size = len(json.dumps(request_body(r, prompt, rid="x", model="m"), separators=(",", ":")))
        total += size
        if r.expect == "accept" and r.prompt_tokens:
            prefill_tokens += r.prompt_tokens
        print(f"#{r.index:<3} {r.endpoint:<16} {r.check:<14} {r.prompt_tokens or 0:>9} tokens {size / 2**20:8.2f} MiB")
    elapsed = time.perf_counter() - started
    print(f"{len(plan.requests)} requests, {total / 2**20:.1f} MiB of request bodies, "
          f"{prefill_tokens:,} prompt tokens in admitted requests; bodies built in {elapsed:.2f} s")


if __name__ == "__main__":
    main()
