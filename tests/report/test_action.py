"""The GitHub Action (action.yml): its check step's script run for real, as the runner would run it."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import jsonschema
import yaml

from tests.conftest import EXAMPLES, REPO_ROOT

ACTION = REPO_ROOT / "action.yml"
VERIFY = REPO_ROOT / "action" / "verify.sh"
SCHEMA = json.loads((Path(__file__).parent / "schemas" / "sarif-schema-2.1.0.json").read_text(encoding="utf-8"))
FAILING = EXAMPLES / "incident" / "manifest.yaml"
PASSING = EXAMPLES / "single-server" / "manifest.yaml"


def run_step(tmp_path: Path, **inputs: str) -> tuple[subprocess.CompletedProcess[str], str, dict[str, str]]:
    """Run the verify step with the action's environment; (process, job summary, step outputs)."""
    summary, output = tmp_path / "summary.md", tmp_path / "output.txt"
    summary.write_text("# earlier step\n", encoding="utf-8")
    output.write_text("", encoding="utf-8")
    env = {
        **os.environ,
        "PYTHONPATH": str(REPO_ROOT),
        "KVCHECK": f"{shlex.quote(sys.executable)} -m kvcheck",
        "KVCHECK_PYTHON": sys.executable,
        "GITHUB_STEP_SUMMARY": str(summary),
        "GITHUB_OUTPUT": str(output),
        "RUNNER_TEMP": str(tmp_path),
        "ACTION_PATH": str(REPO_ROOT),
    }
    env.update({f"KVCHECK_{key.upper()}": value for key, value in inputs.items()})
    done = subprocess.run(["bash", str(VERIFY)], cwd=REPO_ROOT, env=env, capture_output=True, text=True,
                          timeout=300)
    outputs = dict(line.split("=", 1) for line in output.read_text(encoding="utf-8").splitlines())
    return done, summary.read_text(encoding="utf-8"), outputs


def test_a_failing_manifest_fails_the_step_and_still_writes_the_summary_and_sarif(tmp_path: Path) -> None:
    sarif = tmp_path / "out" / "kvcheck.sarif"
    done, summary, outputs = run_step(tmp_path, manifests=f"{FAILING}\n{PASSING}", sarif=str(sarif))
    assert done.returncode == 1, done.stderr
    assert outputs == {"exit-code": "1", "sarif": str(sarif)}
    # annotations on the manifest's line, repository-relative, in the step's log
    assert "::error file=docs/examples/incident/manifest.yaml,line=19,col=3,title=KV101 prefill::" in done.stdout
    # the job summary keeps what was there and gets both reports, the failing one included
    assert summary.startswith("# earlier step\n## kvcheck verify: FAIL (exit 1)\n")
    assert "\n## kvcheck verify: PASS (exit 0)\n" in summary
    # one SARIF run with both checks' invocations, valid against the official schema
    log = json.loads(sarif.read_text(encoding="utf-8"))
    jsonschema.Draft4Validator(SCHEMA).validate(log)
    run = log["runs"][0]
    assert len(log["runs"]) == 1 and [i["exitCode"] for i in run["invocations"]] == [1, 0]
    assert run["results"][0]["ruleId"] == "KV101"
    assert run["results"][0]["locations"][0]["physicalLocation"]["artifactLocation"]["uri"] == (
        "docs/examples/incident/manifest.yaml"
    )


def test_a_passing_manifest_passes(tmp_path: Path) -> None:
    done, summary, outputs = run_step(tmp_path, manifests=str(PASSING))
    assert (done.returncode, outputs) == (0, {"exit-code": "0"})
    assert "## kvcheck verify: PASS (exit 0)" in summary and "No findings." in summary
    assert done.stdout.splitlines()[1].startswith("kvcheck verify: pass (exit 0) server=pass(")


def test_extra_args_reach_kvcheck(tmp_path: Path) -> None:
    manifest = tmp_path / "m.yaml"
    manifest.write_text(PASSING.read_text(encoding="utf-8").replace(
        "llama-3.1-8b-instruct.config.json", str(PASSING.parent / "llama-3.1-8b-instruct.config.json")),
        encoding="utf-8")
    assert run_step(tmp_path, manifests=str(manifest))[0].returncode == 0
    done, _, _ = run_step(tmp_path, manifests=str(manifest), args="--role nosuchrole")
    assert done.returncode == 2  # the option reached verify: an unknown role is invalid input


