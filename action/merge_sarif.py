"""Merge kvcheck's SARIF logs (one per manifest or deployment) into one log with one run.

GitHub code scanning takes one run per tool and category, so the action's checks become one run:
the first log's tool and rules, every log's results and invocations. With no log (every check
stopped on invalid input) it writes a run without results, so an upload step still has a file.
Usage: merge_sarif.py OUT [IN...]; standard library only.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

SCHEMA = "https://docs.oasis-open.org/sarif/sarif/v2.1.0/errata01/os/schemas/sarif-schema-2.1.0.json"


def merge(logs: list[dict]) -> dict:
    if not logs:
        return {"$schema": SCHEMA, "version": "2.1.0",
                "runs": [{"tool": {"driver": {"name": "kvcheck"}}, "results": []}]}
    merged = logs[0]
    run = merged["runs"][0]
    sources = [run.get("properties", {})]
    for log in logs[1:]:
        other = log["runs"][0]
        run["results"].extend(other.get("results", []))
        run.setdefault("invocations", []).extend(other.get("invocations", []))
        sources.append(other.get("properties", {}))
    if len(sources) > 1:
        run["properties"] = {"checks": sources}
    return merged


def main(argv: list[str]) -> int:
    if not argv:
        print("usage: merge_sarif.py OUT [IN...]", file=sys.stderr)
        return 2
    out, inputs = Path(argv[0]), argv[1:]
    logs = [json.loads(Path(name).read_text(encoding="utf-8")) for name in inputs]
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(merge(logs), indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
