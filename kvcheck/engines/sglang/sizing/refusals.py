"""Settings SGLang refuses at startup, refused here too (exit 2) instead of being priced.

Each check names where SGLang 0.5.23 stops: an assertion or error in its argument validation, or
in the model/pool code it reaches before serving. kvcheck must never pass a role the engine would
not start, nor crash on one (a page size of 0 used to be a ZeroDivisionError, exit 4).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from kvcheck.engines.sglang.sizing import releases as rel
from kvcheck.engines.sglang.sizing.defaults import context_len_of
from kvcheck.engines.sglang.sizing.dsv4 import ONLINE_COMPRESS_ENV, STATE_DTYPE_BYTES, STATE_DTYPE_ENV
from kvcheck.engines.sglang.sizing.environ import env_bool
from kvcheck.engines.sglang.sizing.mxfp4_moe import SITU_POOL_ENV, situ_pool_refusal
from kvcheck.engines.sglang.sizing.offload import DEEPSEEK_V2_MODEL, MODES, SHARED_MODES, group_settings
from kvcheck.engines.sglang.sizing.placement import K3_SHARED_TP_SIZE_FROM
from kvcheck.errors import EngineRefusal, EstimateError
from kvcheck.gpus import GpuProfile
from kvcheck.model import RoleTarget

# 0.4.x-0.5.1 assert dp_size > 1 under --enable-dp-attention; 0.5.2 on turn DP attention off at dp_size 1
DP_SIZE_ONE_TURNS_DP_ATTENTION_OFF = "0.5.2"

# Engine arguments that count ranks or tokens and must be at least 1 when given.
POSITIVE_INTS = {
    "tp_size": "--tp-size",
    "pp_size": "--pp-size",
    "dp_size": "--dp-size",
    "attn_dp_size": "--attn-dp-size",
    "attn_cp_size": "--attn-cp-size",
    "dcp_size": "--dcp-size",
    "ep_size": "--ep-size",
    "nnodes": "--nnodes",
    "page_size": "--page-size",
}


class RefusedCandidate(EstimateError):
    """A planner candidate SGLang would refuse: not estimable, and never an option to propose."""


def _refuse(target: RoleTarget, fields: tuple[str, ...], message: str, hint: str | None = None) -> EngineRefusal:
    where = target.arg_location(*fields)
    prefix = f"{where.render()}: " if where is not None else ""
    return EngineRefusal(f"{prefix}role {target.name}: {message}", hint=hint)


def check_args(target: RoleTarget, args: Mapping[str, Any]) -> None:
    """Checks that need only the arguments (before any default is resolved)."""
    for name, flag in POSITIVE_INTS.items():
        value = args.get(name)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise _refuse(
                target, (name,),
                f"{flag} {value} is not a positive integer: SGLang cannot start "
                + ("(its pool and allocator divide by the page size)" if name == "page_size"
                   else "(no rank would be launched)"),
            )
    fraction = args.get("mem_fraction_static")
    if fraction is not None and not 0 < float(fraction) <= 1:
        why = (
            "the pool would be sized larger than the free memory and its allocation fails (CUDA out of memory)"
            if float(fraction) > 1
            else "SGLang stops with 'Loaded weights leave no GPU memory for the KV cache under "
            f"--mem-fraction-static={fraction}' (kv_cache_configurator._profile_available_bytes)"
        )
        raise _refuse(
            target, ("mem_fraction_static",),
            f"--mem-fraction-static {fraction} is outside (0, 1]: {why}",
            hint="it is the fraction of the free GPU memory weights and KV pool may use, e.g. 0.85",
        )
    tp = int(args.get("tp_size") or 1)
    pp = int(args.get("pp_size") or 1)
    attn_dp = int(args.get("attn_dp_size") or 1)
    if args.get("enable_dp_attention") and attn_dp == 1:
        attn_dp = int(args.get("dp_size") or 1)  # deprecated spelling, as defaults.resolve reads it
        if attn_dp == 1 and not rel.rules_for(target.engine_version).has(DP_SIZE_ONE_TURNS_DP_ATTENTION_OFF):
            raise _refuse(
                target, ("enable_dp_attention", "dp_size"),
                f"SGLang {target.engine_version} refuses --enable-dp-attention with --dp-size 1: server_args.py "
                "asserts 'Please set a dp-size > 1' (0.5.2 on turns DP attention off instead)",
                hint="set --dp-size above 1 (it divides --tp-size), or drop --enable-dp-attention",
            )
    attn_cp = int(args.get("attn_cp_size") or 1)
    _check_deepep_v2_draft(target, args)
    if tp % (attn_dp * attn_cp):
        raise _refuse(
            target, ("attn_dp_size", "dp_size", "attn_cp_size", "tp_size"),
            f"--tp-size {tp} is not divisible by attention DP x CP ({attn_dp} x {attn_cp}): SGLang asserts "
            "'tp_size must be divisible by attn_dp_size * attn_cp_size' (arg_groups/parallel_hook.py:163)",
        )
    _check_request_limits(target, args, attn_dp)
    nnodes = int(args.get("nnodes") or 1)
    if nnodes > 1 and (tp * pp) % nnodes:
        raise _refuse(
            target, ("tp_size", "nnodes"),
            f"--tp-size {tp} x --pp-size {pp} is not divisible by --nnodes {nnodes}: SGLang asserts "
            "'tp_size must be divisible by number of nodes' (arg_groups/validation_hook.py:180)",
        )


def _check_deepep_v2_draft(target: RoleTarget, args: Mapping[str, Any]) -> None:
    """moe_hook.py validate_deepep_v2_speculative_draft (0.5.19 on, every launch): a speculative draft whose
    all-to-all backend, given or inherited from the target's, is deepep_v2."""
    algorithm = str(args.get("speculative_algorithm") or "").upper()
    if not algorithm or algorithm == "NGRAM":
        return
    draft = args.get("speculative_moe_a2a_backend")
    fields: tuple[str, ...] = ("speculative_moe_a2a_backend",)
    if draft is None:
        draft, fields = args.get("moe_a2a_backend"), ("moe_a2a_backend", "speculative_algorithm")
    if draft == "deepep_v2":
        raise _refuse(
            target, fields,
            "SGLang refuses a speculative draft on --moe-a2a-backend deepep_v2 ('DeepEP v2 MoE is not validated "
            "as a speculative draft backend', arg_groups/moe_hook.py)",
            hint="set --speculative-moe-a2a-backend to another backend (none, deepep)",
        )


