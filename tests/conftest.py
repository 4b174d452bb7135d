"""Shared fixtures: the repository root, the real model configs, and a CLI runner."""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.datapaths import MODELS, MODELS_ABSENT

REPO_ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = REPO_ROOT / "docs" / "examples"


@pytest.fixture
def model_configs() -> Path:
    """The folder of real Hugging Face configs (see tests/datapaths.py); skips where it is absent."""
    if not MODELS.is_dir():
        pytest.skip(MODELS_ABSENT)
    return MODELS


@dataclass(frozen=True)
class CliResult:
    exit_code: int
    stdout: str
    stderr: str


def run_kvcheck(*args: str, cwd: Path | None = None, env: dict[str, str] | None = None,
                stdin: str | None = None, timeout: float = 120) -> CliResult:
    """Run `python -m kvcheck ARGS` as a user would, with this checkout on the path."""
    full_env = dict(os.environ)
    full_env["PYTHONPATH"] = str(REPO_ROOT) + os.pathsep + full_env.get("PYTHONPATH", "")
    full_env.pop("KVCHECK_DEBUG", None)
    if env:
        full_env.update(env)
    proc = subprocess.run(
        [sys.executable, "-m", "kvcheck", *args],
        cwd=cwd or REPO_ROOT,
        env=full_env,
        input=stdin,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    return CliResult(proc.returncode, proc.stdout, proc.stderr)


@pytest.fixture
def kvcheck():
    return run_kvcheck
