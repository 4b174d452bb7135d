"""The Action's `deployment-args` reach only deployment files: one step gates manifests and charts."""

from __future__ import annotations

from pathlib import Path

import yaml

from tests.report.test_action import ACTION, PASSING, run_step

FIXTURES = "tests/inputs/deploy/fixtures/helm"
CONFIG = "docs/examples/single-server/llama-3.1-8b-instruct.config.json"


def test_deployment_args_reach_the_deployments_and_not_the_manifests(tmp_path: Path) -> None:
    done, summary, outputs = run_step(
        tmp_path,
        manifests=str(PASSING),
        deployments=f"{FIXTURES}/rendered-good.yaml",
        args="--strict",
        deployment_args=f"--gpu H200 --model-config {CONFIG}",
    )
    assert (done.returncode, outputs) == (0, {"exit-code": "0"}), done.stdout + done.stderr
    assert summary.count("## kvcheck verify: PASS (exit 0)") == 2


def test_the_same_options_in_args_still_reach_every_input(tmp_path: Path) -> None:
    """What the issue reported: `args: --gpu H200` makes a manifest exit 2; args keep meaning every input."""
    done, summary, outputs = run_step(
        tmp_path,
        manifests=str(PASSING),
        deployments=f"{FIXTURES}/rendered-good.yaml",
        args=f"--gpu H200 --model-config {CONFIG}",
    )
    assert (done.returncode, outputs) == (2, {"exit-code": "2"})
    assert "apply to deployment files (the manifest states these itself)" in summary
    assert "## kvcheck verify: PASS (exit 0)" in summary  # the deployment, checked with them


def test_action_yml_passes_deployment_args_through_the_environment() -> None:
    action = yaml.safe_load(ACTION.read_text(encoding="utf-8"))
    verify = {step.get("id"): step for step in action["runs"]["steps"]}["verify"]
    assert verify["env"]["KVCHECK_DEPLOYMENT_ARGS"] == "${{ inputs.deployment-args }}"
    assert action["inputs"]["deployment-args"]["default"] == ""
