"""The rule catalogue lists every rule kvcheck defines, engine rules coming from the engine."""

from __future__ import annotations

import importlib
import pkgutil
import subprocess
import sys

import pytest

import kvcheck
from kvcheck.engines import ENGINES, get_engine
from kvcheck.policy.catalogue import NEUTRAL_RULES, catalogue
from kvcheck.policy.registry import RULES, all_rules, finding
from tests.conftest import REPO_ROOT


def _import_every_module() -> None:
    for module in pkgutil.walk_packages(kvcheck.__path__, prefix="kvcheck."):
        importlib.import_module(module.name)


def test_every_rule_a_module_defines_is_in_the_catalogue() -> None:
    _import_every_module()
    listed = [rule.code for rule in catalogue()]
    assert len(listed) == len(set(listed)) == 65
    assert set(listed) == set(RULES)
    assert all_rules() == dict(sorted(RULES.items()))


def test_sglangs_own_rules_come_from_the_engine() -> None:
    assert list(ENGINES) == ["sglang", "vllm"]
    engine_codes = [rule.code for rule in get_engine("sglang").rules()]
    assert engine_codes == ["KV305", "KV105", "KV108", "KV113", "KV120", "KV309", "KV312", "KV313", "KV316"]
    vllm_codes = [rule.code for rule in get_engine("vllm").rules()]
    assert vllm_codes == ["KV109", "KV220", "KV210", "KV211", "KV212", "KV213", "KV214"]
    assert not {rule.code for rule in NEUTRAL_RULES} & {*engine_codes, *vllm_codes}
    assert [rule.code for rule in catalogue()][-16:] == engine_codes + vllm_codes


def test_a_finding_resolves_its_code_from_the_catalogue_when_no_module_defined_it_yet() -> None:
    # A fresh interpreter: the registry alone imports no rule module, and the first lookup of a code
    # defined nowhere yet loads the catalogue.
    script = (
        "import sys\n"
        "from kvcheck.policy.registry import RULES, finding\n"
        "print(sorted(RULES), 'kvcheck.policy.catalogue' in sys.modules)\n"
        "print(finding('KV309', 'p', 'm').severity, 'kvcheck.policy.catalogue' in sys.modules)\n"
    )
    run = subprocess.run([sys.executable, "-c", script], cwd=REPO_ROOT, capture_output=True, text=True, check=True)
    assert run.stdout == "[] False\nerror True\n"


def test_an_unknown_code_is_still_a_key_error() -> None:
    with pytest.raises(KeyError, match="KV999"):
        finding("KV999", None, "m")
