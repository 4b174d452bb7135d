"""Benchmark: the Kubernetes launcher's own cost, against the API double (tests/measure/kubernetes/).

Run by hand from the repository root (not part of the test suite):

    python tests/bench/bench_kubernetes.py [--runs 3] [--load-s 0] [--poll-s 1.0]

Each run measures through the real MeasureBackend, the real `kubernetes` client and the API double,
whose kubelet runs the engine double; the wall time covers creating the objects, listing pods, following
logs, /server_info through the pod proxy, deleting everything and waiting until no pod is listed.
It says nothing about a real cluster's scheduling, image pulls or API latency.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from tests.measure.kubernetes.fake_api import FakeCluster  # noqa: E402
from tests.measure.kubernetes.test_run import measure, target  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--poll-s", type=float, default=1.0, help="how often pods are listed (kvcheck's default)")
    parser.add_argument("--load-s", default="0", help="the engine double's weight-loading time (FAKE_SGLANG_LOAD_S)")
    options = parser.parse_args()
    env = {"FAKE_SGLANG_LOAD_S": options.load_s}
    cases = {
        "one role (a Job)": lambda: [target(env=env)],
        "a two-node role (LeaderWorkerSet, TP2) and a one-node role side by side": lambda: [
            target("prefill", args={"nnodes": 2, "tp_size": 2}, gpus=(), env=env),
            target("decode", env=env),
        ],
    }
    with tempfile.TemporaryDirectory() as workdir:
        cluster = FakeCluster(Path(workdir))
        try:
            for label, roles in cases.items():
                walls, boots = [], []
                for i in range(options.runs):
                    started = time.monotonic()
                    results = measure(cluster, roles(), run_id=f"bench{i:03d}", poll_s=options.poll_s)
                    walls.append(time.monotonic() - started)
                    boots.append(max(float(m.details["boot_s"]) for m in results))
                    if any(m.pool_tokens is None for m in results) or cluster.objects or cluster.pods:
                        raise SystemExit(f"{label}: run {i} failed: {[m.findings for m in results]}")
                print(f"{label}: median wall {statistics.median(walls):.2f} s, slowest role's boot_s "
                      f"{statistics.median(boots):.2f} s, nothing left in the cluster")
        finally:
            cluster.close()


if __name__ == "__main__":
    main()
