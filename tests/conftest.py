"""Shared fixtures: the repository root, the real model configs, and a CLI runner."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.datapaths import MODELS, MODELS_ABSENT

REPO_ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = REPO_ROOT / "docs" / "examples"


# Whole folders that carry a marker (pyproject.toml lists them), so a new test there is marked too.
FOLDER_MARKERS = {
    Path("tests/slurm"): "slurm",
    Path("tests/measure/kubernetes"): "kubernetes",
    Path("tests/engines/real"): "real_engine",
}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Folder markers, and `slow` for every test that boots the engine double (it takes the `pidfile`
    fixture of tests/measure/conftest.py, which checks that no engine process survives)."""
    for item in items:
        if "pidfile" in getattr(item, "fixturenames", ()):
            item.add_marker("slow")
        where = item.path.relative_to(REPO_ROOT) if item.path.is_relative_to(REPO_ROOT) else item.path
        for folder, marker in FOLDER_MARKERS.items():
            if where.is_relative_to(folder):
                item.add_marker(marker)
                # under pytest-xdist (--dist loadgroup) a shared cluster's tests all run on one worker
                item.add_marker(pytest.mark.xdist_group(marker))


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


def _cli_env(env: dict[str, str] | None) -> dict[str, str]:
    """The environment a user's `python -m kvcheck` gets here: this checkout first, no KVCHECK_DEBUG."""
    full_env = dict(os.environ)
    full_env["PYTHONPATH"] = str(REPO_ROOT) + os.pathsep + full_env.get("PYTHONPATH", "")
    full_env.pop("KVCHECK_DEBUG", None)
    if env:
        full_env.update(env)
    return full_env


def run_kvcheck(*args: str, cwd: Path | None = None, env: dict[str, str] | None = None,
                stdin: str | None = None, timeout: float = 120) -> CliResult:
    """Run `python -m kvcheck ARGS` as a user would, inside this process (tests/inprocess.py says how).

    Same exit code, stdout and stderr as `run_kvcheck_process`, in ~0.03 s instead of ~0.8 s; stdin,
    when not given, is empty (a pipe, not a terminal).
    """
    from tests.inprocess import decode_like_subprocess, run_in_process

    code, stdout, stderr = run_in_process(args, cwd or REPO_ROOT, _cli_env(env), stdin, timeout)
    result = CliResult(code, decode_like_subprocess(stdout), decode_like_subprocess(stderr))
    check_report_schema(result.stdout)
    return result


def check_report_schema(stdout: str) -> None:
    """Every JSON report a test produces must follow the shipped schema (kvcheck schema --report): a
    field added to the report without its schema, or a value outside it, fails the test that made it."""
    if not stdout.lstrip().startswith("{") or '"kvcheck/report/v1"' not in stdout[:200]:
        return
    import jsonschema

    from kvcheck.report.schema import REPORT_JSON_SCHEMA

    try:
        document = json.loads(stdout)
    except ValueError:
        return  # not one JSON document (a test asserts on what it is)
    jsonschema.Draft202012Validator(REPORT_JSON_SCHEMA).validate(document)


def run_kvcheck_in_terminal(*args: str, columns: int) -> tuple[int, str]:
    """Run `kvcheck ARGS` with stdout and stderr a pseudo-terminal of `columns` columns, colours allowed, from the
    repository root: its exit code and everything it wrote."""
    import pty

    code = f"import sys; sys.argv = ['kvcheck', *{list(args)!r}]; from kvcheck.cli import main; main()"
    pid, fd = pty.fork()
    if pid == 0:  # child: stdout and stderr are the pseudo-terminal
        os.chdir(REPO_ROOT)
        os.environ.update({"PYTHONPATH": str(REPO_ROOT), "COLUMNS": str(columns)})
        os.environ.pop("NO_COLOR", None)
        os.execv(sys.executable, [sys.executable, "-c", code])
    chunks = []
    while True:
        try:
            data = os.read(fd, 65536)
        except OSError:  # the child closed the terminal
            break
        if not data:
            break
        chunks.append(data)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status), b"".join(chunks).decode()


def run_kvcheck_process(*args: str, cwd: Path | None = None, env: dict[str, str] | None = None,
                        stdin: str | None = None, timeout: float = 120) -> CliResult:
    """Run `python -m kvcheck ARGS` as a real process: for signals, closed pipes, the watchdog, a terminal."""
    proc = subprocess.run(
        [sys.executable, "-m", "kvcheck", *args],
        cwd=cwd or REPO_ROOT,
        env=_cli_env(env),
        input=stdin,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    check_report_schema(proc.stdout)
    return CliResult(proc.returncode, proc.stdout, proc.stderr)


@pytest.fixture
def kvcheck():
    return run_kvcheck
