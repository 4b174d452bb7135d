"""Shared pieces for measure-mode tests: the engine double, role targets, and a no-survivor check."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from kvcheck.model import RoleTarget

REPO = Path(__file__).resolve().parents[2]
FAKE_SGLANG = REPO / "tests" / "doubles" / "fake_sglang.py"
ENGINE = (sys.executable, str(FAKE_SGLANG))


def flags(args: dict[str, object]) -> tuple[str, ...]:
    """Render args as SGLang flags, as the manifest loader does (store-true for True)."""
    argv: list[str] = []
    for key, value in args.items():
        flag = "--" + key.replace("_", "-")
        if value is True:
            argv.append(flag)
        elif value not in (False, None):
            argv += [flag, str(value)]
    return tuple(argv)


def make_target(
    name: str = "prefill",
    *,
    args: dict[str, object] | None = None,
    gpus: tuple[int, ...] = (0,),
    context_length: int = 131072,
    engine_version: str | None = "0.5.23",
    env: dict[str, str] | None = None,
    gpu: str | None = None,
    model_path: str = "meta-llama/Llama-3.1-8B-Instruct",
) -> RoleTarget:
    args = dict(args or {})
    return RoleTarget(
        name=name,
        context_length=context_length,
        min_headroom=1.0,
        engine_version=engine_version,
        args=args,
        argv_args=flags(args),
        gpus=gpus,
        gpu=gpu,
        model_path=model_path,
        engine_command=ENGINE,
        env=dict(env or {}),
    )


def pid_alive(pid: int) -> bool:
    """True while `pid` runs (a zombie is dead: it holds nothing and only awaits reaping)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rfind(")") + 2] not in "ZX"


class PidFile:
    """Where every process of the double writes its pid."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def pids(self) -> list[int]:
        if not self.path.exists():
            return []
        return [int(line) for line in self.path.read_text().split()]

    def survivors(self) -> list[int]:
        return [pid for pid in self.pids() if pid_alive(pid)]


@pytest.fixture
def pidfile(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[PidFile]:
    """Every test that boots the double must leave none of its processes running."""
    path = tmp_path / "pids"
    monkeypatch.setenv("FAKE_SGLANG_PIDFILE", str(path))
    monkeypatch.setenv("FAKE_SGLANG_STEP_S", "0.001")
    record = PidFile(path)
    yield record
    leftover = record.survivors()
    for pid in leftover:  # never leak into the next test, but fail this one
        try:
            os.kill(pid, 9)
        except ProcessLookupError:
            pass
    assert leftover == [], f"engine processes survived: {leftover}"


def start_until_engines_started(
    argv: list[str], pidfile: PidFile, expected: int, *, mode: str
) -> subprocess.Popen[str]:
    """Start `argv` (kvcheck, or a script driving the backend) and return once `expected` engine
    processes of the double are up (FAKE_SGLANG_MODE=`mode`), so a test can interrupt it mid-boot."""
    env = {**os.environ, "PYTHONPATH": str(REPO), "FAKE_SGLANG_MODE": mode}
    proc = subprocess.Popen(argv, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while len(pidfile.pids()) < expected:
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            _, err = proc.communicate()
            pytest.fail(f"engines did not start (rc {proc.returncode}): {err[-2000:]}")
        time.sleep(0.02)
    return proc
