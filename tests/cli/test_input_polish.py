"""Small things a new user meets first: stdin's name, --help's ranges and summaries, UTF-16 files, the
word for a folder, the README's install list."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT, run_kvcheck
from tests.datapaths import LOGS

COMMANDS = ("verify", "plan", "audit", "logs", "probe", "import", "cleanup", "schema", "rules")


def test_a_log_read_from_stdin_is_named_stdin_in_reports() -> None:
    log = (LOGS / "sglang-deepseek-r1-2x8xH20-tp16-k8s-doc.log").read_text()
    result = run_kvcheck("logs", "-", "--context-length", "1000", "--format", "json", stdin=log)
    assert result.exit_code == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["source"] == "<stdin>"
    table = run_kvcheck("logs", "-", "--context-length", "1000", stdin=log)
    assert table.stdout.splitlines()[0] == "kvcheck logs: PASS (exit 0)  <stdin>"


@pytest.mark.parametrize("command", COMMANDS)
def test_help_never_shows_an_unbounded_range_as_none(command: str) -> None:
    result = run_kvcheck(command, "--help")
    assert result.exit_code == 0
    assert "None]" not in result.stdout


def test_probe_help_shows_the_rate_default_alone() -> None:
    text = " ".join(run_kvcheck("probe", "--help").stdout.split())
    assert "Most request starts per second. [default: 2.0]" in text


def test_every_command_summary_is_whole_in_80_columns() -> None:
    result = run_kvcheck("--help", env={"COLUMNS": "80"})
    listed = result.stdout.split("Commands:\n", 1)[1].splitlines()
    assert sorted(line.split()[0] for line in listed) == sorted(COMMANDS)
    for line in listed:
        assert len(line) <= 80 and line.endswith(".") and "..." not in line, line


@pytest.mark.parametrize(("bom", "encoding"), [(b"\xff\xfe", "UTF-16"), (b"\xfe\xff", "UTF-16"),
                                               (b"\xff\xfe\x00\x00", "UTF-32")])
def test_a_utf16_file_is_named_utf16_not_binary(tmp_path: Path, bom: bytes, encoding: str) -> None:
    path = tmp_path / "manifest.yaml"
    text = "context_length: 8192\n"
    codec = {"UTF-16": "utf-16-le" if bom == b"\xff\xfe" else "utf-16-be", "UTF-32": "utf-32-le"}[encoding]
    path.write_bytes(bom + text.encode(codec))
    result = run_kvcheck("verify", str(path))
    assert (result.exit_code, result.stdout) == (2, "")
    assert result.stderr == (
        f"kvcheck: error: {path}: is {encoding} text (it starts with a {encoding} byte-order mark); a manifest "
        "file must be UTF-8\n"
        f"kvcheck: hint: save it as UTF-8 (iconv -f {encoding} -t UTF-8 FILE > NEW, or your editor's encoding menu)\n"
    )


def test_a_utf16_stream_on_stdin_is_named_utf16() -> None:
    result = run_kvcheck("import", "-", stdin="\ufeffservices: {}\n".encode("utf-16-le"))  # type: ignore[arg-type]
    assert result.exit_code == 2
    assert result.stderr.startswith("kvcheck: error: <stdin>: is UTF-16 text"), result.stderr


def test_a_folder_is_called_a_folder(tmp_path: Path) -> None:
    result = run_kvcheck("verify", str(tmp_path))
    assert (result.exit_code, result.stderr) == (2, f"kvcheck: error: {tmp_path}: is a folder, not a manifest file\n")


def test_the_readme_install_list_names_every_extra() -> None:
    import tomllib

    extras = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    install = (REPO_ROOT / "README.md").read_text().split("## Install", 1)[1].split("\n## ", 1)[0]
    for extra in sorted(set(extras) - {"dev"}):
        assert f"'.[{extra}]'" in install, extra
