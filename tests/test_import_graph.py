"""Data flows one way through kvcheck: its import graph (deferred imports and module-naming strings
included) has no cycle, and the layer contracts name every import that breaks one, as file:line."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT
from tools.import_graph import build_graph, cycles, main, violations


def test_kvcheck_has_no_import_cycle():
    assert cycles(build_graph()) == []


def test_the_shared_types_import_nothing_from_kvcheck_but_its_version():
    assert build_graph()["kvcheck.model"] == {"kvcheck"}


def test_the_rule_registry_imports_nothing_but_the_shared_types():
    # The catalogue imports every rule module and each of them the registry: an edge back would be a cycle.
    assert build_graph()["kvcheck.policy.registry"] == {"kvcheck.model"}


def test_the_checker_finds_a_cycle():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert cycles(graph) == [["a", "b", "c"]]


def test_the_checker_runs_as_a_script():
    run = subprocess.run([sys.executable, "tools/import_graph.py"], cwd=REPO_ROOT, capture_output=True, text=True)
    assert run.returncode == 0, run.stdout
    assert run.stdout.startswith("no import cycle among ")


def test_this_checkout_keeps_every_layer_contract():
    # issue 18's done-when: no module outside kvcheck/engines/sglang/ (and the registry) imports SGLang's
    run = subprocess.run([sys.executable, "tools/import_graph.py", "--contracts"], cwd=REPO_ROOT,
                         capture_output=True, text=True)
    assert run.returncode == 0, run.stdout
    assert run.stdout.strip().endswith("the layer contracts hold")


# -- synthetic trees -----------------------------------------------------------------------------


def tree(root: Path, files: dict[str, str]) -> Path:
    """A package tree under `root` (every folder a package), the way the checker reads a checkout."""
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        for folder in path.relative_to(root).parents:
            if folder != Path("."):
                (root / folder / "__init__.py").touch()
    return root


def breaches(root: Path) -> list[str]:
    return [str(v) for v in violations(root)]


def test_a_string_registry_of_module_names_is_an_edge(tmp_path):
    # The shape the rule registry had: a tuple of module names imported later, each importing the registry.
    root = tree(tmp_path, {
        "kvcheck/registry.py": '"""Mentions kvcheck.rules in prose, which is no edge."""\n'
                               'MODULES = ("kvcheck.rules",)\n',
        "kvcheck/rules.py": "from kvcheck.registry import MODULES\n",
        "kvcheck/sections.py": 'SECTION = "kvcheck.text:render"\n',
        "kvcheck/text.py": '"""kvcheck.sections renders me."""\n',
    })
    graph = build_graph(root)
    assert cycles(graph) == [["kvcheck.registry", "kvcheck.rules"]]
    assert graph["kvcheck.sections"] == {"kvcheck.text"}
    assert graph["kvcheck.text"] == set()


def test_only_an_engines_own_package_and_the_registry_import_it(tmp_path):
    root = tree(tmp_path, {
        "kvcheck/engines/__init__.py": "def _fake():\n    from kvcheck.engines.fake.engine import FakeEngine\n",
        "kvcheck/engines/base.py": "from kvcheck.engines.flags import Catalogue\n",
        "kvcheck/engines/flags.py": "Catalogue = dict\n",
        "kvcheck/engines/fake/engine.py": "from kvcheck.engines.base import Engine\nfrom . import logs\n",
        "kvcheck/engines/fake/logs.py": "from kvcheck.engines.fake.engine import FakeEngine\n",
        "kvcheck/engines/other/engine.py": "import kvcheck.engines.fake.logs\n",
        "kvcheck/commands/verify.py": "from kvcheck.engines import get_engine\nfrom kvcheck.engines.base import Engine\n"
                                      "\n\ndef run():\n    from kvcheck.engines.fake import logs, engine\n",
    })
    assert breaches(root) == [
        "kvcheck/commands/verify.py:6: kvcheck.commands.verify imports kvcheck.engines.fake: only "
        "kvcheck/engines/fake/ and the registry kvcheck/engines/__init__.py import kvcheck.engines.fake",
        "kvcheck/engines/other/engine.py:1: kvcheck.engines.other.engine imports kvcheck.engines.fake.logs: only "
        "kvcheck/engines/fake/ and the registry kvcheck/engines/__init__.py import kvcheck.engines.fake",
    ]


def test_the_bottom_layer_imports_only_the_bottom_layer(tmp_path):
    root = tree(tmp_path, {
        "kvcheck/__init__.py": '__version__ = "0"\n',
        "kvcheck/model.py": "from kvcheck import __version__\n",
        "kvcheck/errors.py": "from kvcheck.model import ExitCode\n",
        "kvcheck/http.py": "from kvcheck.errors import InputError\n",
        "kvcheck/profiles.py": "",
        "kvcheck/redact.py": "from kvcheck.model import Report\n",
        "kvcheck/io/yamlpos.py": "from kvcheck.errors import InputError\n",
        "kvcheck/gpus.py": "from kvcheck.profiles import profile_path\n\n\ndef load():\n"
                           "    from kvcheck.io.yamlpos import safe_load\n"
                           "    from kvcheck.engines.sglang.sizing import defaults\n",
        "kvcheck/engines/sglang/sizing/defaults.py": "from kvcheck.gpus import load\n",
        "kvcheck/inputs/fleet.py": "from kvcheck.http import get\n",
    })
    assert breaches(root) == [
        "kvcheck/gpus.py:6: kvcheck.gpus imports kvcheck.engines.sglang.sizing: only "
        "kvcheck/engines/sglang/ and the registry kvcheck/engines/__init__.py import kvcheck.engines.sglang",
        "kvcheck/gpus.py:6: kvcheck.gpus imports kvcheck.engines.sglang.sizing: the bottom layer "
        "(kvcheck.model, kvcheck.errors, kvcheck.http, kvcheck.gpus, kvcheck.hostmem, kvcheck.io, kvcheck.profiles, kvcheck.redact, "
        "kvcheck.scrub, kvcheck.escape) "
        "imports nothing above it",
    ]


def test_inputs_launchers_and_report_do_not_import_the_policys_rules(tmp_path):
    root = tree(tmp_path, {
        "kvcheck/policy/rules.py": "from kvcheck.policy.registry import define_rule\n",
        "kvcheck/policy/registry.py": "",
        "kvcheck/policy/judge.py": "from kvcheck.policy.rules import evaluate_role\n",
        "kvcheck/inputs/load.py": "from kvcheck.policy.rules import PolicyConfig\n",
        "kvcheck/inputs/deploy/rules.py": "from kvcheck.policy.registry import define_rule\n",
        "kvcheck/backends/measure/boot.py": "from kvcheck.policy import rules\n",
        "kvcheck/backends/measure/launchers/slurm.py": "def run():\n    from kvcheck.policy import rules\n",
        "kvcheck/report/formats/sarif.py": "import kvcheck.policy.rules as rules\n",
    })
    reason = "kvcheck.inputs, kvcheck.backends.measure.launchers, kvcheck.report do not import kvcheck.policy.rules"
    assert breaches(root) == [
        f"kvcheck/backends/measure/launchers/slurm.py:2: kvcheck.backends.measure.launchers.slurm imports "
        f"kvcheck.policy.rules: {reason}",
        f"kvcheck/inputs/load.py:1: kvcheck.inputs.load imports kvcheck.policy.rules: {reason}",
        f"kvcheck/report/formats/sarif.py:1: kvcheck.report.formats.sarif imports kvcheck.policy.rules: {reason}",
    ]


def test_contracts_are_checked_only_when_asked(tmp_path, capsys: pytest.CaptureFixture[str]):
    root = tree(tmp_path, {
        "kvcheck/model.py": "",
        "kvcheck/inputs/load.py": "from kvcheck.policy.rules import PolicyConfig\n",
        "kvcheck/policy/rules.py": "from kvcheck.model import Finding\n",
    })
    assert main(["--root", str(root)]) == 0
    assert capsys.readouterr().out == "no import cycle among 6 modules\n"
    assert main(["--contracts", "--root", str(root)]) == 1
    assert capsys.readouterr().out == (
        "kvcheck/inputs/load.py:1: kvcheck.inputs.load imports kvcheck.policy.rules: kvcheck.inputs, "
        "kvcheck.backends.measure.launchers, kvcheck.report do not import kvcheck.policy.rules\n"
        "1 import(s) break a layer contract\n"
    )
    (root / "kvcheck" / "inputs" / "load.py").write_text("from kvcheck.model import Finding\n", encoding="utf-8")
    assert main(["--contracts", "--root", str(root)]) == 0
    assert capsys.readouterr().out == "no import cycle among 6 modules; the layer contracts hold\n"
