"""DeepSeek-V4's pools as SGLang 0.5.23 sizes them (DSV4PoolConfigurator, pool_configurator.py:1067-1712).

V4 keeps no single per-token cell: every layer holds a sliding-window (SWA) ring of the latent, the
layers of compress ratio 4 add a compressed KV pool at 1/4 of the tokens plus an FP8 indexer, the
layers of ratio 128 a compressed pool at 1/128, and the c4/c128 compress states are request-scoped.
`bytes_per_full_token` prices one full-context token across those pools; the request-scoped c128
state is a fixed cost taken from the budget first. Reproduced here for the default CUDA path:
FlashMLA V4 layout (SGLANG_DSV4_KV_LAYOUT=v4, the default), fp32 or (0.5.14 on) bf16 compress state
(SGLANG_DSV4_COMPRESS_STATE_DTYPE, _get_dsv4_compress_state_dtype_sizes), no online c128,
no unified-KV (a ROCm-only switch), no HiSparse, no encoder replay. Other switches are refused.

The layout changed between releases (read from each release's wheel; docs/estimate.md, DeepSeek-V4 by
release), and `plan` takes the era's layout:

- LAYOUT_0_5_12 (0.5.12, the first release with V4): every entry of `compress_ratios` priced on every
  rank (the MTP layer's entry too, no PP slice); SWA, c4 and c128 rows at 584 B unpadded; the c4 *and*
  c128 compress states priced per SWA slot (ring / sliding_window rows per SWA token); no fixed bytes.
- LAYOUT_0_5_13 (0.5.13-0.5.14): the same, over the PP stage's layers.
- LAYOUT_0_5_15 (0.5.15-0.5.20): the c128 state request-scoped (fixed bytes from the request slots); the
  c4 state still per SWA slot, rows still unpadded.
- LAYOUT_0_5_21 (0.5.21-0.5.23): page-padded rows (576 B units), the SWA page is the page size, cap mode
  for V4.1, the operator's ratio kept as given.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from packaging.version import InvalidVersion, Version

from kvcheck.engines.sglang.sizing import releases as rel
from kvcheck.engines.sglang.sizing.allocator import SLACK, block_slack
from kvcheck.engines.sglang.sizing.environ import effective_env, env_bool
from kvcheck.errors import EstimateError

DEFAULT_SWA_FULL_TOKENS_RATIO = 0.1  # DSV4_DEFAULT_SWA_FULL_TOKENS_RATIO
V4_ROW_BYTES = 576 + 8  # KVLayout.V4: 576 data bytes + 8 scale bytes per token
V4_PAGE_ALIGN = 576  # KVLayout.V4.page_align: page stride padded to the TMA row
FP32_STATE_BYTES = 4  # SGLANG_DSV4_COMPRESS_STATE_DTYPE=float32, the default (and the only choice before 0.5.14)
STATE_DTYPE_ENV = "SGLANG_DSV4_COMPRESS_STATE_DTYPE"
STATE_DTYPE_BYTES = {"float32": 4, "fp32": 4, "bfloat16": 2, "bf16": 2}  # _get_dsv4_compress_state_dtype_sizes
SWA_EVICTION_INTERVAL = 128  # SGLANG_SWA_EVICTION_INTERVAL
KV_ROW_BYTES = 448 + 64 * 2 + 8  # fp8 nope + bf16 rope + 7 scales + 1 pad (the configurator's kv_bytes before 0.5.21)

LAYOUT_PRE_0_5_12 = "pre-0.5.12"
LAYOUT_0_5_12 = "0.5.12"
LAYOUT_0_5_13 = "0.5.13"
LAYOUT_0_5_15 = "0.5.15"
LAYOUT_0_5_21 = "0.5.21"
LAYOUTS = {
    LAYOUT_PRE_0_5_12: (
        "a development build before 0.5.12 (the ROCm image of issue 25118): 0.5.12's arithmetic with the speculative "
        "rings 16/256 always and no V4 override of swa_full_tokens_ratio (0.8)"
    ),
    LAYOUT_0_5_12: "0.5.12: c4/c128 compress states per SWA slot, every compress_ratios entry on every rank",
    LAYOUT_0_5_13: "0.5.13-0.5.14: c4/c128 compress states per SWA slot, the PP stage's layers",
    LAYOUT_0_5_15: "0.5.15-0.5.20: c4 state per SWA slot, c128 state request-scoped, unpadded rows",
    LAYOUT_0_5_21: "0.5.21-0.5.23: page-padded rows, request-scoped c128 state, SWA cap mode for V4.1",
}
UNSUPPORTED_ENV = {
    "SGLANG_DSV4_KV_LAYOUT": ("v4",),
    "SGLANG_HACK_FLASHMLA_BACKEND": (),
}


@dataclass(frozen=True)
class Dsv4Plan:
    """What one DeepSeek-V4 rank's pools cost: per full token, and fixed per request slot."""

    bytes_per_full_token: float
    bytes_per_swa_token: float
    swa_ratio: float
    swa_cap_tokens: int | None  # cap mode: SWA slots reserved from the request cap (fixed bytes)
    fixed_bytes: float  # c128 compress state (+ cap-mode SWA pool)
    layers: int
    layers_by_ratio: Mapping[int, int]
    parts: Mapping[str, Any]


ONLINE_COMPRESS_ENV = "SGLANG_OPT_USE_ONLINE_COMPRESS"  # an EnvBool, off by default in every release


