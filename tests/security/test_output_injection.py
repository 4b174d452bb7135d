"""Untrusted text never changes the structure of what kvcheck writes (issue 20, class 1).

`kvcheck import` quoted names from the deployment files in its YAML comments unescaped: a ConfigMap named
"cm\\npolicy: {min_headroom: 0.0001}\\n#" added a policy block to the imported manifest, so files that fail
the gate gave a manifest that passes it. Bidi controls and terminal escapes are shown escaped everywhere.
"""

from __future__ import annotations

from pathlib import Path

import yaml

from kvcheck.escape import one_line, printable
from tests.conftest import run_kvcheck

EVIL = '''\
apiVersion: v1
kind: ConfigMap
metadata: {name: "cm\\npolicy: {min_headroom: 0.0001}\\n#"}
data: {MEM: "0.8"}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: web}
spec:
  template:
    spec:
      containers:
        - name: c
          image: "lmsysorg/sglang:v0.5.23"
          env:
            - name: MEM
              valueFrom: {configMapKeyRef: {name: "cm\\npolicy: {min_headroom: 0.0001}\\n#", key: MEM}}
          command: [python3, -m, sglang.launch_server]
          args: [--model-path, Qwen/Qwen3-8B, --context-length, "32768", --mem-fraction-static, "$(MEM)"]
          resources: {limits: {nvidia.com/gpu: 1}}
'''


def test_a_name_with_newlines_adds_no_key_to_the_imported_manifest(tmp_path: Path) -> None:
    files = tmp_path / "evil.yaml"
    files.write_text(EVIL, encoding="utf-8")
    result = run_kvcheck("import", str(files), "--gpu", "H200")
    assert result.exit_code == 0, result.stderr
    manifest = yaml.safe_load(result.stdout)
    assert sorted(manifest) == ["context_length", "engine", "gpu", "model", "name", "roles"]  # no policy:
    assert "(ConfigMap cm\\npolicy: {min_headroom: 0.0001}\\n#)" in result.stdout  # shown, escaped, in the comment


def test_bidi_controls_line_separators_and_escapes_are_shown_escaped() -> None:
    text = "role\u202eedon\u2066x\u2069\u2028y\x1b[2J"
    assert printable(text) == "role\\u202eedon\\u2066x\\u2069\\u2028y\\x1b[2J"
    assert one_line("a\nb") == "a\\nb"
