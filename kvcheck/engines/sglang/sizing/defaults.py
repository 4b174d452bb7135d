"""SGLang's resolution of the defaults that size the pool: 0.5.23's (docs/sglang-internals.md,
Defaults), keyed by release where older releases differ (releases.py, docs/sglang-releases.md)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from kvcheck.engines.sglang.serving import disaggregation_mode
from kvcheck.engines.sglang.sizing import releases as rel
from kvcheck.engines.sglang.sizing.placement import a2a_backend, resolved_ep
from kvcheck.engines.sglang.sizing.shape import DSA, DSV4, ModelShape
from kvcheck.errors import EstimateError
from kvcheck.gpus import GpuProfile

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


# SGLang's capture lists: the fixed sizes, then (start, step) up to the largest size. Counted, not built: the
# largest size is the user's (--cuda-graph-max-bs, --chunked-prefill-size), and a list of every bucket up to
# 1e14 tokens does not fit in memory.
_DECODE_FIXED = (1, 2, 4, 8, 12, *range(16, 257, 8), *range(272, 512, 16))
_DECODE_FIXED_SPECULATIVE = (*range(1, 9), *range(10, 33, 2), *range(40, 65, 4), *range(72, 257, 8))
_PREFILL_FIXED = (*range(4, 33, 4), *range(48, 257, 16), *range(288, 513, 32), *range(576, 1025, 64),
                  *range(1280, 4097, 256))


def _count_up_to(fixed: tuple[int, ...], start: int, step: int, top: int) -> tuple[int, bool]:
    """(how many of `fixed` + range(start, top + 1, step) are <= top, whether top is one of them)."""
    tail = (top - start) // step + 1 if top >= start else 0
    on_tail = top >= start and (top - start) % step == 0
    return sum(1 for s in fixed if s <= top) + tail, on_tail or top in fixed


def decode_capture_count(max_bs: int, *, speculative: bool) -> int:
    """How many decode CUDA-graph batch sizes SGLang captures up to max_bs (max_bs itself always captured)."""
    if speculative:
        count, has_top = _count_up_to(_DECODE_FIXED_SPECULATIVE, 272, 16, max_bs)
    else:
        count, has_top = _count_up_to(_DECODE_FIXED, 512, 32, max_bs)
    return count if has_top else count + 1


def prefill_capture_count(max_tokens: int) -> int:
    """How many prefill (breakable) CUDA-graph token buckets SGLang captures up to max_tokens."""
    return _count_up_to(_PREFILL_FIXED, 4608, 512, max_tokens)[0]


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


def _reserve_by_gpu_size(
    rules: rel.SizingRules, gpu_mib: int, p: int, *, speculative: str | None, dp_attention: bool
) -> float:
    """The MiB releases with FRACTION_RESERVE_BY_GPU keep free, by GPU size and parallel width `p`."""
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
    return reserve


def fraction_before_0_5_3(
    rules: rel.SizingRules, gpu_mib: int, *, tp: int, pp: int, speculative: str | None,
    dp_attention: bool, is_rocm: bool,
) -> tuple[float, float | None, str]:
    """(mem_fraction_static, reserve MiB or None, which rule) for releases up to 0.5.2."""
    p = tp * pp if rules.has(rel.FRACTION_BOOST_96G) else tp
    if rules.has(rel.FRACTION_RESERVE_BY_GPU):
        reserve = _reserve_by_gpu_size(rules, gpu_mib, p, speculative=speculative, dp_attention=dp_attention)
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


def _default_backend(shape: ModelShape, gpu: GpuProfile, spec_topk: int | None, tp: int = 1) -> str:  # noqa: C901 - a flat decision table
    """SGLang's default attention backend for the platform and model: one rule per return, in the
    order SGLang applies them, kept whole so it reads against SGLang's own code rule by rule."""
    arch = shape.architecture
    topk_ok = spec_topk in (None, 1)
    if gpu.is_npu:
        return "ascend"  # NPUSRTPlatform.get_default_attention_backend (platforms/npu.py:79)
    if gpu.is_rocm:
        if shape.kind == DSV4:
            # the V4 hook (0.5.12) / model override (0.5.15 on) sets attention_backend dsv4 before the
            # attention-compatibility pass, so aiter's x0.85 (attention_hook.py) never sees V4
            return "dsv4"
        if shape.kind == DSA:
            return "dsa"
        if shape.is_mla:
            # model_override_base.py: head_num = model_config.get_num_kv_heads(tp_size), the KV heads one rank
            # holds (DeepSeek-V3's 128 are 32 at TP4: triton, so no aiter x0.85; 16 at TP8: aiter)
            heads = max(1, shape.num_kv_heads // max(1, tp))
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


def _page_size(
    shape: ModelShape, gpu: GpuProfile, backend: str, user: int | None, spec_topk: int | None,
    rules: rel.SizingRules | None = None,
) -> tuple[int, str]:
    if shape.kind == DSA:
        if gpu.is_rocm:
            if rules is not None and not rules.has(rel.DSA_ROCM_PRESHUFFLE_PAGE):
                return 1, f"DSA on ROCm: 1 (the aiter preshuffle path and its 64-token pages came in {rel.DSA_ROCM_PRESHUFFLE_PAGE})"
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

    The steps follow the order SGLang resolves them in: parallel sizes, CUDA-graph batch sizes and
    graphs, the context length, the attention backend and page size, the KV dtype, the static
    memory fraction; each appends its notes in that order.
    """
    c = _inputs(args, shape, gpu, env=env, gpu_mib=gpu_mib, version=version)
    cps, max_bs = _batch_sizes(c)
    decode_graph, prefill_graph = _cuda_graphs(c)
    n_prefill = _prefill_captures(c, cps, model_path)

    # context length (needed by the aiter rule and max_running_requests)
    context_len, ctx_notes = context_len_of(text, args.get("context_length"), env)
    c.notes.extend(ctx_notes)

    backend, page_size = _attention(c)
    kv_dtype = _kv_dtype(c, checkpoint_kv_fp8)
    graphs = _Graphs(cps=cps, max_bs=max_bs, decode=decode_graph, prefill=prefill_graph, n_prefill=n_prefill)
    f, defaulted, reserved = _mem_fraction(c, graphs, backend=backend, context_len=context_len, vision=vision)

    dsa_raw = False
    if shape.kind == DSA:
        dsa_raw = _dsa_raw_layout(args, gpu, kv_dtype, c.role, c.rules)
        if kv_dtype == "fp8_e4m3":
            layout = "raw 576-byte rows" if dsa_raw else "scaled 656-byte rows"
            c.notes.append(f"DSA latent layout: {layout}")

    max_total = args.get("max_total_tokens")
    ratio = args.get("swa_full_tokens_ratio")
    mrr = c.max_running_requests
    return Resolved(
        tp=c.tp,
        pp=c.pp,
        attn_dp=c.attn_dp,
        attn_cp=c.attn_cp,
        dcp=c.dcp,
        ep=c.ep,
        role=c.role,
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
        speculative=c.spec,
        spec_draft_tokens=None if c.draft_tokens is None else int(c.draft_tokens),
        swa_full_tokens_ratio=0.8 if ratio is None else float(ratio),
        dsa_raw_layout=dsa_raw,
        notes=tuple(c.notes),
    )


@dataclass
class _Inputs:
    """What every resolution step reads: the args, model, GPU and release, the parallel layout; the
    steps append their notes to `notes`."""

    args: Mapping[str, Any]
    shape: ModelShape
    gpu: GpuProfile
    env: Mapping[str, str]
    gpu_mib: int
    version: str | None
    rules: rel.SizingRules
    tp: int
    pp: int
    attn_dp: int
    attn_cp: int
    dcp: int
    ep: int
    role: str | None  # the disaggregated role (prefill, decode), None for a unified server
    spec: str | None  # the speculative algorithm, upper case
    spec_topk: Any
    draft_tokens: Any
    max_running_requests: Any
    a2a: str  # --moe-a2a-backend
    notes: list[str] = field(default_factory=list)


def _inputs(
    args: Mapping[str, Any], shape: ModelShape, gpu: GpuProfile, *, env: Mapping[str, str], gpu_mib: int,
    version: str | None,
) -> _Inputs:
    """The parallel layout and the settings every later step reads; EstimateError on a layout SGLang
    refuses or a sizing mode the model does not predict."""
    rules = rel.rules_for(version)
    tp = int(_arg(args, "tp_size", 1))
    pp = int(_arg(args, "pp_size", 1))
    attn_dp = int(_arg(args, "attn_dp_size", 1))
    if args.get("enable_dp_attention") and attn_dp == 1:
        attn_dp = int(_arg(args, "dp_size", 1))  # deprecated spelling: --dp-size N --enable-dp-attention
    dwdp = int(_arg(args, "dwdp_size", 1))
    if dwdp > 1:
        raise EstimateError(
            f"--dwdp-size {dwdp}: DWDP (arg_groups/parallel_hook.py handle_dwdp) forces attention DP {dwdp}, "
            f"--enable-dp-lm-head, --moe-dense-tp-size 1 and ep_size {dwdp}, and prefetches other ranks' experts "
            "into weight buffers (layers/moe/dwdp) whose size the estimate does not price",
            hint="measure the role (kvcheck verify --mode measure) or audit the running server",
        )
    attn_cp = int(_arg(args, "attn_cp_size", 1))
    dcp = int(_arg(args, "dcp_size", 1))
    ep = resolved_ep(args, tp, env, version)
    if tp % (attn_dp * attn_cp) != 0:
        raise EstimateError(f"tp_size {tp} is not divisible by attn_dp_size x attn_cp_size ({attn_dp} x {attn_cp})")
    role = disaggregation_mode(args)
    spec = args.get("speculative_algorithm")
    if str(env.get("SGLANG_ENABLE_POST_CAPTURE_KV_SIZING", "0")).lower() in ("1", "true"):
        raise EstimateError(
            "SGLANG_ENABLE_POST_CAPTURE_KV_SIZING=1 sizes the pool after CUDA-graph capture, "
            "which the estimate model does not predict"
        )
    return _Inputs(
        args=args, shape=shape, gpu=gpu, env=env, gpu_mib=gpu_mib, version=version,
        rules=rules,
        tp=tp, pp=pp, attn_dp=attn_dp, attn_cp=attn_cp, dcp=dcp, ep=ep,
        role=role,
        spec=str(spec).upper() if spec else None,
        spec_topk=args.get("speculative_eagle_topk"),
        draft_tokens=args.get("speculative_num_draft_tokens"),
        max_running_requests=args.get("max_running_requests"),
        a2a=a2a_backend(args, env, version),
    )


def _batch_sizes(c: _Inputs) -> tuple[int, int]:
    """(chunked_prefill_size, decode graph max batch size): memory_hook.py's table, older releases' own."""
    args, rules = c.args, c.rules
    default_cps, default_bs = release_capacity_defaults(rules, c.gpu_mib, c.tp, role=c.role)
    cps = int(_arg(args, "chunked_prefill_size", default_cps))
    # Before 0.5.20 the decode graph's flags were --cuda-graph-bs / --cuda-graph-max-bs.
    decode_bs_list = args.get("cuda_graph_bs_decode") or args.get("cuda_graph_bs")
    user_max_bs = _arg(args, "cuda_graph_max_bs_decode", args.get("cuda_graph_max_bs"))
    max_bs = int(user_max_bs) if user_max_bs is not None else default_bs
    mrr = c.max_running_requests
    if user_max_bs is None and mrr is not None and max_bs > int(mrr) and rules.has(rel.MAX_BS_CAPPED_BY_RUNNING):
        max_bs = int(mrr)
    if decode_bs_list:
        bs_values = decode_bs_list if isinstance(decode_bs_list, list | tuple) else [decode_bs_list]
        max_bs = max(int(b) for b in bs_values)
    return cps, max_bs


def _cuda_graphs(c: _Inputs) -> tuple[bool, bool]:
    """(decode graph on, prefill graph on) as the release decides them."""
    args, rules = c.args, c.rules
    disable_all = bool(args.get("disable_cuda_graph"))
    decode_backend_arg = args.get("cuda_graph_backend_decode")
    prefill_backend_arg = args.get("cuda_graph_backend_prefill")
    decode_graph = not (disable_all or args.get("disable_decode_cuda_graph") or decode_backend_arg == "disabled")
    if c.role == "prefill" and decode_backend_arg is None:
        decode_graph = False
    if not rules.has(rel.PIECEWISE_OPT_IN):
        prefill_graph = False
    elif not rules.has(rel.PIECEWISE_DEFAULT_ON):
        prefill_graph = bool(args.get("enable_piecewise_cuda_graph")) and not disable_all
    elif not rules.has(rel.PREFILL_BREAKABLE) and prefill_backend_arg is None:
        prefill_graph, reasons = _piecewise_prefill_graph(
            rules, args, c.shape, c.gpu, c.role, c.pp, c.attn_cp, c.a2a, c.spec
        )
        if reasons:
            c.notes.append(f"prefill CUDA graph off ({', '.join(reasons)})")
    elif prefill_backend_arg is not None:
        prefill_graph = prefill_backend_arg != "disabled" and not disable_all
    else:
        prefill_graph = not c.gpu.is_rocm and not disable_all and not args.get("disable_prefill_cuda_graph")
        if c.role == "decode":
            prefill_graph = False
        reasons = _breakable_prefill_graph_off(c)
        if prefill_graph and reasons:
            prefill_graph = False
            c.notes.append(f"prefill CUDA graph off ({', '.join(reasons)})")
    return decode_graph, prefill_graph


def _breakable_prefill_graph_off(c: _Inputs) -> list[str]:
    """Why the breakable prefill graph (0.5.15 on) is off: SGLang's conditions, release by release."""
    args, rules, shape = c.args, c.rules, c.shape
    reasons = []
    if c.pp > 1:
        reasons.append("pipeline parallelism")
    if c.dcp > 1 and rules.has(rel.BREAKABLE_DCP_OFF):
        reasons.append("DCP")
    if c.attn_cp > 1:
        reasons.append("attention CP")
    if args.get("enable_two_batch_overlap") and rules.has(rel.BREAKABLE_WIDENED):
        reasons.append("two-batch overlap")
    if rules.has(rel.BREAKABLE_WIDENED) and c.a2a not in A2A_BCG_OK:
        reasons.append(f"moe-a2a-backend {c.a2a}")
    if not rules.has(rel.BREAKABLE_WIDENED):
        if c.a2a != "none":
            reasons.append(f"moe-a2a-backend {c.a2a}")
        if c.attn_dp > 1:
            reasons.append("DP attention")
        if args.get("lora_paths") or args.get("enable_lora"):
            reasons.append("LoRA")
    if shape.is_mla and not rules.has(rel.BREAKABLE_MLA) and (
        not rules.has(rel.BREAKABLE_WIDENED) or shape.kind != DSA
    ):
        reasons.append("MLA attention")
    if shape.is_multimodal and not (
        shape.architecture in _MM_BREAKABLE_OK and rules.has(_MM_BREAKABLE_OK[shape.architecture])
    ):
        reasons.append("multimodal model")
    return reasons


# Multimodal architectures that keep the breakable prefill graph, with the release that listed them
# (configs/model_config.py multimodal_breakable_cuda_graph_supported_model_archs, read by
# _disable_breakable_cudagraph_if_incompatible). Only the entries checked against SGLang's own resolution
# are here: Kimi-K3 (also listed) loses it to the KDA rule first (overrides.py), MiniMax-M3's VL wrapper
# is handled in overrides.py. Qwen3.5/3.6 (both wrappers) were the list's first entries (0.5.16).
_MM_BREAKABLE_OK = {
    "KimiK25ForConditionalGeneration": rel.MM_BREAKABLE_KIMI_K25,
    "Qwen3_5ForConditionalGeneration": rel.MM_BREAKABLE_QWEN3_5,
    "Qwen3_5MoeForConditionalGeneration": rel.MM_BREAKABLE_QWEN3_5,
}


def _prefill_captures(c: _Inputs, cps: int, model_path: str | None) -> int:
    """How many prefill graph sizes are captured (each reserves memory in newer releases)."""
    args = c.args
    prefill_max = _arg(args, "cuda_graph_max_bs_prefill", args.get("piecewise_cuda_graph_max_tokens"))
    if prefill_max is None:
        mla_cap = 8192 if c.rules.has(rel.PREFILL_MLA_8192) else 2048
        # use_mla_backend (attention_arch MLA): Kimi-K3's hybrid counts as MLA too (model_config.py)
        prefill_max = min(mla_cap, cps) if c.shape.mla_full_attention else cps
        if args.get("max_total_tokens") is not None:
            prefill_max = min(prefill_max, int(args["max_total_tokens"]))
        if model_path and "llama-2" in model_path.lower():
            prefill_max = min(prefill_max, 4096)
    prefill_list = _arg(args, "cuda_graph_bs_prefill", args.get("piecewise_cuda_graph_tokens"))
    return len(prefill_list) if isinstance(prefill_list, list | tuple) else prefill_capture_count(int(prefill_max))


_QWEN3_5_ARCHS = ("Qwen3_5ForConditionalGeneration", "Qwen3_5MoeForConditionalGeneration")


def _qwen3_5_sm100_backend(c: _Inputs, default: str) -> str | None:
    """Qwen3.5/3.6 on SM100 with no --attention-backend: SGLang's own choice, or None where it has none.

    Keyed on the architecture, as SGLang keys it (_qwen3_5_hybrid_overrides: arg_groups/model_overrides/
    qwen3_5.py from 0.5.19, arg_groups/overrides.py in 0.5.15-0.5.18; server_args.py
    _handle_model_specific_adjustments before): triton (page 1), except that from
    0.5.10 the platform default trtllm_mha (page 64) stays when the radix cache is off (--disable-radix-cache,
    or a decode role without --disaggregation-decode-enable-radix-cache), a speculative algorithm is set, or
    the mamba radix cache uses the extra buffer (mamba_extra_buffer_of: --mamba-radix-cache-strategy
    extra_buffer / extra_buffer_lazy with the radix cache on). In 0.5.9 (the first release with Qwen3.5)
    triton was set unconditionally (_handle_mamba_radix_cache). Only 0.5.23 is checked against SGLang's
    own resolution (tests/estimate/oracle_defaults_0.5.23.json).
    """
    if c.shape.architecture not in _QWEN3_5_ARCHS or not c.gpu.is_sm100 or not c.rules.has(rel.QWEN3_5_SM100_TRITON):
        return None
    if default != "trtllm_mha" or not c.rules.has(rel.QWEN3_5_SM100_TRTLLM_KEPT):
        return "triton"
    args = c.args
    radix_off = bool(args.get("disable_radix_cache")) or (
        c.role == "decode" and not args.get("disaggregation_decode_enable_radix_cache")
    )
    extra_buffer = not radix_off and args.get("mamba_radix_cache_strategy") in ("extra_buffer", "extra_buffer_lazy")
    return "trtllm_mha" if radix_off or c.spec is not None or extra_buffer else "triton"


def _attention(c: _Inputs) -> tuple[str, int]:
    """(attention backend, page size)."""
    args, shape, gpu = c.args, c.shape, c.gpu
    backend = args.get("attention_backend")
    if backend is None and args.get("prefill_attention_backend") and (
        args.get("prefill_attention_backend") == args.get("decode_attention_backend")
    ):
        backend = args.get("prefill_attention_backend")
    user_backend = bool(backend)
    backend = str(backend) if backend else _default_backend(shape, gpu, c.spec_topk, c.tp)
    user_page = args.get("page_size")
    qwen35_sm100 = not user_backend and _qwen3_5_sm100_backend(c, backend)
    if qwen35_sm100:
        backend = qwen35_sm100
    page_size, page_why = _page_size(shape, gpu, backend, None if user_page is None else int(user_page), c.spec_topk,
                                     c.rules)
    if qwen35_sm100:
        # The override sets the page size with the backend, over --page-size (model_overrides/qwen3_5.py).
        page_size, page_why = (64 if backend == "trtllm_mha" else 1), f"Qwen3.5 override on SM100 with {backend}"
    elif shape.architecture.startswith("Qwen3_5") and gpu.is_sm100 and backend == "trtllm_mha" and user_page is None:
        page_size, page_why = 64, "Qwen3.5 on SM100 with trtllm_mha: 64"
    if shape.architecture == "NemotronHForCausalLM" and gpu.is_sm100 and backend == "trtllm_mha" and user_page is None:
        page_size, page_why = 64, "Nemotron-H on SM100 with trtllm_mha: 64"
    if not c.rules.has(rel.PAGE_ALIGNED):
        page_size, page_why = 1, f"SGLang {c.version} has no pages (--page-size came in {rel.PAGE_ALIGNED})"
    c.notes.append(
        f"attention backend {backend}{'' if args.get('attention_backend') else ' (default)'}; "
        f"page size {page_size} ({page_why})"
    )
    return backend, page_size


def _kv_dtype(c: _Inputs, checkpoint_kv_fp8: bool) -> str:
    """The KV cache dtype (docs/sglang-internals.md, KV cache dtype; DSA overrides it)."""
    shape, gpu = c.shape, c.gpu
    kv_arg = str(_arg(c.args, "kv_cache_dtype", "auto"))
    if shape.kind == DSA and kv_arg == "auto" and not gpu.is_rocm:
        kv_dtype = "fp8_e4m3" if gpu.is_blackwell and not shape.has_attention_sinks else "bfloat16"
        c.notes.append(f"DSA KV dtype auto -> {kv_dtype} on {gpu.name}")
        return kv_dtype
    if kv_arg == "auto":
        if checkpoint_kv_fp8:
            c.notes.append("KV dtype auto -> fp8_e4m3 (checkpoint kv_cache_quant_algo FP8)")
        return "fp8_e4m3" if checkpoint_kv_fp8 else shape.model_dtype
    if kv_arg not in KV_DTYPE_ALIASES:
        raise EstimateError(f"--kv-cache-dtype {kv_arg} is not understood by the estimate model")
    return KV_DTYPE_ALIASES[kv_arg]


@dataclass(frozen=True)
class _Graphs:
    """The CUDA-graph settings the activation reserve depends on."""

    cps: int  # chunked_prefill_size
    max_bs: int  # decode graph max batch size
    decode: bool
    prefill: bool
    n_prefill: int  # prefill graph sizes captured


def _mem_fraction(
    c: _Inputs, graphs: _Graphs, *, backend: str, context_len: int, vision: Mapping[str, Any] | None
) -> tuple[float, bool, float | None]:
    """(mem_fraction_static, whether SGLang chose it, its reserve in MiB when it did by reserving)."""
    args, rules, shape = c.args, c.rules, c.shape
    user_f = args.get("mem_fraction_static")
    reserved = None
    if rules.older_than_known:
        table = f"{rules.release}'s" if rules.release == rel.OLDEST_TABLE else "its own"
        c.notes.append(
            f"SGLang {c.version} predates 0.4.0, the oldest release whose sizing kvcheck has read in full; "
            f"sized with 0.4.0's rules and {table} default-fraction table"
        )
    if rules.newer_than_known:
        c.notes.append(
            f"SGLang {c.version} is newer than {rel.NEWEST_READ}, the newest release whose sizing kvcheck has read; "
            f"sized with {rel.NEWEST_READ}'s rules"
        )
    if user_f is not None:
        f = float(user_f)
        defaulted = False
    elif not rules.has(rel.FRACTION_ACTIVATION):
        defaulted = True
        f, reserved, why = fraction_before_0_5_3(
            rules, c.gpu_mib, tp=c.tp, pp=c.pp, speculative=c.spec, dp_attention=c.attn_dp > 1, is_rocm=c.gpu.is_rocm
        )
        c.notes.append(f"default mem_fraction_static {f:.3f}: SGLang {rules.release} rule ({why})")
    else:
        defaulted = True
        reserved = _activation_reserve(c, graphs)
        f = round((c.gpu_mib - reserved) / c.gpu_mib, 3)
        if not rules.has(rel.CAPACITY_SMALL_48):  # rules older than the 0.5.20 line kvcheck was built on
            c.notes.append(f"default mem_fraction_static {f:.3f}: SGLang {rules.release} rule (activation reserve)")
    if defaulted and shape.is_multimodal and rules.has(rel.VLM_X090):
        skip = (args.get("language_only") and rules.has(rel.VLM_LANGUAGE_ONLY)) or (
            c.role == "decode" and rules.has(rel.VLM_NOT_ON_DECODE)
        )
        if not skip:
            f *= vlm_factor(vision or {}) if rules.has(rel.VLM_FACTOR) else 0.90
            c.notes.append("multimodal: default mem_fraction_static scaled by the vision-tower factor")
    if backend == "aiter" and context_len > 8192 and rules.has(rel.AITER_X085):
        honor = str(c.env.get("SGLANG_AITER_HONOR_EXPLICIT_MEM_FRACTION", "")).lower() in ("1", "true")
        if defaulted or not honor or not rules.has(rel.AITER_HONOR_ENV):
            f *= 0.85
            c.notes.append("aiter backend with context_len > 8192: mem_fraction_static x 0.85")
    return f, defaulted, reserved


def _activation_reserve(c: _Inputs, graphs: _Graphs) -> float:
    """0.5.3 on: the MiB SGLang keeps free for activations, CUDA graphs and speculative decoding."""
    args, rules = c.args, c.rules
    disagg = rules.has(rel.DISAGGREGATION_RESERVE)
    if c.role == "decode" and disagg:
        running = c.max_running_requests or graphs.max_bs or 1
        activation = max(int(running) * int(c.draft_tokens or 1), 2048)
    elif graphs.cps > 0:
        activation = max(graphs.cps, 2048)
    else:
        activation = max(int(_arg(args, "max_prefill_tokens", 16384)), 2048)
    reserved = 512 + activation * 1.5 + c.tp * c.pp / 8 * 1024
    graph, piecewise_late = _graph_reserve(c, graphs, disagg)
    reserved += graph
    if c.gpu_mib > 60 * 1024:
        reserved = max(reserved, 10 * 1024)
    if c.spec is not None and not rules.has(rel.SPEC_RESERVE_REMOVED):
        if c.spec == "STANDALONE":
            reserved += 6 * 1024
        elif c.spec != "NGRAM":
            reserved += 4 * 1024 if rules.has(rel.SPEC_EAGLE_4G) else 2 * 1024
    if piecewise_late:
        reserved += piecewise_late
    if c.a2a == "deepep" and graphs.decode and c.role != "prefill" and disagg:
        reserved += 2048
    return reserved


def _graph_reserve(c: _Inputs, graphs: _Graphs, disagg: bool) -> tuple[float, int]:
    """(MiB for the CUDA graphs before the 10 GiB floor, MiB 0.5.5.post1-0.5.7 added after it)."""
    args, rules, role, max_bs = c.args, c.rules, c.role, graphs.max_bs
    graph = 0.0
    if not disagg or (role != "prefill" and graphs.decode):
        graph += max_bs * 2
    if c.attn_dp > 1 and (not disagg or role != "prefill"):
        graph += max_bs * c.attn_dp * 3
        if max_bs > 300:
            graph += max_bs * c.attn_dp * 1.5
    piecewise_late = 0  # 0.5.5.post1-0.5.7 added the piecewise term after the floor
    if graphs.prefill and (not disagg or role != "decode"):
        if not rules.has(rel.PIECEWISE_DIV8):
            piecewise_late = int(args.get("piecewise_cuda_graph_max_tokens") or 4096) // 4
        elif not rules.has(rel.PIECEWISE_PER_SIZE):
            piecewise_late = int(args.get("piecewise_cuda_graph_max_tokens") or graphs.cps) // 8
        elif c.shape.mla_full_attention and rules.has(rel.PIECEWISE_DEFAULT_ON):
            graph += 1536
        else:
            graph += 8 * graphs.n_prefill
        if c.a2a == "deepep" and rules.has(rel.PREFILL_BCG_DEEPEP_1G):
            graph += 1024
    return graph, piecewise_late


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


def _dsa_raw_layout(
    args: Mapping[str, Any], gpu: GpuProfile, kv_dtype: str, role: str | None, rules: rel.SizingRules | None = None
) -> bool:
    """Whether the DSA pool keeps raw latent rows (kv_cache_configurator.calculate_mla_kv_cache_dim).

    Before 0.5.10 an fp8 KV cache set the DSA backends to flashmla_auto / flashmla_kv on every GPU,
    over any --nsa-*-backend (server_args._handle_model_specific_adjustments), so the rows are the
    scaled ones; 0.5.10 forced trtllm for fp8 on SM100 and left ROCm's tilelang default to unset
    flags; 0.5.11 on keeps a user's backends.
    """
    prefill = args.get("dsa_prefill_backend")
    decode = args.get("dsa_decode_backend")
    if rules is not None and kv_dtype == "fp8_e4m3" and not rules.has(rel.DSA_BACKENDS_BY_PLATFORM):
        return False
    forced_trtllm = kv_dtype == "fp8_e4m3" and gpu.is_blackwell and not gpu.is_rocm
    if rules is not None and forced_trtllm and not rules.has(rel.DSA_BLACKWELL_FP8_USER_BACKENDS):
        prefill = decode = "trtllm"
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


# SGLang loads these model types through its own config class (utils/hf_transformers: _CONFIG_REGISTRY),
# whose vision config sets the attributes the multimodal factor reads (num_hidden_layers, hidden_size)
# from other keys or defaults: configs/kimi_k3.py KimiK3VisionConfig takes vt_num_hidden_layers (default 27)
# and vt_hidden_size (default 1024) and overwrites any plain spelling with them; configs/kimi_k25.py
# KimiK25VisionConfig reads the plain num_hidden_layers and hidden_size, defaulting to 27 and 1152, and
# ignores the vt_* keys Kimi-K2.5/K2.6 checkpoints write (so they load as 27 x 1152 whatever vt_* says).
# (source key, default) for num_hidden_layers, then hidden_size.
_SGLANG_VISION_ALIASES = {
    "kimi_k3": (("vt_num_hidden_layers", 27), ("vt_hidden_size", 1024)),
    "kimi_k25": (("num_hidden_layers", 27), ("hidden_size", 1152)),
}


def vision_as_sglang_loads(model_type: object, vision: Mapping[str, Any] | None) -> Mapping[str, Any] | None:
    """The vision config as SGLang's config class hands it to adjust_mem_fraction_for_vlm (memory_hook.py).

    For Kimi-K3 that is a ViT of 27 x 1024 (a factor 0.95 x 0.9875), for Kimi-K2.5 27 x 1152 (0.95 x
    0.957617...), not the ViT-L default 24 x 1024 the plain keys' absence would give; a model type
    without its own class is read as written.
    """
    aliases = _SGLANG_VISION_ALIASES.get(model_type) if isinstance(model_type, str) else None
    if aliases is None:
        return vision
    seen = dict(vision or {})
    for (key, default), target in zip(aliases, ("num_hidden_layers", "hidden_size"), strict=True):
        value = seen.get(key, default)  # a whole number already (config.check_counts), or null
        if value is None:
            raise EstimateError(
                f"model config: vision_config.{key} is null; SGLang's {model_type} vision config would carry "
                "None into its multimodal memory factor and fail",
                hint="pass the model's own config.json (model.config in the manifest)",
            )
        seen[target] = int(value)
    return seen


def vlm_factor(vision: Mapping[str, Any]) -> float:
    """SGLang's multimodal scaling of the default fraction: 0.95 x clamp(1 - 0.1 (ViT/ViT-L - 1))."""
    layers = vision.get("num_hidden_layers", 24)
    hidden = vision.get("hidden_size", 1024)
    ratio = layers * hidden**2 / (24 * 1024**2)
    return float(0.95 * max(0.8, min(1.05, 1.0 - 0.1 * (ratio - 1.0))))

