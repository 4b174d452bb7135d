"""Per-model overrides SGLang 0.5.23 declares at argument resolution (arg_groups/model_overrides/*),
for the models whose pool code lives outside the generic paths (MiniMax-M3 sparse, DeepSeek-V4).

They run after `defaults.resolve` and replace what it chose (attention backend, page size, KV dtype,
memory fraction rules), each with the file it comes from, so the release-keyed defaults stay in one place.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from kvcheck.engines.sglang.sizing.defaults import Resolved, vlm_factor
from kvcheck.engines.sglang.sizing.mxfp4_moe import K3_OVERRIDE_ARCHS
from kvcheck.engines.sglang.sizing.shape import DSV4, HYBRID_LINEAR, ModelShape
from kvcheck.errors import EstimateError as EngineRefusalLike
from kvcheck.gpus import GpuProfile


def apply_model_overrides(
    res: Resolved,
    shape: ModelShape,
    gpu: GpuProfile,
    args: Mapping[str, Any],
    *,
    gpu_mib: int | None = None,
    vision: Mapping[str, Any] | None = None,
) -> Resolved:
    if shape.msa_sparse_layer_ids:
        res = _minimax_m3(res, gpu, args)
        if (shape.is_multimodal and res.mem_fraction_defaulted and res.reserved_mib is not None and gpu_mib
                and res.role != "decode" and not gpu.is_rocm and not args.get("language_only")):
            # Checked with the reference oracle (0.8094 on B200 TP4, 0.84835 on H200 TP8): SGLang keeps the
            # prefill CUDA graph of MiniMax-M3's VL wrapper (its reserve counts), and its config object gives
            # adjust_mem_fraction_for_vlm no ViT size, so the ViT-L default factor 0.95 applies.
            reserved = res.reserved_mib + (0 if res.prefill_graph else 8 * res.prefill_capture)
            f = round((gpu_mib - reserved) / gpu_mib, 3) * vlm_factor({})
            res = replace(res, mem_fraction_static=f, reserved_mib=reserved, prefill_graph=True)
        return res
    if shape.kind == DSV4:
        res = _deepseek_v4(res, gpu, args)
        return _no_prefill_graph(res, shape, args, gpu_mib, vision, "DeepSeek-V4")
    if shape.kind == HYBRID_LINEAR and shape.mamba is not None and shape.mamba.kind == "kda":
        res = _kimi_k3(res, gpu, args, shape.architecture)
        return _no_prefill_graph(res, shape, args, gpu_mib, vision, "KDA hybrid")
    return res


def _no_prefill_graph(
    res: Resolved, shape: ModelShape, args: Mapping[str, Any], gpu_mib: int | None,
    vision: Mapping[str, Any] | None, why: str,
) -> Resolved:
    """SGLang turns the prefill CUDA graph off for KDA hybrids and DeepSeek-V4 (cuda_graph_hook.py);
    a defaulted mem_fraction_static then keeps no reserve for it (memory_hook.py)."""
    if not res.prefill_graph or args.get("cuda_graph_backend_prefill") is not None:
        return res
    notes = [*res.notes, f"prefill CUDA graph off ({why})"]
    f = res.mem_fraction_static
    if res.mem_fraction_defaulted and res.reserved_mib is not None and gpu_mib and res.role != "decode":
        reserved = res.reserved_mib - (1536 if shape.mla_full_attention else 8 * res.prefill_capture)
        if gpu_mib > 60 * 1024:
            reserved = max(reserved, 10 * 1024)
        f = round((gpu_mib - reserved) / gpu_mib, 3)
        if shape.is_multimodal and not args.get("language_only"):
            f *= vlm_factor(vision or {})
        if res.attention_backend == "aiter" and res.context_len > 8192:
            f *= 0.85
        return replace(res, prefill_graph=False, mem_fraction_static=f, reserved_mib=reserved, notes=tuple(notes))
    return replace(res, prefill_graph=False, notes=tuple(notes))


def _kimi_k3(res: Resolved, gpu: GpuProfile, args: Mapping[str, Any], arch: str) -> Resolved:
    """A KDA hybrid's full-attention layers are MLA: SGLang's MLA backend defaults apply (get_default_attn_backend:
    flashinfer on SM100, fa3 on Hopper, triton elsewhere), not the MHA ones. On SM100 `_kimi_k3_overrides` makes
    it trtllm_mla (page 64), registered for K3_OVERRIDE_ARCHS only (keyed on architectures[0], 0.5.17 to 0.5.23):
    Kimi-Linear and KimiK3LinearForCausalLM keep flashinfer."""
    if args.get("attention_backend"):
        return res
    if gpu.is_sm100 and arch not in K3_OVERRIDE_ARCHS:
        backend, page = "flashinfer", res.page_size if args.get("page_size") is not None else 1
    elif gpu.is_sm100:
        backend = "trtllm_mla"
        page = res.page_size if args.get("page_size") in (32, 64) else 64
    elif gpu.is_hopper:
        backend, page = "fa3", res.page_size if args.get("page_size") is not None else 1
    else:
        backend, page = ("triton" if not gpu.is_npu else "ascend"), res.page_size
    notes = [*res.notes, f"Kimi-K3 MLA layers: attention backend {backend}, page size {page}"]
    return replace(res, attention_backend=backend, page_size=page, notes=tuple(notes))


def _deepseek_v4(res: Resolved, gpu: GpuProfile, args: Mapping[str, Any]) -> Resolved:
    """model_overrides/deepseek_v4.py, deepseek_v4_hook.py and overrides._deepseek_v4_kv_cache_dtype:
    page size 256, the dsv4 attention backend, KV dtype auto -> fp8_e4m3 (NPU: bf16 pool, not priced),
    max_running_requests 256 when unset; EAGLE (top-k 1) and DSPARK are the only drafts it takes."""
    notes = list(res.notes)
    if gpu.is_npu:
        # the hook forces bfloat16 on NPU, and DSV4NPUTokenToKVPool stores bf16 rows of its own geometry
        raise EngineRefusalLike(
            "DeepSeek-V4 on an Ascend NPU keeps a bf16 pool of its own layout (DSV4NPUTokenToKVPool), which the "
            "estimate model does not price"
        )
    page = 256
    kv = res.kv_dtype
    if args.get("kv_cache_dtype") in (None, "auto"):
        kv = "fp8_e4m3"
    if kv != "fp8_e4m3":
        # refusals.check_dsv4_kv_dtype stops every other dtype SGLang stops on; what is left (the ROCm
        # unified-KV pool's bf16 rows) is not priced
        raise EngineRefusalLike(f"a DeepSeek-V4 pool of --kv-cache-dtype {kv} is not priced by the estimate model")
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
