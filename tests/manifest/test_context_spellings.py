"""`context_length: 128k`: the same spellings at the top level as SGLang's --context-length in args."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import EXAMPLES, run_kvcheck

CONFIG = EXAMPLES / "single-server" / "llama-3.1-8b-instruct.config.json"


def write(tmp_path: Path, window: str, role_args: str = "") -> Path:
    path = tmp_path / "m.yaml"
    path.write_text(
        f"context_length: {window}\nmodel: {{path: meta-llama/Llama-3.1-8B-Instruct, config: {CONFIG}}}\n"
        f'engine: {{version: "0.5.23"}}\ngpu: H100\nroles:\n  server: {{gpus: [0]{role_args}}}\n',
        encoding="utf-8",
    )
    return path


@pytest.mark.parametrize(("spelling", "tokens"), [("128k", 128_000), ("128Ki", 131_072), ("131072", 131_072),
                                                   ('"131072"', 131_072), ("1.5k", 1_500)])
def test_top_level_takes_sglangs_spellings(tmp_path: Path, spelling: str, tokens: int) -> None:
    done = run_kvcheck("verify", str(write(tmp_path, spelling)), "--mode", "estimate", "--format", "json")
    assert done.exit_code == 0, done.stderr
    assert json.loads(done.stdout)["context_length"] == tokens


def test_args_take_the_same_spelling_and_agree(tmp_path: Path) -> None:
    done = run_kvcheck("verify", str(write(tmp_path, "128k", ", args: {context-length: 128k}")), "--mode",
                       "estimate", "--format", "json")
    assert done.exit_code == 0, done.stderr
    data = json.loads(done.stdout)
    assert data["context_length"] == 128_000
    assert data["roles"][0]["argv"] == ["--context-length", "128000"] or "128k" in data["roles"][0]["argv"]


@pytest.mark.parametrize("spelling", ["12x", "128K", "true", "-5"])
def test_other_spellings_are_exit_2_at_the_value(tmp_path: Path, spelling: str) -> None:
    path = write(tmp_path, spelling)
    done = run_kvcheck("verify", str(path), "--mode", "estimate")
    assert (done.exit_code, done.stdout) == (2, "")
    assert done.stderr.splitlines()[1].startswith(f"{path}:1:17: context_length: ")
    assert "Traceback" not in done.stderr
