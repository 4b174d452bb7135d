"""Which weights SGLang keeps off the full TP group: the expert-parallel size an all-to-all MoE backend
forces, the shared experts it replicates, and the input embedding under DP attention.

Read in each release's wheel (`pip download sglang==X --no-deps`): `server_args.py` (from 0.5.15
`arg_groups/overrides.py` `_A2A_EP_SPANNING_BACKENDS`, `_a2a_ep_size`), and per model file the
shared-expert MLP's `parallel_group` / `tp_size=1` condition and the `VocabParallelEmbedding` arguments
(`enable_tp=not is_dp_attention_enabled()`: the whole table on every rank; `use_attn_tp_group=...` or
`get_embedding_tp_kwargs()`: sharded over the attention-TP group). Every release kvcheck reads puts
these the same way where the table below has no release; where it changed, the first release of the
new rule is named.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kvcheck.engines.sglang.sizing import releases as rel
from kvcheck.engines.sglang.sizing.environ import env_bool
from kvcheck.errors import EstimateError

# The all-to-all MoE backends after which SGLang sets ep_size = tp_size ("The expert parallel size is
# adjusted to be the same as the tensor parallel size"): server_args.py's per-backend branches, 0.5.15 on
# arg_groups/overrides.py `_A2A_EP_SPANNING_BACKENDS`. A name a release lacks is refused by its flag check.
A2A_EP_SPANNING = frozenset({
    "deepep", "deepep_v2", "megamoe", "mooncake", "nixl", "ascend_fuseep", "flashinfer", "flashinfer_megamoe",
    "mori", "pplx",
})

# SGLANG_OPT_USE_DEEPGEMM_MEGA_MOE=1 turns the backend into megamoe in these releases (server_args.py
# `_handle_a2a_moe` 0.5.12-0.5.14, overrides.py `_a2a_backend_overrides` 0.5.15-0.5.17; gone in 0.5.18)
MEGA_MOE_ENV_FROM = "0.5.12"
MEGA_MOE_ENV_UNTIL = "0.5.18"

# models/deepseek_v2.py DeepseekV2MoE `_shared_expert_use_tp1` (0.5.23; deepep alone in 0.5.2, the others
# as each backend arrived): the MoE block of DeepSeek-V2/V3/R1/V3.2, Kimi-K2/K2.5 (DeepseekV3ForCausalLM
# inside), GLM-5 (GlmMoeDsaForCausalLM subclasses DeepseekV2ForCausalLM) and DeepSeek-V4 (deepseek_v4.py
# builds deepseek_v2.DeepseekV2MoE).
_DSV2_A2A = frozenset({
    "deepep", "pplx", "mooncake", "nixl", "mori", "ascend_fuseep", "flashinfer", "megamoe", "flashinfer_megamoe",
    "deepep_v2",
})
DSV2_FAMILY = frozenset({
    "DeepseekV2ForCausalLM", "DeepseekV3ForCausalLM", "DeepseekV32ForCausalLM", "KimiK25ForConditionalGeneration",
    "GlmMoeDsaForCausalLM", "DeepseekV4ForCausalLM",
})
# Each file's list grew release by release: (the first release of the backends, the backends). Only a
# backend that already was a --moe-a2a-backend choice and that the file did not yet name needs its release
# (any other is refused by the release's flag catalogue). A release is the one after the last wheel read
# without the name (0.5.20 and 0.5.22 were not read, so a name first seen in 0.5.21 or 0.5.23 is keyed from
# them: the heavier reading for the release not read).
ByRelease = tuple[tuple[str, frozenset[str]], ...]
_QWEN2_MOE_A2A: ByRelease = (  # models/qwen2_moe.py Qwen2MoeSparseMoeBlock (Qwen3-Next and Qwen3.5 build it too)
    ("0.5.3", frozenset({"deepep"})),  # 0.5.1-0.5.2: sharded under every backend
    ("0.5.13", frozenset({"flashinfer"})),
    ("0.5.18", frozenset({"mori"})),
    ("0.5.19", frozenset({"deepep_v2"})),
    ("0.5.20", frozenset({"megamoe", "flashinfer_megamoe"})),
    ("0.5.22", frozenset({"ascend_fuseep"})),
)
KIMI_K3 = frozenset({"KimiK3ForConditionalGeneration", "KimiK3LinearForCausalLM"})  # models/kimi_k3.py
# The backends under which each architecture's shared experts are one unsharded MLP on every rank. An
# architecture with shared experts that is not here has not been read: under an all-to-all backend its
# estimate is refused (KV305) rather than priced as if they sharded.
SHARED_EXPERTS_REPLICATED: Mapping[str, ByRelease] = {
    **{arch: (("0", _DSV2_A2A),) for arch in DSV2_FAMILY},  # each backend replicated from its first release
    # models/glm4_moe.py Glm4MoeMoE
    "Glm4MoeForCausalLM": (
        ("0", frozenset({"deepep", "mooncake"})),
        ("0.5.9", frozenset({"flashinfer"})),
        ("0.5.10", frozenset({"nixl", "mori", "ascend_fuseep"})),
        ("0.5.20", frozenset({"flashinfer_megamoe"})),
    ),
    **{arch: _QWEN2_MOE_A2A for arch in (
        "Qwen2MoeForCausalLM", "Qwen3NextForCausalLM", "Qwen3_5MoeForConditionalGeneration",
    )},
    # models/minimax_m3.py: "DeepEP all-gathers (not all-reduces) the layer output ... replicate (tp_size=1)"
    **{arch: (("0", frozenset({"deepep"})), ("0.5.22", frozenset({"megamoe"})))
       for arch in ("MiniMaxM3SparseForCausalLM", "MiniMaxM3SparseForConditionalGeneration")},  # minimax_m3_vl.py too
    # models/glm4_moe_lite.py
    "Glm4MoeLiteForCausalLM": (("0", frozenset({"deepep", "mooncake"})),),
    # models/step3p5.py (Step-3.7's step3p7.py builds Step3p5ForCausalLM): sharded in every release to 0.5.21
    **{arch: (("0.5.22", frozenset({"deepep", "mooncake", "nixl", "mori", "ascend_fuseep", "flashinfer",
                                    "flashinfer_megamoe"})),)
       for arch in ("Step3p5ForCausalLM", "Step3p7ForConditionalGeneration")},
    # models/nemotron_h.py NemotronHMoE: sharded under every backend to 0.5.15
    "NemotronHForCausalLM": (("0.5.16", frozenset({"deepep", "flashinfer"})),
                             ("0.5.20", frozenset({"flashinfer_megamoe"}))),
    # models/kimi_k3.py KimiK3MoE: replicated under an EP all-to-all (`_ep_a2a` / `_uses_ep_a2a`) unless
    # --shared-experts-tp-size / --enable-shared-experts-attn-tp shard them (_kimi_k3_shared_tp)
    **{arch: (("0", frozenset({"megamoe", "deepep"})), ("0.5.18", frozenset({"ascend_fuseep"})),
              ("0.5.19", frozenset({"mooncake", "mori"})), ("0.5.22", frozenset({"flashinfer_megamoe"})))
       for arch in KIMI_K3},
    # models/llama4.py: the shared expert is a LlamaMLP over the TP group whatever the backend
    "Llama4ForConditionalGeneration": (),
}
_SHARED_ON_FULL_TP = DSV2_FAMILY | KIMI_K3
# Kimi-K3's shared experts on the attention-TP group under an EP all-to-all: SGLANG_K3_SHARED_EXPERTS_ATTN_TP
# in 0.5.18 (environ.py), --enable-shared-experts-attn-tp from 0.5.19. To 0.5.19 the attention-TP sharding
# needs DP attention and an attention-TP group of more than one rank; otherwise the MLP is built with no TP
# arguments, on the full TP group. From 0.5.21 (0.5.20 not read: the heavier reading) the size is the
# attention-TP size, or --shared-experts-tp-size, and a size of 1 replicates them.
K3_SHARED_ATTN_TP_ENV_FROM = "0.5.18"
K3_SHARED_ATTN_TP_FLAG_FROM = "0.5.19"
K3_SHARED_TP_SIZE_FROM = "0.5.20"
# SGLANG_SHARED_EXPERT_TP1 (environ.py, deepseek_v2.py) is read from 0.5.12
SHARED_EXPERT_TP1_FROM = "0.5.12"
# deepseek_v2.py, glm4_moe.py, glm4_moe_lite.py and step3p5.py also replicate them on the FP4 all-gather path
# (should_use_flashinfer_cutlass_moe_fp4_allgather: no all-to-all backend, the flashinfer_cutlass MoE runner,
# DP attention, a modelopt_fp4 checkpoint and ep_size == attention DP size)
_FP4_ALLGATHER = DSV2_FAMILY | {
    "Glm4MoeForCausalLM", "Glm4MoeLiteForCausalLM", "Step3p5ForCausalLM", "Step3p7ForConditionalGeneration",
}

# Shared-expert fusion under plain expert parallelism (no all-to-all backend, ep_size > 1): the fused shared
# expert is one more expert slot on every EP rank, at moe_intermediate_size // (tp / ep)
# (layers/moe/fused_moe_triton/layer.py: num_local_routed + num_fused_shared experts at the MoE-TP width), so
# at ep == tp each rank holds it whole. The models' `shared_experts_fusion_disable_reason` (0.5.23; the same
# conditions in earlier releases' `determine_num_fused_shared_experts`) allow it under EP where
# --enforce-shared-experts-fusion is set (deepseek_v2.py's gate returns before its EP check; Kimi-K2.5 and
# GLM-5 take that gate), and by default on ROCm gfx942 and newer (DeepSeek-V3/R1, Kimi-K2.5 and GLM-5
# configs with one shared expert and 256 routed ones, without TBO/SBO; GLM-4.5's glm4_moe.py).
# The gate of every class that takes deepseek_v2.py's (DeepSeek-V2/V3/V3.2, Kimi-K2.5, GLM-5; not V4, whose
# own gate fuses only into per-rank all-to-all slots) returns on --enforce-shared-experts-fusion before its
# EP check from 0.5.12 (0.5.11 fused it under DeepEP only: the heavier reading there). ROCm's default fusion
# under EP comes in 0.5.6, and needs the config's own architecture to be the class's
# `fused_shared_experts_architecture` (DeepseekV3ForCausalLM's for the V2 class, GLM-5's own) and 256 routed
# experts: 384 (Kimi-K2/K2.5) are allowed from 0.5.13 only with a Quark checkpoint (amd/Kimi-K2.5-MXFP4: "the
# standard ... checkpoint stores the shared expert loose and is NOT pre-fused"), which the estimate does not price.
_FUSED_UNDER_EP_ENFORCED = DSV2_FAMILY - {"DeepseekV4ForCausalLM"}
_FUSED_UNDER_EP_ROCM = frozenset({
    "DeepseekV3ForCausalLM", "KimiK25ForConditionalGeneration", "GlmMoeDsaForCausalLM", "Glm4MoeForCausalLM",
})
FUSED_UNDER_EP_ROCM_FROM = "0.5.6"
FUSION_OFF_UNDER_OVERLAP_FROM = "0.5.11"  # the gate's SBO/TBO check
# MoE runners after which SGLang sets --disable-shared-experts-fusion (overrides.py _moe_runner_fusion_disable)
_FUSION_OFF_RUNNERS = frozenset({
    "lora_triton", "lora_cutedsl", "lora_marlin", "flashinfer_cutedsl", "flashinfer_trtllm",
    "experimental_sgl_trtllm", "flashinfer_trtllm_routed",
})
_GFX = re.compile(r"gfx(\d+)([0-9a-f])[0-9a-f]")

# The input embedding under DP attention: replicated (`enable_tp=not is_dp_attention_enabled()`) before
# the named release, sharded over the attention-TP group from it on.
_EMBED_ATTN_TP_FROM: Mapping[str, str] = {
    **{arch: "0.5.8" for arch in DSV2_FAMILY - {"DeepseekV4ForCausalLM"}},  # deepseek_v2.py DeepseekV2Model
    **{arch: "0.5.9" for arch in (
        "Qwen2ForCausalLM", "Qwen3ForCausalLM", "MiMoForCausalLM",  # qwen2.py Qwen2Model (qwen3.py, mimo.py build it)
        "MiMoV2FlashForCausalLM",  # mimo_v2_flash.py: enable_tp=not is_dp_attention_enabled() until 0.5.8
        "Qwen2MoeForCausalLM", "Qwen3MoeForCausalLM",  # qwen2_moe.py Qwen2MoeModel (qwen3_moe.py builds it)
        "Glm4MoeForCausalLM", "Glm4MoeLiteForCausalLM", "GptOssForCausalLM", "Qwen3NextForCausalLM",
        "Llama4ForConditionalGeneration", "Qwen3VLForConditionalGeneration", "Qwen3VLMoeForConditionalGeneration",
    )},
    "MiniMaxM2ForCausalLM": "0.5.11",  # minimax_m2.py: sharded over the full TP group before 0.5.11
    "NemotronHForCausalLM": "0.5.14",  # nemotron_h.py: sharded over the full TP group before 0.5.14
    # their first release already shards it so: kimi_k3.py (get_embedding_tp_kwargs), minimax_m3.py
    **{arch: "0" for arch in (*KIMI_K3, "MiniMaxM3SparseForCausalLM", "MiniMaxM3SparseForConditionalGeneration")},
}
# models/deepseek_v4.py, qwen3_5.py and step3p5.py keep `enable_tp=not is_dp_attention_enabled()` in every release
_EMBED_REPLICATED = frozenset({
    "DeepseekV4ForCausalLM", "Qwen3_5ForConditionalGeneration", "Qwen3_5MoeForConditionalGeneration",
    "Step3p5ForCausalLM", "Step3p7ForConditionalGeneration",
})
# A plain VocabParallelEmbedding over the full TP group whatever the attention layout (llama.py, mixtral.py,
# nemotron_nas.py), and before the release named for those that later shard it otherwise
_EMBED_FULL_TP = frozenset({"LlamaForCausalLM", "MistralForCausalLM", "MixtralForCausalLM", "DeciLMForCausalLM"})
# Gemma 4's embedding is Gemma3TextScaledWordEmbedding, a plain nn.Embedding: the whole table on every rank
# whatever the parallel layout (gemma4_causal.py, gemma3_causal.py)
_EMBED_WHOLE = frozenset({"Gemma4ForCausalLM", "Gemma4ForConditionalGeneration"})
_EMBED_FULL_TP_BEFORE: Mapping[str, str] = {"MiniMaxM2ForCausalLM": "0.5.11", "NemotronHForCausalLM": "0.5.14"}
# Files whose ParallelLMHead does not read --enable-dp-lm-head (0.5.23: qwen2.py, mixtral.py, minimax_m2.py):
# their lm_head stays on the full TP group. Any other file is priced on the attention-TP group under the flag
# (the heavier reading where a file was not read).
_DP_LM_HEAD_IGNORED = frozenset({"Qwen2ForCausalLM", "MixtralForCausalLM", "MiniMaxM2ForCausalLM"})
# get_embedding_tp_kwargs (0.5.13 on) replicates the table on every rank under SGLANG_ENABLE_EMBED_REPLICATION
_EMBED_ENV_FROM: Mapping[str, str] = {
    **{arch: "0.5.13" for arch in DSV2_FAMILY - {"DeepseekV4ForCausalLM"}},
    **{arch: "0" for arch in KIMI_K3},
}


def a2a_backend(args: Mapping[str, Any], env: Mapping[str, str] | None = None, version: str | None = None) -> str:
    """The MoE all-to-all backend SGLang runs: --moe-a2a-backend, or what it is overridden to.

    deepep under the deprecated --enable-deepep-moe (0.4.x-0.5.x; server_args.py sets moe_a2a_backend =
    "deepep" for it, and before --moe-a2a-backend existed the flag itself replicated the shared experts and
    spanned the EP group); deepep under --enable-deepep-waterfill (0.5.12-0.5.15, a backend other than
    deepep) and --enable-waterfill (0.5.16 on, a backend other than deepep or megamoe); megamoe under
    SGLANG_OPT_USE_DEEPGEMM_MEGA_MOE=1 (0.5.12-0.5.17, after the waterfill override, as
    `_handle_a2a_moe` / overrides.py `_a2a_backend_overrides` apply them).
    """
    backend = args.get("moe_a2a_backend")
    if backend in (None, "none"):
        backend = "deepep" if args.get("enable_deepep_moe") else "none"
    backend = str(backend)
    if args.get("enable_deepep_waterfill") and backend != "deepep":
        backend = "deepep"
    if args.get("enable_waterfill") and backend not in ("deepep", "megamoe"):
        backend = "deepep"
    if (env is not None and env_bool(env.get("SGLANG_OPT_USE_DEEPGEMM_MEGA_MOE"))
            and _has(version, MEGA_MOE_ENV_FROM) and not _has(version, MEGA_MOE_ENV_UNTIL)):
        backend = "megamoe"
    return backend


def resolved_ep(args: Mapping[str, Any], tp: int, env: Mapping[str, str] | None = None,
                version: str | None = None) -> int:
    """ep_size as SGLang resolves it: tp_size under an all-to-all backend that spans the EP group, and
    under the deprecated --enable-ep-moe."""
    if a2a_backend(args, env, version) in A2A_EP_SPANNING or args.get("enable_ep_moe"):
        return tp
    return int(args.get("ep_size") or 1)


@dataclass(frozen=True)
class Placement:
    """Ranks each of these shards over (1: a whole copy on every rank); notes say why, for the report."""

    shared_tp: int
    embed_tp: int
    lm_head_tp: int
    notes: tuple[str, ...]


def placement(
    arch: str, args: Mapping[str, Any], env: Mapping[str, str], version: str | None, *,
    tp: int, attn_tp: int, attn_dp: int, ep: int, dense_tp: int, has_shared_experts: bool, nvfp4: bool,
    gpu_arch: str = "", sm: int | None = None, text: Mapping[str, Any] | None = None, a2a: str | None = None,
) -> Placement:
    """Where the shared experts, the input embedding and the lm_head of `arch` live; EstimateError where
    the shared experts' placement under the role's all-to-all backend has not been read. `a2a`: the
    all-to-all backend the layers are built under, when it is not the role's (a draft's, draft_a2a_backend)."""
    notes: list[str] = []
    a2a = a2a_backend(args, env, version) if a2a is None else a2a
    shared_tp = _sharded_shared_tp(arch, tp=tp, dense_tp=dense_tp)
    if has_shared_experts:
        placed, why = _shared_tp(arch, a2a, args, env, version, tp=tp, attn_tp=attn_tp, attn_dp=attn_dp, ep=ep,
                                 dense_tp=dense_tp, nvfp4=nvfp4, sm=sm, gpu_arch=gpu_arch, text=text or {})
        if placed != shared_tp:
            how = "replicated on every rank" if placed == 1 else f"sharded over {placed} ranks"
            notes.append(f"shared experts {how} ({why}, as SGLang's {arch} places them)")
        shared_tp = placed
    embed_tp = _embed_tp(arch, env, version, tp=tp, attn_tp=attn_tp, attn_dp=attn_dp)
    if embed_tp != tp:
        how = "replicated on every rank" if embed_tp == 1 else f"sharded over the {embed_tp}-rank attention-TP group"
        why = "SGLANG_ENABLE_EMBED_REPLICATION" if attn_dp == 1 else "DP attention"
        notes.append(f"input embedding {how} ({why})")
    lm_head_tp = attn_tp if args.get("enable_dp_lm_head") and attn_dp > 1 and arch not in _DP_LM_HEAD_IGNORED else tp
    if lm_head_tp != tp:
        notes.append(f"lm_head sharded over the {attn_tp}-rank attention-TP group (--enable-dp-lm-head)")
    return Placement(shared_tp, embed_tp, lm_head_tp, tuple(notes))


def replicating_backends(arch: str, version: str | None) -> frozenset[str] | None:
    """The all-to-all backends under which `version` replicates `arch`'s shared experts; None: not read."""
    table = SHARED_EXPERTS_REPLICATED.get(arch)
    if table is None:
        return None
    return frozenset().union(*(names for first, names in table if _has(version, first)))