def _check_request_limits(target: RoleTarget, args: Mapping[str, Any], attn_dp: int) -> None:
    """--max-running-requests and --max-queued-requests that leave no request able to run.

    Up to 0.5.22 each DP rank runs `given // attention DP` requests and `tp_worker` asserts "max_running_request
    is zero" when that is below 1; from 0.5.23 `resolve_max_num_reqs` raises it to 1, so 0 or -4 start, serving
    one request per rank where the operator asked for none (refused here all the same: the value says no
    request may run). A queue limit below 1 aborts every request ("The request queue is full.",
    `_abort_on_queued_limit`: `len(waiting_queue) + 1 <= max_queued_requests` never holds); prefill and decode
    roles ignore the flag.
    """
    running = args.get("max_running_requests")
    if isinstance(running, int) and not isinstance(running, bool):
        floor_one = rel.rules_for(target.engine_version).has(rel.RUNNING_FLOOR_ONE)
        if running < 1:
            raise _refuse(
                target, ("max_running_requests",),
                f"--max-running-requests {running} is below 1: no request could run ("
                + ("SGLang 0.5.23 and later start and run 1 per DP rank, not the limit given)" if floor_one
                   else "SGLang asserts 'max_running_request is zero' at startup, tp_worker.py)"),
                hint="leave it unset for SGLang's own limit, or give the running requests the server may hold",
            )
        if attn_dp > 1 and running // attn_dp < 1 and not floor_one:
            raise _refuse(
                target, ("max_running_requests", "dp_size", "attn_dp_size"),
                f"--max-running-requests {running} over {attn_dp} attention DP ranks is {running // attn_dp} per "
                "rank: SGLang asserts 'max_running_request is zero' at startup (tp_worker.py; from 0.5.23 each "
                "rank runs at least 1)",
                hint=f"give at least {attn_dp} (one running request per attention DP rank)",
            )
    queued = args.get("max_queued_requests")
    disaggregated = str(args.get("disaggregation_mode") or "null") in ("prefill", "decode")
    if isinstance(queued, int) and not isinstance(queued, bool) and queued < 1 and not disaggregated:
        raise _refuse(
            target, ("max_queued_requests",),
            f"--max-queued-requests {queued} is below 1: SGLang aborts every request with 'The request queue is "
            "full.' (scheduler._abort_on_queued_limit admits a request only while the queue holds fewer)",
            hint="leave it unset for no queue limit, or give the requests that may wait",
        )


def check_parallel(
    target: RoleTarget,
    args: Mapping[str, Any],
    *,
    tp: int,
    attn_tp: int,
    ep: int,
    num_heads: int,
    num_kv_heads: int | None,
    routed_experts: int,
    page_size: int,
    chunked_prefill_size: int,
    role: str | None,
) -> None:
    """Checks on the resolved parallel layout against the model's shape."""
    if num_heads % attn_tp:
        raise _refuse(
            target, ("tp_size", "attn_dp_size", "dp_size"),
            f"the model's {num_heads} attention heads are not divisible by the attention TP size {attn_tp}: "
            "SGLang's model code asserts 'total_num_heads % tp_size == 0' while loading (e.g. models/llama.py:183)",
            hint="use a TP size that divides the head count",
        )
    if num_kv_heads:
        if attn_tp >= num_kv_heads and attn_tp % num_kv_heads:
            raise _refuse(
                target, ("tp_size",),
                f"the attention TP size {attn_tp} is not a multiple of the model's {num_kv_heads} KV heads: "
                "SGLang's QKVParallelLinear asserts 'tp_size % total_num_kv_heads == 0' (layers/linear.py)",
            )
        if attn_tp < num_kv_heads and num_kv_heads % attn_tp:
            raise _refuse(
                target, ("tp_size",),
                f"the model's {num_kv_heads} KV heads are not divisible by the attention TP size {attn_tp}: "
                "SGLang's QKVParallelLinear asserts 'total_num_kv_heads % tp_size == 0' (layers/linear.py)",
            )
    if ep > 1:
        if tp % ep:
            raise _refuse(
                target, ("ep_size", "tp_size"),
                f"--ep-size {ep} does not divide --tp-size {tp}: the MoE TP size is tp_size // ep_size "
                "(runtime_context.derive_parallel_widths), so SGLang cannot shard the experts",
            )
        if routed_experts and routed_experts % ep:
            raise _refuse(
                target, ("ep_size",),
                f"the model's {routed_experts} routed experts are not divisible by --ep-size {ep}: SGLang "
                "asserts '_num_global_routed % ep_size == 0' (layers/moe/fused_moe_triton/layer.py:414)",
            )
    if chunked_prefill_size > 0 and role != "decode" and chunked_prefill_size % page_size:
        raise _refuse(
            target, ("chunked_prefill_size", "page_size"),
            f"--chunked-prefill-size {chunked_prefill_size} is not divisible by the page size {page_size}: "
            "SGLang asserts 'chunked_prefill_size must be divisible by page_size' (arg_groups/validation_hook.py:245)",
        )


# arg_groups/parallel_hook.py handle_shared_experts_tp (0.5.21, 0.5.23): the backends --shared-experts-tp-size
# accepts, and the one architecture
SHARED_EXPERTS_TP_BACKENDS = ("deepep", "megamoe", "mooncake", "ascend_fuseep", "mori")
SHARED_EXPERTS_TP_ARCH = "KimiK3ForConditionalGeneration"


