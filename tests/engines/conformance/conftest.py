"""The conformance suite: the same cases, through the CLI, against the engine double
(tests/doubles/fake_sglang.py) and against real SGLang 0.5.23 on CPU (tests/engines/real/), so the
double is held to what the real engine does. Where they differ, the double follows the real engine.

The real side needs the install of tests/engines/real/README.md (KVCHECK_REAL_SGLANG); without it
the real cases skip, or fail under KVCHECK_TEST_REAL=required (CI). The double side always runs.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT
from tests.engines.real.conftest import RealSglang, real_sglang  # noqa: F401  (the real side's fixture)

FAKE_SGLANG = REPO_ROOT / "tests" / "doubles" / "fake_sglang.py"
# The real tiny model's config as far as the double reads it (make_tiny_model.py: 8,192 positions).
TINY_CONFIG = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "max_position_embeddings": 8192,
               "vocab_size": 8192, "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
               "num_key_value_heads": 2, "head_dim": 16}


@dataclass(frozen=True)
class DoubleSglang:
    """The double, shaped like RealSglang for the real harness's manifest writer and verify()."""

    model: Path

    @property
    def python(self) -> Path:
        return Path(sys.executable)

    def command(self) -> list[str]:
        return [sys.executable, str(FAKE_SGLANG)]


ENGINES = [
    pytest.param("double", marks=pytest.mark.slow),
    pytest.param("real", marks=[pytest.mark.real_engine, pytest.mark.slow, pytest.mark.xdist_group("real_engine")]),
]


@pytest.fixture(scope="module", params=ENGINES)
def engine(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> RealSglang | DoubleSglang:
    if request.param == "real":
        real: RealSglang = request.getfixturevalue("real_sglang")
        return real
    model = tmp_path_factory.mktemp("tiny-model")
    (model / "config.json").write_text(json.dumps(TINY_CONFIG))
    return DoubleSglang(model)