def draft_a2a_backend(args: Mapping[str, Any], env: Mapping[str, str], version: str | None) -> str:
    """The backend a built-in MTP draft is built under (layers/moe/utils.py speculative_moe_a2a_backend_context):
    --speculative-moe-a2a-backend, unset the target's, none for flashinfer_megamoe."""
    spec = args.get("speculative_moe_a2a_backend")
    if spec is not None:
        return str(spec)
    target = a2a_backend(args, env, version)
    return "none" if target == "flashinfer_megamoe" else target


def _sharded_shared_tp(arch: str, *, tp: int, dense_tp: int) -> int:
    """The ranks sharded shared experts split over: the full TP group in deepseek_v2.py (DeepseekV2MLP with no
    tp_size, parallel_group="tp": --moe-dense-tp-size moves only the dense layers) and kimi_k3.py; elsewhere
    the dense layers' TP (the heavier reading where the two differ, not read per file)."""
    return tp if arch in _SHARED_ON_FULL_TP else dense_tp


def _shared_tp(
    arch: str, a2a: str, args: Mapping[str, Any], env: Mapping[str, str], version: str | None, *,
    tp: int, attn_tp: int, attn_dp: int, ep: int, dense_tp: int, nvfp4: bool, sm: int | None, gpu_arch: str,
    text: Mapping[str, Any],
) -> tuple[int, str]:
    """(the ranks the shared experts split over, why when it is not the sharded layout)."""
    sharded = _sharded_shared_tp(arch, tp=tp, dense_tp=dense_tp)
    if a2a == "none" and _fused_under_ep(arch, args, text, gpu_arch, version, ep=ep):
        return max(1, tp // ep), f"fused as an expert slot under --ep-size {ep}"
    if arch in DSV2_FAMILY and _tp1_env(env, version):
        return 1, "SGLANG_SHARED_EXPERT_TP1"
    if (arch in _FP4_ALLGATHER and a2a == "none" and nvfp4 and attn_dp > 1 and ep == attn_dp
            and moe_runner(args, sm) == "flashinfer_cutlass"):
        return 1, "the FP4 all-gather path: flashinfer_cutlass MoE under DP attention"
    if a2a == "none":
        return sharded, ""
    backends = replicating_backends(arch, version)
    if backends is None:
        raise EstimateError(
            f"{arch}: where SGLang places the shared experts under --moe-a2a-backend {a2a} has not been read "
            "(replicated on every rank or sharded), so the weights cannot be priced"
        )
    if a2a not in backends:
        return sharded, ""
    why = f"moe-a2a-backend {a2a}"
    if arch in KIMI_K3:
        return _kimi_k3_shared_tp(args, env, version, tp=tp, attn_tp=attn_tp, attn_dp=attn_dp), why
    return 1, why


def _kimi_k3_shared_tp(args: Mapping[str, Any], env: Mapping[str, str], version: str | None, *,
                       tp: int, attn_tp: int, attn_dp: int) -> int:
    """The ranks Kimi-K3's shared experts split over under an EP all-to-all backend (see K3_SHARED_*)."""
    if _has(version, K3_SHARED_TP_SIZE_FROM):
        if args.get("shared_experts_tp_size") is not None:
            return int(args["shared_experts_tp_size"])
        return attn_tp if args.get("enable_shared_experts_attn_tp") else 1
    if _has(version, K3_SHARED_ATTN_TP_FLAG_FROM):
        attn_tp_mode = bool(args.get("enable_shared_experts_attn_tp"))
    else:
        attn_tp_mode = (_has(version, K3_SHARED_ATTN_TP_ENV_FROM)
                        and env_bool(env.get("SGLANG_K3_SHARED_EXPERTS_ATTN_TP")))
    if not attn_tp_mode:
        return 1
    return attn_tp if attn_dp > 1 and attn_tp > 1 else tp


def _tp1_env(env: Mapping[str, str], version: str | None) -> bool:
    return env_bool(env.get("SGLANG_SHARED_EXPERT_TP1")) and _has(version, SHARED_EXPERT_TP1_FROM)


def moe_runner(args: Mapping[str, Any], sm: int | None) -> str:
    """--moe-runner-backend as resolved: `auto` with --quantization modelopt_fp4 on SM110/SM120 is
    flashinfer_cutlass (trtllm-gen MoE kernels are SM100-only: server_args.py 0.5.13, overrides.py 0.5.15 on)."""
    runner = str(args.get("moe_runner_backend") or "auto")
    if runner == "auto" and args.get("quantization") == "modelopt_fp4" and sm in (110, 120):
        return "flashinfer_cutlass"
    return runner


def _fused_under_ep(arch: str, args: Mapping[str, Any], text: Mapping[str, Any], gpu_arch: str, version: str | None,
                    *, ep: int) -> bool:
    """Whether SGLang fuses `arch`'s shared expert into the routed experts under plain EP (see above)."""
    if ep <= 1 or args.get("disable_shared_experts_fusion"):
        return False
    if str(args.get("moe_runner_backend") or "auto") in _FUSION_OFF_RUNNERS:
        return False
    if arch in _FUSED_UNDER_EP_ENFORCED and args.get("enforce_shared_experts_fusion"):
        return True
    match = _GFX.fullmatch(gpu_arch)
    if arch not in _FUSED_UNDER_EP_ROCM or match is None or (int(match[1]), int(match[2], 16)) < (9, 4):
        return False
    if not _has(version, FUSED_UNDER_EP_ROCM_FROM):
        return False
    if arch == "Glm4MoeForCausalLM":
        return True
    overlap = args.get("enable_two_batch_overlap") or args.get("enable_single_batch_overlap")
    if overlap and _has(version, FUSION_OFF_UNDER_OVERLAP_FROM):
        return False
    return text.get("n_shared_experts") == 1 and text.get("n_routed_experts") == 256


def _embed_tp(arch: str, env: Mapping[str, str], version: str | None, *, tp: int, attn_tp: int, attn_dp: int) -> int:
    env_from = _EMBED_ENV_FROM.get(arch)
    if env_from is not None and _has(version, env_from) and env_bool(env.get("SGLANG_ENABLE_EMBED_REPLICATION")):
        return 1
    if arch in _EMBED_WHOLE:
        return 1
    if arch in _EMBED_FULL_TP or (arch in _EMBED_FULL_TP_BEFORE and not _has(version, _EMBED_FULL_TP_BEFORE[arch])):
        return tp
    if attn_dp == 1:
        return tp
    if arch in _EMBED_REPLICATED:
        return 1
    first = _EMBED_ATTN_TP_FROM.get(arch)
    if first is not None and _has(version, first):
        return attn_tp
    # before the release that shards it, or an architecture whose embedding kvcheck has not read: the
    # whole table (the larger of the two layouts SGLang uses, and equal to the other at full DP attention)
    return 1


def _has(version: str | None, first: str) -> bool:
    """Whether the declared release has the rule that came in `first` (no release stated: the newest rules)."""
    return rel.rules_for(version).has(first)
