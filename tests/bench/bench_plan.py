"""Time the planner's sweep for one role (run by hand, not by pytest).

    python tests/bench/bench_plan.py [--repeat 50]

For each role of the bundled examples (and, when the real model configs are present, see
tests/datapaths.py, a few large real models), reports the estimate_role evaluations one plan takes
and the wall time of `plan_role`: cold (the first plan in a fresh process: GPU profiles and
config.json read, nothing cached) and warm (median and worst of --repeat further plans; each plan
starts its own sweep, only the estimate model's parsed-config cache is shared, as it is between the
roles of one manifest).
Finally the whole `python -m kvcheck plan` command on the incident example, process start to exit.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from kvcheck.model import RoleTarget  # noqa: E402
from tests.datapaths import MODELS  # noqa: E402

REAL = {  # model -> (gpu, args): long-context deployments an operator would plan
    "deepseek-ai--DeepSeek-V3": ("H200", {"tp_size": 8}),
    "Qwen--Qwen3-235B-A22B-FP8": ("H100", {"tp_size": 8}),
    "Qwen--Qwen3.5-397B-A17B": ("B200", {"tp_size": 8}),
    "openai--gpt-oss-120b": ("H100", {"tp_size": 4}),
}
COLD = """
import sys, time
sys.path.insert(0, {root!r})
from kvcheck.inputs.manifest.load import load_manifest
from kvcheck.plan import plan_role
from pathlib import Path
target = [t for t in load_manifest(Path({manifest!r})).targets if t.name == {role!r}][0]
start = time.perf_counter()
plan = plan_role(target)
print((time.perf_counter() - start) * 1000, plan.estimates)
"""


def _targets() -> list[tuple[str, RoleTarget, Path | None]]:
    from kvcheck.inputs.manifest.load import load_manifest

    out: list[tuple[str, RoleTarget, Path | None]] = []
    for example in ("incident", "single-server"):
        manifest = ROOT / "docs" / "examples" / example / "manifest.yaml"
        for target in load_manifest(manifest).targets:
            out.append((f"{example}/{target.name}", target, manifest))
    if MODELS.is_dir():
        for model, (gpu, args) in REAL.items():
            target = RoleTarget(
                name="serve", context_length=131072, min_headroom=1.0, engine_version="0.5.23", args=args,
                argv_args=(), gpu=gpu, model_config=MODELS / f"{model}.json",
            )
            out.append((f"{model} {gpu}", target, None))
    return out


def _cold_ms(manifest: Path, role: str) -> tuple[float, int]:
    code = COLD.format(root=str(ROOT), manifest=str(manifest), role=role)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    ms, calls = proc.stdout.split()
    return float(ms), int(calls)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=50)
    options = parser.parse_args()

    from kvcheck.plan import plan_role

    print(f"{'role':<40} {'estimates':>9} {'cold ms':>9} {'warm ms':>9} {'worst ms':>9}")
    for label, target, manifest in _targets():
        cold = "-"
        if manifest is not None:
            cold = f"{_cold_ms(manifest, target.name)[0]:.1f}"
        start = time.perf_counter()
        plan = plan_role(target, offline=True)
        first_ms = (time.perf_counter() - start) * 1000
        if manifest is None:
            cold = f"{first_ms:.1f}*"
        runs = []
        for _ in range(options.repeat):
            start = time.perf_counter()
            plan_role(target, offline=True)
            runs.append((time.perf_counter() - start) * 1000)
        print(f"{label:<40} {plan.estimates:>9} {cold:>9} {statistics.median(runs):>9.2f} {max(runs):>9.2f}")
    print("* first plan of the model in this process (GPU profiles already loaded)")

    env = dict(os.environ, PYTHONPATH=str(ROOT))
    incident = ROOT / "docs" / "examples" / "incident" / "manifest.yaml"
    walls = []
    for _ in range(5):
        start = time.perf_counter()
        subprocess.run([sys.executable, "-m", "kvcheck", "plan", str(incident), "--format", "json"],
                       env=env, capture_output=True, check=False)
        walls.append((time.perf_counter() - start) * 1000)
    print(f"python -m kvcheck plan (incident, 2 roles), process start to exit: median "
          f"{statistics.median(walls):.0f} ms, worst {max(walls):.0f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
