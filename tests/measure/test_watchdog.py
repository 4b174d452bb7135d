"""SIGKILL of kvcheck: its watchdog ends every engine and removes the temporary logs (watchdog.py)."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from kvcheck.backends.measure.launchers import watchdog
from tests.measure.conftest import FAKE_SGLANG, REPO, PidFile, pid_alive, start_until_engines_started
from tests.measure.test_cli_measure import MANIFEST

WATCHDOG = [sys.executable, "-I", watchdog.__file__]
DETACHING = REPO / "tests" / "doubles" / "detaching_engine.py"


def _sleep_group() -> subprocess.Popen[bytes]:
    return subprocess.Popen(["sleep", "60"], start_new_session=True)


def _wait_gone(pids: list[int], timeout_s: float) -> float:
    """Seconds until none of `pids` runs; fails after `timeout_s`."""
    start = time.monotonic()
    while any(pid_alive(pid) for pid in pids):
        if time.monotonic() - start > timeout_s:
            pytest.fail(f"still running after {timeout_s} s: {[p for p in pids if pid_alive(p)]}")
        time.sleep(0.02)
    return time.monotonic() - start


def test_end_of_file_ends_listed_groups_and_removes_their_logs(tmp_path: Path) -> None:
    listed, stopped, reused = _sleep_group(), _sleep_group(), _sleep_group()
    log, kept = tmp_path / "a.log", tmp_path / "b.log"
    log.write_text("x")
    kept.write_text("x")
    dog = subprocess.Popen([*WATCHDOG, "1"], stdin=subprocess.PIPE, text=True, start_new_session=True)
    try:
        assert dog.stdin is not None
        dog.stdin.write(f"start {listed.pid} {watchdog.start_time(listed.pid)} {log}\n")
        dog.stdin.write(f"start {stopped.pid} {watchdog.start_time(stopped.pid)} {kept}\n")
        dog.stdin.write(f"stop {stopped.pid}\n")
        # the same number, another start time: a later process reusing the id is never signalled
        dog.stdin.write(f"start {reused.pid} 1 -\n")
        dog.stdin.write("garbage line\n")
        dog.stdin.flush()
        time.sleep(0.2)
        assert dog.poll() is None  # waits for end of file, whatever it reads
        dog.stdin.close()
        assert dog.wait(timeout=10) == 0
        assert listed.wait(timeout=1) == -signal.SIGTERM
        assert not log.exists()
        assert stopped.poll() is None and reused.poll() is None
        assert kept.exists()
    finally:
        for proc in (listed, stopped, reused, dog):
            proc.kill()
            proc.wait()


def test_a_group_ignoring_sigterm_gets_sigkill_after_the_grace(tmp_path: Path) -> None:
    stubborn = subprocess.Popen(
        ["sh", "-c", "trap '' TERM; sleep 60 & wait; sleep 60"], start_new_session=True
    )
    time.sleep(0.2)
    dog = subprocess.Popen([*WATCHDOG, "0.5"], stdin=subprocess.PIPE, text=True, start_new_session=True)
    try:
        assert dog.stdin is not None
        dog.stdin.write(f"start {stubborn.pid} {watchdog.start_time(stubborn.pid)} -\n")
        dog.stdin.close()
        assert dog.wait(timeout=10) == 0
        # the leader is not a reaper: SIGUSR2's default action ends it, and the rest of the group
        # (the backgrounded sleep, also ignoring SIGTERM) gets SIGKILL at once after that
        assert stubborn.wait(timeout=1) == -signal.SIGUSR2
        assert not watchdog._group_alive(stubborn.pid)  # the backgrounded sleep too (a zombie at most)
    finally:
        stubborn.kill()
        stubborn.wait()
        dog.kill()
        dog.wait()


def test_nothing_listed_exits_at_once() -> None:
    done = subprocess.run(WATCHDOG, input="", text=True, timeout=10, capture_output=True)
    assert (done.returncode, done.stdout, done.stderr) == (0, "", "")


def _children(pid: int) -> list[tuple[int, str]]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
                cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            except OSError:
                continue
            if int(stat[stat.rfind(")") + 2 :].split()[1]) == pid:
                found.append((int(entry.name), cmdline))
    return found


def _ports(pids: list[int]) -> set[int]:
    ports = set()
    for pid in pids:
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        ports |= {int(argv[i + 1]) for i, arg in enumerate(argv[:-1]) if arg == b"--port"}
    return ports


@pytest.mark.parametrize("mode", ["hang", "hang,ignore_sigterm"])
def test_sigkill_of_kvcheck_ends_every_engine_within_seconds(
    tmp_path: Path, pidfile: PidFile, monkeypatch: pytest.MonkeyPatch, mode: str
) -> None:
    manifest = tmp_path / "deploy.yaml"
    manifest.write_text(MANIFEST.format(python=json.dumps(sys.executable), engine=json.dumps(str(FAKE_SGLANG))))
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    monkeypatch.setenv("TMPDIR", str(tmp))  # where kvcheck's temporary engine logs go
    argv = [sys.executable, "-m", "kvcheck", "verify", str(manifest), "--no-gpu-check"]
    # prefill and decode: launcher, 2 schedulers, detokenizer each
    proc = start_until_engines_started(argv, pidfile, expected=8, mode=mode)
    engines = pidfile.pids()
    ports = _ports(engines)
    assert len(ports) == 2
    dogs = [pid for pid, cmdline in _children(proc.pid) if "watchdog.py" in cmdline]
    assert len(dogs) == 1
    assert sorted(p.name.split("-")[1] for p in tmp.iterdir()) == ["decode", "prefill"]

    proc.kill()
    killed_at = time.monotonic()
    proc.communicate(timeout=10)
    took = _wait_gone(engines + dogs, timeout_s=10)
    print(f"SIGKILL to no engine left ({mode}): {took:.2f} s (since kill: {time.monotonic() - killed_at:.2f} s)")
    assert pidfile.survivors() == []
    assert list(tmp.iterdir()) == []
    for port in ports:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", port))  # free again


def test_sigkill_of_kvcheck_ends_a_daemon_that_left_the_engines_session(
    tmp_path: Path, pidfile: PidFile
) -> None:
    # Issue 14: a double-forked daemon in its own session, output on /dev/null, ignoring SIGTERM,
    # holding a port. kvcheck is SIGKILLed mid-boot; the watchdog's SIGTERM reaches the engine groups,
    # and its SIGUSR2 after the grace makes each engine's reaper SIGKILL the daemon it inherited.
    markers = tmp_path / "daemons"
    engine = ", ".join(json.dumps(str(part)) for part in (
        DETACHING, markers, "ignore-term", "stay", sys.executable, FAKE_SGLANG))
    manifest = tmp_path / "deploy.yaml"
    manifest.write_text(MANIFEST.format(python=json.dumps(sys.executable), engine=engine))
    argv = [sys.executable, "-m", "kvcheck", "verify", str(manifest), "--no-gpu-check"]
    proc = start_until_engines_started(argv, pidfile, expected=8, mode="hang")
    try:
        daemons = [tuple(map(int, m.read_text().split())) for m in markers.iterdir() if m.name.isdigit()]
        assert len(daemons) == 2  # one per role
        proc.kill()
        killed_at = time.monotonic()
        proc.communicate(timeout=30)
        _wait_gone(pidfile.pids() + [pid for pid, _ in daemons], timeout_s=20)
        print(f"SIGKILL of kvcheck to no daemon left: {time.monotonic() - killed_at:.2f} s")
        for _, port in daemons:
            with socket.socket() as sock:
                sock.bind(("127.0.0.1", port))  # free again
    finally:
        for marker in markers.iterdir():
            if marker.name.isdigit():
                with contextlib.suppress(ProcessLookupError):
                    os.kill(int(marker.name), signal.SIGKILL)


def test_end_of_file_cancels_listed_slurm_jobs_by_name(tmp_path: Path) -> None:
    # Fake scancel and squeue record their calls; squeue keeps saying the job is queued, so the
    # second scancel (no --signal) comes after the grace. A job kvcheck saw leave is not touched.
    calls = tmp_path / "calls"
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool, answer in (("scancel", ""), ("squeue", "4242")):
        script = bin_dir / tool
        script.write_text(f'#!/bin/sh\necho "{tool} $* SLURM_CONF=$SLURM_CONF$SLURM_JOB_ID" >> {calls}\necho {answer}\n')
        script.chmod(0o755)
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "SLURM_CONF": "/etc/test-slurm.conf"}
    dog = subprocess.Popen([*WATCHDOG, "0.6"], stdin=subprocess.PIPE, text=True, start_new_session=True,
                           env={**os.environ, "SLURM_JOB_ID": "99"})  # a surrounding job's id is dropped
    assert dog.stdin is not None
    dog.stdin.write(f"slurm kvcheck-ab12cd34-prefill {json.dumps(env)}\n")
    dog.stdin.write(f"slurm kvcheck-ab12cd34-decode {json.dumps(env)}\n")
    dog.stdin.write("slurm-done kvcheck-ab12cd34-decode\n")
    dog.stdin.close()
    started = time.monotonic()
    assert dog.wait(timeout=20) == 0
    assert time.monotonic() - started >= 0.6  # the final scancel waits for the grace
    lines = calls.read_text().splitlines()
    assert lines[0] == "scancel --signal=TERM --name=kvcheck-ab12cd34-prefill SLURM_CONF=/etc/test-slurm.conf"
    assert set(lines[1:-1]) == {"squeue -h --name=kvcheck-ab12cd34-prefill -o %i SLURM_CONF=/etc/test-slurm.conf"}
    assert lines[-1] == "scancel --name=kvcheck-ab12cd34-prefill SLURM_CONF=/etc/test-slurm.conf"
