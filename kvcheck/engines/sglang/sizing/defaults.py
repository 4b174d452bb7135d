"""SGLang's resolution of the defaults that size the pool: 0.5.23's (docs/sglang-internals.md,
Defaults), keyed by release where older releases differ (releases.py, docs/sglang-releases.md)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from kvcheck.engines.sglang.serving import disaggregation_mode
from kvcheck.engines.sglang.sizing import releases as rel
from kvcheck.engines.sglang.sizing.gpus import GpuProfile
from kvcheck.engines.sglang.sizing.shape import DSA, ModelShape
from kvcheck.errors import EstimateError

GIB_MIB = 1024

KV_DTYPE_ALIASES = {
    "bf16": "bfloat16",
    "bfloat16": "bfloat16",
    "fp16": "float16",
    "float16": "float16",
    "fp8_e4m3": "fp8_e4m3",
    "fp8_e5m2": "fp8_e5m2",
    "mxfp8": "mxfp8",
    "nvfp4": "nvfp4",
    "fp4_mx_block16": "nvfp4",
}
A2A_BCG_OK = ("none", "deepep", "megamoe", "flashinfer")


def decode_capture_sizes(max_bs: int, *, speculative: bool) -> list[int]:
    """SGLang's decode CUDA-graph batch sizes up to max_bs (max_bs itself always captured)."""
    if speculative:
        sizes = [*range(1, 9), *range(10, 33, 2), *range(40, 65, 4), *range(72, 257, 8), *range(272, max_bs + 1, 16)]
    else:
        sizes = [1, 2, 4, 8, 12, *range(16, 257, 8), *range(272, 512, 16), *range(512, max_bs + 1, 32)]
    sizes = [s for s in sizes if s <= max_bs]
    if max_bs not in sizes:
        sizes.append(max_bs)
    return sizes


def prefill_capture_sizes(max_tokens: int) -> list[int]:
    """SGLang's prefill (breakable) CUDA-graph token buckets up to max_tokens."""
    sizes = [
        *range(4, 33, 4), *range(48, 257, 16), *range(288, 513, 32), *range(576, 1025, 64),
        *range(1280, 4097, 256), *range(4608, max_tokens + 1, 512),
    ]
    return [s for s in sizes if s <= max_tokens]


def capacity_defaults(gpu_mib: int | None, tp: int) -> tuple[int, int]:
    """(chunked_prefill_size, decode graph max_bs) by GPU memory, memory_hook.py's table."""
    if gpu_mib is None:
        return 4096, 160
    if gpu_mib < 20 * 1024:
        return 2048, 8
    if gpu_mib < 35 * 1024:
        return 4096, 48 if tp < 4 else 160
    if gpu_mib < 60 * 1024:
        return 4096, 32 if tp < 4 else 160
    if gpu_mib < 160 * 1024:
        return 8192, 256 if tp < 4 else 512
    return 16384, 512


def release_capacity_defaults(
    rules: rel.SizingRules, gpu_mib: int | None, tp: int, *, role: str | None
) -> tuple[int, int]:
    """(chunked_prefill_size, decode graph max_bs) when unset, as the release picks them.

    Before 0.5.3 neither feeds the pool; they are resolved to be reported.
    """
    if rules.has(rel.CAPACITY_TABLE):
        cps, bs = capacity_defaults(gpu_mib, tp)
        if gpu_mib is not None and 20 * 1024 <= gpu_mib < 35 * 1024 and not rules.has(rel.CAPACITY_SMALL_48):
            cps = 2048
            bs = (24 if rules.has(rel.CAPACITY_SMALL_24) else 16) if tp < 4 else 80
        return cps, bs
    small_limit = 35 * 1024 if rules.has(rel.CAPACITY_BY_GPU) else 25_000
    if gpu_mib is not None and gpu_mib < small_limit:
        bs = 80 if rules.has(rel.CAPACITY_SMALL_TP) and tp >= 4 else 8
    else:
        bs = 160  # the capture list's default end
    if rules.has(rel.CAPACITY_BY_GPU):
        if gpu_mib is None:
            return 4096, bs
        return (2048 if gpu_mib < 35 * 1024 else 8192 if gpu_mib < 160 * 1024 else 16384), bs
    if gpu_mib is not None and gpu_mib > 180_000 and rules.has(rel.CAPACITY_B200_16K):
        return 16384, bs
    if gpu_mib is not None and gpu_mib < 25_000:
        return 2048, bs
    if role is not None and rules.has(rel.CAPACITY_PD_16K):
        return 16384, bs
    return 8192, bs


