"""The conformance suite: the same cases, through the CLI, against each engine's double
(tests/doubles/fake_sglang.py, fake_vllm.py) and against the real engine on CPU (SGLang 0.5.23, vLLM
0.32.0; tests/engines/real/), so the double is held to what the real engine does. Where they differ,
the double follows the real engine.

The real side needs the installs of tests/engines/real/README.md (KVCHECK_REAL_SGLANG,
KVCHECK_REAL_VLLM); without them
the real cases skip, or fail under KVCHECK_TEST_REAL=required (CI). The double side always runs.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT
from tests.engines.real.conftest import RealSglang, real_sglang  # noqa: F401  (the real side's fixture)
from tests.engines.real.test_vllm_real import RealVllm, real_vllm  # noqa: F401  (the real side's fixture)

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


# -- vLLM: the double (tests/doubles/fake_vllm.py) and real vLLM 0.32.0 on CPU (test_vllm_real.py) ------

FAKE_VLLM = REPO_ROOT / "tests" / "doubles" / "fake_vllm.py"
# The real tiny model's config (make_vllm_model.py): 1,024 bytes of KV a token, 8,192 positions.
TINY_VLLM_CONFIG = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "max_position_embeddings": 8192,
                    "vocab_size": 8192, "hidden_size": 256, "num_hidden_layers": 2, "num_attention_heads": 4,
                    "num_key_value_heads": 2, "head_dim": 64}


@dataclass(frozen=True)
class DoubleVllm:
    """The vLLM double, shaped like RealVllm for test_vllm_real.verify(); `env` chooses its behaviour."""

    model: Path
    env: dict[str, str] = field(default_factory=dict)

    def command(self) -> list[str]:
        return [sys.executable, str(FAKE_VLLM), "serve"]


@pytest.fixture(scope="module", params=ENGINES)
def vllm_engine(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> RealVllm | DoubleVllm:
    if request.param == "real":
        real: RealVllm = request.getfixturevalue("real_vllm")
        return real
    model = tmp_path_factory.mktemp("tiny-llama")
    (model / "config.json").write_text(json.dumps(TINY_VLLM_CONFIG))
    return DoubleVllm(model)