def test_invalid_input_is_exit_2_with_the_reason_in_the_summary(tmp_path: Path) -> None:
    broken = tmp_path / "broken.yaml"
    broken.write_text("context_length: [\n", encoding="utf-8")
    done, summary, outputs = run_step(tmp_path, manifests=f"{broken} {FAILING}")
    assert (done.returncode, outputs["exit-code"]) == (2, "2")  # invalid input outranks a failing check
    # the invalid manifest has its report too: an annotation on its line and a summary naming it
    assert "## kvcheck verify: ERROR (exit 2)" in summary and "| error | KV001 | - | YAML syntax error" in summary
    assert f"::error file={broken},line=2,col=1,title=KV001::YAML syntax error" in done.stdout
    assert "## kvcheck verify: FAIL (exit 1)" in summary


def test_nothing_to_check_is_an_error_not_a_pass(tmp_path: Path) -> None:
    done, _, outputs = run_step(tmp_path, manifests="", deployments="")
    assert (done.returncode, outputs) == (2, {"exit-code": "2"})
    assert "no manifest or deployment file given" in done.stdout


def test_globs_expand_and_summary_can_be_turned_off(tmp_path: Path) -> None:
    for name, example in (("a", FAILING), ("b", PASSING)):
        folder = tmp_path / "deploy" / name
        folder.mkdir(parents=True)
        for file in example.parent.iterdir():
            (folder / file.name).write_bytes(file.read_bytes())
    done, summary, _ = run_step(tmp_path, manifests=str(tmp_path / "deploy" / "*" / "manifest.yaml"),
                                summary="false")
    assert done.returncode == 1
    assert done.stdout.count("::group::kvcheck verify") == 2
    assert summary == "# earlier step\n"


def test_a_pattern_that_matches_nothing_is_an_error_and_the_other_inputs_are_still_checked(tmp_path: Path) -> None:
    # nullglob used to drop such a pattern silently: the step passed with fewer checks than asked for
    missing = tmp_path / "nowhere" / "*.yaml"
    done, summary, outputs = run_step(tmp_path, manifests=f"{missing} {PASSING}")
    assert (done.returncode, outputs) == (2, {"exit-code": "2"})
    assert f"::error title=kvcheck::input '{missing}' matches no file" in done.stdout
    assert done.stdout.count("::group::kvcheck verify") == 1  # the passing manifest is still checked
    assert f"## kvcheck: input `{missing}` matches no file" in summary
    assert "## kvcheck verify: PASS (exit 0)" in summary


def test_a_lone_unmatched_pattern_says_so_not_that_the_inputs_are_empty(tmp_path: Path) -> None:
    missing = tmp_path / "charts" / "*.yaml"
    done, _, outputs = run_step(tmp_path, manifests="", deployments=f"{missing} {PASSING}")
    assert (done.returncode, outputs) == (2, {"exit-code": "2"})
    assert f"input '{missing}' matches no file" in done.stdout
    assert "inputs manifests and deployments are empty" not in done.stdout


def test_action_yml_passes_every_input_to_the_scripts_through_the_environment() -> None:
    action = yaml.safe_load(ACTION.read_text(encoding="utf-8"))
    assert action["runs"]["using"] == "composite"
    steps = {step.get("id"): step for step in action["runs"]["steps"]}
    verify = steps["verify"]
    assert verify["run"] == '"$ACTION_PATH/action/verify.sh"'
    for name in ("manifests", "deployments", "mode", "args", "sarif", "summary"):
        assert verify["env"][f"KVCHECK_{name.upper()}"] == "${{ inputs." + name + " }}"
        assert name in action["inputs"]
    assert action["inputs"]["mode"]["default"] == "estimate"
    assert steps["install"]["run"] == '"$ACTION_PATH/action/install.sh"'
    for script in ("install.sh", "verify.sh"):
        assert os.access(REPO_ROOT / "action" / script, os.X_OK), script
    assert action["outputs"]["exit-code"]["value"] == "${{ steps.verify.outputs.exit-code }}"


def test_deployment_files_are_checked_together_with_the_args_they_need(tmp_path: Path) -> None:
    fixtures = "tests/inputs/deploy/fixtures/helm"
    done, summary, outputs = run_step(
        tmp_path,
        deployments=f"{fixtures}/rendered-good.yaml\n{fixtures}/rendered-short.yaml",
        args="--gpu H200 --model-config docs/examples/single-server/llama-3.1-8b-instruct.config.json",
    )
    assert (done.returncode, outputs["exit-code"]) == (1, "1"), done.stderr
    assert f"::error file={fixtures}/rendered-short.yaml,line=49,col=11,title=KV101 llama-sglang::" in done.stdout
    assert summary.count("## kvcheck verify: ") == 2 and "## kvcheck verify: PASS (exit 0)" in summary
