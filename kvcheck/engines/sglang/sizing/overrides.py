"""Per-model overrides SGLang 0.5.23 declares at argument resolution (arg_groups/model_overrides/*),
for the models whose pool code lives outside the generic paths (MiniMax-M3 sparse, DeepSeek-V4).

They run after `defaults.resolve` and replace what it chose (attention backend, page size, KV dtype,
memory fraction rules), each with the file it comes from, so the release-keyed defaults stay in one place.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from kvcheck.engines.sglang.sizing.defaults import Resolved
from kvcheck.engines.sglang.sizing.gpus import GpuProfile
from kvcheck.engines.sglang.sizing.shape import ModelShape


def apply_model_overrides(res: Resolved, shape: ModelShape, gpu: GpuProfile, args: Mapping[str, Any]) -> Resolved:
    if shape.msa_sparse_layer_ids:
        return _minimax_m3(res, gpu, args)
    return res


def _minimax_m3(res: Resolved, gpu: GpuProfile, args: Mapping[str, Any]) -> Resolved:
    """arg_groups/model_overrides/minimax_m3.py: attention backend and page size by platform."""
    backend = res.attention_backend
    page = res.page_size
    notes = list(res.notes)
    user_backend = args.get("attention_backend")
    user_page = args.get("page_size")
    if gpu.is_sm100:
        if user_backend is None:
            backend = "trtllm_mha" if res.kv_dtype == "fp8_e4m3" else "fa4"
        if user_page is None and backend in ("fa4", "trtllm_mha"):
            page = 128
    elif gpu.is_hopper:
        if user_backend is None:
            backend = "fa3"
        if user_page is None and backend == "fa3":
            page = 128
    if (backend, page) != (res.attention_backend, res.page_size):
        notes.append(
            f"MiniMax-M3 override (model_overrides/minimax_m3.py): attention backend {backend}, page size {page}"
        )
    return replace(res, attention_backend=backend, page_size=page, notes=tuple(notes))
