"""pre-commit's entry for the `kvcheck-verify` hook: `kvcheck verify --mode estimate` on each file on its own.

pre-commit passes every staged YAML file of the hook in one call, after the hook's `args`. Only the
files kvcheck has something to say about are checked: kvcheck manifests (and overlays) and files that
hold an engine server (a launch line of an engine kvcheck knows, or a format that is one, such as an
srt-slurm recipe); the rest of a repository's YAML (CI workflows, Helm values without a server) is
skipped quietly, and the hook's last line says how many files it checked. `verify` reads several
files as one deployment, so each file gets its own run. The exit code is the most pressing of the
runs' codes: 4 (kvcheck bug), 2 (invalid input), 1 (a finding blocks), 3 (could not check), else 0.
"""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

_PRESSING = {0: 0, 3: 1, 1: 2, 2: 3}  # higher blocks more; anything else (4, a signal) ranks highest


def split_files(argv: Sequence[str]) -> tuple[list[str], list[str]]:
    """(verify options, files): pre-commit appends the files after the hook's args."""
    from kvcheck.cli import main

    ctx = main.commands["verify"].make_context("kvcheck verify", list(argv), resilient_parsing=True)
    files = list(ctx.params.get("files") or ())
    return list(argv[: len(argv) - len(files)]), files


MAX_SNIFF_BYTES = 4 << 20  # a file larger than this is checked, never skipped unread
_MANIFEST_KEYS = frozenset({"roles", "deployment"})  # a manifest's roles, an overlay's deployment files
_WORD_RE = re.compile(r"[^\s'\"\[\],=]+")


def _launches_an_engine(text: str) -> bool:
    """Whether the text holds a launch line of an engine kvcheck knows (`python -m sglang.launch_server`)."""
    from kvcheck.engines import engine_names, get_engine

    words = _WORD_RE.findall(text)
    return any(get_engine(name).launch_index(words) is not None for name in engine_names())


def is_checked(path: str) -> bool:
    """Whether the hook checks a file: a kvcheck manifest, or a file that holds an engine server.

    Unreadable, huge or broken files are checked, so that verify says what is wrong with them.
    """
    from kvcheck.errors import InputError
    from kvcheck.inputs.deploy.formats import FORMATS
    from kvcheck.inputs.deploy.source import SourceFile, parse_documents
    from kvcheck.io.textfile import read_text_file

    try:
        text = read_text_file(Path(path), path, kind="file", max_bytes=MAX_SNIFF_BYTES)
    except InputError:
        return True
    if _launches_an_engine(text):
        return True
    try:
        docs = parse_documents(SourceFile(path, text))
    except InputError:  # broken YAML: checked when it looks like a manifest or a format kvcheck reads
        return any(line.split(":", 1)[0] in _MANIFEST_KEYS for line in text.splitlines()) or any(
            fmt.marks_text(text) for fmt in FORMATS.values())
    for doc in docs:
        if isinstance(doc.data, dict) and _MANIFEST_KEYS & set(doc.data):
            return True
        found = FORMATS.detect(doc)
        if found is not None and found.name == "srt-slurm":  # a recipe is an SGLang server by itself
            return True
    return False


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    options, given = split_files(args)
    files = [file for file in given if is_checked(file)]
    worst = 0
    for file in files:
        done = subprocess.run([sys.executable, "-m", "kvcheck", "verify", "--mode", "estimate", *options, file],
                              check=False)
        if _PRESSING.get(done.returncode, 4) > _PRESSING.get(worst, 4):
            worst = done.returncode
    skipped = len(given) - len(files)
    print(f"kvcheck: checked {len(files)} of {len(given)} file{'s' if len(given) != 1 else ''}"
          + (f" ({skipped} neither a kvcheck manifest nor a file holding an engine server)" if skipped else ""),
          file=sys.stderr)
    return worst


if __name__ == "__main__":
    sys.exit(main())
