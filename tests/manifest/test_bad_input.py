"""The bad-input corpus: every file exits 2 with exactly the expected message and no traceback."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT, run_kvcheck

CORPUS = Path(__file__).parent / "corpus"
UPDATE = os.environ.get("KVCHECK_UPDATE_GOLDEN") == "1"
CASES = sorted(p.stem for p in CORPUS.glob("*.yaml"))


@pytest.mark.parametrize("case", CASES)
def test_bad_manifest_is_exit_2_with_exact_message(case: str) -> None:
    rel = (CORPUS / f"{case}.yaml").relative_to(REPO_ROOT)
    result = run_kvcheck("verify", str(rel), "--mode", "estimate")
    expected = CORPUS / f"{case}.expected"
    if UPDATE:
        expected.write_text(result.stderr, encoding="utf-8")
    assert result.exit_code == 2
    assert result.stdout == ""
    assert "Traceback" not in result.stderr
    assert result.stderr == expected.read_text(encoding="utf-8")


def test_missing_manifest_file() -> None:
    result = run_kvcheck("verify", "no/such/manifest.yaml", "--mode", "estimate")
    assert (result.exit_code, result.stdout) == (2, "")
    assert result.stderr == "kvcheck: error: no/such/manifest.yaml: no such manifest file\n"


def test_directory_instead_of_manifest() -> None:
    result = run_kvcheck("verify", "tests", "--mode", "estimate")
    assert result.exit_code == 2
    assert result.stderr == "kvcheck: error: tests: is a folder, not a manifest file\n"


def test_unknown_role_selected(tmp_path: Path) -> None:
    manifest = tmp_path / "m.yaml"
    manifest.write_text(
        'context_length: 8192\nmodel: {path: m}\nengine: {version: "0.5.23"}\n'
        "roles:\n  prefill: {gpus: [0]}\n  decode: {gpus: [1]}\n"
    )
    result = run_kvcheck("verify", str(manifest), "--role", "prefil", "--mode", "estimate")
    assert result.exit_code == 2
    assert result.stderr == (
        f"kvcheck: error: {manifest}: no role 'prefil' (did you mean 'prefill'?); "
        "the manifest's roles are: prefill, decode\n"
    )


def test_bad_option_is_exit_2() -> None:
    result = run_kvcheck("verify", "x.yaml", "--mode", "guess")
    assert result.exit_code == 2
    assert "Invalid value for '--mode'" in result.stderr


@pytest.mark.parametrize("command", ["logs", "audit"])
def test_a_headroom_below_one_is_exit_2(command: str) -> None:
    # below 1, a pool smaller than the window it advertises passed (exit 0): the incident kvcheck gates
    target = "tests/data/logs/sglang-qwen35-9b-2x4090-tp2.log" if command == "logs" else "http://127.0.0.1:9"
    result = run_kvcheck(command, target, "--min-headroom", "0.5")
    assert (result.exit_code, result.stdout) == (2, "")
    assert "Invalid value for '--min-headroom': 0.5 is not in the range x>=1." in result.stderr