def check_shared_experts_tp(
    target: RoleTarget, args: Mapping[str, Any], *, arch: str, a2a: str, attn_tp: int, shared_width: int,
) -> None:
    """Kimi-K3's shared-expert TP settings SGLang stops on: handle_shared_experts_tp's checks of
    --shared-experts-tp-size, and KimiK3MoE's 'Shared-expert intermediate size ... must be divisible by
    shared-expert TP size' (models/kimi_k3.py, 0.5.21 on) for it and for --enable-shared-experts-attn-tp
    under an all-to-all backend."""
    size = args.get("shared_experts_tp_size")
    fields: tuple[str, ...] = ("shared_experts_tp_size",)
    if size is not None:
        size = int(size)
        if size < 1 or attn_tp % size:
            raise _refuse(
                target, (*fields, "tp_size", "attn_dp_size", "dp_size"),
                f"--shared-experts-tp-size {size} is not a positive divisor of the attention TP size {attn_tp}: "
                "SGLang raises it at startup (arg_groups/parallel_hook.py handle_shared_experts_tp)",
            )
        if arch != SHARED_EXPERTS_TP_ARCH:
            raise _refuse(
                target, fields,
                f"--shared-experts-tp-size is only supported for Kimi-K3 ({SHARED_EXPERTS_TP_ARCH}), not {arch}: "
                "SGLang raises it at startup (arg_groups/parallel_hook.py handle_shared_experts_tp)",
            )
        if a2a not in SHARED_EXPERTS_TP_BACKENDS:
            raise _refuse(
                target, (*fields, "moe_a2a_backend"),
                f"--shared-experts-tp-size requires an expert-parallel all-to-all backend "
                f"({', '.join(SHARED_EXPERTS_TP_BACKENDS)}), not {a2a}: SGLang raises it at startup "
                "(arg_groups/parallel_hook.py handle_shared_experts_tp)",
                hint="set --moe-a2a-backend, or drop --shared-experts-tp-size",
            )
    elif args.get("enable_shared_experts_attn_tp") and a2a != "none" and arch == SHARED_EXPERTS_TP_ARCH:
        size, fields = attn_tp, ("enable_shared_experts_attn_tp", "tp_size")
    if (size is not None and size > 1 and shared_width % size
            and rel.rules_for(target.engine_version).has(K3_SHARED_TP_SIZE_FROM)):
        raise _refuse(
            target, fields,
            f"the shared experts' intermediate size {shared_width} is not divisible by their TP size {size}: "
            "SGLang's KimiK3MoE raises 'Shared-expert intermediate size ... must be divisible by shared-expert "
            "TP size' while loading (models/kimi_k3.py)",
        )


# The architectures --moe-a2a-backend deepep_v2 starts for, by the release that added them: the primary
# (first) architecture of the model's config must be one (arg_groups/moe_hook.py
# validate_deepep_v2_model_architecture, run by _handle_a2a_moe before any weight loads; a tuple in the
# function to 0.5.20, configs/moe_model_registry.py _DEEPEP_V2_MODELS from 0.5.21; no model file of 0.5.23
# registers more).
DEEPEP_V2_ARCHS: tuple[tuple[str, frozenset[str]], ...] = (
    ("0.5.19", frozenset({"DeepseekV3ForCausalLM", "DeepseekV4ForCausalLM", "Qwen3MoeForCausalLM"})),
    ("0.5.21", frozenset({"Glm5NextForConditionalGeneration"})),
    ("0.5.22", frozenset({"GlmMoeDsaForCausalLM", "MiMoV2ForCausalLM", "MiMoV2FlashForCausalLM"})),
)
DEEPEP_V2_REGISTRY = "0.5.21"  # the list moves to configs/moe_model_registry.py


def deepep_v2_architectures(version: str | None) -> frozenset[str]:
    """The architectures a release's deepep_v2 backend starts for (the newest list for an unknown release)."""
    rules = rel.rules_for(version)
    return frozenset().union(*(archs for since, archs in DEEPEP_V2_ARCHS if rules.has(since)))


def check_deepep_v2_architecture(target: RoleTarget, *, arch: str | None, a2a: str) -> None:
    """SGLang stops a deepep_v2 launch whose model architecture it has not validated for that backend:
    'DeepEP v2 MoE is not validated for ...' (it would need an all-reduce after the all-to-all combine)."""
    if a2a != "deepep_v2":
        return
    allowed = deepep_v2_architectures(target.engine_version)
    if arch in allowed:
        return
    where = "configs/moe_model_registry.py" if rel.rules_for(target.engine_version).has(DEEPEP_V2_REGISTRY) \
        else "arg_groups/moe_hook.py validate_deepep_v2_model_architecture"
    raise _refuse(
        target, ("moe_a2a_backend",),
        f"SGLang refuses --moe-a2a-backend deepep_v2 for {arch}: \"DeepEP v2 MoE is not validated for {arch!r}\" "
        f"({where}; validated in {target.engine_version or 'the newest release'}: {', '.join(sorted(allowed))})",
        hint="use --moe-a2a-backend deepep",
    )


def check_k3_situ_pool(
    target: RoleTarget, args: Mapping[str, Any], gpu: GpuProfile, *, arch: str, k3_mxfp4: bool
) -> None:
    """SGLang 0.5.17 refuses Kimi-K3's MXFP4 experts on SM100/SM103 under `auto` or flashinfer_mxfp4 while the
    arguments resolve when the trtllm-gen SiTU cubin pool is missing (mxfp4_moe.situ_pool_refusal). `k3_mxfp4`: the model is Kimi-K3 with MXFP4 experts on a
    GPU (the override's `_is_mxfp4_pack_quantized`); `arch` its architectures[0], which the override is keyed on."""
    why = situ_pool_refusal(target.env, target.engine_version, args, gpu, arch) if k3_mxfp4 else None
    if why is None:
        return
    raise _refuse(
        target, ("moe_runner_backend",), why,
        hint=f"set {SITU_POOL_ENV} in engine.env to the unpacked SiTU cubin pool (as the Kimi-K3 images do), "
             "set --moe-runner-backend marlin, or run SGLang 0.5.18 or later (FlashInfer ships the SiTU kernels)",
    )


