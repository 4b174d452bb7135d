"""A role whose weights leave no room for a KV pool: KV101 says the engine refuses to start, not that
"the largest context that fits is 0 tokens", and names what would give it room."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from tests.conftest import REPO_ROOT, run_kvcheck

CONFIG = REPO_ROOT / "docs" / "examples" / "incident" / "glm-5.2-fp8.config.json"
MANIFEST = """\
name: zero pool
context_length: 131072
model:
  path: zai-org/GLM-5.2-FP8
  config: glm-5.2-fp8.config.json
engine:
  version: "0.5.23"
gpu: H200
args:
  tp-size: 4
roles:
  server:
    gpus: [0, 1, 2, 3]
"""


def test_weights_that_fill_the_gpus_are_a_refused_start_with_the_settings_that_fit(tmp_path: Path) -> None:
    shutil.copy(CONFIG, tmp_path / CONFIG.name)
    (tmp_path / "m.yaml").write_text(MANIFEST)
    done = run_kvcheck("verify", str(tmp_path / "m.yaml"), "--mode", "estimate", "--format", "json")
    assert done.exit_code == 1, done.stderr
    report = json.loads(done.stdout)
    [kv101] = [f for f in report["findings"] if f["rule"] == "KV101"]
    assert kv101["message"] == (
        "no KV pool: the weights and the engine's own memory leave nothing for a KV cache under this memory "
        "fraction, so the engine refuses to start (predicted pool 0 tokens, 131,072 required)")
    assert kv101["hint"].startswith("the weights must leave room for a pool first; ")
    assert "tp-size 8 would hold" in kv101["hint"]
    assert "largest context that fits" not in kv101["hint"]
