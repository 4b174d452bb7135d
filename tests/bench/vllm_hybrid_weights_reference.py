"""Weight bytes of hybrid models as the real vLLM 0.32.0's model classes allocate them (TP 1).

Run with the real vLLM install's interpreter (tests/engines/real/install_vllm.sh; no GPU, no weights):

    /tmp/kvcheck-real-vllm/venv/bin/python tests/bench/vllm_hybrid_weights_reference.py \
        > tests/data/vllm_hybrid_weights/reference_vllm_0.32.0.json

Each small config in tests/data/vllm_hybrid_weights/ (the real models' configs with their widths shrunk) is
built by vLLM's own class (NemotronHForCausalLM, Qwen3NextForCausalLM, Qwen3_5(Moe)ForConditionalGeneration)
on the meta device in bfloat16, and the bytes of its parameters summed. Two stand-ins, neither changing a
parameter: the CPU build has no kernel for NemotronH's non-gated (squared-ReLU) MoE, so the MoE config check
and backend choice are passed over; and Qwen3.5's module imports torchvision, which the CPU install lacks, so
where it is missing the script runs itself again with a stub on PYTHONPATH (a sitecustomize.py serving
`torchvision.*` as MagicMock modules, for vLLM's registry subprocess too; no parameter comes from it). tests/estimate/test_vllm_hybrid_weights.py checks kvcheck's count against the file this prints.
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
import tempfile
from pathlib import Path

STUB = """import importlib.abc, importlib.machinery, sys
from unittest.mock import MagicMock
class _Stub(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, name, path, target=None):
        if name == "torchvision" or name.startswith("torchvision."):
            return importlib.machinery.ModuleSpec(name, self, is_package=True)
        return None
    def create_module(self, spec):
        module = MagicMock(name=spec.name)
        module.__path__, module.__spec__, module.__name__, module.__version__ = [], spec, spec.name, "0.0"
        return module
    def exec_module(self, module):
        pass
sys.meta_path.insert(0, _Stub())
"""

if importlib.util.find_spec("torchvision") is None and __name__ == "__main__":
    stub_dir = tempfile.mkdtemp(prefix="tv-stub-")
    Path(stub_dir, "sitecustomize.py").write_text(STUB, encoding="utf-8")
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (stub_dir, os.environ.get("PYTHONPATH")) if p)
    os.execv(sys.executable, [sys.executable, *sys.argv])

import torch  # noqa: E402
import vllm.model_executor.layers.fused_moe.config as moe_config  # noqa: E402
import vllm.model_executor.layers.fused_moe.unquantized_fused_moe_method as moe_method  # noqa: E402
from vllm.config import ModelConfig, VllmConfig, set_current_vllm_config  # noqa: E402
from vllm.distributed import init_distributed_environment, initialize_model_parallel  # noqa: E402
from vllm.platforms import current_platform  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
CONFIGS = ROOT / "tests" / "data" / "vllm_hybrid_weights"
CLASSES = {
    "NemotronHForCausalLM": "vllm.model_executor.models.nemotron_h",
    "Qwen3NextForCausalLM": "vllm.model_executor.models.qwen3_next",
    "Qwen3_5ForConditionalGeneration": "vllm.model_executor.models.qwen3_5",
    "Qwen3_5MoeForConditionalGeneration": "vllm.model_executor.models.qwen3_5",
}

_post_init = moe_config.FusedMoEConfig.__post_init__


def _post_init_any_platform(self: object) -> None:  # the non-gated MoE check names CUDA/ROCm/XPU only
    type(current_platform).is_cuda_alike = lambda *_: True  # type: ignore[method-assign]
    try:
        _post_init(self)
    finally:
        del type(current_platform).is_cuda_alike


_select = moe_method.select_unquantized_moe_backend


def _select_any(*args: object, **kwargs: object) -> object:
    try:
        return _select(*args, **kwargs)
    except NotImplementedError:  # no CPU kernel: the weights do not depend on the kernel chosen
        return moe_method.UnquantizedMoeBackend.TRITON, None


moe_config.FusedMoEConfig.__post_init__ = _post_init_any_platform  # type: ignore[method-assign]
moe_method.select_unquantized_moe_backend = _select_any  # type: ignore[assignment]


def weight_bytes(config: dict, *, language_model_only: bool = False) -> int:
    folder = tempfile.mkdtemp()
    (Path(folder) / "config.json").write_text(json.dumps(config), encoding="utf-8")
    model_config = ModelConfig(model=folder, tokenizer=None, skip_tokenizer_init=True, dtype="bfloat16",
                               max_model_len=4096, **({"language_model_only": True} if language_model_only else {}))
    vllm_config = VllmConfig(model_config=model_config)
    architecture = config["architectures"][0]
    cls = getattr(__import__(CLASSES[architecture], fromlist=[architecture]), architecture)
    torch.set_default_dtype(torch.bfloat16)
    with set_current_vllm_config(vllm_config), torch.device("meta"):
        model = cls(vllm_config=vllm_config, prefix="")
    torch.set_default_dtype(torch.float32)
    return sum(p.numel() * p.element_size() for p in model.parameters())


def main() -> None:
    with set_current_vllm_config(VllmConfig()):
        init_distributed_environment(world_size=1, rank=0, local_rank=0, backend="gloo",
                                     distributed_init_method=f"file://{tempfile.mktemp()}")
        initialize_model_parallel(1, 1)
    cases = []
    for path in sorted(CONFIGS.glob("*-tiny.json")):
        config = json.loads(path.read_text(encoding="utf-8"))
        cases.append({"config": path.name, "tp": 1, "language_model_only": False, "bytes": weight_bytes(config)})
        if "vision_config" in config:
            cases.append({"config": path.name, "tp": 1, "language_model_only": True,
                          "bytes": weight_bytes(config, language_model_only=True)})
    import vllm

    json.dump({"vllm": vllm.__version__, "dtype": "bfloat16", "cases": cases}, sys.stdout, indent=1)
    sys.stdout.write("\n")


if __name__ == "__main__":
    os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")
    main()
