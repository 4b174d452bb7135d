"""CPython 3.11's AST constructor is not thread-safe (gh-106905: "AST constructor recursion depth
mismatch", seen in CI when the log pumps of two roles booted side by side parsed `server_args=` at
once). Every ast.parse and ast.literal_eval in kvcheck goes through kvcheck/io/pyast.py's lock."""

from __future__ import annotations

import re
import threading

from kvcheck.io import pyast
from tests.conftest import REPO_ROOT

RAW = re.compile(r"\bast\.(parse|literal_eval)\(")


def test_no_module_parses_python_outside_the_lock() -> None:
    offenders = [
        f"{path.relative_to(REPO_ROOT)}:{n}"
        for path in sorted((REPO_ROOT / "kvcheck").rglob("*.py"))
        if path.name != "pyast.py"
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if RAW.search(line)
    ]
    assert offenders == []


def test_parsing_waits_for_the_lock() -> None:
    done = threading.Event()
    with pyast._LOCK:
        worker = threading.Thread(target=lambda: (pyast.literal_eval("{'a': [1, 2]}"), done.set()))
        worker.start()
        assert not done.wait(0.2)  # held: the other thread's parse has not run
    worker.join(10)
    assert done.is_set()
