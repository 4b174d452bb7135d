"""The `kvcheck-verify` pre-commit hook, for real: `pre-commit try-repo` and a blocked `git commit`.

pre-commit installs the hook's Python environment from a copy of this checkout with pip, so the
first run needs the package index (or the mirror pip is configured with); PRE_COMMIT_HOME is a
temporary folder, so nothing outside the test's tree is touched.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from kvcheck.precommit import split_files
from tests.conftest import EXAMPLES, REPO_ROOT

# what `pip install` of the hook repository needs (the rest of the checkout is not copied)
HOOK_REPO_PATHS = ("setup.py", "pyproject.toml", "README.md", ".pre-commit-hooks.yaml", "kvcheck", "profiles")


def git(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.invalid",
           "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.invalid"}
    return subprocess.run(["git", *args], cwd=cwd, env=env, capture_output=True, text=True, check=True)


def hook_repository(root: Path) -> tuple[Path, str]:
    """This checkout's working tree (tracked and new files) as a one-commit git repository; (path, sha)."""
    listed = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z", "--",
                             *HOOK_REPO_PATHS], cwd=REPO_ROOT, capture_output=True, text=True, check=True)
    for name in filter(None, listed.stdout.split("\0")):
        source = REPO_ROOT / name
        if source.is_file():
            (root / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, root / name)
    git(root, "init", "-q")
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "kvcheck")
    return root, git(root, "rev-parse", "HEAD").stdout.strip()


def user_repository(root: Path) -> Path:
    """A repository with a passing and a failing manifest (and the model configs they name)."""
    for name, example in (("ok", "single-server"), ("bad", "incident")):
        folder = root / "deploy" / name
        folder.mkdir(parents=True)
        for file in (EXAMPLES / example).iterdir():
            shutil.copy2(file, folder / file.name)
    git(root, "init", "-q")
    return root


def pre_commit(cwd: Path, home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PRE_COMMIT_HOME": str(home), "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.invalid",
           "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.invalid"}
    env.pop("PYTHONPATH", None)  # the hook must run from its own environment, not this checkout
    return subprocess.run([sys.executable, "-m", "pre_commit", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=900)


@pytest.mark.precommit
def test_hook_passes_a_passing_manifest_and_blocks_a_failing_one(tmp_path: Path) -> None:
    hooks, sha = hook_repository(tmp_path / "kvcheck")
    user = user_repository(tmp_path / "user")
    home = tmp_path / "pre-commit-home"

    ok = pre_commit(user, home, "try-repo", str(hooks), "kvcheck-verify", "--files", "deploy/ok/manifest.yaml")
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert "kvcheck verify (estimate)" in ok.stdout and "Passed" in ok.stdout

    bad = pre_commit(user, home, "try-repo", str(hooks), "kvcheck-verify", "--files", "deploy/bad/manifest.yaml",
                     "deploy/ok/manifest.yaml")
    assert bad.returncode == 1, bad.stdout + bad.stderr
    assert "Failed" in bad.stdout
    assert "kvcheck verify: FAIL (exit 1)  deploy/bad/manifest.yaml" in bad.stdout
    assert "kvcheck verify: PASS (exit 0)  deploy/ok/manifest.yaml" in bad.stdout

    # installed as a git hook, it blocks the commit of the failing manifest and lets the passing one in
    (user / ".pre-commit-config.yaml").write_text(
        f"repos:\n  - repo: {hooks}\n    rev: {sha}\n    hooks:\n      - id: kvcheck-verify\n", encoding="utf-8"
    )
    assert pre_commit(user, home, "install").returncode == 0
    git(user, "add", ".pre-commit-config.yaml", "deploy/ok")
    git(user, "commit", "-q", "-m", "a manifest that holds its window")
    git(user, "add", "deploy/bad")
    blocked = subprocess.run(["git", "commit", "-q", "-m", "the incident's manifest"], cwd=user, capture_output=True,
                             text=True, env={**os.environ, "PRE_COMMIT_HOME": str(home),
                                             "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.invalid",
                                             "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.invalid"})
    assert blocked.returncode == 1
    assert "KV101" in blocked.stdout + blocked.stderr
    assert git(user, "log", "--format=%s").stdout.splitlines() == ["a manifest that holds its window"]


def test_hook_entry_keeps_the_hooks_args_and_checks_each_file_on_its_own() -> None:
    assert split_files(["--strict", "--role", "prefill", "a.yaml", "b.yaml"]) == (
        ["--strict", "--role", "prefill"], ["a.yaml", "b.yaml"]
    )
    assert split_files(["a.yaml"]) == ([], ["a.yaml"])
