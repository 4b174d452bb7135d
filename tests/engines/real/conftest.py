"""Real SGLang 0.5.23 on CPU for the real-engine tests: where it is installed, how to boot it, and
that nothing it started outlives a test.

The install is `bash tests/engines/real/install_sglang.sh DEST` (README.md beside this file); the
tests read DEST from KVCHECK_REAL_SGLANG and skip without it, unless KVCHECK_TEST_REAL=required (CI),
where a missing or incomplete install fails every test instead.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from tests.conftest import REPO_ROOT, run_kvcheck

SGLANG_VERSION = "0.5.23"
INSTALL = Path(__file__).resolve().parent / "install_sglang.sh"
READY = "The server is fired up and ready to roll!"
# Every process a test starts carries this variable with the test's own value, so the check that
# nothing survives finds SGLang's schedulers and detokenizer too (they are not in the launcher's argv).
TAG_VAR = "KVCHECK_REAL_TEST_TAG"
# Seconds a boot may take here: 16-100 s on the idle 2-core machine, more while other jobs run.
BOOT_TIMEOUT_S = 600
# The window the manifests advertise (args context-length too).
WINDOW = 2048


@dataclass(frozen=True)
class RealSglang:
    """An install made by install_sglang.sh."""

    dest: Path

    @property
    def python(self) -> Path:
        return self.dest / "venv" / "bin" / "python"

    @property
    def model(self) -> Path:
        return self.dest / "tiny-llama"

    def command(self) -> list[str]:
        """engine.command for a manifest: the venv's SGLang server."""
        return [str(self.python), "-m", "sglang.launch_server"]

    def cpu_args(self) -> list[str]:
        """What SGLang 0.5.23 needs to run on CPU (with SGLANG_USE_CPU_ENGINE=1 in its environment)."""
        return ["--device", "cpu", "--attention-backend", "torch_native"]


def _install_problem(dest: str | None) -> str | None:
    how = f"run `bash {INSTALL.relative_to(Path.cwd()) if INSTALL.is_relative_to(Path.cwd()) else INSTALL} DEST` " \
          "and export KVCHECK_REAL_SGLANG=DEST"
    if not dest:
        return f"KVCHECK_REAL_SGLANG is not set: no real SGLang to test against ({how})"
    root = Path(dest)
    if not (root / ".complete").is_file():
        return f"KVCHECK_REAL_SGLANG={dest} holds no complete install ({how})"
    if not RealSglang(root).python.is_file() or not (RealSglang(root).model / "config.json").is_file():
        return f"KVCHECK_REAL_SGLANG={dest} lacks its venv or its tiny model ({how})"
    return None


@pytest.fixture(scope="session")
def real_sglang() -> RealSglang:
    """The installed SGLang; skips without one, fails without one under KVCHECK_TEST_REAL=required."""
    dest = os.environ.get("KVCHECK_REAL_SGLANG")
    problem = _install_problem(dest)
    if problem is not None:
        if os.environ.get("KVCHECK_TEST_REAL") == "required":
            pytest.fail(f"KVCHECK_TEST_REAL=required: {problem}", pytrace=False)
        pytest.skip(problem)
    assert dest is not None
    return RealSglang(Path(dest))


VLLM_VERSION = "0.32.0"
INSTALL_VLLM = Path(__file__).resolve().parent / "install_vllm.sh"


@dataclass(frozen=True)
class RealVllm:
    """An install made by install_vllm.sh."""

    dest: Path

    @property
    def vllm(self) -> Path:
        return self.dest / "venv" / "bin" / "vllm"

    @property
    def python(self) -> Path:
        return self.dest / "venv" / "bin" / "python"

    @property
    def model(self) -> Path:
        return self.dest / "tiny-llama"

    def command(self) -> list[str]:
        """engine.command for a manifest: the venv's `vllm serve`."""
        return [str(self.vllm), "serve"]


