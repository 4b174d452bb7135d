#!/usr/bin/env python3
"""Re-record tests/estimate/oracle_defaults_0.5.23.json's cases for some GPUs with SGLang's own resolution.

The oracle file holds what SGLang 0.5.23's argument code decided for each (model, GPU, args) case, run by
../shared/tools/sglang-reference/resolve.py with the GPU profile's memory_total_mib and compute capability. When
a profile's memory total changes, the defaults SGLang derives from it (mem_fraction_static, chunked prefill,
CUDA-graph sizes) change with it, so that GPU's cases are recorded again from the engine's code, never edited by
hand:

    VENV=/tmp/sglang-ref bash ../shared/tools/sglang-reference/setup.sh        # once
    python tools/oracle_defaults.py --gpu B300 --gpu GB300 \\
        --python /tmp/sglang-ref/bin/python --resolve ../shared/tools/sglang-reference/resolve.py

A case SGLang refuses stops the run (the file only holds resolved cases): nothing is written then.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
ORACLE = ROOT / "tests" / "estimate" / "oracle_defaults_0.5.23.json"
MODELS = ROOT / "tests" / "data" / "models"
sys.path.insert(0, str(ROOT))

from kvcheck.gpus import default_profiles  # noqa: E402

KEYS = ("mem_fraction_static", "chunked_prefill_size", "page_size", "attention_backend", "cuda_graph_max_bs_decode")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpu", action="append", required=True, help="a profile name whose cases are re-recorded")
    parser.add_argument("--python", required=True, help="the sglang-reference venv's python")
    parser.add_argument("--resolve", required=True, help="sglang-reference's resolve.py")
    opts = parser.parse_args(argv)
    data = json.loads(ORACLE.read_text())
    profiles = default_profiles()
    todo = [i for i, case in enumerate(data["cases"]) if case["gpu"] in opts.gpu]
    with tempfile.TemporaryDirectory() as tmp:
        requests = []
        for i in todo:
            case = data["cases"][i]
            folder = Path(tmp) / case["model"]
            if not folder.is_dir():
                folder.mkdir()
                (folder / "config.json").write_text((MODELS / f"{case['model']}.json").read_text())
            gpu = profiles.get(case["gpu"])
            requests.append({
                "model_dir": str(folder), "gpu_mib": gpu.memory_total_mib, "capability": gpu.compute_capability,
                "gpu_name": gpu.aliases[0] if gpu.aliases else gpu.name, "args": case["args"], "index": i,
            })
        out = subprocess.run([opts.python, opts.resolve, "-"], input=json.dumps(requests), text=True,
                             capture_output=True, check=True, timeout=3600)
    answers = [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]
    if len(answers) != len(requests):
        print(f"resolve.py answered {len(answers)} of {len(requests)} cases:\n{out.stderr[-4000:]}", file=sys.stderr)
        return 1
    changed = 0
    for answer in answers:
        if "error" in answer:
            print(f"SGLang refused {answer['case']['model']} {answer['case']['args']}: {answer['error']}",
                  file=sys.stderr)
            return 1
        i = answer["case"]["index"]
        new = {**data["cases"][i], **{k: answer["resolved"][k] for k in KEYS}}
        changed += new != data["cases"][i]
        data["cases"][i] = new
    ORACLE.write_text(json.dumps(data, indent=1) + "\n")
    print(f"{len(answers)} cases re-recorded for {', '.join(opts.gpu)}; {changed} changed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
