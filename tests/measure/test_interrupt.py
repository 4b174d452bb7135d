"""Ctrl-C and SIGTERM to kvcheck while engines boot: every engine process ends, then kvcheck does."""

from __future__ import annotations

import signal
import subprocess
import sys

import pytest

from tests.measure.conftest import PidFile, start_until_engines_started

SCRIPT = """
import sys
from tests.measure.conftest import make_target
from kvcheck.backends.measure import MeasureBackend

targets = [make_target("a", args={"tp_size": 2}, gpus=(0, 1)), make_target("b", gpus=(2,))]
MeasureBackend(gpu_check=False, progress=False, grace_s=0.5, timeout_s=300).measure(targets)
print("measure returned", flush=True)
"""


def _run_until_engines_started(pidfile: PidFile, expected: int) -> subprocess.Popen[str]:
    return start_until_engines_started([sys.executable, "-c", SCRIPT], pidfile, expected, mode="hang,ignore_sigterm")


@pytest.mark.parametrize(
    ("signum", "returncode"),
    [(signal.SIGINT, -signal.SIGINT), (signal.SIGTERM, -signal.SIGTERM), (signal.SIGHUP, -signal.SIGHUP)],
)
def test_signal_stops_every_engine_then_kvcheck(pidfile: PidFile, signum: int, returncode: int) -> None:
    # role a: launcher, 2 schedulers, detokenizer; role b: launcher, 1 scheduler, detokenizer
    proc = _run_until_engines_started(pidfile, expected=7)
    assert pidfile.survivors() == pidfile.pids()
    proc.send_signal(signum)
    out, err = proc.communicate(timeout=60)
    assert "measure returned" not in out
    assert proc.returncode == returncode, err[-2000:]
    assert pidfile.survivors() == []