@pytest.fixture(scope="session")
def real_vllm() -> RealVllm:
    """The installed vLLM; skips without one, fails without one under KVCHECK_TEST_REAL=required."""
    dest = os.environ.get("KVCHECK_REAL_VLLM")
    how = f"run `bash {INSTALL_VLLM} DEST` and export KVCHECK_REAL_VLLM=DEST"
    problem = None
    if not dest:
        problem = f"KVCHECK_REAL_VLLM is not set: no real vLLM to test against ({how})"
    elif not (Path(dest) / ".complete").is_file() or not RealVllm(Path(dest)).vllm.is_file():
        problem = f"KVCHECK_REAL_VLLM={dest} holds no complete install ({how})"
    if problem is not None:
        if os.environ.get("KVCHECK_TEST_REAL") == "required":
            pytest.fail(f"KVCHECK_TEST_REAL=required: {problem}", pytrace=False)
        pytest.skip(problem)
    assert dest is not None
    return RealVllm(Path(dest))


def write_vllm_manifest(real: RealVllm, path: Path, tag: str, window: int, env: dict[str, str] | None = None,
                        **args: object) -> Path:
    """A one-role vLLM CPU manifest (`device: cpu`: no GPU list, no --no-gpu-check); size the pool in the
    args or env, always: left to itself vLLM takes 92% of the host's RAM."""
    doc = {
        "name": "real vllm on cpu",
        "context_length": window,
        "model": {"path": str(real.model)},
        "engine": {
            "name": "vllm",
            "version": VLLM_VERSION,
            "command": real.command(),
            "env": {"VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "1", "HF_HUB_OFFLINE": "1", TAG_VAR: tag,
                    **(env or {})},
        },
        "device": "cpu",  # vLLM 0.32.0 has no --device flag: the manifest says where the role runs
        "args": args,
        "roles": {"server": {}},
    }
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def tagged_pids(tag: str) -> list[int]:
    """Live processes whose environment carries TAG_VAR=tag (zombies have none and do not count)."""
    needle = f"{TAG_VAR}={tag}".encode()
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        with contextlib.suppress(OSError):
            if needle in Path(f"/proc/{entry}/environ").read_bytes().split(b"\0"):
                found.append(int(entry))
    return found


def wait_until_gone(tag: str, within_s: float) -> list[int]:
    """Poll until no process carries the tag; return the survivors after within_s."""
    deadline = time.monotonic() + within_s
    while (alive := tagged_pids(tag)) and time.monotonic() < deadline:
        time.sleep(0.2)
    return alive


@pytest.fixture
def engine_tag() -> Iterator[str]:
    """A tag for this test's engine processes; after the test, none of them may be running."""
    tag = uuid.uuid4().hex
    yield tag
    survivors = wait_until_gone(tag, within_s=30)
    for pid in survivors:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)
    assert survivors == [], f"engine processes outlived the test: {survivors}"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass(frozen=True)
class Server:
    """A real SGLang server started by a fixture."""

    url: str
    log: Path
    boot_s: float


BIND_RETRIES = 3  # boots tried when another process takes the chosen port before SGLang binds it


