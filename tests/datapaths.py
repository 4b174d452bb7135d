"""Where the tests and benches find real-world inputs: tests/data, and the model configs kept outside.

Logs and the independent flag catalogue are in the repository (tests/data/README.md gives their
sources). Hugging Face model configs are not: their folder asks not to be copied, so they are read
from $KVCHECK_TEST_MODELS, else tests/data/models if it exists, else ../shared/data/models beside the
checkout, and tests skip without them.
"""

from __future__ import annotations

import os
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
TEST_DATA = REPO_ROOT / "tests" / "data"
LOGS = TEST_DATA / "logs"
DATAPOINTS = LOGS / "datapoints.yaml"
FLAGS_0_5_23 = TEST_DATA / "sglang" / "flags-0.5.23.json"
_MODELS_IN_REPO = TEST_DATA / "models"  # used if configs are ever allowed into the repository
MODELS = Path(
    os.environ.get("KVCHECK_TEST_MODELS")
    or (_MODELS_IN_REPO if _MODELS_IN_REPO.is_dir() else REPO_ROOT.parent / "shared" / "data" / "models")
).resolve()
MODELS_ABSENT = (
    f"real model configs absent ({MODELS}): they are not copied into the repository at their source's "
    "request; set KVCHECK_TEST_MODELS to a folder of <org>--<model>.json configs"
)
