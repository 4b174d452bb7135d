"""Pure-Python stand-in for SGLang's CPU kernel package (sglang-kernel-cpu), whose C++ sources are not
on PyPI: it satisfies SGLang's imports, and every name raises if called. On a CPU without AMX SGLang
0.5.23 takes its torch-native paths and never calls it. `scalar_type` is deliberately missing (SGLang
falls back on the ImportError)."""

import torch  # noqa: F401 - imported first, as the real package does, so torch is loaded before SGLang asks
from sgl_kernel._stub import missing

__version__ = "0.0.0+shim"


def __getattr__(name):
    return missing("sgl_kernel", name)
