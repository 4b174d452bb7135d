"""Engine logs on disk (measure mode, --logs-dir): each run writes its own folder, files are created
exclusively and never through a planted symlink, they are the owner's only, and an engine that logs
nonstop keeps a bounded head and tail on disk."""

from __future__ import annotations

import concurrent.futures
import json
import re
import stat
import sys
from pathlib import Path

import pytest

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


QUICK_ENGINE = """\
import sys
print("RuntimeError: engine " + sys.argv[sys.argv.index("--port") + 1] + " stops here", flush=True)
sys.exit(1)
"""


def manifest(tmp_path: Path, engine_text: str = NOISY_ENGINE, name: str = "engine") -> Path:
    engine = tmp_path / f"{name}.py"
    engine.write_text(engine_text)
    path = tmp_path / f"{name}.yaml"
    path.write_text(MANIFEST.format(python=json.dumps(sys.executable), engine=json.dumps(str(engine))))
    return path


def quick_manifest(tmp_path: Path) -> Path:
    return manifest(tmp_path, QUICK_ENGINE, "quick")


def run_folder(logs: Path) -> Path:
    [folder] = [p for p in logs.iterdir() if p.is_dir() and not p.is_symlink()]
    assert re.fullmatch(r"\d{8}T\d{6}Z-[0-9a-f]{6}", folder.name)
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    return folder


def test_a_planted_symlink_in_the_logs_dir_is_not_followed(tmp_path):
    logs = tmp_path / "logs"
    logs.mkdir()
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    (logs / "server.log").symlink_to(victim)  # where the log went before runs had their own folder
    out = attack("verify", str(quick_manifest(tmp_path)), "--no-gpu-check", "--logs-dir", str(logs), timeout=120)
    assert out.exit_code == 3, out.stderr
    assert victim.read_text() == "precious\n"
    log = run_folder(logs) / "server.log"
    assert "stops here" in log.read_text()


def test_the_log_file_is_created_exclusively_never_through_a_link(tmp_path):
    from kvcheck.backends.measure.launchers.process import create_log, open_log

    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    (tmp_path / "link.log").symlink_to(victim)
    (tmp_path / "dangling.log").symlink_to(tmp_path / "nowhere")
    (tmp_path / "there.log").write_text("another run's log\n")
    for name in ("link.log", "dangling.log", "there.log"):
        with pytest.raises(FileExistsError):
            create_log(tmp_path / name)
    with pytest.raises(OSError, match="Too many levels of symbolic links"):
        open_log(tmp_path / "link.log")  # swapped for a link after it was created
    assert victim.read_text() == "precious\n"
    assert not (tmp_path / "nowhere").exists()
    assert (tmp_path / "there.log").read_text() == "another run's log\n"


def test_concurrent_runs_into_one_logs_dir_keep_their_own_logs(tmp_path):
    # Two runs at once into one --logs-dir: each writes its own run folder and its own complete log
    # (they overwrote each other's server.log before).
    logs = tmp_path / "logs"
    manifest = quick_manifest(tmp_path)
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        runs = list(pool.map(
            lambda _: attack("verify", str(manifest), "--no-gpu-check", "--logs-dir", str(logs), "--format", "json",
                             timeout=120, process=True),  # two kvcheck processes at once
            range(2),
        ))
    folders = sorted(p for p in logs.iterdir())
    assert len(folders) == 2
    reported = set()
    for out in runs:
        assert out.exit_code == 3, out.stderr
        [role] = json.loads(out.stdout)["roles"]
        log = Path(role["details"]["log_file"])
        assert log.parent in folders and log.name == "server.log"
        port = role["details"]["ports"]["http"]
        assert log.read_text().splitlines()[0] == f"RuntimeError: engine {port} stops here"
        assert stat.S_IMODE(log.stat().st_mode) == 0o600
        reported.add(log.parent)
    assert reported == set(folders)


def test_an_engine_that_logs_nonstop_keeps_a_bounded_head_and_tail(tmp_path):
    logs = tmp_path / "logs"
    out = attack("verify", str(manifest(tmp_path)), "--no-gpu-check", "--logs-dir", str(logs), "--format", "json",
                 timeout=300, process=True)
    assert out.exit_code == 3, out.stderr
    log = run_folder(logs) / "server.log"
    assert stat.S_IMODE(log.stat().st_mode) == 0o600
    size = log.stat().st_size
    assert 80 * 2**20 <= size <= 81 * 2**20  # 64 MiB head + 16 MiB tail + the marker line
    text = log.read_text()
    assert text.startswith("00000000 ")
    assert "lines of engine output left out here: the log keeps its first 64 MiB and last 16 MiB]" in text
    assert text.endswith("RuntimeError: the last line\n")
    assert out.peak_mib < PEAK_MIB_LIMIT
