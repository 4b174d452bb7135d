"""Score the hybrid (attention + Mamba2/GDN) vLLM boots of tests/data/vllm_logs/hybrid_cases.json.

Usage: python tests/bench/score_vllm_hybrid.py

Per case: the block size, the "GPU KV cache size" line and the "Maximum concurrency" line kvcheck's layout
(sizing/layout.py, hybrid_layout) gives from the log's own "Available KV cache memory", beside the logged
ones. A case that quotes no memory is scored as whether some block count prints both logged figures. All
cases are held out; tests/estimate/test_vllm_hybrid.py pins what this prints.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from tests.estimate.test_vllm_hybrid import _cases, score  # noqa: E402


def _error(predicted: float | None, logged: float | None) -> str:
    if predicted is None or logged is None:
        return "-" if logged is None else "MISS"
    return f"{(predicted - logged) / logged:+.2%}"


def main() -> int:
    print(f"{'case':46} {'block':>11} {'GPU KV cache size':>23} {'error':>7} {'concurrency':>13}")
    for case in _cases():
        got = score(case)
        block = f"{got['block_size']}" + (f"/{case['logged_block_size']}" if case["logged_block_size"] else "")
        tokens = f"{got.get('tokens') or '-'}/{case['logged_tokens'] or '-'}"
        conc = f"{got.get('concurrency') or '-'}/{case['logged_concurrency'] or '-'}"
        err = _error(got.get("tokens"), case["logged_tokens"])
        if case["logged_block_size"] and not case["logged_tokens"]:
            err = "exact" if got["block_size"] == case["logged_block_size"] else "MISS"
        print(f"{case['id']:46} {block:>11} {tokens:>23} {err:>7} {conc:>13}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
