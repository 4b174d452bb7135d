"""Where the report goes: a closed stdout (`| head`) keeps the verdict; a missing --output folder is exit 2 up front."""

from __future__ import annotations

import os
import subprocess
import sys

from tests.conftest import REPO_ROOT

SINGLE = "docs/examples/single-server/manifest.yaml"
INCIDENT = "docs/examples/incident/manifest.yaml"


def run_into_closed_pipe(*args: str) -> subprocess.CompletedProcess[str]:
    """Run kvcheck with stdout a pipe whose reader is already gone: every write fails with EPIPE."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        return subprocess.run(
            [sys.executable, "-m", "kvcheck", *args],
            cwd=REPO_ROOT,
            env={**os.environ, "PYTHONPATH": str(REPO_ROOT)},
            stdout=write_end,
            stderr=subprocess.PIPE,
            text=True,
            timeout=120,
        )
    finally:
        os.close(write_end)


def test_closed_stdout_keeps_the_passing_verdict_without_a_traceback() -> None:
    done = run_into_closed_pipe("verify", SINGLE, "--mode", "estimate")
    assert (done.returncode, done.stderr) == (0, "")


def test_closed_stdout_keeps_the_failing_verdict() -> None:
    done = run_into_closed_pipe("verify", INCIDENT, "--mode", "estimate", "--format", "json")
    assert (done.returncode, done.stderr) == (1, "")


def test_output_into_a_missing_folder_is_refused_before_the_check_runs(tmp_path) -> None:
    from tests.conftest import run_kvcheck

    target = tmp_path / "missing" / "report.json"
    done = run_kvcheck("verify", SINGLE, "--mode", "estimate", "--output", str(target))
    assert done.exit_code == 2
    assert done.stderr.splitlines()[-1] == (
        f"Error: Invalid value for '--output' / '-o': folder {target.parent} does not exist; create it first"
    )
    assert not target.parent.exists()
