"""Shell completion through click's environment-variable protocol, as `eval "$(_KVCHECK_COMPLETE=bash_source
kvcheck)"` installs it: GPU names from the profiles, rule codes, and the roles of the files on the line."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.conftest import REPO_ROOT

FIX = "tests/inputs/deploy/fixtures"
# what the `kvcheck` console script runs (its argv[0] names the program, hence the variable's name)
SCRIPT = "from kvcheck.cli import main; main(prog_name='kvcheck')"


def complete(line: str, shell: str = "bash", cwd: Path = REPO_ROOT) -> list[str]:
    """The candidates the shell gets for the last word of `line` (an empty last word after a space)."""
    words = line.split()
    cword = len(words) if line.endswith(" ") else len(words) - 1
    env = {**os.environ, "_KVCHECK_COMPLETE": f"{shell}_complete", "COMP_WORDS": line, "COMP_CWORD": str(cword)}
    done = subprocess.run([sys.executable, "-c", SCRIPT], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=60, check=False)
    assert (done.returncode, done.stderr) == (0, "")
    if shell == "bash":  # one `type,value` line per candidate
        return [entry.split(",", 1)[1] for entry in done.stdout.splitlines() if entry]  # none: one empty line
    lines = done.stdout.splitlines()  # zsh: type, value, help (`_` for none), three lines per candidate
    return [lines[i + 1] for i in range(0, len(lines), 3)]


def test_gpu_names_come_from_the_profiles() -> None:
    assert complete("kvcheck verify deploy.yaml --gpu H1") == ["H100-NVL", "H100-PCIe", "H100"]
    assert complete("kvcheck plan deploy.yaml --gpu h20") == ["H20", "H200-NVL", "H200"]  # as typed, any case
    assert complete("kvcheck import --gpu zz") == []


def test_a_profile_folder_adds_its_names(tmp_path: Path) -> None:
    shipped = next((REPO_ROOT / "profiles" / "gpus").glob("*.yaml"))
    text = shipped.read_text(encoding="utf-8")
    name = next(line.split(":", 1)[1].strip() for line in text.splitlines() if line.startswith("name:"))
    (tmp_path / "lab.yaml").write_text(text.replace(f"name: {name}", "name: LabCard-9000"), encoding="utf-8")
    assert complete(f"kvcheck verify --profiles {tmp_path} deploy.yaml --gpu Lab") == ["LabCard-9000"]


def test_rule_codes_complete_with_their_titles() -> None:
    assert complete("kvcheck rules KV60") == ["KV601", "KV602", "KV603"]
    env = {**os.environ, "_KVCHECK_COMPLETE": "zsh_complete", "COMP_WORDS": "kvcheck rules kv10", "COMP_CWORD": "2"}
    done = subprocess.run([sys.executable, "-c", SCRIPT], cwd=REPO_ROOT, env=env, capture_output=True, text=True,
                          timeout=60, check=True)
    assert done.stdout.splitlines()[:3] == ["plain", "KV101", "a role's KV pool is below min_headroom x context_length"]


def test_role_names_come_from_the_files_on_the_line() -> None:
    assert complete(f"kvcheck plan {FIX}/lws-pd.yaml --role ") == ["glm-prefill", "glm-decode"]
    assert complete(f"kvcheck verify {FIX}/disaggregatedset-v1-role-spec.yaml --role d") == ["decode"]
    # a role already chosen is not offered again; zsh gets the same names
    assert complete(f"kvcheck verify {FIX}/lws-pd.yaml --role glm-prefill --role ", shell="zsh") == ["glm-decode"]
    # no file yet, or a file kvcheck cannot read: nothing, and no error on the terminal
    assert complete("kvcheck verify --role ") == []
    assert complete("kvcheck verify missing.yaml --role ") == []


def test_the_documented_install_line_prints_a_bash_function() -> None:
    env = {**os.environ, "_KVCHECK_COMPLETE": "bash_source"}
    done = subprocess.run([sys.executable, "-c", SCRIPT], cwd=REPO_ROOT, env=env, capture_output=True, text=True,
                          timeout=60, check=True)
    assert "_kvcheck_completion()" in done.stdout and "complete -o nosort -F _kvcheck_completion kvcheck" in done.stdout
