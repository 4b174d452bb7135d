"""kvcheck's reading of vLLM command lines and `--config` files, against the real vLLM 0.32.0 parser.

No engine boots: one process imports the installed vLLM and parses each command line with `vllm serve`'s
own FlexibleArgumentParser (the parser `vllm serve` builds: the top-level parser with the serve subcommand),
printing the values; the test reads the same lines with kvcheck (`Engine.parse_argv` and the deployment
readers) and compares. Skips without KVCHECK_REAL_VLLM, fails without it under KVCHECK_TEST_REAL=required.
"""

from __future__ import annotations

import json
import subprocess
from typing import Any

import pytest

from kvcheck.engines import get_engine
from tests.conftest import REPO_ROOT, run_kvcheck
from tests.engines.real.conftest import RealVllm

pytestmark = [pytest.mark.real_engine]

FIX = REPO_ROOT / "tests" / "inputs" / "deploy" / "fixtures" / "vllm"
KEYS = ("tensor_parallel_size", "pipeline_parallel_size", "data_parallel_size", "max_model_len",
        "gpu_memory_utilization", "enable_prefix_caching", "enable_chunked_prefill", "max_num_seqs",
        "kv_transfer_config", "optimization_level")

PARSE = r"""
import json, sys
from vllm.entrypoints.cli.serve import ServeSubcommand
from vllm.utils.argparse_utils import FlexibleArgumentParser
keys = json.loads(sys.argv[1])
out = []
for argv in json.loads(sys.argv[2]):
    parser = FlexibleArgumentParser(description="kvcheck")
    ServeSubcommand().subparser_init(parser.add_subparsers(required=False, dest="subparser"))
    args = parser.parse_args(argv)
    row = {"model": args.model_tag}
    for key in keys:
        value = getattr(args, key, None)
        if value is not None and not isinstance(value, (bool, int, float, str, list, dict)):
            value = {k: getattr(value, k) for k in ("kv_connector", "kv_role") if getattr(value, k) is not None}
        row[key] = value
    out.append(row)
print("KVCHECK" + json.dumps(out))
"""

LINES = [
    ["serve", "meta-llama/Llama-3.1-8B-Instruct", "-tp", "2", "--max_model_len=32K", "--no-enable-prefix-caching",
     "--kv-transfer-config.kv_connector", "NixlConnector", "--kv_transfer_config.kv_role=kv_consumer",
     "--max-num-seq", "64"],
    ["serve", "m", "--max-model-len", "32k", "-pp", "2", "-dp=4", "-O3", "--gpu-memory-util", "0.8"],
    ["serve", "--max-model-len", "auto", "--model", "Qwen/Qwen3-8B", "--enable-chunked-prefill"],
    # the dotted keys replace a JSON value given whole (vLLM appends their merged value after it)
    ["serve", "m", "--kv-transfer-config", '{"kv_connector":"NixlConnector","kv_role":"kv_both"}',
     "--kv-transfer-config.kv_role", "kv_producer"],
]


@pytest.fixture(scope="module")
def real_parse(real_vllm: RealVllm) -> list[dict[str, Any]]:
    """Real vLLM's values for LINES, and for the compose fixture's `--config` line (run in its folder)."""
    python = real_vllm.python
    lines = [*LINES, ["serve", "Qwen/Qwen3-8B", "--config", "vllm-config.yaml", "--max-model-len", "16384"],
             ["serve", "m"]]  # the last: vLLM's defaults
    done = subprocess.run([str(python), "-c", PARSE, json.dumps(KEYS), json.dumps(lines)], cwd=FIX / "compose-config",
                          capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    (row,) = [line for line in done.stdout.splitlines() if line.startswith("KVCHECK")]
    return json.loads(row.removeprefix("KVCHECK"))


def kvcheck_values(argv: list[str]) -> dict[str, Any]:
    engine = get_engine("vllm")
    parsed = engine.parse_argv(["vllm", *argv], version="0.32.0", start=2)
    assert parsed.problems == ()
    values = {o.key: o.value for o in parsed.final.values()}
    return {"model": values.pop("model", None), **values}


def set_by(real: dict[str, Any], defaults: dict[str, Any]) -> dict[str, Any]:
    """What the line set: every value real vLLM parsed that is not its default (the model always)."""
    return {key: value for key, value in real.items() if key == "model" or value != defaults.get(key)}


@pytest.mark.parametrize("index", range(len(LINES)))
def test_kvcheck_reads_a_command_line_as_vllm_does(real_parse: list[dict[str, Any]], index: int) -> None:
    real = set_by(real_parse[index], real_parse[-1])
    ours = kvcheck_values(LINES[index])
    if ours.get("max_model_len") == -1:  # kvcheck stores auto as -1, as vLLM's human_readable_int_or_auto does
        assert real["max_model_len"] == -1
    assert real == ours


def test_kvcheck_reads_a_config_file_as_vllm_does(real_parse: list[dict[str, Any]]) -> None:
    real = set_by(real_parse[len(LINES)], real_parse[-1])
    result = run_kvcheck("import", str(FIX / "compose-config" / "compose.yaml"), "--format", "json")
    assert result.exit_code == 0, result.stderr
    manifest = json.loads(result.stdout)
    args = {key.replace("-", "_"): value for key, value in manifest["roles"]["qwen"]["args"].items()}
    assert {"model": manifest["model"]["path"], **args} == real