@contextlib.contextmanager
def running_server(real: RealSglang, log: Path, *args: str) -> Iterator[Server]:
    """Boot SGLang with ARGS on a free loopback port until it is ready; stop it and all its children on
    every way out (SIGKILL to its process group, then to whatever else carries its tag).

    free_port() releases the port before SGLang binds it, 15-20 s later here (the tokenizer loads first), and
    SGLang's own processes pick free ports for themselves in between: when uvicorn then cannot bind ("address
    already in use") the server stays up without serving, so that boot is stopped and another port is tried."""
    for attempt in range(1, BIND_RETRIES + 1):
        tag = uuid.uuid4().hex
        port = free_port()
        env = dict(os.environ, SGLANG_USE_CPU_ENGINE="1", **{TAG_VAR: tag})
        argv = [*real.command(), "--model-path", str(real.model), *real.cpu_args(), *args,
                "--host", "127.0.0.1", "--port", str(port)]
        start = time.monotonic()
        with open(log, "wb") as out:
            proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True)
        taken = False
        try:
            deadline = start + BOOT_TIMEOUT_S
            while READY not in (text := log.read_text(errors="replace")):
                if "error while attempting to bind on address" in text and attempt < BIND_RETRIES:
                    taken = True
                    break
                if proc.poll() is not None:
                    raise AssertionError(f"SGLang exited with {proc.returncode} before ready:\n{text[-4000:]}")
                if time.monotonic() > deadline:
                    raise AssertionError(f"SGLang not ready after {BOOT_TIMEOUT_S} s:\n{text[-4000:]}")
                time.sleep(0.5)
            if not taken:
                yield Server(f"http://127.0.0.1:{port}", log, time.monotonic() - start)
                return
        finally:
            stop_tagged(proc, tag, "SGLang")
        print(f"port {port} was taken before SGLang bound it (boot {attempt}); trying another")


def stop_tagged(proc: subprocess.Popen, tag: str, what: str, *, sig: int = signal.SIGKILL,
                within_s: float = 10) -> None:
    """End a fixture's process group with `sig`, then SIGKILL whatever else carries its tag; none may survive.

    SIGKILL at once, as kvcheck stops a measured role: on SIGTERM SGLang 0.5.23 reports its scheduler as
    crashed, sleeps 5 s and SIGKILLs itself anyway (docs/measure.md)."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, sig)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=15)
    for pid in tagged_pids(tag):
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=5)
    survivors = wait_until_gone(tag, within_s=within_s)
    assert survivors == [], f"{what} processes outlived the fixture: {survivors}"


def write_manifest(real: RealSglang, path: Path, tag: str, max_total_tokens: int, window: int = WINDOW,
                   **args: object) -> Path:
    """A one-role CPU manifest for the installed SGLang; the pool is always capped."""
    doc = {
        "name": "real sglang on cpu",
        "context_length": window,
        "model": {"path": str(real.model)},
        "engine": {
            "version": SGLANG_VERSION,
            "command": real.command(),
            "env": {"SGLANG_USE_CPU_ENGINE": "1", TAG_VAR: tag},
        },
        "device": "cpu",  # a CPU deployment: kvcheck gives SGLang --device cpu, and the role lists no GPUs
        "args": {"attention-backend": "torch_native",
                 "context-length": window, "max-total-tokens": max_total_tokens, **args},
        "roles": {"server": {}},
    }
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


@dataclass(frozen=True)
class Verified:
    code: int
    report: dict
    stderr: str
    log: Path
    wall_s: float


def verify(real: RealSglang, folder: Path, max_total_tokens: int, window: int = WINDOW, **args: object) -> Verified:
    """`kvcheck verify M --format json --logs-dir folder/logs` (a CPU role needs no --no-gpu-check); every engine
    process gone after."""
    tag = f"{folder.name}-{uuid.uuid4().hex}"
    path = write_manifest(real, folder / "deploy.yaml", tag, max_total_tokens, window, **args)
    start = time.monotonic()
    done = run_kvcheck("verify", str(path), "--format", "json", "--timeout", str(BOOT_TIMEOUT_S),
                       "--logs-dir", str(folder / "logs"), cwd=REPO_ROOT, timeout=BOOT_TIMEOUT_S + 120)
    wall_s = time.monotonic() - start
    assert wait_until_gone(tag, within_s=10) == [], "engine processes outlived kvcheck verify"
    assert done.stdout, done.stderr
    (folder / "report.json").write_text(done.stdout)  # kept beside the log, for whoever reads a failure
    [run] = (folder / "logs").iterdir()
    return Verified(done.exit_code, json.loads(done.stdout), done.stderr, run / "server.log", wall_s)