def check_env(env: Mapping[str, str]) -> None:
    for name, allowed in UNSUPPORTED_ENV.items():
        value = env.get(name)
        if value is not None and str(value).lower() not in allowed:
            raise EstimateError(
                f"{name}={value} selects a DeepSeek-V4 pool layout the estimate model does not price "
                "(it reproduces the default FlashMLA V4 layout)"
            )
    # online compression is on only for a value EnvBool reads as true; "no", "off" or " 1" leave it off
    if env_bool(env.get(ONLINE_COMPRESS_ENV)):
        raise EstimateError(
            f"{ONLINE_COMPRESS_ENV}={env[ONLINE_COMPRESS_ENV]} selects a DeepSeek-V4 pool layout the estimate model "
            "does not price (it reproduces the default FlashMLA V4 layout)"
        )


def compress_state_bytes(env: Mapping[str, str], *, reads_env: bool) -> int:
    """Bytes per element of the c4/c128 compress states: SGLANG_DSV4_COMPRESS_STATE_DTYPE as the release reads it.

    `reads_env`: the release has the variable (0.5.14 on); before, the states are float32 whatever it says.
    A value SGLang rejects is refused before this (refusals.check_dsv4_state_dtype); here it is not priced.
    """
    value = env.get(STATE_DTYPE_ENV)
    if not reads_env or value is None:
        return FP32_STATE_BYTES
    size = STATE_DTYPE_BYTES.get(str(value).strip().lower())
    if size is None:
        raise EstimateError(f"{STATE_DTYPE_ENV}={value} is not a compress-state dtype SGLang accepts")
    return size


def _paged_bytes(page_size: int, ratio: int = 0) -> float:
    """Bytes per token of a V4-layout page (the page stride is padded to 576 B)."""
    page = page_size // ratio if ratio else page_size
    raw = page * V4_ROW_BYTES
    return math.ceil(raw / V4_PAGE_ALIGN) * V4_PAGE_ALIGN / page


def _ring(ratio: int, draft_tokens: int) -> int:
    """get_compress_state_ring_size: rows per request ring."""
    if draft_tokens > 0:
        return 16 if ratio == 4 else 256
    return 8 if ratio == 4 else 128