def check_dsv4_kv_dtype(target: RoleTarget, args: Mapping[str, Any], *, npu: bool, bf16_hook: bool) -> None:
    """The KV-cache dtypes SGLang stops on for DeepseekV4ForCausalLM (on a GPU; NPU forces bfloat16).

    The V4 hook turns `auto` into fp8_e4m3 and asserts the result is in its list: [fp8_e4m3] in
    0.5.12-0.5.13, [fp8_e4m3, bfloat16] from 0.5.14 (`bf16`, which the generic flag accepts, is not in
    it: the hook compares the string as given). A bfloat16 that passes the hook reaches the pool:
    DeepSeekV4SingleKVPool.create_buffer asserts `store_dtype == torch.uint8` (the V4 rows are a packed
    fp8 layout), which a bf16 KVCache's store dtype is not, so the server stops while building the pool.
    `bf16_hook`: the release's hook accepts bfloat16 (0.5.14 on). The ROCm unified-KV switch, whose pool
    stores bf16 rows, is left to the estimate's own refusal of that switch.
    """
    raw = args.get("kv_cache_dtype")
    if npu or raw in (None, "auto", "fp8_e4m3") or target.env.get("SGLANG_HACK_FLASHMLA_BACKEND"):
        return
    accepted = "[fp8_e4m3, bfloat16]" if bf16_hook else "[fp8_e4m3]"
    if raw == "bfloat16" and bf16_hook:
        why = (
            "the V4 hook accepts bfloat16, but DeepSeekV4SingleKVPool.create_buffer asserts its store dtype is "
            "torch.uint8 (the packed fp8 V4 row: 448 fp8 + 64 bf16 rope + scales, 584 B), so SGLang stops with an "
            "AssertionError while building the KV pool (mem_cache/deepseek_v4_memory_pool.py)"
        )
    else:
        why = (
            f"SGLang's DeepSeek-V4 hook asserts the KV-cache dtype is one of {accepted} and stops with "
            f"'{raw} is not supported for DeepseekV4ForCausalLM' (arg_groups/deepseek_v4_hook.py, "
            "overrides._deepseek_v4_kv_cache_dtype)"
        )
    raise _refuse(
        target, ("kv_cache_dtype",),
        f"--kv-cache-dtype {raw} cannot serve DeepseekV4ForCausalLM on a GPU: {why}",
        hint="leave --kv-cache-dtype unset (auto) or set fp8_e4m3: V4's pools store fp8 rows",
    )


def check_dsv4_state_dtype(target: RoleTarget, *, reads_env: bool, bf16_with_online: bool) -> None:
    """SGLANG_DSV4_COMPRESS_STATE_DTYPE values SGLang stops on (_get_dsv4_compress_state_dtype_sizes, 0.5.14 on).

    The pool configurator raises ValueError for a name other than float32, fp32, bfloat16 or bf16 (after
    strip().lower()); 0.5.14-0.5.15 also refuse bf16 with SGLANG_OPT_USE_ONLINE_COMPRESS on.
    `reads_env`: the release has the variable; `bf16_with_online`: it accepts bf16 with online compress (0.5.16 on).
    """
    value = target.env.get(STATE_DTYPE_ENV)
    if not reads_env or value is None:
        return
    name = str(value).strip().lower()
    if name not in STATE_DTYPE_BYTES:
        raise _refuse(
            target, (),
            f"{STATE_DTYPE_ENV}={value} stops SGLang while it sizes the DeepSeek-V4 pools: "
            f"'Unsupported {STATE_DTYPE_ENV}={name!r}. Expected one of: float32, fp32, bfloat16, bf16.' "
            "(_get_dsv4_compress_state_dtype_sizes)",
            hint="set float32 (the default) or bf16, or leave the variable unset",
        )
    online = env_bool(target.env.get(ONLINE_COMPRESS_ENV))
    if STATE_DTYPE_BYTES[name] == 2 and online and not bf16_with_online:
        raise _refuse(
            target, (),
            f"{STATE_DTYPE_ENV}={value} with SGLANG_OPT_USE_ONLINE_COMPRESS on stops SGLang: "
            f"'{STATE_DTYPE_ENV}=bf16 is not supported when SGLANG_OPT_USE_ONLINE_COMPRESS=1; online c128 state "
            "must stay float32.' (_get_dsv4_compress_state_dtype_sizes)",
            hint="drop one of the two variables, or run SGLang 0.5.16 or later",
        )


# The KV-cache, backend and DeepSeek-V4 hook checks below, each keyed from the oldest release read whose source has it
# with the condition implemented here (read: 0.5.9, 0.5.10, 0.5.12, 0.5.13, 0.5.15.post1, 0.5.16-0.5.23; not read:
# 0.5.11, 0.5.14, 0.5.15). A release before a key is not refused by that check: it keeps being priced as before,
# never refused on a guess. Where a release between two read ones was not read, the key is the newer read one.
#
# DSA: 0.5.9 server_args.py:1149 (_set_default_nsa_kv_cache_dtype, from _handle_model_specific_adjustments:1264 for
# the DeepSeek family archs with index_topk, off NPU): `auto` becomes fp8_e4m3/bfloat16, bf16 becomes bfloat16, and
# the result must be bfloat16 or fp8_e4m3, as in 0.5.21's overrides.py:515. The family list lacks
# DeepseekV32ForCausalLM in 0.5.9 (server_args.py:1197) and 0.5.10; 0.5.12 (server_args.py:1788) has it.
DSA_KV_DTYPE_CHECK = "0.5.9"
DSA_V32_ARCH = "0.5.12"  # 0.5.11 not read
# the archs whose DSA check was read in 0.5.9 (0.5.9 server_args.py:1197); V3.2's from 0.5.12; any other (GLM-5 Next,
# HY-V4, LongCat, Dots3: 0.5.21 overrides.py:702) from 0.5.21, the oldest read for them
DSA_ARCHS_0_5_9 = ("DeepseekV3ForCausalLM", "KimiK25ForConditionalGeneration", "MistralLarge3ForCausalLM",
                   "PixtralForConditionalGeneration", "GlmMoeDsaForCausalLM")
# 0.5.9's in-seq-split prefill context parallel sets kv_cache_dtype bf16 before the check (server_args.py:1226);
# 0.5.10 no longer does
DSA_IN_SEQ_SPLIT_BF16_UNTIL = "0.5.10"
DSA_ANY_ARCH = "0.5.21"
# nvfp4 / fp4_mx_block16 / mxfp8: --kv-cache-dtype choices from 0.5.16 (profiles/sglang/flags-0.5.16.json), whose
# server_args.py already has the three checks with 0.5.21's conditions: _handle_mxfp8_kv_cache_compatibility:5064
# (is_blackwell_supported), _handle_kv4_compatibility:5074 (nvfp4 off SM100/SM120: 5086; off CUDA: 5146). 0.5.9-0.5.15
# check fp4_e2m1 only, which kvcheck does not price.
FP4_KV_CHECKS = "0.5.16"
# 0.5.21 kv_cache_hook.py:55 ('... provides neither') and :251 (SM100 native NVFP4 with trtllm_mha in a PD role);
# neither is in 0.5.20's kv_cache_hook.py
NVFP4_PREFILL_CHECKS = "0.5.21"
# trtllm_mla: 0.5.9 server_args.py:1874 (_handle_attention_backend_compatibility, after the model override that picks
# it for DeepSeek-V3/Kimi-K2.5 on SM100) checks attention_backend or decode_attention_backend: off Blackwell, and a
# KV dtype outside [fp8_e4m3, fp4_e2m1, bf16, auto]; the same in 0.5.13, then arg_groups/overrides.py
# _mla_kv_cache_dtype_checks (0.5.15.post1:1586 to 0.5.23). 0.5.21 (overrides.py:1147) drops fp4_e2m1 from the list.
TRTLLM_MLA_CHECKS = "0.5.9"
TRTLLM_MLA_NO_FP4_E2M1 = "0.5.21"
# swa ratio: 0.5.9 server_args.py:2703 (_handle_cache_compatibility) raises for the field outside (0, 1]; later
# releases check the effective value (0.5.15.post1 server_args.py:5791, 0.5.21 kv_cache_hook.py:427) after the
# MiMoV2/Step3p5 resets to 1.0 under hierarchical cache (0.5.13 server_args.py:2285, :2314)
SWA_RATIO_CHECK = "0.5.9"
# the file each check's message names, by release
KV_CACHE_HOOK_FILE = "0.5.19"  # arg_groups/kv_cache_hook.py (before: server_args.py)
OVERRIDES_FILE = "0.5.15"  # arg_groups/overrides.py for the DSA and trtllm_mla checks (0.5.15.post1 read; 0.5.14 not)

