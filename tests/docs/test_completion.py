"""Shell completion, as docs/index.md documents it: click's completion for the `kvcheck` command."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.conftest import REPO_ROOT

# the console script's name is what the completion variable is derived from (_KVCHECK_COMPLETE)
RUN_AS_KVCHECK = "import sys; from kvcheck.cli import main; sys.argv[0] = 'kvcheck'; main(prog_name='kvcheck')"


def complete(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", RUN_AS_KVCHECK], cwd=REPO_ROOT, capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(REPO_ROOT), **env}, timeout=60)


@pytest.mark.parametrize("shell", ["bash", "zsh", "fish"])
def test_the_documented_source_command_prints_a_completion_script(shell: str) -> None:
    done = complete({"_KVCHECK_COMPLETE": f"{shell}_source"})
    assert done.returncode == 0 and "_KVCHECK_COMPLETE" in done.stdout, done.stderr
    docs = (REPO_ROOT / "docs" / "index.md").read_text(encoding="utf-8")
    assert f"_KVCHECK_COMPLETE={shell}_source kvcheck" in docs


def test_commands_and_formats_complete_from_the_registries() -> None:
    commands = complete({"_KVCHECK_COMPLETE": "bash_complete", "COMP_WORDS": "kvcheck ve", "COMP_CWORD": "1"})
    assert commands.stdout.split() == ["plain,verify"]
    formats = complete({"_KVCHECK_COMPLETE": "bash_complete", "COMP_WORDS": "kvcheck verify --format ",
                        "COMP_CWORD": "3"})
    assert formats.stdout.split() == [f"plain,{f}" for f in ("github", "gitlab", "json", "junit", "markdown", "sarif", "table")]
