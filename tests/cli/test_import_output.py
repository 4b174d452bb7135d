"""`kvcheck import -o FILE` writes a manifest that can be committed: model.config relative to FILE."""

from __future__ import annotations

import shutil
from pathlib import Path

import yaml

from tests.conftest import run_kvcheck
from tests.datapaths import MODELS, REPO_ROOT

COMPOSE = REPO_ROOT / "tests" / "inputs" / "deploy" / "fixtures" / "compose.yaml"


def test_the_written_manifest_names_its_config_relative_to_itself(tmp_path: Path) -> None:
    (tmp_path / "configs").mkdir()
    shutil.copy(MODELS / "meta-llama--Meta-Llama-3.1-8B.json", tmp_path / "configs" / "llama.json")
    (tmp_path / "gate").mkdir()
    result = run_kvcheck("import", str(COMPOSE), "--gpu", "H100", "--model-config", "configs/llama.json",
                         "-o", "gate/llama.yaml", cwd=tmp_path)
    assert (result.exit_code, result.stdout) == (0, "")
    written = yaml.safe_load((tmp_path / "gate" / "llama.yaml").read_text())
    assert written["model"]["config"] == "../configs/llama.json"
    assert str(tmp_path) not in (tmp_path / "gate" / "llama.yaml").read_text()

    # the manifest verifies from another working folder, as a checkout elsewhere would
    verify = run_kvcheck("verify", "../gate/llama.yaml", "--mode", "estimate", "--format", "json",
                         cwd=tmp_path / "configs")
    assert verify.exit_code == 0, verify.stdout + verify.stderr


def test_without_output_the_config_is_printed_as_given(tmp_path: Path) -> None:
    shutil.copy(MODELS / "meta-llama--Meta-Llama-3.1-8B.json", tmp_path / "llama.json")
    result = run_kvcheck("import", str(COMPOSE), "--model-config", "llama.json", "--format", "json", cwd=tmp_path)
    assert result.exit_code == 0, result.stderr
    assert '"config": "llama.json"' in result.stdout
