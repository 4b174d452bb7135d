"""Command line, environment and process-group ending of one engine launch."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import pytest

from kvcheck.backends.measure.launchers.command import (
    build_argv,
    build_env,
    needs_bootstrap_port,
    role_nnodes,
)
from kvcheck.backends.measure.launchers.local import free_port
from kvcheck.backends.measure.launchers.process import EngineProcess, create_log, group_alive
from kvcheck.errors import InputError
from tests.measure.conftest import ENGINE, PidFile, make_target, pid_alive


def test_argv_is_engine_model_args_then_loopback_and_ports() -> None:
    target = make_target(args={"tp_size": 2, "mem_fraction_static": 0.85, "context_length": 131072})
    argv = build_argv(target, port=31000, bootstrap_port=None, dummy_weights=False)
    assert argv == (
        *ENGINE,
        "--model-path", "meta-llama/Llama-3.1-8B-Instruct",
        "--tp-size", "2", "--mem-fraction-static", "0.85", "--context-length", "131072",
        "--host", "127.0.0.1", "--port", "31000",
    )  # fmt: skip


def test_disaggregated_role_gets_its_own_bootstrap_port_and_dummy_weights_flag() -> None:
    target = make_target(args={"disaggregation_mode": "prefill"})
    assert needs_bootstrap_port(target)
    argv = build_argv(target, port=31000, bootstrap_port=31001, dummy_weights=True)
    assert argv[-8:] == (
        "--host", "127.0.0.1", "--port", "31000", "--disaggregation-bootstrap-port", "31001",
        "--load-format", "dummy",
    )  # fmt: skip


def test_bootstrap_port_set_in_the_args_is_kept() -> None:
    target = make_target(args={"disaggregation_mode": "decode", "disaggregation_bootstrap_port": 9000})
    assert not needs_bootstrap_port(target)
    assert not needs_bootstrap_port(make_target(args={"disaggregation_mode": "null"}))
    assert not needs_bootstrap_port(make_target())


def test_a_role_without_model_is_an_input_error() -> None:
    target = make_target()
    target = type(target)(**{**target.__dict__, "model_path": None})
    with pytest.raises(InputError):
        build_argv(target, port=1, bootstrap_port=None, dummy_weights=False)


def test_env_sets_the_role_gpus_and_the_manifest_env_wins() -> None:
    target = make_target(gpus=(4, 5), env={"NCCL_DEBUG": "INFO", "CUDA_DEVICE_ORDER": "FASTEST_FIRST"})
    env = build_env(target, {"PATH": "/bin", "CUDA_VISIBLE_DEVICES": "0"})
    assert env == {
        "PATH": "/bin",
        "CUDA_VISIBLE_DEVICES": "4,5",
        "CUDA_DEVICE_ORDER": "FASTEST_FIRST",
        "NCCL_DEBUG": "INFO",
    }
    assert build_env(make_target(gpus=(1,)), {})["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID"


def test_free_ports_are_never_handed_out_twice() -> None:
    ports = [free_port() for _ in range(50)]
    assert len(set(ports)) == 50


def test_nnodes() -> None:
    assert role_nnodes(make_target()) == 1
    assert role_nnodes(make_target(args={"nnodes": 2})) == 2


def _start(tmp_path: Path, mode: str, lines: list[str]) -> EngineProcess:
    env = {**os.environ, "FAKE_SGLANG_MODE": mode}
    argv = (*ENGINE, "--model-path", "m", "--tp-size", "2", "--port", str(free_port()))
    create_log(tmp_path / "engine.log")
    return EngineProcess(argv, env, log_path=tmp_path / "engine.log", on_line=lines.append)


def _wait_for(predicate, what: str) -> None:
    deadline = time.monotonic() + 30
    while not predicate():
        assert time.monotonic() < deadline, f"gave up waiting for {what}"
        time.sleep(0.01)


def test_stop_ends_children_that_ignore_sigterm(tmp_path: Path, pidfile: PidFile) -> None:
    lines: list[str] = []
    engine = _start(tmp_path, "ignore_sigterm", lines)
    _wait_for(lambda: any("fired up" in line for line in lines), "the ready line")
    assert len(pidfile.pids()) == 4  # launcher, two schedulers, detokenizer
    survivors = engine.stop(grace_s=0.2)
    assert survivors == []
    assert not group_alive(engine.pgid)
    # the launcher was in SGLang's 5 s sleep after SIGTERM when the grace ran out; its children ignored it
    assert engine.returncode == -9
    log = (tmp_path / "engine.log").read_text()
    assert "SIGTERM received" in log
    assert log.splitlines() == lines


def test_sigterm_is_sglangs_crash_path_sleep_then_sigkill(tmp_path: Path, pidfile: PidFile, monkeypatch) -> None:
    """The double ends on SIGTERM as SGLang 0.5.23 does: no drain, a crash report, a sleep, its own SIGKILL."""
    monkeypatch.setenv("FAKE_SGLANG_CRASH_SLEEP_S", "0.2")
    lines: list[str] = []
    engine = _start(tmp_path, "", lines)
    _wait_for(lambda: any("fired up" in line for line in lines), "the ready line")
    assert engine.stop(grace_s=30) == []
    assert engine.returncode == -9  # SGLang SIGKILLs itself, within the grace
    log = (tmp_path / "engine.log").read_text()
    tail = log[log.index("SIGTERM received"):].splitlines()
    assert [line.split("] ", 1)[-1].split(" (pid=")[0] for line in tail[:4]] == [
        "SIGTERM received. signum=None frame=None. Draining requests and shutting down...",
        "Subprocess scheduler_0",
        "SIGQUIT received. signum=None, frame=None. It usually means one child failed.",
        "Sleeping 5 seconds before crash diagnostics to let GPU activity settle.",
    ]
    assert "kill_process_tree called" in tail[-1]
    assert pidfile.survivors() == []


def test_stop_with_no_grace_sends_no_sigterm_and_leaves_nothing(tmp_path: Path, pidfile: PidFile) -> None:
    """A measured role (grace 0): SIGKILL to the whole tree at once, so SGLang's 5 s crash path never runs."""
    lines: list[str] = []
    engine = _start(tmp_path, "ignore_sigterm", lines)
    _wait_for(lambda: any("fired up" in line for line in lines), "the ready line")
    assert len(pidfile.pids()) == 4
    assert engine.stop(grace_s=0) == []
    assert not group_alive(engine.pgid)
    assert engine.returncode == -9
    assert "SIGTERM received" not in (tmp_path / "engine.log").read_text()
    assert pidfile.survivors() == []


