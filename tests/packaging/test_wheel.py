"""The wheel carries profiles/ (GPU profiles, flag catalogues) so an installed kvcheck works anywhere."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

from tests.conftest import REPO_ROOT


def test_wheel_ships_the_profiles(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(tmp_path), str(REPO_ROOT)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr
    [wheel] = tmp_path.glob("kvcheck-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    shipped = sorted(p.relative_to(REPO_ROOT / "profiles").as_posix()
                     for p in (REPO_ROOT / "profiles").rglob("*") if p.is_file())
    assert shipped, "profiles/ is empty"
    missing = [p for p in shipped if f"kvcheck/_profiles/{p}" not in names]
    assert missing == []
    assert "kvcheck/_profiles/sglang/flags-0.5.23.json" in names
