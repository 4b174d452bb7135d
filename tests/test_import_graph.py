"""Data flows one way through kvcheck: its import graph (deferred imports included) has no cycle."""

import subprocess
import sys

from tests.conftest import REPO_ROOT
from tools.import_graph import build_graph, cycles


def test_kvcheck_has_no_import_cycle():
    assert cycles(build_graph()) == []


def test_the_shared_types_import_nothing_from_kvcheck_but_its_version():
    assert build_graph()["kvcheck.model"] == {"kvcheck"}


def test_the_checker_finds_a_cycle():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert cycles(graph) == [["a", "b", "c"]]


def test_the_checker_runs_as_a_script():
    run = subprocess.run([sys.executable, "tools/import_graph.py"], cwd=REPO_ROOT, capture_output=True, text=True)
    assert run.returncode == 0, run.stdout
    assert run.stdout.startswith("no import cycle among ")
