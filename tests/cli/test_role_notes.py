"""A role's note (a log holding two engine starts is judged on the last one) shows in every human format,
not in JSON alone."""

from __future__ import annotations

import json
from pathlib import Path

from tests.conftest import REPO_ROOT, run_kvcheck

LOG = REPO_ROOT / "tests/data/real-engines/sglang-0.5.23-cpu-decode-pool2048.log"
NOTE = "the log holds 2 engine starts; the figures are from the last"


def _restarted(tmp_path: Path) -> str:
    """A real SGLang log, restarted in the same stream (the engine's output twice, as a restarted pod's)."""
    text = LOG.read_text(encoding="utf-8")
    path = tmp_path / "restarted.log"
    path.write_text(text + text, encoding="utf-8")
    return str(path)


def test_the_last_start_note_is_in_every_human_format(tmp_path: Path) -> None:
    log = _restarted(tmp_path)
    report = json.loads(run_kvcheck("logs", log, "--format", "json").stdout)
    assert report["roles"][0]["details"]["note"] == NOTE
    table = run_kvcheck("logs", log)
    assert table.exit_code == 1  # the pool of 2,048 tokens is below the log's 4,096 window
    assert f"note [restarted.log]: {NOTE}" in table.stdout.splitlines()
    markdown = run_kvcheck("logs", log, "--format", "markdown")
    assert f"- note (restarted.log): {NOTE}" in markdown.stdout.splitlines()
    github = run_kvcheck("logs", log, "--format", "github")
    assert f"::notice title=kvcheck restarted.log::{NOTE}" in github.stdout.splitlines()


def test_a_single_start_has_no_note() -> None:
    for fmt in ("table", "markdown", "github"):
        done = run_kvcheck("logs", str(LOG), "--format", fmt)
        assert done.exit_code == 1
        assert "engine starts" not in done.stdout
