"""Defaults from a settings file: `.kvcheck.yaml` or `pyproject.toml` [tool.kvcheck], the nearest from
the working folder up; `--config FILE`, `--no-config`; the command line wins; unknown keys are exit 2."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tests.conftest import EXAMPLES, run_kvcheck

SINGLE = EXAMPLES / "single-server"


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A repository with the single-server example in deploy/ and KV202's warning on its role."""
    deploy = tmp_path / "deploy"
    deploy.mkdir()
    shutil.copy(SINGLE / "llama-3.1-8b-instruct.config.json", deploy)
    text = (SINGLE / "manifest.yaml").read_text().replace("gpu: H100\n", "gpu: H100\nargs:\n  allow-auto-truncate: true\n")
    (deploy / "manifest.yaml").write_text(text)
    return tmp_path


def verify(where: Path, *args: str) -> tuple[int, str, str]:
    done = run_kvcheck(*args, "verify", "manifest.yaml", cwd=where)
    return done.exit_code, done.stdout, done.stderr


def test_pyproject_defaults_apply_from_a_subfolder_and_per_command_tables_win(project: Path) -> None:
    (project / "pyproject.toml").write_text(
        '[project]\nname = "x"\n\n[tool.kvcheck]\nformat = "markdown"\nfail-on = "warning"\n\n'
        '[tool.kvcheck.verify]\nformat = "json"\nmode = "estimate"\n')
    code, out, err = verify(project / "deploy")
    assert code == 1  # fail-on warning: KV202 fails
    report = json.loads(out)  # verify's own table wins over the top-level markdown
    assert (report["mode"], report["verdict"]) == ("estimate", "fail")
    assert f"kvcheck: defaults from {project / 'pyproject.toml'}" in err


def test_the_command_line_wins_over_the_file(project: Path) -> None:
    (project / ".kvcheck.yaml").write_text("format: json\nfail-on: warning\nverify:\n  mode: estimate\n")
    done = run_kvcheck("verify", "manifest.yaml", "--format", "table", "--fail-on", "error", cwd=project / "deploy")
    assert done.exit_code == 0, done.stderr
    assert done.stdout.startswith("kvcheck verify: PASS (exit 0)")


def test_the_nearest_file_wins_and_paths_are_relative_to_it(project: Path) -> None:
    (project / "pyproject.toml").write_text('[tool.kvcheck]\nformat = "markdown"\n')
    (project / "deploy" / ".kvcheck.yml").write_text("verify:\n  mode: estimate\n  output: reports/gate.json\n"
                                                      "  format: json\n")
    (project / "deploy" / "reports").mkdir()
    code, out, err = verify(project / "deploy")
    assert code == 0, err
    assert out == ""
    assert json.loads((project / "deploy" / "reports" / "gate.json").read_text())["verdict"] == "pass"


def test_unknown_keys_are_exit_2_with_the_line_and_the_likely_key(project: Path) -> None:
    (project / ".kvcheck.yaml").write_text("format: json\nverify:\n  mode: estimate\n  timout: 5\nfial-on: warning\n")
    code, out, err = verify(project / "deploy")
    assert (code, out) == (2, "")
    assert "2 errors in the settings file:" in err
    assert f"{project / '.kvcheck.yaml'}:4:3: unknown setting 'verify.timout'; did you mean 'timeout'?" in err
    assert f"{project / '.kvcheck.yaml'}:5:1: unknown setting 'fial-on'; did you mean 'fail-on'?" in err


def test_a_value_outside_the_options_type_is_exit_2(project: Path) -> None:
    (project / ".kvcheck.yaml").write_text("fail-on: never\nverify:\n  mode: estimate\n")
    code, _, err = verify(project / "deploy")
    assert code == 2
    assert "'never' is not one of 'error', 'warning'" in err


def test_no_config_and_an_explicit_config(project: Path, tmp_path: Path) -> None:
    (project / ".kvcheck.yaml").write_text("verify:\n  mode: nonsense\n")
    assert verify(project / "deploy")[0] == 2  # the file is read: 'nonsense' is no mode
    done = run_kvcheck("--no-config", "verify", "manifest.yaml", "--mode", "estimate", cwd=project / "deploy")
    assert done.exit_code == 0, done.stderr
    assert "defaults from" not in done.stderr
    other = tmp_path / "ci.toml"
    other.write_text('format = "json"\nfail-on = "warning"\n[verify]\nmode = "estimate"\n')
    code, out, err = verify(project / "deploy", "--config", str(other))
    assert code == 1 and json.loads(out)["verdict"] == "fail", err
    code, _, err = verify(project / "deploy", "--config", str(tmp_path / "missing.toml"))
    assert code == 2 and "--config" in err and "no such file" in err


def test_a_bad_setting_is_exit_2_at_its_line_and_a_command_is_a_table(project: Path) -> None:
    # a bad value was click's usage error with no file:line, and `audit: [1, 2]` "did you mean 'audit'?"
    settings = project / ".kvcheck.yaml"
    settings.write_text("audit: [1, 2]\nfail-on: never\nverify: {timeout: abc}\n")
    code, out, err = verify(project / "deploy")
    assert (code, out) == (2, "")
    lines = err.splitlines()
    assert lines[1:4] == [
        f"{settings}:1:1: 'audit' is a command: its settings are a table of its options (`audit: {{option: value}}`), "
        "not a list",
        lines[2],
        f"{settings}:3:19: --timeout: Invalid value: 'abc' is not a valid finite float.",
    ]
    assert lines[2].startswith(f"{settings}:2:10: --fail-on: Invalid value: 'never' is not one of ")
    # a top-level value one command takes is set for it only (verify's markdown, not import's yaml|json)
    settings.write_text("format: markdown\nverify: {mode: estimate}\n")
    code, out, err = verify(project / "deploy")
    assert code == 0, err
    assert out.startswith("## kvcheck verify")


def test_a_settings_file_that_is_a_loop_of_links_is_not_ignored_in_silence(project: Path) -> None:
    settings = project / ".kvcheck.yaml"
    settings.symlink_to(settings)
    code, _, err = verify(project / "deploy")
    assert code == 2
    assert f"kvcheck: error: {settings}: the settings file is a loop of symbolic links, not a file" in err
