"""Real SGLang 0.5.23 killed mid-boot, through `kvcheck verify`: exit 3 (could not check), never a
pass, and nothing left running. (A setting the engine refuses is a conformance case,
tests/engines/conformance/, run against the double and the real engine alike.)"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT, _cli_env
from tests.engines.real.conftest import (
    BOOT_TIMEOUT_S,
    RealSglang,
    tagged_pids,
    verify,
    wait_until_gone,
    write_manifest,
)

pytestmark = [pytest.mark.real_engine, pytest.mark.slow]


def _engine_pids(tag: str, python: Path) -> list[int]:
    """The tagged processes that run the venv's Python (SGLang's launcher, scheduler, detokenizer)."""
    pids = []
    for pid in tagged_pids(tag):
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if cmdline[0] == str(python).encode():  # not kvcheck's subreaper, whose Python may be the same binary
            pids.append(pid)
    return sorted(pids)


def test_an_engine_killed_mid_boot_is_exit_3_and_nothing_survives(real_sglang: RealSglang, tmp_path: Path) -> None:
    tag = f"killed-{uuid.uuid4().hex}"
    path = write_manifest(real_sglang, tmp_path / "deploy.yaml", tag, 4096)
    argv = [sys.executable, "-m", "kvcheck", "verify", str(path), "--format", "json",
            "--timeout", str(BOOT_TIMEOUT_S)]
    proc = subprocess.Popen(argv, cwd=REPO_ROOT, env=_cli_env(None), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        # Mid-boot: SGLang's launcher has started its scheduler (two processes of its Python or more).
        deadline = time.monotonic() + BOOT_TIMEOUT_S
        while len(pids := _engine_pids(tag, real_sglang.python)) < 2:
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "SGLang never started its scheduler"
            time.sleep(0.2)
        launcher = min(pids)  # the launch_server process is the oldest
        os.kill(launcher, signal.SIGKILL)
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 3, (out, err)
    report = json.loads(out)
    [role] = report["roles"]
    assert (role["status"], role["pool_tokens"]) == ("error", None)
    [kv301] = [f for f in report["findings"] if f["rule"] == "KV301"]
    assert "killed by SIGKILL" in kv301["message"], kv301
    assert wait_until_gone(tag, within_s=30) == []


def test_kvcheck_killed_with_sigkill_mid_boot_leaves_no_engine_process(real_sglang: RealSglang, tmp_path: Path) -> None:
    """SIGKILL cannot be caught: kvcheck's watchdog (docs/measure.md) ends the real SGLang it started,
    its scheduler and detokenizer included, once kvcheck is gone."""
    tag = f"kvkilled-{uuid.uuid4().hex}"
    path = write_manifest(real_sglang, tmp_path / "deploy.yaml", tag, 4096)
    argv = [sys.executable, "-m", "kvcheck", "verify", str(path), "--format", "json",
            "--timeout", str(BOOT_TIMEOUT_S)]
    proc = subprocess.Popen(argv, cwd=REPO_ROOT, env=_cli_env(None), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + BOOT_TIMEOUT_S
        while len(_engine_pids(tag, real_sglang.python)) < 2:  # the launcher and its scheduler are up
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "SGLang never started its scheduler"
            time.sleep(0.2)
        started = _engine_pids(tag, real_sglang.python)
        proc.kill()
        proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == -signal.SIGKILL
    assert started, "no engine process was seen before the kill"
    # the watchdog's grace is 5 s; SGLang's own shutdown path takes about as long again
    assert wait_until_gone(tag, within_s=60) == []


def test_a_port_taken_before_sglang_bound_it_is_booted_again_on_another(
    real_sglang: RealSglang, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Real SGLang binds its HTTP port only once its pool is sized; when another process holds that port by
    then, uvicorn logs "error while attempting to bind" and SGLang stays up serving nobody. kvcheck stops
    that boot at once (it used to wait until --timeout) and boots the role again on a fresh port: exit 0,
    the pool of the second boot, and the taken port in the report."""
    from kvcheck.backends.measure.launchers import local

    holder = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    holder.bind(("127.0.0.1", 0))
    holder.listen(1)
    taken = int(holder.getsockname()[1])
    real_free_port = local.free_port
    handed = iter([taken])
    monkeypatch.setattr(local, "free_port", lambda: next(handed, None) or real_free_port())
    try:
        done = verify(real_sglang, tmp_path, 4096)
    finally:
        holder.close()
    assert done.code == 0, done.stderr
    [role] = done.report["roles"]
    assert role["pool_tokens"] == 4096
    assert role["details"]["ports_taken"] == [taken]
    assert role["details"]["ports"]["http"] != taken
    assert "The server is fired up and ready to roll!" in done.log.read_text()
    assert done.wall_s < BOOT_TIMEOUT_S  # the first boot was not waited on until the timeout
