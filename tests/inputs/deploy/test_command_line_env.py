"""`--cmd` keeps the environment its command line gives the engine: `VAR=value` prefixes and `env VAR=value`
(read by the project's shell reader, as in a Slurm script), so a manifest imported from the line, and verify
of the line itself, judge the engine as it would start."""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from tests.conftest import run_kvcheck
from tests.datapaths import MODELS

LLAMA_8B = str(MODELS / "meta-llama--Meta-Llama-3.1-8B.json")  # max_position_embeddings 131072
OPTIONS = ("--gpu", "H100", "--model-config", LLAMA_8B, "--engine-version", "0.32.0")
LONG = "vllm serve meta-llama/Llama-3.1-8B-Instruct --max-model-len 200000 -tp 2"


def test_a_var_prefix_reaches_the_imported_manifest_and_verify_passes(tmp_path: Path) -> None:
    manifest = tmp_path / "imp1.yaml"
    result = run_kvcheck("import", "--cmd", f"VLLM_ALLOW_LONG_MAX_MODEL_LEN=1 {LONG}", *OPTIONS, "-o", str(manifest))
    assert result.exit_code == 0, result.stderr
    assert yaml.safe_load(manifest.read_text())["roles"]["server"]["env"] == {"VLLM_ALLOW_LONG_MAX_MODEL_LEN": "1"}
    result = run_kvcheck("verify", str(manifest), "--mode", "estimate", "--format", "json")
    report = json.loads(result.stdout)
    assert (result.exit_code, report["verdict"], report["findings"]) == (0, "pass", []), result.stderr


def test_without_the_prefix_vllm_refuses_the_window(tmp_path: Path) -> None:
    manifest = tmp_path / "imp0.yaml"
    assert run_kvcheck("import", "--cmd", LONG, *OPTIONS, "-o", str(manifest)).exit_code == 0
    assert "env" not in yaml.safe_load(manifest.read_text())["roles"]["server"]
    result = run_kvcheck("verify", str(manifest), "--mode", "estimate", "--format", "json")
    assert result.exit_code == 1
    assert [f["rule"] for f in json.loads(result.stdout)["findings"]] == ["KV220"]


def test_verify_cmd_judges_the_line_with_its_prefix() -> None:
    result = run_kvcheck("verify", "--cmd", f"VLLM_ALLOW_LONG_MAX_MODEL_LEN=1 {LONG}", *OPTIONS, "--mode", "estimate")
    assert result.exit_code == 0, result.stdout + result.stderr


def test_env_prefixes_and_sglang_launch_lines_keep_their_variables() -> None:
    for cmd, env in (
        ("env VLLM_ALLOW_LONG_MAX_MODEL_LEN=1 " + LONG, {"VLLM_ALLOW_LONG_MAX_MODEL_LEN": "1"}),
        ("A=1 env -u A B=2 " + LONG, {"B": "2"}),
        ("A=1 env -i B=2 " + LONG, {"B": "2"}),
        ("NCCL_DEBUG=INFO SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1 python -m sglang.launch_server "
         "--model-path m --tp 2",
         {"NCCL_DEBUG": "INFO", "SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN": "1"}),
        ("env SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1 python3 -m sglang.launch_server --model-path m",
         {"SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN": "1"}),
        ("export NCCL_DEBUG=WARN; sglang serve --model-path m", {"NCCL_DEBUG": "WARN"}),
    ):
        result = run_kvcheck("import", "--format", "json", "--cmd", cmd)
        assert result.exit_code == 0, (cmd, result.stderr)
        assert json.loads(result.stdout)["roles"]["server"].get("env") == env, cmd


def test_an_sglang_prefix_lets_the_longer_context_be_estimated() -> None:
    line = ("python -m sglang.launch_server --model-path meta-llama/Llama-3.1-8B-Instruct --context-length 200000 "
            "--tp 2")
    options = ("--gpu", "H100", "--model-config", LLAMA_8B, "--sglang-version", "0.5.23", "--mode", "estimate",
               "--format", "json")
    refused = run_kvcheck("verify", "--cmd", line, *options)  # SGLang's own refusal: exit 2 at the flag
    assert refused.exit_code == 2
    assert "--cmd:1:95: role server: --context-length 200000 is greater" in refused.stderr
    assert "SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1" in refused.stderr
    allowed = run_kvcheck("verify", "--cmd", f"SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1 {line}", *options)
    assert allowed.exit_code == 0, allowed.stdout + allowed.stderr
    assert json.loads(allowed.stdout)["findings"] == []


def test_a_slurm_script_keeps_an_env_prefix_as_it_keeps_a_var_prefix(tmp_path: Path) -> None:
    script = tmp_path / "job.sbatch"
    script.write_text("#!/bin/bash\n#SBATCH --nodes=1\n#SBATCH --gres=gpu:8\n"
                      "NCCL_DEBUG=INFO env -u NCCL_DEBUG SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1 "
                      "python -m sglang.launch_server --model-path m --tp 8\n")
    result = run_kvcheck("import", "--format", "json", str(script))
    assert result.exit_code == 0, result.stderr
    (role,) = json.loads(result.stdout)["roles"].values()
    assert role["env"] == {"SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN": "1"}