def fraction_before_0_5_3(
    rules: rel.SizingRules, gpu_mib: int, *, tp: int, pp: int, speculative: str | None,
    dp_attention: bool, is_rocm: bool,
) -> tuple[float, float | None, str]:
    """(mem_fraction_static, reserve MiB or None, which rule) for releases up to 0.5.2."""
    p = tp * pp if rules.has(rel.FRACTION_BOOST_96G) else tp
    if rules.has(rel.FRACTION_RESERVE_BY_GPU):
        if gpu_mib < 35 * 1024:
            reserve = (2.8 + p / 10) * 1024
        elif gpu_mib < 90 * 1024:
            reserve = (9.5 + p / 2) * 1024
        elif gpu_mib < 160 * 1024:
            reserve = (12 + p / 2) * 1024
        else:
            reserve = 32 * 1024.0
        if speculative is not None:
            reserve += 6 * 1024 if speculative == "STANDALONE" and rules.has(rel.SPEC_STANDALONE_6G) else 2 * 1024
        if dp_attention:
            reserve += 4 * 1024
        return round((gpu_mib - reserve) / gpu_mib, 3), reserve, "reserve by GPU size"
    tp8 = 0.81 if rules.has(rel.FRACTION_TP_TABLE) else 0.82 if rules.has(rel.FRACTION_TP8_082) else 0.83
    table = 0.79 if p >= 16 else tp8 if p >= 8 else 0.85 if p >= 4 else 0.87 if p >= 2 else 0.88
    if not rules.has(rel.FRACTION_BIG_GPU_13G) or gpu_mib <= 81920:
        f, why = table, "by TP size"
    elif not rules.has(rel.FRACTION_BOOST_96G):
        return (gpu_mib - 13 * 1024) / gpu_mib, 13 * 1024.0, "13 GiB reserve above 80 GiB"
    else:
        f, why = 0.88, "0.88 above 80 GiB"
    if not rules.has(rel.FRACTION_BOOST_96G):
        return f, None, why
    if rules.has(rel.FRACTION_B200_079) and gpu_mib > 180_000 and not is_rocm:
        return 0.79, None, "0.79 above 180,000 MiB"
    if gpu_mib > 96 * 1024:
        reserve = 20 * 1024 if speculative is not None and rules.has(rel.FRACTION_B200_079) else 18 * 1024
        return min(f + 48 * 1024 * (1 - f) / gpu_mib, (gpu_mib - reserve) / gpu_mib), float(reserve), (
            f"{why}, raised above 96 GiB"
        )
    if speculative is not None and rules.has(rel.FRACTION_B200_079):
        return f * 0.95, None, f"{why}, x 0.95 for speculative decoding"
    return f, None, why