def plan(
    *,
    compress_ratios: tuple[int, ...],
    stage: range,
    head_dim: int,
    index_head_dim: int,
    sliding_window: int,
    page_size: int,
    max_running_requests: int,
    attn_dp: int,
    role: str | None,
    chunked_prefill_size: int,
    swa_ratio_arg: float | None,
    cap_mode_default: bool,
    draft_tokens: int,
    speculative: bool,
    radix_cache: bool,
    decode_extra_slots: int,
    layout: str = LAYOUT_0_5_21,
    state_bytes: int = FP32_STATE_BYTES,
) -> Dsv4Plan:
    """DSV4PoolConfigurator.__init__ / _get_bytes_per_* for one PP stage of one rank, in `layout`'s era."""
    if page_size % 128:
        raise EstimateError(f"page size {page_size}: SGLang asserts a multiple of 128 for compressed attention")
    if layout == LAYOUT_PRE_0_5_12:
        stage = range(len(compress_ratios))  # like 0.5.12: every compress_ratios entry, on every PP stage
    ratios = [compress_ratios[i] for i in stage if i < len(compress_ratios)]
    if any(r not in (0, 4, 128) for r in ratios):
        raise EstimateError("DeepSeek-V4 compress ratios 1/2 (V4.1 low-ratio pools) are not priced by the estimate model")
    by_ratio = {r: sum(1 for x in ratios if x == r) for r in (4, 128) if any(x == r for x in ratios)}
    layers = len(ratios)
    if layout != LAYOUT_0_5_21:
        return _swa_slot_plan(
            layout=layout, by_ratio=by_ratio, layers=layers, head_dim=head_dim, index_head_dim=index_head_dim,
            sliding_window=sliding_window, max_running_requests=max_running_requests, attn_dp=attn_dp, role=role,
            swa_ratio_arg=swa_ratio_arg, speculative=speculative, decode_extra_slots=decode_extra_slots,
            state_bytes=state_bytes,
        )
    rings = {r: _ring(r, draft_tokens) for r in by_ratio}
    indexer_bytes = index_head_dim + index_head_dim // 128 * 4  # get_dsv4_indexer_bytes_per_token, fp8

    c4_state = 2 * 2 * head_dim * state_bytes
    c4_indexer_state = 2 * 2 * index_head_dim * state_bytes
    bytes_per_swa = _paged_bytes(page_size) * layers + (
        rings.get(4, 0) / page_size * (c4_state + c4_indexer_state) * by_ratio.get(4, 0)
    )
    compressed = 0.0
    if 4 in by_ratio:
        compressed += (_paged_bytes(page_size, 4) / 4 + indexer_bytes / 4) * by_ratio[4]
    if 128 in by_ratio:
        compressed += _paged_bytes(page_size, 128) / 128 * by_ratio[128]

    per_worker = max(1, max_running_requests // max(1, attn_dp))
    # cap mode: the SWA pool is sized from the request cap, unless the operator (or V4's own
    # override, swa_full_tokens_ratio 0.1 for model_type deepseek_v4) gave a ratio
    cap_tokens = None
    if swa_ratio_arg is None and cap_mode_default and (role == "decode" or chunked_prefill_size > 0):
        trailing = sliding_window + SWA_EVICTION_INTERVAL * max(1, draft_tokens) + page_size
        per_request = trailing + page_size
        if role == "decode":
            cap = per_request * per_worker + (sliding_window + page_size) * decode_extra_slots
        else:
            cap = per_request * per_worker + 2 * chunked_prefill_size + page_size
        tails = 4 * per_worker if radix_cache else 0
        cap_tokens = math.ceil((cap + tails * (sliding_window + page_size)) / page_size) * page_size
    swa_ratio = DEFAULT_SWA_FULL_TOKENS_RATIO if swa_ratio_arg is None else float(swa_ratio_arg)
    full = (0.0 if cap_tokens is not None else swa_ratio * bytes_per_swa) + compressed
    spec_infl = (layers + 1) / layers if speculative and layers else 1.0
    full *= spec_infl
    bytes_per_swa *= spec_infl

    slots = per_worker + 1 + (decode_extra_slots if role == "decode" else 0)
    c128 = 0.0
    if 128 in by_ratio:
        rows = slots * rings[128] + rings[128] + 1
        rows = math.ceil(rows / 128) * 128
        c128 = rows * 2 * head_dim * state_bytes * by_ratio[128]
    fixed = c128 + (cap_tokens * bytes_per_swa if cap_tokens is not None else 0.0)
    return Dsv4Plan(
        bytes_per_full_token=full,
        bytes_per_swa_token=bytes_per_swa,
        swa_ratio=swa_ratio,
        swa_cap_tokens=cap_tokens,
        fixed_bytes=fixed,
        layers=layers,
        layers_by_ratio=by_ratio,
        parts={
            "layers": layers,
            "compressed_layers_by_ratio": dict(by_ratio),
            "swa_bytes_per_token": round(bytes_per_swa, 2),
            "compressed_bytes_per_full_token": round(compressed * spec_infl, 2),
            "swa_full_tokens_ratio": None if cap_tokens is not None else swa_ratio,
            "swa_cap_tokens": cap_tokens,
            "c128_state_fixed_bytes": int(c128),
            "compress_state_bytes_per_element": state_bytes,
            "fixed_bytes": int(fixed),
            "layout": LAYOUTS[layout],
        },
    )


def _swa_slot_plan(
    *,
    layout: str,
    by_ratio: Mapping[int, int],
    layers: int,
    head_dim: int,
    index_head_dim: int,
    sliding_window: int,
    max_running_requests: int,
    attn_dp: int,
    role: str | None,
    swa_ratio_arg: float | None,
    speculative: bool,
    decode_extra_slots: int,
    state_bytes: int,
) -> Dsv4Plan:
    """DSV4PoolConfigurator._get_bytes_per_full_token of 0.5.12-0.5.20 (pool_configurator.py):

        swa_ratio * kv * L + kv / 4 * L4 + kv / 128 * L128 + indexer / 4 * L4
        + swa_ratio * ring4 / window * (c4_state + c4_indexer_state) * L4
        + swa_ratio * ring128 / window * c128_state * L128      (0.5.12-0.5.14 only)

    with kv = 584 B unpadded, window = config.window_size (the compress states' "swa_page_size"),
    rings get_compress_state_ring_size(ratio, is_speculative). From 0.5.15 the c128 state is
    _get_c128_state_fixed_bytes(max_running_requests): fixed bytes taken from the budget first.
    """
    # the development build of issue 25118 (2026-05-12) sizes the rings as 0.5.12 does for a draft, with none
    # running (c4_state_pool_size = swa_size / 8, c128_state_pool_size = 2 x swa_size in its log)
    ring4, ring128 = (16, 256) if speculative or layout == LAYOUT_PRE_0_5_12 else (8, 128)
    window = max(1, sliding_window)
    l4, l128 = by_ratio.get(4, 0), by_ratio.get(128, 0)
    indexer_bytes = index_head_dim + index_head_dim // 128 * 4
    c4_state = 2 * 2 * head_dim * state_bytes
    c4_indexer_state = 2 * 2 * index_head_dim * state_bytes
    c128_state = 2 * head_dim * state_bytes
    c128_per_slot = layout in (LAYOUT_PRE_0_5_12, LAYOUT_0_5_12, LAYOUT_0_5_13)
    bytes_per_swa = KV_ROW_BYTES * layers + ring4 / window * (c4_state + c4_indexer_state) * l4
    if c128_per_slot:
        bytes_per_swa += ring128 / window * c128_state * l128
    compressed = (KV_ROW_BYTES + indexer_bytes) / 4 * l4 + KV_ROW_BYTES / 128 * l128
    # before 0.5.12's hook (deepseek_v4_hook.py) the field's own default 0.8 stays
    default_ratio = 0.8 if layout == LAYOUT_PRE_0_5_12 else DEFAULT_SWA_FULL_TOKENS_RATIO
    swa_ratio = default_ratio if swa_ratio_arg is None else float(swa_ratio_arg)
    full = swa_ratio * bytes_per_swa + compressed
    spec_infl = (layers + 1) / layers if speculative and layers else 1.0
    full *= spec_infl
    c128 = 0.0
    if not c128_per_slot and l128:
        slots = max(1, max_running_requests // max(1, attn_dp)) + 1 + (decode_extra_slots if role == "decode" else 0)
        rows = math.ceil((slots * ring128 + ring128 + 1) / 128) * 128
        c128 = rows * c128_state * l128
    return Dsv4Plan(
        bytes_per_full_token=full,
        bytes_per_swa_token=bytes_per_swa * spec_infl,
        swa_ratio=swa_ratio,
        swa_cap_tokens=None,
        fixed_bytes=c128,
        layers=layers,
        layers_by_ratio=dict(by_ratio),
        parts={
            "layers": layers,
            "compressed_layers_by_ratio": dict(by_ratio),
            "swa_bytes_per_token": round(bytes_per_swa * spec_infl, 2),
            "compressed_bytes_per_full_token": round(compressed * spec_infl, 2),
            "swa_full_tokens_ratio": swa_ratio,
            "swa_cap_tokens": None,
            "c128_state_fixed_bytes": int(c128),
            "compress_state_bytes_per_element": state_bytes,
            "fixed_bytes": int(c128),
            "layout": LAYOUTS[layout],
        },
    )


def layout_for(version: str | None) -> tuple[str, str | None]:
    """(the layout kvcheck prices for the declared release, why it may not be that release's layout).

    The second item is None when the release's own source was read; otherwise (no version stated, a
    development or release-candidate build, a release newer than the newest read) the layout is the
    newest one and the estimate must carry the range over every layout (KV108).
    Raises EstimateError for a release before DeepSeek-V4 support.
    """
    if version is None:
        return LAYOUT_0_5_21, (
            "engine.version is not stated, and DeepSeek-V4's pool layout changed between SGLang releases "
            "(0.5.12, 0.5.13, 0.5.15, 0.5.21) and the development builds before 0.5.12"
        )
    try:
        parsed = Version(version)
    except InvalidVersion:
        return LAYOUT_0_5_21, f"SGLang {version!r} is not a release number kvcheck can place among the V4 layouts"
    base = Version(parsed.base_version)
    if base < Version(rel.DSV4_FIRST):
        raise EstimateError(
            f"SGLang {version} has no DeepSeek-V4 support (DeepseekV4ForCausalLM first appears in "
            f"{rel.DSV4_FIRST}): the engine would not load this model",
            hint="declare the release the deployment runs (engine.version)",
        )
    if parsed.is_prerelease or parsed.is_devrelease:
        return _layout_of(base), (
            f"SGLang {version} is a development build: its DeepSeek-V4 pool layout may be that of a release "
            "before or after it"
        )
    if base > Version(rel.DSV4_NEWEST_READ):
        return LAYOUT_0_5_21, (
            f"SGLang {version} is newer than {rel.DSV4_NEWEST_READ}, the newest release whose DeepSeek-V4 pool "
            "code kvcheck has read"
        )
    return _layout_of(base), None


def range_layouts(version: str | None) -> tuple[str, ...]:
    """The layouts the KV108 range spans for a build whose layout kvcheck cannot place (layout_for's second item).

    Every release layout; and the pre-0.5.12 development layout only where the build may predate 0.5.12: no
    version stated, an unreadable one, or a development / release-candidate build of 0.5.12 or earlier (a
    0.5.22rc1 is not a May 2026 image).
    """
    releases = tuple(k for k in LAYOUTS if k != LAYOUT_PRE_0_5_12)
    try:
        parsed = Version(version) if version is not None else None
    except InvalidVersion:
        parsed = None
    if parsed is not None and Version(parsed.base_version) > Version(rel.DSV4_FIRST):
        return releases
    return (LAYOUT_PRE_0_5_12, *releases)


def _layout_of(base: Version) -> str:
    if base >= Version(rel.DSV4_PAGED_RING):
        return LAYOUT_0_5_21
    if base >= Version(rel.DSV4_C128_REQUEST_SCOPED):
        return LAYOUT_0_5_15
    if base >= Version(rel.DSV4_PP_SLICE):
        return LAYOUT_0_5_13
    return LAYOUT_0_5_12


def full_tokens(plan_: Dsv4Plan, available_bytes: float, page_size: int) -> int:
    """calculate_pool_sizes: the full-token capacity left after the fixed pools, page-aligned."""
    left = max(available_bytes - plan_.fixed_bytes, 0.0)
    if plan_.bytes_per_full_token <= 0:
        return 0
    return int(left / plan_.bytes_per_full_token) // page_size * page_size


def swa_tokens(plan_: Dsv4Plan, full: int, page_size: int) -> int:
    if plan_.swa_cap_tokens is not None:
        return plan_.swa_cap_tokens
    return int(full * plan_.swa_ratio) // page_size * page_size


# --- weights ------------------------------------------------------------------------------------------

FMT_BYTES = {
    "bf16": 2.0,
    "fp8": 1.0 + 4 / (128 * 128),
    "mxfp4": 0.5 + 1 / 32,  # packed E2M1 + one E8M0 scale byte per 32
    "mxfp4_fp32_scales": 0.5 + 4 / 32,  # packed E2M1 + a float32 scale per 32 (the FP8 MoE method's staging)
    # Marlin before 0.5.16: the repacked E2M1 and E8M0 Marlin scales, plus the float32 loader scales it never frees
    "mxfp4_marlin_fp32_kept": 0.5 + 1 / 32 + 4 / 32,
    "nvfp4": 0.5 + 1 / 16,  # packed E2M1 + one FP8 E4M3 scale per 16 (ModelOpt)
}
# FMT_BYTES as the tensors that hold them: the packed weights, then each scale tensor (the caching allocator
# rounds each on its own: sizing/allocator.py)
FMT_TENSORS = {
    "bf16": (2.0,),
    "fp8": (1.0, 4 / (128 * 128)),
    "mxfp4": (0.5, 1 / 32),
    "mxfp4_fp32_scales": (0.5, 4 / 32),
    "mxfp4_marlin_fp32_kept": (0.5, 1 / 32, 4 / 32),
    "nvfp4": (0.5, 1 / 16),
}


@dataclass(frozen=True)
class ExpertFormat:
    """How one GPU holds DeepSeek-V4's routed experts: bytes per expert weight, padding, and why."""

    fmt: str
    inter_align: int  # the per-rank intermediate width is padded up to a multiple of this (1: none)
    note: str
    hip_rope_per_layer: bool = True  # the release keeps per-layer bf16 RoPE copies on ROCm (0.5.13 on)
    rope_cache_entry_bytes: int = 0  # bytes per entry of each rotary_emb's cos_sin_cache (0: no rotary_emb, 0.5.12)
    rope_plain_swa: bool = False  # the uncompressed layers' rotary_emb is plain RoPE over max_position (0.5.18 on)
    wo_a_bf16: bool = False  # the release dequantizes the checkpoint's FP8 wo_a to bf16 at load (see wo_a_in_bf16)
    wo_a_note: str = ""  # why, for the report


def expert_format(
    checkpoint_fmt: str,
    *,
    version: str | None,
    vendor: str,
    sm: int | None,
    env: Mapping[str, str],
    moe_runner_backend: str | None,
    moe_a2a_backend: str | None,
    gpu_arch: str = "",
) -> ExpertFormat:
    """The routed-expert format SGLang loads a V4 checkpoint's experts into, per release and GPU.

    `checkpoint_fmt` is the checkpoint's expert format (mxfp4 for expert_dtype fp4, nvfp4, fp8,
    bf16). From layers/quantization/fp8.py (Fp8MoEMethod.create_weights, process_weights_after_loading,
    _dequantize_aiter_fp4_experts), mxfp4_flashinfer_{cutlass,trtllm}_moe.py and the V4 MoE-runner
    override (arg_groups/overrides.py, then model_overrides/deepseek_v4.py) of each release:

    - SGLANG_DSV4_FP4_DEQUANT=1 turns MXFP4 experts into block FP8 (1 B per weight) on every platform.
    - ROCm: native MXFP4 (E8M0 scales) with the per-rank intermediate padded to 256 (0.5.13-0.5.16) or
      128 (0.5.17 on); 0.5.12 had no aiter FP4 path (the FP8 method's float32 scales).
    - SM90 and SM100 from 0.5.19, SM120 from 0.5.16: flashinfer_mxfp4 keeps the E8M0 scales (the SM90
      W4A16 interleave makes same-size copies and frees the old ones), 0.53125 B per weight.
    - Marlin (explicit, or SM120's default in 0.5.13-0.5.15): E8M0 Marlin scales, plus the float32 loader
      scales it keeps registered before 0.5.16 (see _marlin_format).
    - Before that (and with an explicit other MoE runner): the FP8 MoE method stages each 32-weight
      block's scale as float32 (0.625 B per weight); only the DeepGEMM path of a DeepEP/Mooncake/NIXL
      all-to-all on SM100 repacks them to UE8M0 (0.53125).
    - NVFP4 (ModelOpt, nvidia/DeepSeek-V4-*-NVFP4): E2M1 + an FP8 scale per 16 on every platform.
    """
    rules = rel.rules_for(version)
    hip_rope = rules.has(rel.DSV4_HIP_ROPE_PER_LAYER)
    fmt = _expert_format(checkpoint_fmt, rules, vendor=vendor, sm=sm, env=env, moe_runner_backend=moe_runner_backend,
                         moe_a2a_backend=moe_a2a_backend)
    wo_a_bf16, wo_a_note = wo_a_in_bf16(version, vendor=vendor, sm=sm, gpu_arch=gpu_arch, env=env)
    return ExpertFormat(fmt.fmt, fmt.inter_align, fmt.note, hip_rope_per_layer=hip_rope,
                        rope_cache_entry_bytes=rope_cache_entry_bytes(rules, vendor),
                        rope_plain_swa=rules.has(rel.DSV4_ROPE_PLAIN_SWA), wo_a_bf16=wo_a_bf16, wo_a_note=wo_a_note)


# SGLANG_OPT_FP8_WO_A_GEMM (environ.py, an EnvBool defaulting on in every release with V4): on, each MQALayer's wo_a
# keeps the checkpoint's FP8 weight and block scales (a DeepGEMM fp8_einsum on CUDA); off, wo_a is built with
# params_dtype bfloat16 and no quant config, and load_weights dequantizes the checkpoint's FP8 wo_a into it
# ("Execute dequant fp8 wo_a", _dequant_fp8_wo_a): 2 B per weight instead of 1. Where each release turns it off:
WO_A_ENV = "SGLANG_OPT_FP8_WO_A_GEMM"
DSV4_WO_A_SM120_OFF = "0.5.13"  # the V4 branch of server_args.py turns it off on SM120 (0.5.12: SM120 counts as sm >= 100)
DSV4_WO_A_HIP_OFF = "0.5.14"  # ... and on HIP (`elif is_hip()`); 0.5.12-0.5.13 leave it on there
DSV4_WO_A_DEEPGEMM_GATE = "0.5.16"  # CUDA keeps it only on DeepGEMM's UE8M0 path (SM100/103) or an explicit opt-in on SM90
#   (before: off wherever sm < 100, an explicit setting overridden)
DSV4_WO_A_GFX950 = "0.5.20"  # HIP keeps it on gfx950 (aiter batched_gemm_a8w8_mxscale, deepseek_v4_wo_a_fp8.py)
DSV4_WO_A_SM120_OPT_IN = "0.5.23"  # SM120 keeps an explicit setting (DeepGEMM's UE8M0 path covers SM120 from here)
_OFF_VALUES = ("false", "0", "no", "n")  # EnvBool.parse; anything else (true, or invalid: the default) is on


def wo_a_in_bf16(
    version: str | None, *, vendor: str, sm: int | None, gpu_arch: str, env: Mapping[str, str]
) -> tuple[bool, str]:
    """Whether the release holds V4's wo_a in bf16 (dequantized from the checkpoint's FP8), and why.

    Read in each release's server_args.py (0.5.19 on arg_groups/model_hook.py and serving_hook.py): 0.5.12-0.5.15
    turn SGLANG_OPT_FP8_WO_A_GEMM off on CUDA below SM100 (`is_cuda() and get_device_sm() < 100`, whatever the
    variable says), 0.5.13 on SM120 too; 0.5.14 on HIP; 0.5.16 keeps it on CUDA only where DeepGEMM's UE8M0 scales
    apply (SM100/103, SM120 too from 0.5.23) or SM90 sets it explicitly; 0.5.20 keeps it on HIP gfx950 (aiter's
    mxscale GEMM; the op comes with the release's ROCm image, pip wheels do not pin aiter). Off by the variable
    anywhere.
    """
    rules = rel.rules_for(version)
    env = effective_env(env, version)
    value = env.get(WO_A_ENV)
    explicit_on = value is not None and str(value).lower() not in _OFF_VALUES
    if value is not None and not explicit_on:
        return True, f"wo_a dequantized to bf16 ({WO_A_ENV}={value})"
    why = ""
    if vendor == "amd":
        if rules.has(DSV4_WO_A_GFX950):
            bf16 = not gpu_arch.startswith("gfx95")
            why = "the V4 override keeps FP8 wo_a on HIP only on gfx950 (aiter's mxscale GEMM)"
        else:
            bf16 = rules.has(DSV4_WO_A_HIP_OFF)
            why = "the V4 override turns FP8 wo_a off on HIP"
    elif vendor == "nvidia" and sm is not None:
        sm120 = sm in (120, 121)
        if sm120 and rules.has(DSV4_WO_A_SM120_OFF):
            bf16 = not (explicit_on and rules.has(DSV4_WO_A_SM120_OPT_IN))
            why = "the V4 override turns FP8 wo_a off on SM120 unless set" if rules.has(DSV4_WO_A_SM120_OPT_IN) else (
                "the V4 override turns FP8 wo_a off on SM120")
        elif rules.has(DSV4_WO_A_DEEPGEMM_GATE):
            jit = env.get("SGLANG_ENABLE_JIT_DEEPGEMM")
            deepgemm = jit is None or str(jit).lower() not in _OFF_VALUES
            bf16 = not (deepgemm and (sm in (100, 103) or (sm == 90 and explicit_on)))
            why = "FP8 wo_a needs DeepGEMM's UE8M0 scales (SM100/103) or an explicit opt-in on SM90"
        else:
            bf16 = sm < 100
            why = "FP8 wo_a needs SM100 or newer"
    else:
        bf16 = False
    return bf16, (f"wo_a dequantized to bf16 ({why})" if bf16 else "")


def rope_cache_entry_bytes(rules: rel.SizingRules, vendor: str) -> int:
    """Bytes per entry of the cos_sin_cache each V4 rope setting's rotary_emb keeps (0: the release builds none).

    From 0.5.13 every MQALayer also calls get_rope_wrapper, whose RotaryEmbedding registers a cos_sin_cache of
    positions x rope_dim (cos and sin halves) on the GPU; get_rope's _ROPE_DICT shares it among the layers of one
    rope setting. rotary_embedding/base.py keeps it in float32 on CUDA, and casts it to the model dtype (bf16)
    elsewhere until 0.5.22 made HIP float32 too.
    """
    if not rules.has(rel.DSV4_ROPE_COS_SIN):
        return 0
    if vendor == "amd" and not rules.has(rel.ROPE_CACHE_FP32_HIP):
        return 2
    return 4


def _expert_format(
    checkpoint_fmt: str,
    rules: rel.SizingRules,
    *,
    vendor: str,
    sm: int | None,
    env: Mapping[str, str],
    moe_runner_backend: str | None,
    moe_a2a_backend: str | None,
) -> ExpertFormat:
    if checkpoint_fmt != "mxfp4":
        return ExpertFormat(checkpoint_fmt, 1, f"routed experts {checkpoint_fmt} as the checkpoint stores them")
    if str(env.get("SGLANG_DSV4_FP4_DEQUANT", "")).lower() in ("1", "true", "yes", "on"):
        return ExpertFormat("fp8", 1, "SGLANG_DSV4_FP4_DEQUANT=1: MXFP4 experts dequantized to block FP8 at load")
    backend = (moe_runner_backend or "auto").lower()
    if vendor == "amd":
        if not rules.has(rel.DSV4_FP4_AITER):
            return ExpertFormat("mxfp4_fp32_scales", 1, "MXFP4 experts with float32 block scales (no aiter FP4 path)")
        align = 128 if rules.has(rel.DSV4_FP4_AITER_PAD_128) else 256
        return ExpertFormat("mxfp4", align, f"aiter native MXFP4 experts, intermediate per rank padded to {align}")
    flashinfer_default = (
        rules.has(rel.DSV4_FP4_FLASHINFER_DEFAULT) and sm in (90, 100, 103)
    ) or (rules.has(rel.DSV4_FP4_SM120_FLASHINFER) and sm in (120, 121))
    a2a = (moe_a2a_backend or "none").lower()
    if backend == "flashinfer_mxfp4" or (backend == "auto" and flashinfer_default and a2a == "none"):
        return ExpertFormat("mxfp4", 1, "flashinfer_mxfp4 MoE runner: MXFP4 experts with their E8M0 scales")
    sm120_marlin = sm in (120, 121) and rules.has(DSV4_FP4_SM120_MARLIN) and not rules.has(rel.DSV4_FP4_SM120_FLASHINFER)
    if backend == "marlin" or (backend == "auto" and sm120_marlin):
        return _marlin_format(rules, sm)
    if sm in (100, 103) and a2a in ("deepep", "mooncake", "nixl"):
        return ExpertFormat("mxfp4", 1, "DeepGEMM MoE: MXFP4 experts with scales repacked to UE8M0")
    return ExpertFormat(
        "mxfp4_fp32_scales", 1,
        "FP8 MoE method: MXFP4 experts with a float32 scale per 32 weights (0.625 B per weight)",
    )


# Marlin W4A16 for V4's MXFP4 experts (layers/quantization/mxfp4_marlin_moe.py, marlin_utils_fp4.py)
DSV4_FP4_SM120_MARLIN = "0.5.13"  # SM120 defaults V4's MoE runner to marlin (until 0.5.16's flashinfer_mxfp4)
DSV4_MARLIN_FREES_LOADER_SCALES = "0.5.16"  # prepare_moe_mxfp4_layer_for_marlin deletes w13/w2_weight_scale_inv
DSV4_MARLIN_PAD_AT_CREATE = "0.5.13"  # create_weights rounds the per-rank intermediate up to 128 (hidden to 256)
DSV4_MARLIN_SM90_LOGICAL = "0.5.20"  # on SM90 create_weights keeps the logical width; the repack pads it to 64


def _marlin_format(rules: rel.SizingRules, sm: int | None) -> ExpertFormat:
    """V4's MXFP4 experts under --moe-runner-backend marlin (SM120's default in 0.5.13-0.5.15).

    Mxfp4MarlinMoEMethod.create_weights registers the loader-format experts (int8-packed E2M1) and scales
    (float32 until 0.5.16, E8M0 after); process_weights_after_loading repacks the weights (gptq_marlin_repack,
    the same bytes) and sets new E8M0 `w13/w2_weight_scale` (one byte per 32). Before 0.5.16 the float32
    `w13/w2_weight_scale_inv` stay registered on the layer, so each expert weight costs 0.5 + 1/32 + 4/32 B;
    0.5.16 deletes them ("release the loader-format parameters"). The per-rank intermediate is padded to 128
    at create_weights from 0.5.13 (not on SM90 from 0.5.20), and the repack pads it to 64 (V4's hidden sizes
    are multiples of 128 and of create_weights' 256).
    """
    fmt = "mxfp4" if rules.has(DSV4_MARLIN_FREES_LOADER_SCALES) else "mxfp4_marlin_fp32_kept"
    pad_at_create = rules.has(DSV4_MARLIN_PAD_AT_CREATE) and not (sm == 90 and rules.has(DSV4_MARLIN_SM90_LOGICAL))
    align = 128 if pad_at_create else 64
    if fmt == "mxfp4":
        note = f"Marlin MoE runner: MXFP4 experts repacked with E8M0 scales, intermediate per rank padded to {align}"
    else:
        note = (f"Marlin MoE runner: MXFP4 experts repacked with E8M0 scales, and the float32 loader scales kept "
                f"(0.65625 B per weight), intermediate per rank padded to {align}")
    return ExpertFormat(fmt, align, note)


def weights_bytes(
    text: Mapping[str, Any],
    *,
    stage: range,
    tp: int,
    attn_tp: int,
    ep: int,
    dense_fmt: str,
    expert_fmt: str,
    last_stage: bool,
    first_stage: bool,
    inter_align: int = 1,
    hip_rope_per_layer: bool = False,
    rope_cache_entry_bytes: int = 0,
    rope_plain_swa: bool = False,
    shared_tp: int | None = None,
    embed_tp: int | None = None,
    lm_head_tp: int | None = None,
    allocator_rounding: bool = True,
    wo_a_fmt: str | None = None,
) -> dict[str, float]:
    """Per-rank weight bytes of DeepSeek-V4 (models/deepseek_v4.py), by component.

    `shared_tp`, `embed_tp`, `lm_head_tp`: the ranks the shared experts, the input embedding and the
    lm_head shard over where SGLang keeps them off the TP group (sizing/placement.py; None: tp).

    Main projections exactly; the compressor, indexer and hyper-connection weights from their
    shapes in the reference implementation (small: under 3 % of the model); experts in the
    checkpoint's expert dtype (fp4 -> MXFP4, or the NVFP4/FP8 of a requantized checkpoint).

    `wo_a_fmt`: the format each layer's wo_a is held in (None: `dense_fmt`; bf16 where the release dequantizes it,
    wo_a_in_bf16).

    `allocator_rounding`: add the caching allocator's rounding of the large tensors (component
    "allocator_slack", sizing/allocator.py): the attention projections, the routed experts' w13 and w2, the
    shared experts, the embedding and the lm_head (the compressor and indexer tensors are left out).
    """
    h = int(text["hidden_size"])
    heads = int(text["num_attention_heads"])
    hd = int(text["head_dim"])
    q_lora = int(text.get("q_lora_rank") or 0)
    o_lora = int(text.get("o_lora_rank") or 0)
    o_groups = int(text.get("o_groups") or 1)
    idx_heads = int(text.get("index_n_heads") or 64)
    idx_dim = int(text.get("index_head_dim") or 128)
    experts = int(text.get("n_routed_experts") or 0)
    inter = int(text.get("moe_intermediate_size") or 0)
    shared = int(text.get("n_shared_experts") or 0)
    vocab = int(text["vocab_size"])
    ratios = list(text.get("compress_ratios") or [])
    hc = int(text.get("hc_mult") or 1)
    d, e = FMT_BYTES[dense_fmt], FMT_BYTES[expert_fmt]
    wo_a_fmt = wo_a_fmt or dense_fmt
    d_wo_a = FMT_BYTES[wo_a_fmt]
    # FusedMoE deals experts / ep whole experts to a rank and splits each over the MoE-TP group (tp / ep):
    # the width one rank holds is inter / (tp / ep), padded where the kernel needs it (a pad applies to
    # that width, so at ep == tp a 3072-wide V4-Pro expert needs none where inter / tp = 384 would be
    # padded to 512)
    moe_tp = max(tp // max(ep, 1), 1)
    local_experts = experts / max(ep, 1)
    inter_rank = inter / moe_tp
    if inter_align > 1:
        inter_rank = math.ceil(inter_rank / inter_align) * inter_align
    out: dict[str, float] = {}

    def add(key: str, value: float) -> None:
        out[key] = out.get(key, 0.0) + value

    for i in stage:
        ratio = ratios[i] if i < len(ratios) else 0
        add("attention", d * (h * q_lora + q_lora * heads * hd / attn_tp + h * hd))  # wq_a, wq_b, wkv
        add("attention", d_wo_a * heads * hd / attn_tp * o_lora + d * o_groups * o_lora * h / attn_tp)  # wo_a, wo_b
        add("norms", 2 * (q_lora + hd + 2 * h) + 4 * heads / attn_tp)  # norms, attention sink
        if ratio:
            overlap = 2 if ratio == 4 else 1
            add("compressor", 2 * (2 * h * hd * overlap) + 4 * ratio * hd * overlap)  # wkv + wgate (bf16), ape
        if ratio == 4:
            add("dsa_indexer", d * q_lora * idx_heads * idx_dim + 2 * h * idx_heads)  # wq_b, weights_proj
            add("dsa_indexer", 2 * (2 * h * idx_dim * 2) + 4 * 4 * idx_dim * 2)  # indexer compressor
        add("moe_experts", e * local_experts * 3 * h * inter_rank)
        add("shared_experts", d * shared * 3 * h * inter / (shared_tp or tp))
        add("router", 2 * experts * h + 4 * experts)
        mix = (2 + hc) * hc
        add("hyper_connections", 4 * 2 * (mix * hc * h + mix + 1))  # attn + ffn hc_fn/base/scale (fp32)
    # RoPE tables built at model init (models/deepseek_v4.py): each attention layer registers a complex64
    # freqs_cis of max_position_embeddings x rope_dim / 2 (8 B each), shared through precompute_freqs_cis's
    # lru_cache by the layers of one rope setting (uncompressed layers: rope_theta; compressed ones:
    # compress_rope_theta with the YaRN original length); on ROCm (0.5.13 on) every layer also keeps its
    # own bf16 cos and sin copies (cos_cache / sin_cache), 4 B per table entry
    positions = int(text.get("max_position_embeddings") or 0)
    rope_half = int(text.get("qk_rope_head_dim") or 64) // 2
    kinds = {bool(ratios[i]) if i < len(ratios) else False for i in stage}
    add("rope_tables", 8 * positions * rope_half * len(kinds))
    if hip_rope_per_layer:
        add("rope_tables", 4 * positions * rope_half * len(stage))
    # and (0.5.13 on) each rope setting's rotary_emb cos_sin_cache (get_rope_wrapper, shared through _ROPE_DICT):
    # deepseek_yarn over original_max_position x factor (DeepseekScalingRotaryEmbedding), or plain RoPE over
    # max_position for the uncompressed layers from 0.5.18; `rope_cache_entry_bytes` per cos or sin entry
    if rope_cache_entry_bytes:
        scaling = text.get("rope_scaling") or {}
        yarn_positions = (
            math.ceil(int(scaling.get("original_max_position_embeddings") or positions) * float(scaling.get("factor") or 1))
            if scaling else positions
        )
        caches = set()
        for compressed in kinds:
            base = text.get("compress_rope_theta") if compressed else text.get("rope_theta")
            yarn = bool(scaling) and (compressed or not rope_plain_swa)
            caches.add((base, yarn))
        for _, yarn in caches:
            add("rope_tables", rope_cache_entry_bytes * (yarn_positions if yarn else positions) * 2 * rope_half)
    if first_stage:
        add("embedding", 2 * vocab * h / (embed_tp or tp))
    if last_stage:
        add("lm_head", 2 * vocab * h / (lm_head_tp or tp))
        add("hyper_connections", 4 * (hc * hc * h + hc + 1))
    # wqkv_a (wq_a and wkv fused: SGLANG_OPT_FUSE_WQA_WKV, on by default), wq_b, wo_a, wo_b of each layer
    attention = (h * (q_lora + hd), q_lora * heads * hd / attn_tp, o_groups * o_lora * h / attn_tp)
    wo_a = (heads * hd / attn_tp * o_lora,)
    # w13 and w2 of all the rank's routed experts, gate_up and down of the shared ones
    routed = (local_experts * 2 * h * inter_rank, local_experts * h * inter_rank)
    shared_mats = (shared * 2 * h * inter / (shared_tp or tp), shared * h * inter / (shared_tp or tp))
    # the embedding on the first stage, the lm_head on the last
    vocab_mats = (first_stage * vocab * h / (embed_tp or tp), last_stage * vocab * h / (lm_head_tp or tp))
    out[SLACK] = _slack(len(stage), attention, routed, shared_mats, vocab_mats, dense_fmt, expert_fmt,
                        wo_a=wo_a, wo_a_fmt=wo_a_fmt, rounding=allocator_rounding)
    return out


def _slack(
    layers: int, attention: Iterable[float], routed: Iterable[float], shared: Iterable[float],
    vocab: Iterable[float], dense_fmt: str, expert_fmt: str, *, wo_a: Iterable[float], wo_a_fmt: str,
    rounding: bool,
) -> float:
    """The caching allocator's rounding of a stage's large tensors (`layers` of each layer's, then `vocab`);
    0 where the allocator does not round them (`rounding` False)."""
    if not rounding:
        return 0.0
    per_layer = (_tensors_slack(attention, dense_fmt) + _tensors_slack(routed, expert_fmt)
                 + _tensors_slack(shared, dense_fmt) + _tensors_slack(wo_a, wo_a_fmt))
    return per_layer * layers + _tensors_slack(vocab, "bf16")


def _tensors_slack(params: Iterable[float], fmt: str) -> float:
    """The caching allocator's rounding of weight tensors of `params` weights each in `fmt`, scales apart."""
    return sum(block_slack(p * per) for p in params for per in FMT_TENSORS[fmt])