DSA_KV_DTYPES = ("auto", "bf16", "bfloat16", "fp8_e4m3")
FP4_KV = ("nvfp4", "fp4_mx_block16")
TRTLLM_MLA_KV_DTYPES = ("auto", "fp8_e4m3", "bf16")
# bfloat16 is not in SGLang's list (the check compares the string), but it is left priced here until a run confirms
# the refusal of that spelling: never refuse what the engine might start
TRTLLM_MLA_KV_PRICED = (*TRTLLM_MLA_KV_DTYPES, "bfloat16")
MLA_SM100_TRTLLM_ARCHS = ("DeepseekV3ForCausalLM", "KimiK25ForConditionalGeneration")
NVFP4_PREFILL_BACKENDS = ("flashinfer", "trtllm_mha")  # kv_cache_hook._NVFP4_PREFILL_BACKEND's values


def _dsa_checked(rules: rel.SizingRules, arch: str, args: Mapping[str, Any]) -> bool:
    """Whether the release runs its DSA KV-dtype check for this architecture (see DSA_KV_DTYPE_CHECK)."""
    if not rules.has(DSA_KV_DTYPE_CHECK):
        return False
    if not rules.has(DSA_IN_SEQ_SPLIT_BF16_UNTIL) and args.get("enable_nsa_prefill_context_parallel"):
        return False  # 0.5.9 may set bf16 itself (in-seq-split mode) before the check
    if rules.has(DSA_ANY_ARCH):
        return True
    return arch in DSA_ARCHS_0_5_9 or (arch == "DeepseekV32ForCausalLM" and rules.has(DSA_V32_ARCH))


def check_kv_hooks(  # noqa: C901 - one SGLang check per branch, in the order its hooks run
    target: RoleTarget, args: Mapping[str, Any], *, kind: str, arch: str, gpu: Any, backend: str,
) -> None:
    """KV-cache dtypes and attention backends SGLang refuses for the model and GPU (each from its key above).

    `kind`: the model's pool kind (shape.DSA for MLA + indexer); `backend`: the resolved attention backend.
    SGLang's NVFP4 prefill hook runs after the model overrides and before the platform's auto-pick, so it sees a
    backend a model override set (DeepSeek-V3 / Kimi-K2.5 MLA on SM100: trtllm_mla, model_overrides/deepseek_v2.py;
    Qwen3.5 on SM100, model_overrides/qwen3_5.py) as given, and the auto-pick's as unset.
    """
    rules = rel.rules_for(target.engine_version)
    if gpu.is_npu:
        return
    model_backend = gpu.is_sm100 and not args.get("attention_backend") and (
        (arch in MLA_SM100_TRTLLM_ARCHS and backend == "trtllm_mla") or arch.startswith("Qwen3_5")
    )
    raw = str(args.get("kv_cache_dtype") or "auto")
    kv = ("kv_cache_dtype",)
    if kind == "dsa" and raw not in DSA_KV_DTYPES and _dsa_checked(rules, arch, args):
        where = ("arg_groups/overrides.py _dsa_kv_cache_dtype_default" if rules.has(OVERRIDES_FILE)
                 else "server_args.py _set_default_nsa_kv_cache_dtype")
        raise _refuse(
            target, kv,
            f"--kv-cache-dtype {raw} cannot serve a DeepSeek sparse-attention (DSA) model: SGLang asserts 'DeepSeek "
            f"DSA only supports bf16/bfloat16 or fp8_e4m3 kv_cache_dtype' ({where})",
            hint="set fp8_e4m3 or bfloat16, or leave it unset (auto)",
        )
    hook = "arg_groups/kv_cache_hook.py handle" if rules.has(KV_CACHE_HOOK_FILE) else "server_args.py _handle"
    sm = gpu.sm
    fp4_checked = rules.has(FP4_KV_CHECKS)
    if fp4_checked and raw in FP4_KV and gpu.vendor != "nvidia":
        raise _refuse(
            target, kv,
            f"--kv-cache-dtype {raw} on {gpu.name}: SGLang raises 'KV4 is not tested on non-CUDA platforms.' "
            f"({hook}_kv4_compatibility)",
            hint="use fp8_e4m3 on this GPU",
        )
    if fp4_checked and raw == "nvfp4" and sm not in (100, 103, 120, 121):
        raise _refuse(
            target, kv,
            f"--kv-cache-dtype nvfp4 on {gpu.name} (SM{sm}): SGLang raises '--kv-cache-dtype=nvfp4 requires "
            f"Blackwell SM100 or SM120.' ({hook}_kv4_compatibility)",
            hint="use fp8_e4m3 on this GPU",
        )
    if fp4_checked and raw == "mxfp8" and (sm is None or sm < 100):
        raise _refuse(
            target, kv,
            f"--kv-cache-dtype mxfp8 on {gpu.name}: SGLang raises '--kv-cache-dtype mxfp8 requires an SM100+ "
            "(Blackwell) GPU for the block-scaled operands used by the FA4 MXFP8 attention path.' "
            f"({hook}_mxfp8_kv_cache_compatibility)",
            hint="use fp8_e4m3 on this GPU",
        )
    backends = {backend, args.get("decode_attention_backend")}
    if "trtllm_mla" in backends and rules.has(TRTLLM_MLA_CHECKS):
        # SGLang checks attention_backend and decode_attention_backend only (a prefill-only trtllm_mla is not checked)
        fields = ("attention_backend", "decode_attention_backend")
        where = ("arg_groups/overrides.py _mla_kv_cache_dtype_checks" if rules.has(OVERRIDES_FILE)
                 else "server_args.py _handle_attention_backend_compatibility")
        if not gpu.is_blackwell:
            raise _refuse(
                target, fields,
                f"the trtllm_mla attention backend on {gpu.name}: SGLang raises 'TRTLLM MLA backend is only supported "
                f"on Blackwell GPUs (SM100/SM12x). Please use a different backend.' ({where})",
                hint="leave --attention-backend unset, or pick one this GPU runs",
            )
        listed = "fp8_e4m3, bf16, or auto" if rules.has(TRTLLM_MLA_NO_FP4_E2M1) else "fp8_e4m3, fp4_e2m1, bf16, or auto"
        priced = TRTLLM_MLA_KV_PRICED if rules.has(TRTLLM_MLA_NO_FP4_E2M1) else (*TRTLLM_MLA_KV_PRICED, "fp4_e2m1")
        if raw not in priced:
            raise _refuse(
                target, (*kv, *fields),
                f"--kv-cache-dtype {raw} with the trtllm_mla attention backend: SGLang raises 'TensorRT-LLM MLA "
                f"backend only supports kv-cache-dtype of {listed}.' ({where})",
                hint="set fp8_e4m3 (or another --attention-backend for an FP4 KV cache)",
            )
    if raw == "nvfp4" and rules.has(NVFP4_PREFILL_CHECKS):
        _check_nvfp4_prefill(target, args, gpu=gpu, backend=backend, model_backend=model_backend)


