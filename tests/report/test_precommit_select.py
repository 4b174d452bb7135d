"""The pre-commit hook checks every YAML file kvcheck has something to say about, and only those.

Its default `files:` used to be `manifest[^/]*\\.ya?ml$`: a repository whose manifests are named
otherwise was checked not at all, silently (issue 20). Now the hook takes every YAML file and skips,
quietly and cheaply, the ones that are neither a kvcheck manifest nor a file holding an engine server.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml

from kvcheck.precommit import is_checked, main
from tests.conftest import EXAMPLES, REPO_ROOT

FIXTURES = REPO_ROOT / "tests" / "inputs" / "deploy" / "fixtures"
WORKFLOW = "name: ci\non: [push]\njobs:\n  test:\n    runs-on: ubuntu-latest\n    steps: [{run: make}]\n"
NGINX = """\
apiVersion: apps/v1
kind: Deployment
metadata: {name: web}
spec:
  template:
    spec:
      containers: [{name: web, image: nginx:1.27, args: [nginx, -g, daemon off;]}]
"""


@pytest.mark.parametrize(("path", "checked"), [
    (EXAMPLES / "incident" / "manifest.yaml", True),
    (FIXTURES / "overlay.yaml", True),
    (FIXTURES / "deployment.yaml", True),
    (FIXTURES / "lws-pd.yaml", True),
    (FIXTURES / "srt-slurm.yaml", True),
    (FIXTURES / "compose.yaml", True),
], ids=lambda value: value.name if isinstance(value, Path) else str(value))
def test_manifests_and_files_holding_a_server_are_checked(path: Path, checked: bool) -> None:
    assert is_checked(str(path)) is checked


def test_other_yaml_is_skipped_and_broken_manifests_are_not(tmp_path: Path) -> None:
    (tmp_path / "ci.yaml").write_text(WORKFLOW, encoding="utf-8")
    (tmp_path / "web.yaml").write_text(NGINX, encoding="utf-8")
    (tmp_path / "values.yaml").write_text(yaml.safe_dump({"replicaCount": 2, "image": {"tag": "v1"}}))
    (tmp_path / "broken.yaml").write_text("context_length: 131072\nroles: [\n", encoding="utf-8")
    assert [is_checked(str(tmp_path / name)) for name in ("ci.yaml", "web.yaml", "values.yaml", "broken.yaml")] == [
        False, False, False, True]


def test_the_hook_says_how_many_files_it_checked(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    deploy = tmp_path / "deploy"
    shutil.copytree(EXAMPLES / "incident", deploy)
    (deploy / "prod.yaml").write_text((deploy / "manifest.yaml").read_text(encoding="utf-8"), encoding="utf-8")
    (tmp_path / "ci.yaml").write_text(WORKFLOW, encoding="utf-8")
    code = main([str(deploy / "prod.yaml"), str(tmp_path / "ci.yaml")])
    assert code == 1  # the incident manifest, named prod.yaml, is checked and fails the gate
    err = capfd.readouterr().err
    assert err.rstrip().endswith(
        "kvcheck: checked 1 of 2 files (1 neither a kvcheck manifest nor a file holding an engine server)")