def test_stop_during_startup_kills_the_launcher_and_its_children(tmp_path: Path, pidfile: PidFile) -> None:
    lines: list[str] = []
    engine = _start(tmp_path, "hang", lines)
    _wait_for(lambda: sum("Load weight begin" in line for line in lines) == 2, "both schedulers loading")
    assert engine.stop(grace_s=5) == []
    assert engine.returncode == -15  # no handler before serving: default action (docs/sglang-internals.md)
    assert engine.stop(grace_s=5) == []  # idempotent


def test_engine_runs_in_its_own_session(tmp_path: Path, pidfile: PidFile) -> None:
    lines: list[str] = []
    engine = _start(tmp_path, "hang", lines)
    try:
        assert os.getpgid(engine.pid) == engine.pid != os.getpgid(0)
        assert os.getsid(engine.pid) == engine.pid
    finally:
        engine.stop(grace_s=5)


def test_missing_program_raises_oserror(tmp_path: Path) -> None:
    # the reaper starts the engine; the error is still the one starting it directly would raise
    with pytest.raises(FileNotFoundError, match=r"No such file or directory: '/nonexistent/sglang'"):
        EngineProcess(("/nonexistent/sglang",), {}, log_path=tmp_path / "x.log", on_line=print)
    with pytest.raises(FileNotFoundError, match=r"No such file or directory: 'no-such-sglang'"):
        EngineProcess(("no-such-sglang",), {"PATH": str(tmp_path)}, log_path=tmp_path / "x.log", on_line=print)
    script = tmp_path / "sglang"
    script.write_text("#!/bin/sh\n")  # not executable
    with pytest.raises(PermissionError, match="Permission denied"):
        EngineProcess((str(script),), {}, log_path=tmp_path / "x.log", on_line=print)


def _run(tmp_path: Path, script: str, *, grace_s: float = 5.0) -> EngineProcess:
    log = tmp_path / "engine.log"
    create_log(log)
    return EngineProcess(("/bin/sh", "-c", script), dict(os.environ), log_path=log, on_line=lambda line: None,
                         grace_s=grace_s)


@pytest.mark.parametrize(("script", "returncode"), [
    ("exit 0", 0), ("exit 3", 3), ("kill -TERM $$", -15), ("kill -KILL $$", -9), ("kill -SEGV $$", -11),
])
def test_the_reaper_ends_as_the_engine_did(tmp_path: Path, script: str, returncode: int) -> None:
    engine = _run(tmp_path, script)
    _wait_for(lambda: engine.poll() is not None, "the engine's end")
    assert engine.returncode == returncode
    assert engine.stop(grace_s=1) == []
    assert not list(tmp_path.glob("core*"))  # a mirrored SIGSEGV leaves no core of the reaper


