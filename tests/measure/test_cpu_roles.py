"""CPU roles are a deployment, not a test trick (issue 19): SGLang `--device cpu` on a host without GPUs.

Such a role lists no GPUs, gets no NVML pre-flight and no CUDA_VISIBLE_DEVICES, and needs no
--no-gpu-check; the report records the host memory its pool is sized from. The estimate says plainly
that it cannot size a CPU pool (it depends on the RAM free at boot), while a --max-total-tokens cap
below the window still fails the gate for certain (KV103).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from tests.conftest import EXAMPLES, run_kvcheck
from tests.measure.conftest import FAKE_SGLANG

LLAMA = EXAMPLES / "single-server" / "llama-3.1-8b-instruct.config.json"
MANIFEST = """\
name: cpu server
context_length: 8192
model: {{path: meta-llama/Llama-3.1-8B-Instruct, config: {config}}}
engine:
  version: "0.5.23"
  command: [{python}, {engine}]
  env: {{SGLANG_USE_CPU_ENGINE: "1"}}
args: {{device: cpu, attention-backend: torch_native, max-total-tokens: {cap}, context-length: 8192}}
roles:
  server: {{{gpus}}}
"""


def manifest(tmp_path: Path, *, cap: int = 16384, gpus: str = "") -> Path:
    path = tmp_path / "cpu.yaml"
    path.write_text(MANIFEST.format(config=json.dumps(str(LLAMA)), python=json.dumps(sys.executable),
                                    engine=json.dumps(str(FAKE_SGLANG)), cap=cap, gpus=gpus), encoding="utf-8")
    return path


@pytest.mark.slow
def test_a_cpu_role_is_measured_without_gpus_nvml_or_cuda_settings(tmp_path: Path) -> None:
    envfile = tmp_path / "env.json"
    result = run_kvcheck("verify", str(manifest(tmp_path)), "--format", "json",
                         env={"FAKE_SGLANG_ENVFILE": str(envfile), "FAKE_SGLANG_MODEL_CONTEXT": "8192"})
    assert result.exit_code == 0, result.stdout + result.stderr  # no --no-gpu-check on a host without NVML
    (role,) = json.loads(result.stdout)["roles"]
    assert (role["status"], role["pool_tokens"], role["gpus"]) == ("pass", 16384, None)
    assert role["details"]["engine_env"] == {"SGLANG_USE_CPU_ENGINE": "1"}  # no CUDA_VISIBLE_DEVICES
    assert set(role["details"]["host"]) == {"mem_available_gib", "numa_nodes"}
    seen = json.loads(envfile.read_text(encoding="utf-8"))
    assert not any(name.startswith("CUDA_") for name in seen["env"])
    assert seen["argv"][seen["argv"].index("--device") + 1] == "cpu"


def test_a_cpu_role_takes_no_gpu_list(tmp_path: Path) -> None:
    result = run_kvcheck("verify", str(manifest(tmp_path, gpus="gpus: [0]")))
    assert result.exit_code == 2
    assert "the role runs on the CPU (device: cpu): it takes no GPU list; remove gpus" in result.stderr


def test_the_estimate_says_it_cannot_size_a_cpu_pool(tmp_path: Path) -> None:
    result = run_kvcheck("verify", str(manifest(tmp_path)), "--mode", "estimate", "--format", "json")
    assert result.exit_code == 3
    (finding,) = json.loads(result.stdout)["findings"]
    assert finding["rule"] == "KV305"
    assert "runs on the CPU (device: cpu): SGLang sizes a CPU pool at boot from the RAM free on each NUMA " \
           "node times mem-fraction-static" in finding["message"]
    assert "the pool is at most --max-total-tokens 16,384" in finding["message"]


def test_a_cap_below_the_window_fails_a_cpu_role_for_certain(tmp_path: Path) -> None:
    result = run_kvcheck("verify", str(manifest(tmp_path, cap=4096)), "--mode", "estimate", "--format", "json")
    assert result.exit_code == 1
    assert [f["rule"] for f in json.loads(result.stdout)["findings"]] == ["KV305", "KV103"]
