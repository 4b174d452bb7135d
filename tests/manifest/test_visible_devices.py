"""CUDA_VISIBLE_DEVICES in a manifest's env would win over the GPUs kvcheck gives the role (roles.N.gpus,
which the NVML pre-flight inspects): the engine would run on devices nobody checked. Exit 2 at its line."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import run_kvcheck

CONFIG = Path("tests/data/models/Qwen--Qwen3-8B.json").resolve()
MANIFEST = """\
context_length: 32768
model: {{path: Qwen/Qwen3-8B, config: CONFIG}}
engine:
  version: "0.5.23"
  env: {engine_env}
gpu: H100
device: {device}
roles:
  main:
    gpus: [0, 1]
    env: {role_env}
    args: {{tp-size: 2}}
"""


@pytest.mark.parametrize(("engine_env", "role_env", "line", "key"), [
    ("{}", "{CUDA_VISIBLE_DEVICES: '0'}", "11:33", "roles.main.env.CUDA_VISIBLE_DEVICES"),
    ("{CUDA_VISIBLE_DEVICES: '2,3'}", "{}", "5:31", "engine.env.CUDA_VISIBLE_DEVICES"),
])
def test_a_manifest_env_that_picks_the_gpus_is_refused(
        tmp_path: Path, engine_env: str, role_env: str, line: str, key: str) -> None:
    path = tmp_path / "kvcheck.yaml"
    text = MANIFEST.format(engine_env=engine_env, role_env=role_env, device="gpu")
    path.write_text(text.replace("CONFIG", str(CONFIG)), encoding="utf-8")
    result = run_kvcheck("verify", str(path), "--mode", "estimate")
    value = "'0'" if "main.env" in key else "'2,3'"
    assert result.exit_code == 2
    assert (f"{path}:{line}: {key}: CUDA_VISIBLE_DEVICES={value} would override the GPUs kvcheck gives role main "
            "(roles.main.gpus, the ones its pre-flight inspects): list the GPUs in roles.main.gpus instead"
            ) in result.stderr


def test_other_env_is_left_alone(tmp_path: Path) -> None:
    path = tmp_path / "kvcheck.yaml"
    text = MANIFEST.format(engine_env="{CUDA_DEVICE_ORDER: PCI_BUS_ID}", role_env="{NCCL_DEBUG: WARN}", device="gpu")
    path.write_text(text.replace("CONFIG", str(CONFIG)), encoding="utf-8")
    result = run_kvcheck("verify", str(path), "--mode", "estimate")
    assert "CUDA_VISIBLE_DEVICES" not in result.stderr
    assert result.exit_code == 0, result.stderr
