"""Benchmark: kvcheck's own cost around an engine boot, and concurrent boots of disjoint roles.

Run by hand from the repository root (not part of the test suite):

    python tests/bench/bench_measure.py [--boot-s 2.0] [--runs 5]

It boots the engine double (tests/doubles/fake_sglang.py) with a fixed weight-loading time and reports
medians over `--runs`:

* engine alone: spawn the double, read its output until "The server is fired up and ready to roll!",
  kill its process group. This is the boot a real engine costs whatever tool starts it.
* measure, one role: MeasureBackend.measure() wall time (ports, log parsing, /server_info, SIGTERM
  and the wait until no process of the group is left). overhead = measure - engine alone.
* measure, two roles on disjoint GPUs: booted side by side; target: at most the slower role + 1 s.
* measure, two roles sharing a GPU: booted one after another (about twice one role).
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from kvcheck.backends.measure import MeasureBackend  # noqa: E402
from kvcheck.backends.measure.launchers.local import free_port  # noqa: E402
from tests.measure.conftest import ENGINE, make_target  # noqa: E402


def engine_alone() -> float:
    """Seconds from spawn to the ready line, plus ending the group: the floor any tool pays."""
    started = time.monotonic()
    proc = subprocess.Popen(
        [*ENGINE, "--model-path", "m", "--tp-size", "2", "--port", str(free_port())],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        start_new_session=True,
        text=True,
    )
    assert proc.stderr is not None
    for line in proc.stderr:
        if "fired up and ready to roll" in line:
            break
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    return time.monotonic() - started


def measure_wall(*targets) -> float:
    started = time.monotonic()
    results = MeasureBackend(gpu_check=False, progress=False).measure(list(targets))
    elapsed = time.monotonic() - started
    assert all(m.pool_tokens == 947824 for m in results), [m.findings for m in results]
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--boot-s", type=float, default=2.0, help="weight-loading time of the double")
    parser.add_argument("--runs", type=int, default=5)
    options = parser.parse_args()
    os.environ["FAKE_SGLANG_LOAD_S"] = str(options.boot_s)

    one = make_target("prefill", args={"tp_size": 2}, gpus=(0, 1))
    other = make_target("decode", args={"tp_size": 2}, gpus=(2, 3))
    sharing = make_target("decode", args={"tp_size": 2}, gpus=(1, 2))

    rows: dict[str, list[float]] = {"engine alone": [], "one role": [], "two disjoint": [], "two sharing": []}
    for _ in range(options.runs):
        rows["engine alone"].append(engine_alone())
        rows["one role"].append(measure_wall(one))
        rows["two disjoint"].append(measure_wall(one, other))
        rows["two sharing"].append(measure_wall(one, sharing))
    median = {name: statistics.median(values) for name, values in rows.items()}

    print(f"engine double: {options.boot_s:g} s weight load, TP2; {options.runs} runs, medians")
    print(f"{'case':<30}{'median s':>10}{'min s':>10}{'max s':>10}")
    for name, values in rows.items():
        print(f"{name:<30}{median[name]:>10.3f}{min(values):>10.3f}{max(values):>10.3f}")
    overhead = median["one role"] - median["engine alone"]
    concurrent_extra = median["two disjoint"] - median["one role"]
    print(f"kvcheck overhead per role (one role - engine alone): {overhead:.3f} s")
    print(f"two disjoint roles over one role: +{concurrent_extra:.3f} s (target <= 1 s)")
    print(f"two roles sharing a GPU over one role: +{median['two sharing'] - median['one role']:.3f} s")


if __name__ == "__main__":
    main()
