"""--fail-on error|warning: the lowest severity that fails the check. `warning` is --strict; no level
lets an error or a role that could not be checked pass."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tests.conftest import EXAMPLES, run_kvcheck

SINGLE = EXAMPLES / "single-server"


@pytest.fixture
def warned(tmp_path: Path) -> Path:
    """The single-server example with --allow-auto-truncate: its pool holds the window, KV202 warns."""
    shutil.copy(SINGLE / "llama-3.1-8b-instruct.config.json", tmp_path)
    text = (SINGLE / "manifest.yaml").read_text().replace("gpu: H100\n", "gpu: H100\nargs:\n  allow-auto-truncate: true\n")
    (tmp_path / "manifest.yaml").write_text(text)
    return tmp_path / "manifest.yaml"


def verify(manifest: Path, *extra: str) -> tuple[int, dict]:
    done = run_kvcheck("verify", str(manifest), "--mode", "estimate", "--format", "json", *extra)
    assert done.stdout, done.stderr
    return done.exit_code, json.loads(done.stdout)


def test_a_warning_passes_by_default_and_with_fail_on_error(warned: Path) -> None:
    for extra in ((), ("--fail-on", "error")):
        code, report = verify(warned, *extra)
        assert (code, report["verdict"]) == (0, "pass")
        assert [(f["rule"], f["severity"]) for f in report["findings"]] == [("KV202", "warning")]


def test_fail_on_warning_fails_like_strict(warned: Path) -> None:
    code, report = verify(warned, "--fail-on", "warning")
    assert (code, report["verdict"], report["roles"][0]["status"]) == (1, "fail", "fail")
    assert verify(warned, "--strict")[1]["verdict"] == "fail"


def test_an_unknown_level_is_bad_input() -> None:
    done = run_kvcheck("verify", str(SINGLE / "manifest.yaml"), "--mode", "estimate", "--fail-on", "never")
    assert done.exit_code == 2
    assert "'never' is not one of 'error', 'warning'" in done.stderr
