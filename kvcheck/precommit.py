"""pre-commit's entry for the `kvcheck-verify` hook: `kvcheck verify --mode estimate` on each file on its own.

pre-commit passes every staged file of the hook in one call, after the hook's `args`; `verify`
reads several files as one deployment, so each file gets its own run here. The exit code is the
most pressing of the runs' codes: 4 (kvcheck bug), 2 (invalid input), 1 (a finding blocks), 3
(could not check), else 0.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Sequence

_PRESSING = {0: 0, 3: 1, 1: 2, 2: 3}  # higher blocks more; anything else (4, a signal) ranks highest


def split_files(argv: Sequence[str]) -> tuple[list[str], list[str]]:
    """(verify options, files): pre-commit appends the files after the hook's args."""
    from kvcheck.cli import main

    ctx = main.commands["verify"].make_context("kvcheck verify", list(argv), resilient_parsing=True)
    files = list(ctx.params.get("files") or ())
    return list(argv[: len(argv) - len(files)]), files


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    options, files = split_files(args)
    worst = 0
    for file in files:
        done = subprocess.run([sys.executable, "-m", "kvcheck", "verify", "--mode", "estimate", *options, file],
                              check=False)
        if _PRESSING.get(done.returncode, 4) > _PRESSING.get(worst, 4):
            worst = done.returncode
    return worst


if __name__ == "__main__":
    sys.exit(main())
