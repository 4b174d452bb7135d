"""GPU names as platforms write them (issue 21): GKE, EKS/Karpenter and GPU feature discovery labels name
the card; an explicit --gpu that names the same card agrees; a typo is invalid input with a did-you-mean."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvcheck.gpus import default_profiles
from tests.conftest import EXAMPLES, run_kvcheck

QWEN3 = "tests/data/models/Qwen--Qwen3-8B.json"
POD = """\
apiVersion: apps/v1
kind: Deployment
metadata: {name: qwen3}
spec:
  template:
    spec:
      nodeSelector: {%s: %s}
      containers:
        - name: sglang
          image: lmsysorg/sglang:v0.5.23
          command: [python3, -m, sglang.launch_server]
          args: [--model-path, Qwen/Qwen3-8B, --context-length, "32768"]
          resources: {limits: {nvidia.com/gpu: 1}}
"""


@pytest.mark.parametrize(("label", "card"), [
    ("nvidia-h100-80gb", "H100"), ("nvidia-h100-mega-80gb", "H100"), ("nvidia-h200-141gb", "H200"),
    ("nvidia-a100-80gb", "A100-80GB"), ("nvidia-tesla-a100", "A100-40GB"), ("nvidia-l4", "L4"),
    ("nvidia-b200", "B200"), ("h100", "H100"), ("l40s", "L40S"), ("NVIDIA-H100-80GB-HBM3", "H100"),
    ("NVIDIA-A100-SXM4-40GB", "A100-40GB"), ("NVIDIA-H200", "H200"),
])
def test_platform_labels_name_their_card(label: str, card: str) -> None:
    assert [p.name for p in default_profiles().matches(label)] == [card]


def test_a_label_that_leaves_the_memory_open_is_ambiguous() -> None:
    assert {p.name for p in default_profiles().matches("a100")} == {"A100-40GB", "A100-80GB", "A100-80GB-PCIe"}


@pytest.mark.parametrize("key", ["cloud.google.com/gke-accelerator", "karpenter.k8s.aws/instance-gpu-name",
                                 "nvidia.com/gpu.product"])
def test_a_chart_for_gke_can_be_gated_with_and_without_gpu(tmp_path: Path, key: str) -> None:
    value = {"cloud.google.com/gke-accelerator": "nvidia-h100-80gb", "karpenter.k8s.aws/instance-gpu-name": "h100",
             "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}[key]
    chart = tmp_path / "pod.yaml"
    chart.write_text(POD % (key, value), encoding="utf-8")
    for extra in ((), ("--gpu", "H100")):  # the explicit --gpu names the same card: they agree
        result = run_kvcheck("verify", str(chart), "--mode", "estimate", "--model-config", QWEN3, "--format", "json",
                             *extra)
        assert result.exit_code == 0, result.stdout + result.stderr
        assert json.loads(result.stdout)["roles"][0]["status"] == "pass"


def test_an_unknown_label_or_a_typo_in_gpu_is_invalid_input(tmp_path: Path) -> None:
    chart = tmp_path / "pod.yaml"
    chart.write_text(POD % ("cloud.google.com/gke-accelerator", "nvidia-tesla-t4"), encoding="utf-8")
    result = run_kvcheck("verify", str(chart), "--mode", "estimate", "--model-config", QWEN3)
    assert result.exit_code == 2
    assert "unknown GPU 'nvidia-tesla-t4' (nodeSelector cloud.google.com/gke-accelerator)" in result.stderr
    manifest = tmp_path / "m.yaml"
    manifest.write_text((EXAMPLES / "single-server" / "manifest.yaml").read_text(encoding="utf-8").replace(
        "gpu: H100", "gpu: H1OO"), encoding="utf-8")
    result = run_kvcheck("verify", str(manifest), "--mode", "estimate")
    assert result.exit_code == 2  # it was exit 3, "retrying can help"
    assert f"{manifest}:10:6: gpu: unknown GPU 'H1OO' (did you mean 'H100'?)" in result.stderr
