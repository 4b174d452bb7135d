"""Real SGLang 0.5.23 failing to start, through `kvcheck verify` and `kvcheck logs`: a setting the
engine refuses and an engine killed mid-boot are exit 3 (could not check), never a pass."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT, _cli_env, run_kvcheck
from tests.engines.real.conftest import (
    BOOT_TIMEOUT_S,
    RealSglang,
    Verified,
    tagged_pids,
    verify,
    wait_until_gone,
    write_manifest,
)

pytestmark = [pytest.mark.real_engine, pytest.mark.slow]

# Longer than the tiny model's max_position_embeddings (8192): SGLang refuses it unless
# SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1.
TOO_LONG = 100_000
REFUSAL = "is greater than the derived context_length (8192)"


@pytest.fixture(scope="module")
def refused(real_sglang: RealSglang, tmp_path_factory: pytest.TempPathFactory) -> Verified:
    # The cap is the window, so no static finding (KV103) stands beside the refusal; SGLang refuses
    # while its arguments resolve, before any pool is sized.
    return verify(real_sglang, tmp_path_factory.mktemp("refused"), TOO_LONG, window=TOO_LONG)


def test_a_context_length_sglang_refuses_is_exit_3_with_its_message(refused: Verified) -> None:
    done = refused
    print(f"verify (refused) took {done.wall_s:.1f} s")
    assert (done.code, done.report["verdict"]) == (3, "error"), done.report
    [role] = done.report["roles"]
    assert (role["status"], role["pool_tokens"]) == ("error", None)
    assert [(f["rule"], f["severity"]) for f in done.report["findings"]] == [("KV301", "error")]
    [kv301] = done.report["findings"]
    assert kv301["message"].startswith("the engine exited with status 1 before reporting its pool (phase: failed)")  # the reader knows the refusal
    assert f"ValueError: Warning: User-specified context_length ({TOO_LONG}) {REFUSAL}" in kv301["message"]
    assert REFUSAL in done.log.read_text()


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


def test_logs_on_the_real_refused_start_is_exit_3_with_its_message(refused: Verified) -> None:
    done = run_kvcheck("logs", str(refused.log), "--format", "json", cwd=REPO_ROOT)
    assert done.exit_code == 3, (done.stdout, done.stderr)
    report = json.loads(done.stdout)
    assert [f["rule"] for f in report["findings"]] == ["KV309"], report["findings"]
    assert f"ValueError: Warning: User-specified context_length ({TOO_LONG}) {REFUSAL}" in report["findings"][0]["message"]
