"""docs/rules.md is generated from the registry; it must list every rule the code defines."""

import subprocess
import sys

from tests.conftest import REPO_ROOT


def test_rules_doc_is_up_to_date() -> None:
    proc = subprocess.run([sys.executable, "tools/gen_rules_doc.py", "--check"], cwd=REPO_ROOT,
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