def _check_nvfp4_prefill(target: RoleTarget, args: Mapping[str, Any], *, gpu: Any, backend: str,
                         model_backend: bool) -> None:
    """NVFP4's prefill backend and PD-role checks (0.5.21 kv_cache_hook.py, see NVFP4_PREFILL_CHECKS)."""
    kv = ("kv_cache_dtype",)
    backends = {backend, args.get("prefill_attention_backend"), args.get("decode_attention_backend")}
    given = args.get("prefill_attention_backend") or args.get("attention_backend")
    if given is None and model_backend:
        given = backend
    dequant = str(args.get("prefill_kv_cache_dequant_dtype") or "auto")
    if dequant == "auto" and given is not None and given not in NVFP4_PREFILL_BACKENDS:
        raise _refuse(
            target, (*kv, "attention_backend", "prefill_attention_backend"),
            f"--kv-cache-dtype nvfp4 with the {given} attention backend: SGLang raises 'NVFP4 prefill supports "
            f"an FP8 E4M3 workspace or native NVFP4, but backend {given!r} provides neither.' "
            "(arg_groups/kv_cache_hook.py handle_nvfp4_prefill_kv_dequant_dtype)",
            hint="set --attention-backend flashinfer or trtllm_mha, or use fp8_e4m3",
        )
    prefill_native = given == "trtllm_mha" or (given is None and gpu.is_sm100) or dequant == "nvfp4"
    role = str(args.get("disaggregation_mode") or "null")
    if gpu.is_sm100 and role != "null" and ("trtllm_mha" in backends or prefill_native):
        raise _refuse(
            target, (*kv, "disaggregation_mode"),
            "--kv-cache-dtype nvfp4 with trtllm_mha on SM100 in a prefill/decode role: SGLang raises 'SM100 "
            "native NVFP4 with trtllm_mha does not yet support PD disaggregation because its physical "
            "block-scale layout is not implemented by the KV transfer path.' (arg_groups/kv_cache_hook.py "
            "handle_kv4_compatibility)",
            hint="use fp8_e4m3 for disaggregated roles",
        )


def check_swa_ratio(target: RoleTarget, args: Mapping[str, Any]) -> None:
    """The effective --swa-full-tokens-ratio must be in (0, 1] (see SWA_RATIO_CHECK; 0.5.9 on)."""
    ratio = args.get("swa_full_tokens_ratio")
    rules = rel.rules_for(target.engine_version)
    if ratio is None or not rules.has(SWA_RATIO_CHECK):
        return
    if args.get("enable_hierarchical_cache"):
        return  # MiMoV2 and Step3p5 reset the ratio to 1.0 under hierarchical cache before the check
    if not 0 < float(ratio) <= 1:
        where = "arg_groups/kv_cache_hook.py" if rules.has(KV_CACHE_HOOK_FILE) else "server_args.py _handle_cache_compatibility"
        raise _refuse(
            target, ("swa_full_tokens_ratio",),
            f"--swa-full-tokens-ratio {ratio} is outside (0, 1]: SGLang raises '--swa-full-tokens-ratio should be in "
            f"range (0, 1.0].' ({where})",
            hint="give the sliding-window pool's share of the full pool, e.g. 0.1 to 1",
        )


# The DeepSeek-V4 hook (arg_groups/deepseek_v4_hook.py apply_deepseek_v4_defaults). V4 is served from 0.5.12, which
# was not read: nothing refused there.
# 0.5.13 deepseek_v4_hook.py:37-42 (0.5.15.post1 :56-61): a speculative algorithm must be "EAGLE", with
# speculative_eagle_topk == 1. 0.5.16 deepseek_v4_hook.py:56-63 (0.5.17 :148-155, 0.5.18 :145-152): "EAGLE" or
# "DSPARK", EAGLE with topk == 1. Up to 0.5.18 the hook runs in _handle_model_specific_adjustments, before
# handle_speculative_decoding upper-cases the name, turns NEXTN into EAGLE and defaults the top-k (0.5.13
# server_args.py:970 vs :1019; 0.5.18 :3680 vs :3742), so those compare the arguments as given: NEXTN or a lower-case
# name stops the server. An unset top-k fails the same `== 1` as read, but is not refused: a logged V4 MTP run on a
# branch between 0.5.14 and 0.5.15 (tests/bench/bench_dsv4_logs.py, sglang PR #28620) started with its top-k not
# stated, and a manifest that omits the flag may describe a launch that gives it.
DSV4_SPEC_EAGLE_ONLY = "0.5.13"
DSV4_SPEC_DSPARK = "0.5.16"
# 0.5.19 on read them through the resolution pipeline's view (deepseek_v4_hook.py:151 in 0.5.19, :101 in 0.5.21);
# refused there as kvcheck reads 0.5.21: NEXTN as EAGLE, an unset top-k not refused (never refused on a reading not
# confirmed by a run)
DSV4_SPEC_RESOLVED = "0.5.19"
# --dsv4-attn-backend trtllm: 0.5.20 deepseek_v4_hook.py:138-165 (SM100/SM103 on CUDA; no PD role), as 0.5.21 :46-73;
# 0.5.19 has neither the flag nor the checks
DSV4_TRTLLM_CHECKS = "0.5.20"


