"""KV205: a manifest's mem-fraction-static above SGLang's own value for the GPU and role is a warning."""

from __future__ import annotations

import json
from pathlib import Path

from tests.conftest import EXAMPLES, run_kvcheck

CONFIG = EXAMPLES / "single-server" / "llama-3.1-8b-instruct.config.json"


def manifest(tmp_path: Path, fraction: float | None) -> Path:
    path = tmp_path / "m.yaml"
    args = f"args: {{mem-fraction-static: {fraction}}}\n" if fraction is not None else ""
    path.write_text(
        f"context_length: 131072\nmodel: {{path: meta-llama/Llama-3.1-8B-Instruct, config: {CONFIG}}}\n"
        f'engine: {{version: "0.5.23"}}\ngpu: H100\n{args}roles:\n  server: {{gpus: [0]}}\n',
        encoding="utf-8",
    )
    return path


def findings(path: Path, *extra: str) -> tuple[int, list[dict]]:
    done = run_kvcheck("verify", str(path), "--mode", "estimate", "--format", "json", *extra)
    return done.exit_code, json.loads(done.stdout)["findings"]


def test_a_fraction_above_sglangs_own_is_a_warning_on_its_line(tmp_path: Path) -> None:
    code, found = findings(manifest(tmp_path, 0.95))
    assert code == 0  # a warning: the pool holds the window
    (kv205,) = [f for f in found if f["rule"] == "KV205"]
    assert (kv205["severity"], kv205["role"]) == ("warning", "server")
    # SGLang's own value for an H100 at TP1 is 0.83 (what `kvcheck plan` shows as the safe maximum)
    assert kv205["message"].startswith("mem-fraction-static 0.95 is above 0.83, SGLang's own value for this GPU")
    assert kv205["hint"].startswith("set mem-fraction-static at most 0.83")
    assert kv205["location"] == {"file": str(tmp_path / "m.yaml"), "line": 5, "column": 8}  # the key
    strict, _ = findings(manifest(tmp_path, 0.95), "--strict")
    assert strict == 1


def test_a_fraction_at_or_below_sglangs_own_or_unset_is_silent(tmp_path: Path) -> None:
    for fraction in (0.83, 0.7, None):
        code, found = findings(manifest(tmp_path, fraction))
        assert (code, [f["rule"] for f in found if f["rule"] == "KV205"]) == (0, []), fraction


def test_plan_reports_the_same_warning_as_verify(tmp_path: Path) -> None:
    done = run_kvcheck("plan", str(manifest(tmp_path, 0.95)), "--format", "json")
    rules = [f["rule"] for f in json.loads(done.stdout)["findings"]]
    assert done.exit_code == 0 and rules.count("KV205") == 1