@dataclass(frozen=True)
class Resolved:
    """The engine settings that decide the pool, each as the declared SGLang release would resolve it."""

    tp: int
    pp: int
    attn_dp: int
    attn_cp: int
    dcp: int
    ep: int
    role: str | None  # "prefill", "decode" or None (single server)
    chunked_prefill_size: int
    decode_max_bs: int
    decode_graph: bool
    prefill_graph: bool
    prefill_capture: int  # number of prefill capture sizes
    attention_backend: str
    page_size: int
    kv_dtype: str
    mem_fraction_static: float
    mem_fraction_defaulted: bool
    reserved_mib: float | None  # the heuristic's reserve when the fraction was defaulted
    context_len: int
    max_total_tokens: int | None
    max_running_requests: int | None
    speculative: str | None
    spec_draft_tokens: int | None
    swa_full_tokens_ratio: float
    dsa_raw_layout: bool = False  # DSA rows without fp8 block scales (trtllm / ROCm kernels)
    notes: tuple[str, ...] = field(default=())

    @property
    def attn_tp(self) -> int:
        return max(1, self.tp // self.attn_dp // self.attn_cp)


def _arg(args: Mapping[str, Any], name: str, default: Any = None) -> Any:
    value = args.get(name)
    return default if value is None else value


def context_len_of(text: Mapping[str, Any], requested: int | None, env: Mapping[str, str]) -> tuple[int, list[str]]:
    """SGLang's derived context length and the effect of --context-length (docs/sglang-internals.md)."""
    notes: list[str] = []
    rope = text.get("rope_scaling") or {}
    factor = 1.0
    if isinstance(rope, Mapping) and rope:
        factor = float(rope.get("factor", 1) or 1)
        if "original_max_position_embeddings" in rope or rope.get("rope_type") == "llama3":
            factor = 1.0
    derived = 2048
    for key in ("max_sequence_length", "seq_length", "max_seq_len", "model_max_length", "max_position_embeddings"):
        value = text.get(key)
        if value is not None:
            derived = int(factor * value)
            break
    if requested is None:
        return derived, notes
    if requested <= derived:
        return int(requested), notes
    allowed = str(env.get("SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN", "")).lower() in ("1", "true")
    if not allowed:
        raise EstimateError(
            f"--context-length {requested} is greater than the model's derived context_len {derived}: "
            "SGLang refuses to start",
            hint="set SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1 in engine.env if the model really supports it",
        )
    notes.append(f"--context-length {requested} above the derived {derived} (SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1)")
    return int(requested), notes


def _default_backend(shape: ModelShape, gpu: GpuProfile, spec_topk: int | None) -> str:
    arch = shape.architecture
    topk_ok = spec_topk in (None, 1)
    if gpu.is_npu:
        return "ascend"  # NPUSRTPlatform.get_default_attention_backend (platforms/npu.py:79)
    if gpu.is_rocm:
        if shape.kind == DSA:
            return "dsa"
        if shape.is_mla:
            heads = shape.num_heads
            return "aiter" if heads in (16, 128) else "triton"
        return "aiter"
    if shape.kind == DSA:
        return "dsa"
    if arch == "GptOssForCausalLM" or arch == "Llama4ForConditionalGeneration":
        return "trtllm_mha" if gpu.is_sm100 else ("fa3" if gpu.is_hopper else "triton")
    if arch.startswith("Gemma4"):
        return "trtllm_mha" if gpu.is_sm100 else "triton"
    if arch == "MiMoV2FlashForCausalLM" and gpu.is_sm100:
        return "fa4"
    if shape.is_mla:
        if gpu.is_hopper:
            return "fa3"
        if gpu.is_sm100:
            return "trtllm_mla" if arch in ("DeepseekV3ForCausalLM", "KimiK25ForConditionalGeneration") else "flashinfer"
        return "triton"
    if gpu.is_hopper and topk_ok:
        return "fa3"
    if gpu.is_sm100 and topk_ok:
        return "fa4" if shape.head_dim != shape.v_head_dim else "trtllm_mha"
    return "triton" if shape.has_attention_sinks else "flashinfer"


def _page_size(shape: ModelShape, gpu: GpuProfile, backend: str, user: int | None, spec_topk: int | None) -> tuple[int, str]:
    if shape.kind == DSA:
        if gpu.is_rocm:
            return 64 * shape.index_kpool, "DSA on ROCm: 64 x index_kpool (aiter preshuffle path; 1 on legacy Triton)"
        return 64 * shape.index_kpool, "DSA model override: 64 x index_kpool (takes precedence over --page-size)"
    page = user
    why = "--page-size" if user is not None else "default"
    if backend == "flashmla":
        return 64, "FlashMLA backend forces 64"
    if backend in ("trtllm_mla", "cutedsl_mla") and page not in (32, 64):
        return 64, f"{backend} backend: 64"
    if backend == "trtllm_mha" and page not in (16, 32, 64, 128):
        return 64, "trtllm_mha backend: 64"
    if backend == "hpc_ops":
        return 64, "hpc_ops backend: 64"
    if backend == "fa4" and not shape.is_mla and gpu.is_sm100 and (spec_topk or 0) <= 1:
        return 128, "fa4 on SM100 (non-MLA): 128"
    if gpu.is_npu and page is None:
        return 128, "Ascend NPU default: 128 (hardware_backend/npu/utils.py:96-100)"
    return (page if page is not None else 1), why


def resolve(
    args: Mapping[str, Any],
    shape: ModelShape,
    gpu: GpuProfile,
    *,
    text: Mapping[str, Any],
    checkpoint_kv_fp8: bool,
    model_path: str | None,
    env: Mapping[str, str],
    gpu_mib: int,
    vision: Mapping[str, Any] | None = None,
    version: str | None = None,
) -> Resolved:
    """Resolve every pool-relevant setting from the merged args, the model and the GPU.

    `version` is the declared SGLang release: the defaults that changed between releases follow
    it (releases.py); None means the newest rules.
    """
    notes: list[str] = []
    rules = rel.rules_for(version)
    tp = int(_arg(args, "tp_size", 1))
    pp = int(_arg(args, "pp_size", 1))
    attn_dp = int(_arg(args, "attn_dp_size", 1))
    if args.get("enable_dp_attention") and attn_dp == 1:
        attn_dp = int(_arg(args, "dp_size", 1))  # deprecated spelling: --dp-size N --enable-dp-attention
    attn_cp = int(_arg(args, "attn_cp_size", 1))
    dcp = int(_arg(args, "dcp_size", 1))
    ep = int(_arg(args, "ep_size", 1))
    if tp % (attn_dp * attn_cp) != 0:
        raise EstimateError(f"tp_size {tp} is not divisible by attn_dp_size x attn_cp_size ({attn_dp} x {attn_cp})")
    role = disaggregation_mode(args)
    spec = args.get("speculative_algorithm")
    spec = str(spec).upper() if spec else None
    spec_topk = args.get("speculative_eagle_topk")
    draft_tokens = args.get("speculative_num_draft_tokens")
    a2a = str(_arg(args, "moe_a2a_backend", "none"))
    if str(env.get("SGLANG_ENABLE_POST_CAPTURE_KV_SIZING", "0")).lower() in ("1", "true"):
        raise EstimateError(
            "SGLANG_ENABLE_POST_CAPTURE_KV_SIZING=1 sizes the pool after CUDA-graph capture, "
            "which the estimate model does not predict"
        )

    # chunked prefill and decode graph batch sizes (memory_hook.py table; older releases' own)
    default_cps, default_bs = release_capacity_defaults(rules, gpu_mib, tp, role=role)
    cps = int(_arg(args, "chunked_prefill_size", default_cps))
    # Before 0.5.20 the decode graph's flags were --cuda-graph-bs / --cuda-graph-max-bs.
    decode_bs_list = args.get("cuda_graph_bs_decode") or args.get("cuda_graph_bs")
    user_max_bs = _arg(args, "cuda_graph_max_bs_decode", args.get("cuda_graph_max_bs"))
    max_bs = int(user_max_bs) if user_max_bs is not None else default_bs
    mrr = args.get("max_running_requests")
    if user_max_bs is None and mrr is not None and max_bs > int(mrr) and rules.has(rel.MAX_BS_CAPPED_BY_RUNNING):
        max_bs = int(mrr)
    if decode_bs_list:
        bs_values = decode_bs_list if isinstance(decode_bs_list, list | tuple) else [decode_bs_list]
        max_bs = max(int(b) for b in bs_values)

    disable_all = bool(args.get("disable_cuda_graph"))
    decode_backend_arg = args.get("cuda_graph_backend_decode")
    prefill_backend_arg = args.get("cuda_graph_backend_prefill")
    decode_graph = not (disable_all or args.get("disable_decode_cuda_graph") or decode_backend_arg == "disabled")
    if role == "prefill" and decode_backend_arg is None:
        decode_graph = False
    if not rules.has(rel.PIECEWISE_OPT_IN):
        prefill_graph = False
    elif not rules.has(rel.PIECEWISE_DEFAULT_ON):
        prefill_graph = bool(args.get("enable_piecewise_cuda_graph")) and not disable_all
    elif not rules.has(rel.PREFILL_BREAKABLE) and prefill_backend_arg is None:
        prefill_graph, reasons = _piecewise_prefill_graph(rules, args, shape, gpu, role, pp, attn_cp, a2a, spec)
        if reasons:
            notes.append(f"prefill CUDA graph off ({', '.join(reasons)})")
    elif prefill_backend_arg is not None:
        prefill_graph = prefill_backend_arg != "disabled" and not disable_all
    else:
        prefill_graph = not gpu.is_rocm and not disable_all and not args.get("disable_prefill_cuda_graph")
        if role == "decode":
            prefill_graph = False
        reasons = []
        if pp > 1:
            reasons.append("pipeline parallelism")
        if dcp > 1 and rules.has(rel.BREAKABLE_DCP_OFF):
            reasons.append("DCP")
        if attn_cp > 1:
            reasons.append("attention CP")
        if args.get("enable_two_batch_overlap") and rules.has(rel.BREAKABLE_WIDENED):
            reasons.append("two-batch overlap")
        if rules.has(rel.BREAKABLE_WIDENED) and a2a not in A2A_BCG_OK:
            reasons.append(f"moe-a2a-backend {a2a}")
        if not rules.has(rel.BREAKABLE_WIDENED):
            if a2a != "none":
                reasons.append(f"moe-a2a-backend {a2a}")
            if attn_dp > 1:
                reasons.append("DP attention")
            if args.get("lora_paths") or args.get("enable_lora"):
                reasons.append("LoRA")
        if shape.is_mla and not rules.has(rel.BREAKABLE_MLA) and (
            not rules.has(rel.BREAKABLE_WIDENED) or shape.kind != DSA
        ):
            reasons.append("MLA attention")
        if shape.is_multimodal:
            reasons.append("multimodal model")
        if prefill_graph and reasons:
            prefill_graph = False
            notes.append(f"prefill CUDA graph off ({', '.join(reasons)})")
    prefill_max = _arg(args, "cuda_graph_max_bs_prefill", args.get("piecewise_cuda_graph_max_tokens"))
    if prefill_max is None:
        mla_cap = 8192 if rules.has(rel.PREFILL_MLA_8192) else 2048
        prefill_max = min(mla_cap, cps) if shape.is_mla else cps
        if args.get("max_total_tokens") is not None:
            prefill_max = min(prefill_max, int(args["max_total_tokens"]))
        if model_path and "llama-2" in model_path.lower():
            prefill_max = min(prefill_max, 4096)
    prefill_list = _arg(args, "cuda_graph_bs_prefill", args.get("piecewise_cuda_graph_tokens"))
    n_prefill = len(prefill_list) if isinstance(prefill_list, list | tuple) else len(prefill_capture_sizes(int(prefill_max)))

    # context length (needed by the aiter rule and max_running_requests)
    context_len, ctx_notes = context_len_of(text, args.get("context_length"), env)
    notes.extend(ctx_notes)

    # attention backend and page size
    backend = args.get("attention_backend")
    if backend is None and args.get("prefill_attention_backend") and (
        args.get("prefill_attention_backend") == args.get("decode_attention_backend")
    ):
        backend = args.get("prefill_attention_backend")
    backend = str(backend) if backend else _default_backend(shape, gpu, spec_topk)
    user_page = args.get("page_size")
    page_size, page_why = _page_size(shape, gpu, backend, None if user_page is None else int(user_page), spec_topk)
    if shape.architecture.startswith("Qwen3_5") and gpu.is_sm100 and backend == "trtllm_mha" and user_page is None:
        page_size, page_why = 64, "Qwen3.5 on SM100 with trtllm_mha: 64"
    if shape.architecture == "NemotronHForCausalLM" and gpu.is_sm100 and backend == "trtllm_mha" and user_page is None:
        page_size, page_why = 64, "Nemotron-H on SM100 with trtllm_mha: 64"
    if not rules.has(rel.PAGE_ALIGNED):
        page_size, page_why = 1, f"SGLang {version} has no pages (--page-size came in {rel.PAGE_ALIGNED})"
    notes.append(f"attention backend {backend}{'' if args.get('attention_backend') else ' (default)'}; page size {page_size} ({page_why})")

    # KV dtype (docs/sglang-internals.md, KV cache dtype; DSA overrides it)
    kv_arg = str(_arg(args, "kv_cache_dtype", "auto"))
    if shape.kind == DSA and kv_arg == "auto" and not gpu.is_rocm:
        kv_dtype = "fp8_e4m3" if gpu.is_blackwell and not shape.has_attention_sinks else "bfloat16"
        notes.append(f"DSA KV dtype auto -> {kv_dtype} on {gpu.name}")
    elif kv_arg == "auto":
        kv_dtype = "fp8_e4m3" if checkpoint_kv_fp8 else shape.model_dtype
        if checkpoint_kv_fp8:
            notes.append("KV dtype auto -> fp8_e4m3 (checkpoint kv_cache_quant_algo FP8)")
    else:
        if kv_arg not in KV_DTYPE_ALIASES:
            raise EstimateError(f"--kv-cache-dtype {kv_arg} is not understood by the estimate model")
        kv_dtype = KV_DTYPE_ALIASES[kv_arg]

    # mem_fraction_static (docs/sglang-internals.md; docs/sglang-releases.md for the older rules)
    user_f = args.get("mem_fraction_static")
    reserved = None
    if rules.older_than_known:
        table = f"{rules.release}'s" if rules.release == rel.OLDEST_TABLE else "its own"
        notes.append(
            f"SGLang {version} predates 0.4.0, the oldest release whose sizing kvcheck has read in full; "
            f"sized with 0.4.0's rules and {table} default-fraction table"
        )
    if user_f is not None:
        f = float(user_f)
        defaulted = False
    elif not rules.has(rel.FRACTION_ACTIVATION):
        defaulted = True
        f, reserved, why = fraction_before_0_5_3(
            rules, gpu_mib, tp=tp, pp=pp, speculative=spec, dp_attention=attn_dp > 1, is_rocm=gpu.is_rocm
        )
        notes.append(f"default mem_fraction_static {f:.3f}: SGLang {rules.release} rule ({why})")
    else:
        defaulted = True
        disagg = rules.has(rel.DISAGGREGATION_RESERVE)
        if role == "decode" and disagg:
            running = mrr or max_bs or 1
            activation = max(int(running) * int(draft_tokens or 1), 2048)
        elif cps > 0:
            activation = max(cps, 2048)
        else:
            activation = max(int(_arg(args, "max_prefill_tokens", 16384)), 2048)
        reserved = 512 + activation * 1.5 + tp * pp / 8 * 1024
        graph = 0.0
        if not disagg or (role != "prefill" and decode_graph):
            graph += max_bs * 2
        if attn_dp > 1 and (not disagg or role != "prefill"):
            graph += max_bs * attn_dp * 3
            if max_bs > 300:
                graph += max_bs * attn_dp * 1.5
        piecewise_late = 0  # 0.5.5.post1-0.5.7 added the piecewise term after the floor
        if prefill_graph and (not disagg or role != "decode"):
            if not rules.has(rel.PIECEWISE_DIV8):
                piecewise_late = int(args.get("piecewise_cuda_graph_max_tokens") or 4096) // 4
            elif not rules.has(rel.PIECEWISE_PER_SIZE):
                piecewise_late = int(args.get("piecewise_cuda_graph_max_tokens") or cps) // 8
            elif shape.is_mla and rules.has(rel.PIECEWISE_DEFAULT_ON):
                graph += 1536
            else:
                graph += 8 * n_prefill
            if a2a == "deepep" and rules.has(rel.PREFILL_BCG_DEEPEP_1G):
                graph += 1024
        reserved += graph
        if gpu_mib > 60 * 1024:
            reserved = max(reserved, 10 * 1024)
        if spec is not None and not rules.has(rel.SPEC_RESERVE_REMOVED):
            if spec == "STANDALONE":
                reserved += 6 * 1024
            elif spec != "NGRAM":
                reserved += 4 * 1024 if rules.has(rel.SPEC_EAGLE_4G) else 2 * 1024
        if piecewise_late:
            reserved += piecewise_late
        if a2a == "deepep" and decode_graph and role != "prefill" and disagg:
            reserved += 2048
        f = round((gpu_mib - reserved) / gpu_mib, 3)
        if not rules.has(rel.CAPACITY_SMALL_48):  # rules older than the 0.5.20 line kvcheck was built on
            notes.append(f"default mem_fraction_static {f:.3f}: SGLang {rules.release} rule (activation reserve)")
    if defaulted and shape.is_multimodal and rules.has(rel.VLM_X090):
        skip = (args.get("language_only") and rules.has(rel.VLM_LANGUAGE_ONLY)) or (
            role == "decode" and rules.has(rel.VLM_NOT_ON_DECODE)
        )
        if not skip:
            f *= vlm_factor(vision or {}) if rules.has(rel.VLM_FACTOR) else 0.90
            notes.append("multimodal: default mem_fraction_static scaled by the vision-tower factor")
    if backend == "aiter" and context_len > 8192 and rules.has(rel.AITER_X085):
        honor = str(env.get("SGLANG_AITER_HONOR_EXPLICIT_MEM_FRACTION", "")).lower() in ("1", "true")
        if defaulted or not honor or not rules.has(rel.AITER_HONOR_ENV):
            f *= 0.85
            notes.append("aiter backend with context_len > 8192: mem_fraction_static x 0.85")

    dsa_raw = False
    if shape.kind == DSA:
        dsa_raw = _dsa_raw_layout(args, gpu, kv_dtype, role)
        if kv_dtype == "fp8_e4m3":
            layout = "raw 576-byte rows" if dsa_raw else "scaled 656-byte rows"
            notes.append(f"DSA latent layout: {layout}")

    max_total = args.get("max_total_tokens")
    ratio = args.get("swa_full_tokens_ratio")
    return Resolved(
        tp=tp,
        pp=pp,
        attn_dp=attn_dp,
        attn_cp=attn_cp,
        dcp=dcp,
        ep=ep,
        role=role,
        chunked_prefill_size=cps,
        decode_max_bs=max_bs,
        decode_graph=decode_graph,
        prefill_graph=prefill_graph,
        prefill_capture=n_prefill,
        attention_backend=backend,
        page_size=page_size,
        kv_dtype=kv_dtype,
        mem_fraction_static=f,
        mem_fraction_defaulted=defaulted,
        reserved_mib=reserved,
        context_len=context_len,
        max_total_tokens=None if max_total is None else int(max_total),
        max_running_requests=None if mrr is None else int(mrr),
        speculative=spec,
        spec_draft_tokens=None if draft_tokens is None else int(draft_tokens),
        swa_full_tokens_ratio=0.8 if ratio is None else float(ratio),
        dsa_raw_layout=dsa_raw,
        notes=tuple(notes),
    )


def _piecewise_prefill_graph(
    rules: rel.SizingRules, args: Mapping[str, Any], shape: ModelShape, gpu: GpuProfile,
    role: str | None, pp: int, attn_cp: int, a2a: str, spec: str | None,
) -> tuple[bool, list[str]]:
    """0.5.10-0.5.14: the piecewise (torch.compile) prefill graph, on unless a setting rules it out.

    ServerArgs._handle_piecewise_cuda_graph (0.5.10) and
    _disable_tc_piecewise_cudagraph_if_incompatible (0.5.14), for what a manifest can express.
    """
    if args.get("disable_cuda_graph") or args.get("disable_piecewise_cuda_graph"):
        return False, []
    if args.get("enforce_piecewise_cuda_graph"):
        return True, []
    reasons = []
    if spec is not None and not rules.has(rel.PREFILL_BACKEND_CONFIG):
        reasons.append("speculative decoding")
    checks = (
        (args.get("enable_dp_attention"), "DP attention"),
        (args.get("enable_torch_compile"), "torch.compile"),
        (pp > 1, "pipeline parallelism"),
        (gpu.is_rocm, "not CUDA"),
        (a2a != "none", f"moe-a2a-backend {a2a}"),
        (args.get("lora_paths") or args.get("enable_lora"), "LoRA"),
        (shape.is_multimodal, "multimodal model"),
        ((args.get("cpu_offload_gb") or 0) > 0 or args.get("enable_hierarchical_cache"), "CPU offload"),
        (args.get("enable_deterministic_inference"), "deterministic inference"),
        (role is not None, "PD disaggregation"),
        (attn_cp > 1, "attention CP"),
    )
    reasons += [why for hit, why in checks if hit]
    return not reasons, reasons


def _dsa_raw_layout(args: Mapping[str, Any], gpu: GpuProfile, kv_dtype: str, role: str | None) -> bool:
    """Whether the DSA pool keeps raw latent rows (kv_cache_configurator.calculate_mla_kv_cache_dim)."""
    prefill = args.get("dsa_prefill_backend")
    decode = args.get("dsa_decode_backend")
    if gpu.is_rocm:
        prefill = prefill or "triton"
        decode = decode or "triton"
    elif kv_dtype == "fp8_e4m3":
        default = "trtllm" if gpu.is_blackwell else "flashmla_kv"
        prefill, decode = prefill or default, decode or default
    else:
        prefill = prefill or "flashmla_sparse"
        decode = decode or ("trtllm" if gpu.is_blackwell else "fa3")
    if role == "decode":
        trtllm = decode == "trtllm"
    elif role == "prefill":
        trtllm = prefill == "trtllm"
    else:
        trtllm = "trtllm" in (prefill, decode)
    if trtllm:
        return True
    if gpu.is_rocm and ({prefill, decode} & {"tilelang", "triton", "aiter"}):
        return True
    return prefill == "tilelang" and decode == "tilelang"


def vlm_factor(vision: Mapping[str, Any]) -> float:
    """SGLang's multimodal scaling of the default fraction: 0.95 x clamp(1 - 0.1 (ViT/ViT-L - 1))."""
    layers = vision.get("num_hidden_layers", 24)
    hidden = vision.get("hidden_size", 1024)
    ratio = layers * hidden**2 / (24 * 1024**2)
    return 0.95 * max(0.8, min(1.05, 1.0 - 0.1 * (ratio - 1.0)))

