"""Time a planner-style sweep: ~200 estimate_role calls over fraction, TP, KV dtype and context.

Usage: python tests/bench/bench_estimate_sweep.py   (from the repository root; needs the real model
configs, see tests/datapaths.py)
"""

from __future__ import annotations

import itertools
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from kvcheck.engines.sglang.sizing import estimate_role  # noqa: E402
from kvcheck.gpus import default_profiles  # noqa: E402
from kvcheck.model import RoleTarget  # noqa: E402
from tests.datapaths import MODELS, MODELS_ABSENT  # noqa: E402

SWEEPS = {
    "deepseek-ai--DeepSeek-V3": "H200",
    "Qwen--Qwen3-235B-A22B-FP8": "H100",
    "Qwen--Qwen3.5-397B-A17B": "B200",
    "openai--gpt-oss-120b": "H100",
}


def main() -> int:
    if not MODELS.is_dir():
        print(MODELS_ABSENT, file=sys.stderr)
        return 2
    profiles = default_profiles()
    grid = list(
        itertools.product(
            (0.80, 0.82, 0.84, 0.85, 0.86, 0.87, 0.88, 0.90, 0.92, 0.93),  # mem_fraction_static
            (4, 8),  # tp_size
            ("auto", "fp8_e4m3"),  # kv_cache_dtype
            (8192, 16384, 24576, 32768, None),  # context_length (None: derived)
        )
    )
    for model, gpu in SWEEPS.items():
        target = RoleTarget(
            name="sweep", context_length=1, min_headroom=1.0, engine_version="0.5.23", args={},
            argv_args=(), gpu=gpu, model_config=MODELS / f"{model}.json",
        )
        first = time.perf_counter()
        estimate_role(target, profiles=profiles, offline=True)
        cold_ms = (time.perf_counter() - first) * 1000
        runs = []
        for _ in range(3):
            start = time.perf_counter()
            for fraction, tp, kv, ctx in grid:
                overrides = {"mem_fraction_static": fraction, "tp_size": tp, "kv_cache_dtype": kv}
                if ctx is not None:
                    overrides["context_length"] = ctx
                estimate_role(target, overrides=overrides, profiles=profiles, offline=True)
            runs.append(time.perf_counter() - start)
        best = min(runs)
        print(
            f"{model:32s} {gpu:5s} {len(grid)} settings: best {best * 1000:7.1f} ms "
            f"(median {statistics.median(runs) * 1000:7.1f} ms, {best / len(grid) * 1e6:6.0f} us/call; "
            f"first call {cold_ms:6.1f} ms)"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