def check_dsv4_hook(target: RoleTarget, args: Mapping[str, Any], *, gpu: Any) -> None:
    """The DeepSeek-V4 hook's assertions kvcheck can see (arg_groups/deepseek_v4_hook.py, each from its key above)."""
    rules = rel.rules_for(target.engine_version)
    hook = "(arg_groups/deepseek_v4_hook.py)"
    if args.get("dsv4_attn_backend") == "trtllm" and rules.has(DSV4_TRTLLM_CHECKS):
        if gpu.vendor != "nvidia" or not gpu.is_sm100:
            raise _refuse(
                target, ("dsv4_attn_backend",),
                f"--dsv4-attn-backend trtllm on {gpu.name}: SGLang asserts '--dsv4-attn-backend trtllm requires an "
                f"SM100/SM103 (Blackwell) GPU.' {hook}",
                hint="leave --dsv4-attn-backend unset on this GPU",
            )
        if str(args.get("disaggregation_mode") or "null") != "null":
            raise _refuse(
                target, ("dsv4_attn_backend", "disaggregation_mode"),
                "--dsv4-attn-backend trtllm in a prefill/decode role: SGLang asserts '--dsv4-attn-backend trtllm "
                f"does not support PD disaggregation yet' {hook}",
                hint="leave --dsv4-attn-backend unset for disaggregated roles",
            )
    algorithm = args.get("speculative_algorithm")
    if algorithm is None or not rules.has(DSV4_SPEC_EAGLE_ONLY):
        return
    resolved = rules.has(DSV4_SPEC_RESOLVED)
    name = str(algorithm).upper() if resolved else str(algorithm)
    if name == "NEXTN" and resolved:
        name = "EAGLE"  # speculative_hook turns NEXTN into EAGLE before the V4 hook
    allowed = ("EAGLE", "DSPARK") if rules.has(DSV4_SPEC_DSPARK) else ("EAGLE",)
    if name not in allowed:
        quoted = ("Only EAGLE and DSPARK speculative algorithms are supported" if len(allowed) == 2
                  else "Only EAGLE speculative algorithm is supported")
        raise _refuse(
            target, ("speculative_algorithm",),
            f"--speculative-algorithm {algorithm}: SGLang asserts '{quoted} for DeepseekV4ForCausalLM' {hook}",
            hint="use EAGLE (the MTP layer) with --speculative-eagle-topk 1",
        )
    topk = args.get("speculative_eagle_topk")
    if name == "EAGLE" and topk is not None and int(topk) != 1:
        raise _refuse(
            target, ("speculative_eagle_topk",),
            f"--speculative-eagle-topk {topk}: SGLang asserts 'Only EAGLE speculative algorithm with topk == 1 is "
            f"supported for DeepseekV4ForCausalLM' {hook}",
            hint="set --speculative-eagle-topk 1",
        )


# ModelConfig._derive_context_length: the same condition in 0.4.0 (configs/model_config.py:70, message without the
# "Warning: " prefix) and in 0.5.9-0.5.23 (0.5.9 configs/model_config.py:359, the same function body through 0.5.21,
# with get_context_length's keys and rope factor unchanged), every release read. From 0.5.9 (oldest read with it; 0.4.0
# lacks it) SGLANG_IS_IN_CI=1 also lets the longer length start (sglang/utils.py is_in_ci).
CONTEXT_IN_CI_ALLOWED = "0.5.9"


def check_context_length(target: RoleTarget, args: Mapping[str, Any], text: Mapping[str, Any]) -> None:
    """A --context-length above the model's derived context_len without SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN:
    ModelConfig._derive_context_length raises ValueError (configs/model_config.py; every release read, see above).
    With the variable set SGLang starts with the longer length (priced as given); with SGLANG_IS_IN_CI set it starts
    too, which the estimate does not price (KV305), never refused."""
    requested = args.get("context_length")
    if requested is None:
        return
    if env_bool(target.env.get("SGLANG_IS_IN_CI")) and rel.rules_for(target.engine_version).has(CONTEXT_IN_CI_ALLOWED):
        return
    try:
        context_len_of(text, int(requested), target.env)
    except EstimateError as exc:
        derived = context_len_of(text, None, target.env)[0]
        raise _refuse(
            target, ("context_length",),
            f"--context-length {requested} is greater than the model's derived context_len {derived}: SGLang raises "
            f"'Warning: User-specified context_length ({requested}) is greater than the derived context_length "
            f"({derived}). ... To allow overriding this maximum, set the env var "
            "SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1' (configs/model_config.py _derive_context_length)",
            hint=exc.hint,
        ) from exc


# configs/model_config.py _verify_quantization (0.5.20, 0.5.21, 0.5.23): a --quantization other than the checkpoint's
# quant_method starts only where the pair is compatible (compatible_quantization_methods), an online
# re-quantization (REQUANTIZATION_METHODS) or a method's override_quantization_method claims the checkpoint
# (humming claims any non-MXFP4 one). Refused here for FP8 checkpoints only, the case read in full.
FP8_CHECKPOINT_REQUANTIZED = ("modelopt_fp4", "nvfp4_online", "quark_mxfp4", "humming")
# 0.5.20 model_config.py:1757-1860 is 0.5.21's _verify_quantization line for line, with the same
# layers/quantization/__init__.py registry and the same override_quantization_method bodies. 0.5.19's registry differs
# (__init__.py and marlin_utils.py define overrides of their own) and 0.5.18's compatible list lacks modelopt_fp4 ->
# fp8: before 0.5.20 such a pair is not refused, and not priced either (KV305).
QUANTIZATION_CHECK = "0.5.20"


