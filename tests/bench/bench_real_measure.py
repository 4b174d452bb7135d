"""Benchmark: kvcheck's own cost around a real SGLang 0.5.23 boot on CPU, and two roles on one host.

Run by hand from the repository root with the real-engine install (tests/engines/real/README.md):

    KVCHECK_REAL_SGLANG=/tmp/kvcheck-real-sglang python tests/bench/bench_real_measure.py [--runs 3]

It reports medians over `--runs`:

* engine alone: spawn real SGLang (the same CPU arguments and capped pool `verify` uses), read its
  output until "The server is fired up and ready to roll!", SIGKILL its process group. The floor any
  tool pays for a boot.
* verify, one role: `kvcheck verify` (measure mode, local launcher) wall time, from the command's
  start to its exit: manifest loading, the boot, reading the figures, stopping the engine until no
  process of it is left, the report. overhead = verify - engine alone (target: at most 5% of the
  engine's time to ready), and after ready = the engine's time from start to stopped (the report's
  details.boot_s) - the boot alone: reading the figures and stopping the engine (target: at most 1 s
  to stop).
* verify, two roles: two CPU roles in one manifest, booted side by side (target: at most the slower
  role alone + 1 s; on a 2-core host two CPU engines compete for the cores, which the target ignores).

The figures are printed, never asserted; docs/measure.md quotes a run.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from tests.engines.real.conftest import TAG_VAR, RealSglang, free_port, wait_until_gone, write_manifest  # noqa: E402

READY = "The server is fired up and ready to roll!"
POOL = 4096


def engine_alone(real: RealSglang) -> float:
    """Seconds from spawn to the ready line (the group is then killed, not timed)."""
    env = dict(os.environ, SGLANG_USE_CPU_ENGINE="1")
    argv = [*real.command(), "--model-path", str(real.model), *real.cpu_args(), "--context-length", "2048",
            "--max-total-tokens", str(POOL), "--host", "127.0.0.1", "--port", str(free_port())]
    started = time.monotonic()
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env, text=True,
                            start_new_session=True)
    assert proc.stderr is not None
    try:
        for line in proc.stderr:
            if READY in line:
                return time.monotonic() - started
        raise SystemExit(f"SGLang exited ({proc.wait()}) before it was ready")
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def verify(manifest: Path, logs: Path) -> tuple[float, dict]:
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "kvcheck", "verify", str(manifest), "--format", "json",
                           "--logs-dir", str(logs)], cwd=REPO, capture_output=True, text=True, timeout=900)
    wall = time.monotonic() - started
    if done.returncode != 0:
        raise SystemExit(f"verify exited {done.returncode}: {done.stderr[-2000:]}")
    return wall, json.loads(done.stdout)


def two_roles(real: RealSglang, folder: Path, tag: str) -> Path:
    import yaml

    path = write_manifest(real, folder / "two.yaml", tag, POOL)
    doc = yaml.safe_load(path.read_text())
    doc["roles"] = {"a": {}, "b": {}}
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    options = parser.parse_args()
    dest = os.environ.get("KVCHECK_REAL_SGLANG")
    if not dest:
        raise SystemExit("set KVCHECK_REAL_SGLANG to the install of tests/engines/real/install_sglang.sh")
    real = RealSglang(Path(dest))
    alone, walls, boots = [], [], []
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        for run in range(options.runs):
            alone.append(engine_alone(real))
            tag = uuid.uuid4().hex
            manifest = write_manifest(real, folder / f"one-{run}.yaml", tag, POOL)
            wall, report = verify(manifest, folder / f"logs-{run}")
            assert wait_until_gone(tag, within_s=10) == []
            [role] = report["roles"]
            walls.append(wall)
            boots.append(role["details"]["boot_s"])
        tag = uuid.uuid4().hex
        both_wall, _ = verify(two_roles(real, folder, tag), folder / "logs-two")
        assert wait_until_gone(tag, within_s=10) == []
    ready = statistics.median(alone)
    wall = statistics.median(walls)
    print(f"engine alone, spawn to ready:      {ready:6.1f} s  (runs: {', '.join(f'{x:.1f}' for x in alone)})")
    print(f"verify, one role:                  {wall:6.1f} s  (runs: {', '.join(f'{x:.1f}' for x in walls)})")
    print(f"overhead (verify - engine alone):  {wall - ready:6.1f} s  = {100 * (wall - ready) / ready:.1f}% of the boot")
    after = statistics.median(boots) - ready
    print(f"after ready (engine start to stopped, less the boot alone): {after:.1f} s "
          f"(boot_s runs: {', '.join(f'{x:.1f}' for x in boots)})")
    print(f"verify, two roles side by side:    {both_wall:6.1f} s  (slowest single run {max(walls):.1f} s)")
    print(f"({TAG_VAR} tagged every engine process; none survived)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
