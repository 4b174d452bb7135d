"""Where the tests and benches find real-world inputs: tests/data (tests/data/README.md gives sources).

Logs, the independent flag catalogue and the Hugging Face model configs are in the repository, so a
plain clone runs every test. $KVCHECK_TEST_MODELS points the tests at another folder of
<org>--<model>.json configs (to try the estimator on more models).
"""

from __future__ import annotations

import os
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
TEST_DATA = REPO_ROOT / "tests" / "data"
LOGS = TEST_DATA / "logs"
DATAPOINTS = LOGS / "datapoints.yaml"
FLAGS_0_5_23 = TEST_DATA / "sglang" / "flags-0.5.23.json"
_MODELS_IN_REPO = TEST_DATA / "models"
MODELS = Path(
    os.environ.get("KVCHECK_TEST_MODELS")
    or _MODELS_IN_REPO
).resolve()
MODELS_ABSENT = (
    f"real model configs absent ({MODELS}): tests/data/models is missing from this checkout, or "
    "KVCHECK_TEST_MODELS names a folder that does not exist"
)