def test_the_engine_runs_below_the_reaper_in_its_group_with_a_clean_signal_state(tmp_path: Path) -> None:
    # the shell reads its own status with builtins, before it forks anything: a grep of /proc/$$ races
    # dash, which blocks every signal in itself for the moment it vforks the grep
    out = tmp_path / "status"
    engine = _run(tmp_path, "while IFS= read -r line; do case $line in SigBlk:*|SigIgn:*) echo \"$line\";; esac; "
                            f"done < /proc/$$/status > {out}; echo $PPID $(ps -o pgid= $$) >> {out}")
    _wait_for(lambda: engine.poll() is not None, "the engine's end")
    blocked, ignored, parent = out.read_text().splitlines()
    assert blocked.split() == ["SigBlk:", "0000000000000000"]  # the reaper's blocked signals are its own
    assert ignored.split() == ["SigIgn:", "0000000000000000"]  # SIGPIPE and SIGXFSZ back at their defaults
    ppid, pgid = map(int, parent.split())
    assert ppid == engine.pid == pgid  # below the reaper, in the group kvcheck signals


def test_stop_ends_a_process_that_left_the_group(tmp_path: Path) -> None:
    # setsid, output closed, SIGTERM ignored: outside the group, invisible to killpg and to the pipe
    pidfile = tmp_path / "escaped"
    engine = _run(tmp_path, f"setsid sh -c 'trap \"\" TERM; echo $$ > {pidfile}; exec sleep 60' "
                            "</dev/null >/dev/null 2>&1 & exec sleep 60")
    _wait_for(lambda: pidfile.exists() and pidfile.read_text().strip(), "the escaped process")
    escaped = int(pidfile.read_text())
    assert os.getpgid(escaped) != engine.pgid
    started = time.monotonic()
    assert engine.stop(grace_s=0.5) == []
    assert not pid_alive(escaped)
    assert time.monotonic() - started < 10  # SIGKILL right after the grace, not at some later timeout
    assert not engine.output_held


def test_leftovers_of_an_engine_that_exited_are_ended_by_the_reaper(tmp_path: Path) -> None:
    pidfile = tmp_path / "left"
    engine = _run(tmp_path, f"setsid sh -c 'trap \"\" TERM; echo $$ > {pidfile}; exec sleep 60' "
                            "</dev/null >/dev/null 2>&1 & sleep 0.2; exit 7", grace_s=0.3)
    _wait_for(lambda: engine.poll() is not None, "the reaper's end")  # after SIGKILL of the leftover
    assert engine.returncode == 7
    assert not pid_alive(int(pidfile.read_text()))
    assert engine.stop(grace_s=1) == []


def test_the_double_refuses_more_nodes_than_tp_times_pp_as_sglang_does(tmp_path: Path) -> None:
    # SGLang asserts tp_size * pp_size % nnodes == 0 before starting anything; the double used to wait
    # for peers that could never be placed.
    import subprocess

    done = subprocess.run(
        [*ENGINE, "--model-path", "m", "--tp-size", "1", "--nnodes", "2", "--node-rank", "0",
         "--dist-init-addr", "127.0.0.1:1", "--port", str(free_port())],
        capture_output=True, text=True, timeout=60, env={**os.environ, "FAKE_SGLANG_PIDFILE": str(tmp_path / "p")},
    )
    assert done.returncode == 1
    assert done.stderr.splitlines()[-1] == "AssertionError: tp_size must be divisible by number of nodes"


STUBBORN_REAPER = """\
import signal, sys
sys.path.insert(0, {folder!r})
import reaper
reaper.GIVE_UP_S = 0.5
real = reaper._signal
# a process stuck in the kernel outlives SIGKILL: here, SIGKILL never reaches the sleeping one
reaper._signal = lambda pids, signum: real(
    [p for p in pids if signum != signal.SIGKILL or open(f"/proc/{{p}}/comm").read().strip() != "sleep"], signum)
reaper.main(sys.argv[1:])
"""


def test_processes_the_reaper_gave_up_on_are_named(tmp_path: Path, monkeypatch) -> None:
    # They come back on the reaper's own pipe, not in the engine's output, which could forge them.
    from kvcheck.backends.measure.launchers import process, reaper

    script = tmp_path / "stubborn_reaper.py"
    script.write_text(STUBBORN_REAPER.format(folder=str(Path(reaper.__file__).parent)))
    monkeypatch.setattr(process, "_reaper_argv",
                        lambda argv, grace_s, fd: [sys.executable, str(script), str(grace_s), str(fd), "--", *argv])
    pidfile = tmp_path / "stuck"
    engine = _run(tmp_path, f"setsid sh -c 'trap \"\" TERM; echo $$ > {pidfile}; exec sleep 60' "
                            "</dev/null >/dev/null 2>&1 & "
                            "echo '1 2 3'; exec tail -f /dev/null")
    _wait_for(lambda: pidfile.exists() and pidfile.read_text().strip(), "the stuck process")
    stuck = int(pidfile.read_text())
    try:
        survivors = engine.stop(grace_s=0.2)
        assert survivors == [stuck]  # not the engine's forged "1 2 3"
    finally:
        os.kill(stuck, 9)
