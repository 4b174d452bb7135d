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
from kvcheck.engines.sglang.sizing.shape import DSV4, ModelShape
from kvcheck.errors import EstimateError as EngineRefusalLike


def apply_model_overrides(res: Resolved, shape: ModelShape, gpu: GpuProfile, args: Mapping[str, Any]) -> Resolved:
    if shape.msa_sparse_layer_ids:
        return _minimax_m3(res, gpu, args)
    if shape.kind == DSV4:
        return _deepseek_v4(res, gpu, args)
    return res


def _deepseek_v4(res: Resolved, gpu: GpuProfile, args: Mapping[str, Any]) -> Resolved:
    """model_overrides/deepseek_v4.py, deepseek_v4_hook.py and overrides._deepseek_v4_kv_cache_dtype:
    page size 256 (128 on NPU), the dsv4 attention backend, KV dtype auto -> fp8_e4m3 (bf16 on NPU),
    max_running_requests 256 when unset; EAGLE (top-k 1) and DSPARK are the only drafts it takes."""
    notes = list(res.notes)
    page = 128 if gpu.is_npu else 256
    kv = res.kv_dtype
    if args.get("kv_cache_dtype") in (None, "auto"):
        kv = "bfloat16" if gpu.is_npu else "fp8_e4m3"
    if kv not in ("fp8_e4m3", "bfloat16"):
        raise EngineRefusalLike(f"--kv-cache-dtype {kv} is not supported for DeepseekV4ForCausalLM (SGLang asserts)")
    mrr = res.max_running_requests if res.max_running_requests is not None else 256
    if res.speculative not in (None, "EAGLE", "NEXTN", "MTP"):
        raise EngineRefusalLike(
            f"--speculative-algorithm {res.speculative}: only EAGLE (MTP) and DSPARK are supported for "
            "DeepseekV4ForCausalLM (deepseek_v4_hook.py), and DSPARK is not priced by the estimate model"
        )
    notes.append(
        f"DeepSeek-V4 overrides: page size {page}, KV dtype {kv}, attention backend dsv4, "
        f"max_running_requests {mrr}{'' if res.max_running_requests is not None else ' (default for V4)'}"
    )
    return replace(
        res, page_size=page, kv_dtype=kv, attention_backend="dsv4", max_running_requests=mrr, notes=tuple(notes)
    )


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