def check_quantization(target: RoleTarget, args: Mapping[str, Any], quant: Mapping[str, Any] | None) -> None:
    """A --quantization that contradicts an FP8 checkpoint's quant_method: SGLang's ValueError (exit 2); a pair it
    accepts that re-quantizes the weights online is not priced (KV305), never priced as the checkpoint's FP8."""
    given = args.get("quantization")
    if given is None or not quant:
        return
    arg = str(given).lower()
    method = str(quant.get("quant_method") or "").lower()
    if method != "fp8" or arg == method:
        return
    if not rel.rules_for(target.engine_version).has(QUANTIZATION_CHECK):
        raise EstimateError(  # a release before the oldest read: not priced as the checkpoint's FP8, not refused
            f"--quantization {given} on an FP8 checkpoint is not understood by the estimate model for SGLang "
            f"{target.engine_version} (read from {QUANTIZATION_CHECK})",
        )
    if arg in FP8_CHECKPOINT_REQUANTIZED:
        raise EstimateError(
            f"--quantization {given} re-quantizes the FP8 checkpoint online, which the estimate model does not price",
            hint="set estimate.weights_gib_per_gpu in the manifest (the 'mem usage' of a 'Load weight end' line)",
        )
    raise _refuse(
        target, ("quantization",),
        f"--quantization {given} contradicts the checkpoint's quant_method fp8: SGLang raises 'Quantization method "
        f"specified in the model config (fp8) does not match the quantization method specified in the "
        f"`quantization` argument ({arg}).' (configs/model_config.py _verify_quantization)",
        hint="drop --quantization (the checkpoint's fp8 is used)",
    )


def check_group_offload(target: RoleTarget, args: Mapping[str, Any], *, architecture: str, tp: int,
                        stage_ranges: Sequence[range], moe_layers: frozenset[int], nvfp4_experts: bool) -> None:
    """Group offload settings SGLang stops on (sizing/offload.py has what OffloaderV2 does), each before it serves:
    at argument time (--ple-offload-embedding), as the model runner builds OffloaderV2 (a shared mode over TP), as
    the model is built (a class that names no submodule to offload, an unknown mode, pre-0.5.3 block scales), in
    post_init (a prefetch step beyond the offloaded layers) or at the first forward (a prefetch step of 0)."""
    gib = args.get("cpu_offload_gb") or 0
    group = args.get("offload_group_size")
    if args.get("ple_offload_embedding") is True and (
            (isinstance(gib, int | float) and gib > 0) or (isinstance(group, int) and group > 0)):
        raise _refuse(
            target, ("ple_offload_embedding", "offload_group_size", "cpu_offload_gb"),
            "SGLang refuses --ple-offload-embedding with --cpu-offload-gb or --offload-group-size "
            "('generic layer offload would stage the pinned PLE embedding back to the device', "
            "arg_groups/memory_hook.py handle_offload_compatibility)",
            hint="drop --ple-offload-embedding, or the layer offload")
    settings = group_settings(args)
    if settings is None:
        return
    text = settings.text
    if settings.mode in SHARED_MODES and tp != 1:
        raise _refuse(
            target, ("offload_mode", "tp_size"),
            f"{text}: OffloaderV2 asserts 'not yet support tp_size!=1' for --offload-mode {settings.mode} as the "
            f"model runner starts (srt/utils/offloader.py:216-217 in 0.5.23), and --tp-size is {tp}",
            hint="use --offload-mode cpu, or --tp-size 1")
    picked = settings.by_stage(stage_ranges)
    step = settings.prefetch_step
    if architecture not in DEEPSEEK_V2_MODEL:
        if step >= 1:
            raise _refuse(
                target, ("offload_group_size",),
                f"{text}: SGLang's {architecture} model does not name the submodule OffloaderV2 offloads (only the "
                "DeepSeek-V2 model passes offloader_kwargs to make_layers), so SGLang stops loading it: with a "
                "TypeError in OffloaderV2.wrap_modules where a layer falls in a group's last --offload-num-in-group, "
                "else with an IndexError in post_init, which prefetches layers it did not offload "
                "(srt/utils/offloader.py:252 and :282-283 in 0.5.23)",
                hint="drop the group offload flags (--cpu-offload-gb moves weights of any model class)")
        return
    for s, layers in enumerate(picked):
        where = "each rank" if len(picked) == 1 else f"pipeline stage {s}"
        if step > len(layers):
            raise _refuse(
                target, ("offload_prefetch_step", "offload_group_size", "offload_num_in_group"),
                f"{text}: OffloaderV2 offloads {len(layers)} of the {len(stage_ranges[s])} layers of {where}, and "
                f"post_init prefetches the first {step}: SGLang stops with an IndexError before the pool is sized "
                "(srt/utils/offloader.py:282-283 in 0.5.23)",
                hint=f"set --offload-prefetch-step to at most {len(layers)}" if layers else
                "set --offload-group-size and --offload-num-in-group so that some layer is offloaded")
        if step < 1 and layers:
            raise _refuse(
                target, ("offload_prefetch_step",),
                f"{text}: with no layer prefetched, the first forward finds layer {layers[0]}'s experts not copied "
                "back and asserts (wait_and_get_device_tensors, srt/utils/offloader.py:371 in 0.5.23): SGLang stops "
                "at its warmup", hint="set --offload-prefetch-step to 1 or more")
    moved_moe = [i for layers in picked for i in layers if i in moe_layers]
    if not moved_moe:
        return
    if settings.mode not in MODES:
        raise _refuse(
            target, ("offload_mode",),
            f"--offload-mode {settings.mode} is not one SGLang has ({', '.join(MODES)}): _BaseParamOffloader.create "
            "stops with a KeyError as the first offloaded experts are built (srt/utils/offloader.py:386-393 in 0.5.23)",
            hint="use --offload-mode cpu")
    if not nvfp4_experts and not rel.rules_for(target.engine_version).has(rel.OFFLOAD_V2_ANY_EXPERT_FORMAT):
        raise _refuse(
            target, ("offload_group_size", "quantization"),
            f"{text}: SGLang {target.engine_version}'s DeepSeek-V2 model names the NVFP4 block scales "
            "(w13_blockscale_swizzled, w2_blockscale_swizzled) of every offloaded MoE layer, which these experts do "
            f"not have (layer {moved_moe[0]}): _ModuleOffloader asserts as the model is built (srt/offloader.py; "
            f"from {rel.OFFLOAD_V2_ANY_EXPERT_FORMAT} it names them only where they exist)",
            hint=f"use SGLang {rel.OFFLOAD_V2_ANY_EXPERT_FORMAT} or later, or drop the group offload flags")
