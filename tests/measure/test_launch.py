"""Command line, environment and process-group ending of one engine launch."""

from __future__ import annotations

import os
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
from kvcheck.backends.measure.launchers.process import EngineProcess, group_alive
from kvcheck.errors import InputError
from tests.measure.conftest import ENGINE, PidFile, make_target


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
    assert engine.returncode == 0  # the launcher itself honoured SIGTERM; its children did not
    log = (tmp_path / "engine.log").read_text()
    assert "SIGTERM received" in log
    assert log.splitlines() == lines


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
    with pytest.raises(OSError):
        EngineProcess(("/nonexistent/sglang",), {}, log_path=tmp_path / "x.log", on_line=print)
