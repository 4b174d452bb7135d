"""Real vLLM 0.32.0 on CPU: where it is installed, how a test boots it through `kvcheck verify`, and the
checks that need the installed release itself (its parser against the committed flag catalogue).

The install is `bash tests/engines/real/install_vllm.sh DEST` (README.md beside this file); the tests
read DEST from KVCHECK_REAL_VLLM and skip without it, unless KVCHECK_TEST_REAL=required (CI), where a
missing install fails them. The single-server cases (a pass, a refusal, an auto-fit below the
advertised window, --num-gpu-blocks-override, `logs` on their real logs) are the conformance suite's
(tests/engines/conformance/test_vllm.py), run against this install and against the double alike; the
prefill/decode pair and the audit of running servers are in test_vllm_pd_real.py. The pool is always
sized explicitly (--kv-cache-memory-bytes): left to itself vLLM takes 92% of the host's RAM.
"""

from __future__ import annotations

import json
import subprocess
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import pytest
import yaml

from tests.conftest import REPO_ROOT, run_kvcheck
from tests.engines.real.conftest import TAG_VAR, VLLM_VERSION, RealVllm, wait_until_gone

BOOT_TIMEOUT_S = 900
WINDOW = 4096
BLOCK = 128  # vLLM's KV block on its CPU backend
TOKEN_BYTES = 1024  # the tiny model's KV per token: 2 layers x (K + V) x 2 KV heads x 64 x 2 bytes
HOLDS_BYTES = 16 * 2**20  # 16,384 tokens = 128 blocks: 127 usable
SHORT_BYTES = 2 * 2**20  # 2,048 tokens = 16 blocks: 15 usable = 1,920 < the window
ENV = {"VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "1", "HF_HUB_OFFLINE": "1"}


class VllmLike(Protocol):
    """What verify() needs of an engine: the real install, or the double (tests/doubles/fake_vllm.py)."""

    @property
    def model(self) -> Path: ...

    def command(self) -> list[str]: ...


@dataclass(frozen=True)
class Verified:
    code: int
    report: dict
    stderr: str
    log: Path


def device_of(engine: VllmLike) -> str:
    """Where the engine runs: the real install and the double by default are vLLM's CPU build; the double
    with FAKE_VLLM_DEVICE=cuda prints vLLM's GPU lines."""
    return str(getattr(engine, "env", {}).get("FAKE_VLLM_DEVICE", "cpu"))


def manifest(engine: VllmLike, tag: str, window: int, roles: dict, args: dict, policy: dict | None = None) -> dict:
    """A vLLM manifest for the real install or the double. vLLM 0.32.0 has no --device flag, so a CPU
    deployment says so in the manifest (`device: cpu`: no GPU list, no --no-gpu-check); the double's GPU
    mode lists a GPU per role and is verified with --no-gpu-check (this host has none)."""
    cpu = device_of(engine) == "cpu"
    return {
        "name": "vllm on cpu" if cpu else "vllm double on a gpu",
        "context_length": window,
        "model": {"path": str(engine.model)},
        "engine": {"name": "vllm", "version": VLLM_VERSION, "command": engine.command(),
                   "env": {**ENV, **getattr(engine, "env", {}), TAG_VAR: tag}},
        **({"device": "cpu"} if cpu else {}),
        "args": args,
        "roles": {name: {k: v for k, v in role.items() if not (cpu and k == "gpus")} for name, role in roles.items()},
        **({"policy": policy} if policy else {}),
    }


def gpu_check_options(engine: VllmLike) -> list[str]:
    """--no-gpu-check for the double's GPU mode only: a CPU role needs no flag."""
    return [] if device_of(engine) == "cpu" else ["--no-gpu-check"]


def verify(engine: VllmLike, folder: Path, *, window: int = WINDOW, timeout_s: float = BOOT_TIMEOUT_S,
           policy: dict | None = None, **args: object) -> Verified:
    """`kvcheck verify M --format json --logs-dir folder/logs` on a one-role vLLM manifest; every engine
    process (API server, engine core, worker) gone after."""
    tag = f"{folder.name}-{uuid.uuid4().hex}"
    path = folder / "deploy.yaml"
    # one GPU index per data-parallel rank: the count vLLM needs (Engine.gpus_needed); a CPU role (manifest()) lists none
    gpus = list(range(int(str(args.get("data_parallel_size", 1)))))
    path.write_text(yaml.safe_dump(manifest(engine, tag, window, {"server": {"gpus": gpus}}, args, policy), sort_keys=False))
    done = run_kvcheck("verify", str(path), *gpu_check_options(engine), "--format", "json", "--timeout", str(timeout_s),
                       "--logs-dir", str(folder / "logs"), cwd=REPO_ROOT, timeout=timeout_s + 120)
    assert wait_until_gone(tag, within_s=30) == [], "vLLM processes outlived kvcheck verify"
    assert done.stdout, done.stderr
    (folder / "report.json").write_text(done.stdout)
    [run] = (folder / "logs").iterdir()
    return Verified(done.exit_code, json.loads(done.stdout), done.stderr, run / "server.log")


@pytest.mark.real_engine
@pytest.mark.slow
def test_the_committed_catalogue_is_the_installed_releases_parser_and_help(real_vllm: RealVllm) -> None:
    """tools/gen_vllm_catalogue.py --check: regenerated from vllm serve's argparse, equal to the committed
    file, and every option of the real `vllm serve --help=all` in it (and none more)."""
    done = subprocess.run([str(real_vllm.python), "tools/gen_vllm_catalogue.py", "--check", "profiles/vllm/"],
                          cwd=REPO_ROOT, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip() == (
        "profiles/vllm/flags-0.32.0.json: matches vllm serve's parser and --help=all (316 flags)")
