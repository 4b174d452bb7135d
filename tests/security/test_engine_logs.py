"""Engine logs on disk (measure mode, --logs-dir): no planted symlink is followed, files are the owner's
only, and an engine that logs nonstop keeps a bounded head and tail on disk."""

from __future__ import annotations

import json
import stat
import sys
from pathlib import Path

from tests.security.helpers import PEAK_MIB_LIMIT, attack

MANIFEST = """\
name: noisy
context_length: 131072
model: {{path: meta-llama/Llama-3.1-8B-Instruct}}
engine:
  version: "0.5.23"
  command: [{python}, {engine}]
gpu: H100
roles:
  server: {{gpus: [0]}}
"""

# 96 MiB of output in 1 KiB lines, then a crash: more than the log's 64 MiB head plus 16 MiB tail.
NOISY_ENGINE = """\
import sys
line = "x" * 1000
out = sys.stdout
for i in range(96 * 1024):
    out.write(f"{i:08d} {line}\\n")
out.write("RuntimeError: the last line\\n")
out.flush()
sys.exit(1)
"""


def manifest(tmp_path: Path) -> Path:
    engine = tmp_path / "engine.py"
    engine.write_text(NOISY_ENGINE)
    path = tmp_path / "deploy.yaml"
    path.write_text(MANIFEST.format(python=json.dumps(sys.executable), engine=json.dumps(str(engine))))
    return path


def test_a_planted_symlink_in_the_logs_dir_is_not_followed(tmp_path):
    logs = tmp_path / "logs"
    logs.mkdir()
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    (logs / "server.log").symlink_to(victim)
    out = attack("verify", str(manifest(tmp_path)), "--no-gpu-check", "--logs-dir", str(logs), timeout=120)
    assert out.exit_code == 2, out.stderr
    assert f"--logs-dir {logs}: cannot write server.log" in out.stderr
    assert victim.read_text() == "precious\n"


def test_an_engine_that_logs_nonstop_keeps_a_bounded_head_and_tail(tmp_path):
    logs = tmp_path / "logs"
    out = attack("verify", str(manifest(tmp_path)), "--no-gpu-check", "--logs-dir", str(logs), "--format", "json",
                 timeout=300)
    assert out.exit_code == 3, out.stderr
    log = logs / "server.log"
    assert stat.S_IMODE(log.stat().st_mode) == 0o600
    size = log.stat().st_size
    assert 80 * 2**20 <= size <= 81 * 2**20  # 64 MiB head + 16 MiB tail + the marker line
    text = log.read_text()
    assert text.startswith("00000000 ")
    assert "lines of engine output left out here: the log keeps its first 64 MiB and last 16 MiB]" in text
    assert text.endswith("RuntimeError: the last line\n")
    assert out.peak_mib < PEAK_MIB_LIMIT
