"""Report files and format detection (issue 20, class 9).

`--output` and `--report FORMAT=FILE` wrote through an existing symbolic link and could overwrite the
manifest being checked; a `helm template` stream over 4 MiB given as a file was taken for a kvcheck
manifest (and refused as one) while the same bytes on stdin were read as deployment files. Report files
are now opened without following a link, never over an input of the run (by device and inode), and a
file's kind is told by its content, whatever its size.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import click
import pytest

from kvcheck.report.outputs import write_output
from tests.conftest import REPO_ROOT
from tests.security.helpers import attack

EXAMPLE = REPO_ROOT / "docs" / "examples" / "single-server"
CONFIG = "llama-3.1-8b-instruct.config.json"
VERIFY = ("verify", "manifest.yaml", "--mode", "estimate", "--format", "json")


@pytest.fixture
def run_dir(tmp_path: Path) -> Path:
    """The single-server example (a manifest and the model config it names) in a folder of its own."""
    shutil.copy(EXAMPLE / "manifest.yaml", tmp_path / "manifest.yaml")
    shutil.copy(EXAMPLE / CONFIG, tmp_path / CONFIG)
    return tmp_path


def _snapshot(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in folder.iterdir() if p.is_file() and not p.is_symlink()}


@pytest.mark.parametrize("option", ["--output", "--report json", "--report sarif"])
@pytest.mark.parametrize("target", ["victim.txt", "manifest.yaml", "missing.txt"])
def test_a_report_file_that_is_a_symbolic_link_is_refused(run_dir: Path, option: str, target: str) -> None:
    (run_dir / "victim.txt").write_text("keep me\n")
    (run_dir / "out.json").symlink_to(target)  # to a file, to the input, or dangling (would create it)
    before = _snapshot(run_dir)
    args = ("--output", "out.json") if option == "--output" else ("--report", f"{option.split()[1]}=out.json")
    out = attack(*VERIFY, *args, cwd=run_dir)
    assert out.exit_code == 2, out.stderr
    assert "out.json is a symbolic link: kvcheck does not write a report through one" in out.stderr
    assert _snapshot(run_dir) == before  # nothing written, nothing created
    assert not (run_dir / "missing.txt").exists()


@pytest.mark.parametrize("spelling", ["manifest.yaml", "./manifest.yaml", "{dir}/manifest.yaml", "hard-link.yaml",
                                      CONFIG])
@pytest.mark.parametrize("option", ["--output", "--report markdown"])
def test_a_report_file_never_overwrites_an_input(run_dir: Path, spelling: str, option: str) -> None:
    os.link(run_dir / "manifest.yaml", run_dir / "hard-link.yaml")
    path = spelling.format(dir=run_dir)
    before = _snapshot(run_dir)
    args = ("--output", path) if option == "--output" else ("--report", f"{option.split()[1]}={path}")
    out = attack(*VERIFY, *args, cwd=run_dir)
    assert out.exit_code == 2, out.stderr
    assert "is one of this run's input files" in out.stderr
    assert "the report would overwrite it" in out.stderr
    assert _snapshot(run_dir) == before


def test_two_report_files_that_are_one_file_are_refused(run_dir: Path) -> None:
    out = attack(*VERIFY, "--output", "r.json", "--report", "sarif=./r.json", cwd=run_dir)
    assert out.exit_code == 2, out.stderr
    assert "--report sarif=r.json: --output r.json writes the same file" in out.stderr
    assert not (run_dir / "r.json").exists()


def test_a_fifo_as_a_report_file_is_refused_without_blocking(run_dir: Path) -> None:
    os.mkfifo(run_dir / "pipe")
    out = attack(*VERIFY, "--output", "pipe", cwd=run_dir, timeout=30)
    assert out.exit_code == 2, out.stderr
    assert "pipe exists and is not a regular file" in out.stderr


def test_report_files_are_created_and_replaced_in_place(run_dir: Path) -> None:
    (run_dir / "old.sarif").write_text("x" * 100_000)  # longer than the report: the file is truncated
    out = attack(*VERIFY, "--output", "new.json", "--report", "sarif=old.sarif", cwd=run_dir)
    assert out.exit_code == 0, out.stderr
    assert json.loads((run_dir / "new.json").read_text())["verdict"] == "pass"
    assert json.loads((run_dir / "old.sarif").read_text())["version"] == "2.1.0"
    # a device is not a file to protect: --output /dev/null beside a --report file still works
    out = attack(*VERIFY, "--output", "/dev/null", "--report", "junit=r.xml", cwd=run_dir)
    assert out.exit_code == 0, out.stderr
    assert (run_dir / "r.xml").read_text().startswith("<?xml")


def test_a_link_planted_after_the_check_is_not_written_through(tmp_path: Path) -> None:
    """write_output itself opens with O_NOFOLLOW: a link swapped in between the check and the write."""
    (tmp_path / "victim").write_text("keep me\n")
    (tmp_path / "report.json").symlink_to(tmp_path / "victim")
    with pytest.raises(click.UsageError, match="is a symbolic link"):
        write_output(tmp_path / "report.json", "{}", "--output report.json")
    assert (tmp_path / "victim").read_text() == "keep me\n"


def _helm_stream() -> str:
    """The Helm fixture's rendered chart padded past 4 MiB with a ConfigMap (a platform's worth of output)."""
    chart = (REPO_ROOT / "tests" / "inputs" / "deploy" / "fixtures" / "helm" / "rendered-good.yaml").read_text()
    pad = "".join(f"  key{i}: {'v' * 100}\n" for i in range(45_000))
    return f"{chart}\n---\napiVersion: v1\nkind: ConfigMap\nmetadata: {{name: platform}}\ndata:\n{pad}"


def test_a_helm_stream_over_4_mib_is_read_as_deployment_files_from_a_file_as_from_stdin(tmp_path: Path) -> None:
    text = _helm_stream()
    assert len(text.encode()) > 4 * 1024 * 1024
    path = tmp_path / "rendered.yaml"
    path.write_text(text)
    args = ("--mode", "estimate", "--gpu", "H200", "--model-config", str(EXAMPLE / CONFIG), "--format", "json")
    from_file = attack("verify", str(path), *args)
    from_stdin = attack("verify", "-", *args, stdin=text)
    assert (from_file.exit_code, from_stdin.exit_code) == (0, 0), (from_file.stderr, from_stdin.stderr)
    roles = [[(r["name"], r["pool_tokens"]) for r in json.loads(out.stdout)["roles"]] for out in (from_file, from_stdin)]
    assert roles[0] == roles[1] == [("llama-sglang", roles[0][0][1])]


def test_a_manifest_over_4_mib_is_still_refused_as_a_manifest(tmp_path: Path) -> None:
    manifest = (EXAMPLE / "manifest.yaml").read_text().replace(f"config: {CONFIG}", f"config: {EXAMPLE / CONFIG}")
    path = tmp_path / "big.yaml"
    path.write_text(manifest + "# padding\n" * 500_000)
    out = attack("verify", str(path), "--mode", "estimate")
    assert out.exit_code == 2, out.stderr
    assert f"{path}: {path.stat().st_size:,} bytes is too large for a manifest file" in out.stderr
