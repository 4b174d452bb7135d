"""`kvcheck import -o FILE` writes a manifest that can be committed: model.config relative to FILE."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
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


def _estimate(manifest: str, cwd: Path) -> tuple[int, list[tuple[str, int]]]:
    """verify --mode estimate on a written manifest: its exit code and each role's predicted pool."""
    verify = run_kvcheck("verify", manifest, "--mode", "estimate", "--format", "json", cwd=cwd)
    report = json.loads(verify.stdout)
    return verify.exit_code, [(role["name"], role["pool_tokens"]) for role in report["roles"]]


def _llama_in(folder: Path) -> None:
    (folder / "configs").mkdir(parents=True)
    shutil.copy(MODELS / "meta-llama--Meta-Llama-3.1-8B.json", folder / "configs" / "llama.json")
    for name in ("gate", "elsewhere"):
        (folder / name).mkdir()


def test_a_config_relative_to_the_working_folder_resolves_from_the_written_manifest(tmp_path: Path) -> None:
    # the config is named from the working folder, the manifest goes into another: verify and plan read it from a third
    _llama_in(tmp_path)
    result = run_kvcheck("import", str(COMPOSE), "--gpu", "H100", "--model-config", "llama.json",
                         "-o", "../gate/llama.yaml", cwd=tmp_path / "configs")
    assert (result.exit_code, result.stdout) == (0, "")
    assert yaml.safe_load((tmp_path / "gate" / "llama.yaml").read_text())["model"]["config"] == "../configs/llama.json"
    assert _estimate("../gate/llama.yaml", tmp_path / "elsewhere") == (0, [("sglang", 457_188)])
    plan = run_kvcheck("plan", "../gate/llama.yaml", "--format", "json", cwd=tmp_path / "elsewhere")
    assert plan.exit_code == 0, plan.stderr
    assert [role["pool_tokens"] for role in json.loads(plan.stdout)["roles"]] == [457_188]


def test_on_stdout_the_config_is_absolute_so_the_manifest_resolves_wherever_it_is_saved(tmp_path: Path) -> None:
    # `kvcheck import ... > gate/llama.yaml`: the manifest reads model.config relative to gate/, where a path
    # as given (relative to the working folder) names nothing, or another file of the same name
    _llama_in(tmp_path)
    result = run_kvcheck("import", str(COMPOSE), "--gpu", "H100", "--model-config", "configs/llama.json", cwd=tmp_path)
    assert result.exit_code == 0, result.stderr
    assert yaml.safe_load(result.stdout)["model"]["config"] == str(tmp_path.resolve() / "configs" / "llama.json")
    (tmp_path / "gate" / "llama.yaml").write_text(result.stdout)
    assert _estimate("../gate/llama.yaml", tmp_path / "elsewhere") == (0, [("sglang", 457_188)])

    as_json = run_kvcheck("import", str(COMPOSE), "--model-config", "configs/llama.json", "--format", "json",
                          cwd=tmp_path)
    assert as_json.exit_code == 0, as_json.stderr
    assert json.loads(as_json.stdout)["model"]["config"] == str(tmp_path.resolve() / "configs" / "llama.json")


def test_stdout_redirected_to_a_file_names_the_config_relative_to_that_file(tmp_path: Path) -> None:
    # `kvcheck import ... > gate/llama.yaml` in a shell: the manifest can be committed as -o writes it
    _llama_in(tmp_path)
    with (tmp_path / "gate" / "llama.yaml").open("w") as out:
        proc = subprocess.run([sys.executable, "-m", "kvcheck", "import", str(COMPOSE), "--gpu", "H100",
                               "--model-config", "configs/llama.json"], cwd=tmp_path, stdout=out,
                              stderr=subprocess.PIPE, text=True, timeout=120,
                              env={"PYTHONPATH": str(REPO_ROOT), "PATH": "/usr/bin:/bin"})
    assert proc.returncode == 0, proc.stderr
    text = (tmp_path / "gate" / "llama.yaml").read_text()
    assert yaml.safe_load(text)["model"]["config"] == "../configs/llama.json"
    assert str(tmp_path) not in text
    assert _estimate("../gate/llama.yaml", tmp_path / "elsewhere") == (0, [("sglang", 457_188)])


def test_a_config_reached_through_a_link_keeps_its_own_name(tmp_path: Path) -> None:
    # a Hugging Face snapshot's config.json is a link to a blob named by its hash: the manifest names the link
    _llama_in(tmp_path)
    (tmp_path / "snapshot").mkdir()
    (tmp_path / "snapshot" / "config.json").symlink_to(tmp_path / "configs" / "llama.json")
    result = run_kvcheck("import", str(COMPOSE), "--gpu", "H100", "--model-config", "snapshot/config.json",
                         "-o", "gate/llama.yaml", cwd=tmp_path)
    assert (result.exit_code, result.stdout) == (0, "")
    assert yaml.safe_load((tmp_path / "gate" / "llama.yaml").read_text())["model"]["config"] == "../snapshot/config.json"
    assert _estimate("../gate/llama.yaml", tmp_path / "elsewhere") == (0, [("sglang", 457_188)])
