"""What a pod states about its GPUs, read end to end on real files: a pod that asks for none, a
production-stack `requestGPU` the chart cannot use, a `CUDA_VISIBLE_DEVICES` that hides the role's GPUs,
and an image built for another accelerator than the GPU the role is sized on (KV318)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import REPO_ROOT, run_kvcheck

FIX = "tests/inputs/deploy/fixtures"
REAL = "tests/data/vllm-deploy"
QWEN = ("--mode", "estimate", "--model-config", "tests/data/models/Qwen--Qwen3-8B.json")
NO_GPU = ("role 'qwen': the container asks for no GPU (no nvidia.com/gpu or amd.com/gpu in resources.limits or "
          "requests), but its parallel settings need 4 (tensor x pipeline parallel size x data-parallel replicas); "
          "state resources.limits nvidia.com/gpu: 4")


@pytest.mark.parametrize("name", ["deployment-no-gpu-tp4-vllm.yaml", "deployment-no-gpu-tp4-sglang.yaml"])
def test_a_pod_asking_for_no_gpu_is_exit_2_at_its_container_for_a_role_needing_several(name: str) -> None:
    result = run_kvcheck("verify", f"{FIX}/{name}", *QWEN, "--gpu", "H100")
    assert result.exit_code == 2, result.stdout
    assert result.stderr.splitlines()[1] == f"{FIX}/{name}:9:9: {NO_GPU}"


def _deployment(tmp_path: Path, extra: str, tp: int = 4) -> str:
    path = tmp_path / "deploy.yaml"
    path.write_text(
        "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: qwen}\nspec:\n  template:\n    spec:\n"
        "      containers:\n      - name: vllm\n        image: vllm/vllm-openai:v0.32.0\n"
        f"        args: [Qwen/Qwen3-8B, --max-model-len, '8192', --tensor-parallel-size, '{tp}']\n" + extra)
    return str(path)


@pytest.mark.parametrize(("extra", "tp"), [
    ("", 1),  # one GPU and no resources: read as before (docs/import.md)
    ("        resources: {claims: [{name: gpus}]}\n      resourceClaims: [{name: gpus}]\n", 4),  # DRA
    ("        env: [{name: NVIDIA_VISIBLE_DEVICES, value: all}]\n", 4),  # the runtime hands the devices over
])
def test_a_pod_that_may_get_its_gpus_another_way_or_needs_one_is_checked(tmp_path: Path, extra: str,
                                                                          tp: int) -> None:
    result = run_kvcheck("verify", _deployment(tmp_path, extra, tp), *QWEN, "--gpu", "H100", "--format", "json")
    assert (result.exit_code, json.loads(result.stdout)["verdict"]) == (0, "pass"), result.stderr


@pytest.mark.parametrize(("value", "shown"), [('"two"', "'two'"), ("0", "0"), ("-1", "-1")])
def test_a_production_stack_request_gpu_that_is_no_positive_count_is_exit_2_at_its_line(
        tmp_path: Path, value: str, shown: str) -> None:
    path = tmp_path / "values.yaml"
    path.write_text("servingEngineSpec:\n  modelSpec:\n  - name: llama3\n    repository: vllm/vllm-openai\n"
                    f"    tag: v0.32.0\n    modelURL: Qwen/Qwen3-8B\n    requestGPU: {value}\n"
                    "    vllmConfig: {maxModelLen: 4096}\n")
    for command in (("import", str(path)), ("verify", str(path), *QWEN, "--gpu", "H100")):
        result = run_kvcheck(*command)
        assert result.exit_code == 2, result.stdout
        assert result.stderr.splitlines()[1] == (
            f"{path}:7:17: modelSpec requestGPU {shown} is not a positive whole number of GPUs (the chart writes "
            "it as the pod's nvidia.com/gpu limit); state the GPUs each pod gets, e.g. requestGPU: 1")


def test_a_production_stack_request_gpu_of_digits_is_the_count(tmp_path: Path) -> None:
    path = tmp_path / "values.yaml"
    path.write_text("servingEngineSpec:\n  modelSpec:\n  - name: llama3\n    repository: vllm/vllm-openai\n"
                    "    tag: v0.32.0\n    modelURL: Qwen/Qwen3-8B\n    requestGPU: '2'\n"
                    "    vllmConfig: {maxModelLen: 4096, tensorParallelSize: 2}\n")
    result = run_kvcheck("import", str(path), "--format", "json")
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout)["roles"]["llama3"]["gpus"] == [0, 1]


def test_cuda_visible_devices_listing_fewer_gpus_than_the_role_needs_is_exit_2_at_its_value() -> None:
    name = f"{FIX}/deployment-cuda-visible-devices.yaml"
    result = run_kvcheck("verify", name, *QWEN, "--gpu", "H100")
    assert result.exit_code == 2, result.stdout
    assert result.stderr.splitlines()[1] == (
        f"{name}:13:47: role 'qwen': CUDA_VISIBLE_DEVICES='0' shows the engine 1 GPU(s), but its parallel settings "
        "need 2 on each node (tensor x pipeline parallel size x data-parallel replicas); list that many devices, or "
        "drop the variable and let the GPU limit choose them")


HETEROGENEOUS = f"{REAL}/llm-d-modelservice-values-heterogeneous-pd.yaml"
GAUDI = "vault.habana.ai/gaudi-docker/1.18.0/ubuntu22.04/habanalabs/pytorch-installer-2.4.0:latest"


def test_llm_d_heterogeneous_pd_decode_hides_its_second_gpu_and_prefill_runs_a_gaudi_image(tmp_path: Path) -> None:
    options = (*QWEN, "--gpu", "H100", "--context-length", "32768")
    result = run_kvcheck("verify", HETEROGENEOUS, *options)
    assert result.exit_code == 2, result.stdout
    assert result.stderr.splitlines()[1] == (
        f"{HETEROGENEOUS}:58:16: role 'decode': CUDA_VISIBLE_DEVICES='0' shows the engine 1 GPU(s), but its "
        "parallel settings need 2 on each node (tensor x pipeline parallel size x data-parallel replicas); list "
        "that many devices, or drop the variable and let the GPU limit choose them")
    # with both of decode's devices shown, the roles are sized, and the Gaudi prefill on an H100 is said
    fixed = tmp_path / "values.yaml"
    text = (REPO_ROOT / HETEROGENEOUS).read_text()
    assert text.count('      - name: CUDA_VISIBLE_DEVICES\n        value: "0"\n') == 1
    fixed.write_text(text.replace('      - name: CUDA_VISIBLE_DEVICES\n        value: "0"\n',
                                  '      - name: CUDA_VISIBLE_DEVICES\n        value: "0,1"\n'))
    result = run_kvcheck("verify", str(fixed), *options, "--format", "json")
    report = json.loads(result.stdout)
    assert (result.exit_code, report["verdict"]) == (0, "pass"), result.stderr
    assert [(r["name"], r["status"]) for r in report["roles"]] == [("decode", "pass"), ("prefill", "pass")]
    (kv318,) = [f for f in report["findings"] if f["rule"] == "KV318"]
    assert (kv318["severity"], kv318["role"], kv318["location"]) == ("warning", "prefill", {"file": str(fixed), "line": 103, "column": 12})
    assert kv318["message"] == (
        f"image '{GAUDI}' is built for Intel Gaudi (HPU), but the role is sized for H100 (--gpu), an NVIDIA GPU: "
        "the predicted pool is for a card this image does not run on")


@pytest.mark.parametrize(("gpu", "findings"), [
    ("H100", ["image 'rocm/vllm:rocm6.4.1_vllm_0.10.0_20250812' is built for AMD ROCm, but the role is sized for "
              "H100 (--gpu), an NVIDIA GPU: the predicted pool is for a card this image does not run on"]),
    ("MI300X", []),  # the image's own accelerator: nothing to say
])
def test_a_rocm_image_on_an_nvidia_gpu_is_kv318_naming_both(gpu: str, findings: list[str]) -> None:
    name = f"{FIX}/deployment-rocm-image.yaml"
    result = run_kvcheck("verify", name, *QWEN, "--gpu", gpu, "--engine-version", "0.10.0", "--format", "json")
    report = json.loads(result.stdout)
    assert (result.exit_code, report["verdict"]) == (0, "pass"), result.stderr
    got: list[Any] = [f for f in report["findings"] if f["rule"] == "KV318"]
    assert [f["message"] for f in got] == findings
    assert all(f["location"] == {"file": name, "line": 10, "column": 16} for f in got)


def test_a_cuda_image_on_an_amd_gpu_is_kv318(tmp_path: Path) -> None:
    path = tmp_path / "deploy.yaml"
    path.write_text("apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: qwen}\nspec:\n  template:\n    spec:\n"
                    "      containers:\n      - name: sglang\n        image: lmsysorg/sglang:v0.5.23-cu129\n"
                    "        command: [python3, -m, sglang.launch_server, --model-path, Qwen/Qwen3-8B, "
                    "--context-length, '8192']\n        resources: {limits: {amd.com/gpu: 1}}\n")
    result = run_kvcheck("import", str(path))
    assert result.exit_code == 0, result.stderr
    result = run_kvcheck("verify", str(path), *QWEN, "--gpu", "MI300X", "--format", "json")
    report = json.loads(result.stdout)
    assert [f["message"] for f in report["findings"] if f["rule"] == "KV318"] == [
        "image 'lmsysorg/sglang:v0.5.23-cu129' is built for NVIDIA CUDA, but the role is sized for MI300X (--gpu), "
        "an AMD GPU: the predicted pool is for a card this image does not run on"]
