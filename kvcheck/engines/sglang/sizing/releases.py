"""The parts of SGLang's pool sizing that changed between releases, keyed by the release they came in.

Each entry names the first release whose source has the change (read from the released wheels;
docs/sglang-releases.md has the table with the file and function of each). The estimate model asks
`SizingRules.has(CHANGE)` instead of comparing version strings itself, so a rule reads the same in
the code as in the table.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache

from packaging.version import InvalidVersion, Version

# --- the default mem_fraction_static (server_args.py ServerArgs.__post_init__, later
#     _handle_gpu_memory_settings, arg_groups/memory_hook.py from 0.5.19)
FRACTION_TP8_082 = "0.3.6"  # the TP table's TP 8-15 entry: 0.83 (0.2.15-0.3.5.post2), then 0.82
FRACTION_TP_TABLE = "0.4.0"  # 0.88 / 0.87 / 0.85 / 0.81 / 0.79 by TP size
FRACTION_BIG_GPU_13G = "0.4.5.post3"  # GPUs > 81,920 MiB: (gpu - 13 GiB) / gpu
FRACTION_BOOST_96G = "0.4.6.post2"  # table by tp x pp; > 96 GiB: min(f + 48 GiB (1-f)/gpu, (gpu - 18 GiB)/gpu)
FRACTION_B200_079 = "0.4.7"  # > 180,000 MiB on CUDA: 0.79; speculative 20 GiB / x0.95
FRACTION_RESERVE_BY_GPU = "0.4.7.post1"  # reserve by GPU size bucket, + spec 2 GiB, + DP attention 4 GiB
FRACTION_ACTIVATION = "0.5.3"  # 512 + 1.5 x activation tokens + 2 x max_bs + tp x pp / 8 GiB, floor 10 GiB
SPEC_STANDALONE_6G = "0.5.2"  # STANDALONE drafts reserve 6 GiB instead of 2
SPEC_EAGLE_4G = "0.5.10"  # EAGLE-family drafts reserve 4 GiB instead of 2
SPEC_RESERVE_REMOVED = "0.5.14"  # no speculative-decoding reserve any more
DISAGGREGATION_RESERVE = "0.5.15"  # decode roles size activations by batch; graph terms by role; DeepEP +2 GiB
PREFILL_BCG_DEEPEP_1G = "0.5.17"  # breakable prefill graph with DeepEP: + 1 GiB
VLM_X090 = "0.4.9"  # multimodal models: x 0.90
VLM_FACTOR = "0.4.9.post3"  # multimodal models: 0.95 x clamp(1 - 0.1 (ViT / ViT-L - 1), 0.8, 1.05)
VLM_LANGUAGE_ONLY = "0.5.9"  # --language-only skips the multimodal factor
VLM_NOT_ON_DECODE = "0.5.17"  # decode roles skip the multimodal factor
AITER_X085 = "0.5.4.post2"  # aiter backend with context_len > 8192: x 0.85
AITER_HONOR_ENV = "0.5.19"  # SGLANG_AITER_HONOR_EXPLICIT_MEM_FRACTION exempts a given fraction

# --- the prefill CUDA graph's reserve
PIECEWISE_OPT_IN = "0.5.5.post1"  # --enable-piecewise-cuda-graph: + max_tokens // 4 after the floor
PIECEWISE_DIV8 = "0.5.7"  # + max_tokens // 8, max_tokens defaulting to chunked_prefill_size
PIECEWISE_PER_SIZE = "0.5.8"  # + 8 MiB per capture size, before the floor
PIECEWISE_DEFAULT_ON = "0.5.10"  # on unless disabled; MLA reserves 1.5 GiB
PREFILL_BACKEND_CONFIG = "0.5.14"  # per-phase config; tc_piecewise prefill backend by default
PREFILL_BREAKABLE = "0.5.15"  # breakable prefill graph on CUDA by default
BREAKABLE_DCP_OFF = "0.5.16"  # DCP turns the breakable prefill graph off
BREAKABLE_WIDENED = "0.5.17"  # LoRA and DP attention keep it; non-DSA MLA, TBO, other A2A backends turn it off
BREAKABLE_MLA = "0.5.18"  # MLA models keep it
MM_BREAKABLE_QWEN3_5 = "0.5.16"  # Qwen3.5/3.6 multimodal wrappers keep it (the list appears, with them only)
MM_BREAKABLE_KIMI_K25 = "0.5.18"  # Kimi-K2.5's multimodal wrapper keeps it (the multimodal allow-list)
PREFILL_MLA_8192 = "0.5.23"  # an MLA prefill graph captures up to min(8192, chunked prefill), not 2048

# --- the attention backend and page size
QWEN3_5_SM100_TRITON = "0.5.9"  # Qwen3.5/3.6 on SM100 with no --attention-backend: triton, page 1
QWEN3_5_SM100_TRTLLM_KEPT = "0.5.10"  # ... unless radix cache off, speculative or mamba extra buffer: trtllm_mha, page 64

# --- chunked_prefill_size and the decode CUDA-graph max_bs when unset
CAPACITY_SMALL_TP = "0.4.0.post1"  # < 25,000 MiB: max_bs 8 (TP < 4) or 80
CAPACITY_PD_16K = "0.4.6.post2"  # prefill/decode roles: chunked prefill 16384
CAPACITY_B200_16K = "0.4.7"  # > 180,000 MiB: chunked prefill 16384
CAPACITY_BY_GPU = "0.4.7.post1"  # chunked prefill 2048 / 8192 / 16384 below 35 / 160 GiB / above
CAPACITY_TABLE = "0.5.3"  # one table for chunked prefill and max_bs by GPU size
CAPACITY_SMALL_24 = "0.5.4.post1"  # < 35 GiB, TP < 4: max_bs 24
CAPACITY_SMALL_48 = "0.5.20"  # < 35 GiB: chunked prefill 4096, max_bs 48 (TP < 4) or 160
MAX_BS_CAPPED_BY_RUNNING = "0.5.22"  # a defaulted decode max_bs is capped at --max-running-requests
RUNNING_FLOOR_ONE = "0.5.23"  # --max-running-requests per DP rank is max(1, given // attn DP) (before: given // attn DP)

# --- the pool
PAGE_ALIGNED = "0.4.4"  # --page-size appears; the token count is rounded down to a page multiple

# --- DeepSeek-V4's pools (model_executor/pool_configurator.py DSV4PoolConfigurator, mem_cache/deepseek_v4_memory_pool.py,
#     arg_groups/deepseek_v4_hook.py; sizing/dsv4.py has the layout of each era)
DSV4_FIRST = "0.5.12"  # DeepseekV4ForCausalLM served; c4 and c128 compress states priced per SWA slot, every layer of
#                        compress_ratios priced on every rank (the MTP layer's entry too, no PP slice)
DSV4_PP_SLICE = "0.5.13"  # the pool prices its PP stage's layers only (compress_ratios[start_layer:end_layer])
DSV4_BF16_HOOK = "0.5.14"  # the V4 hook accepts --kv-cache-dtype bfloat16 (before: fp8_e4m3 only)
DSV4_STATE_DTYPE_ENV = "0.5.14"  # SGLANG_DSV4_COMPRESS_STATE_DTYPE (float32/fp32, bfloat16/bf16) sizes the c4/c128
#   compress states (before: float32, the variable unread); 0.5.14-0.5.15 refuse bf16 with SGLANG_OPT_USE_ONLINE_COMPRESS=1
DSV4_STATE_BF16_ONLINE = "0.5.16"  # bf16 compress state no longer refused with online compress
DSV4_C128_REQUEST_SCOPED = "0.5.15"  # the c128 compress state is request-scoped: fixed bytes, not per SWA slot
DSV4_SWA_RATIO_NONE = "0.5.20"  # the V4 SWA ratio 0.1 applies when the flag is unset (before: when it equals 0.8)
DSV4_PAGED_RING = "0.5.21"  # page-padded V4 rows, SWA page = page size, cap mode, the operator's ratio kept
NOT_ENOUGH_MEMORY_VALUE = "0.5.3"  # "Not enough memory ..." appends "Current value: self.server_args.mem_fraction_static=F"
NOT_ENOUGH_MEMORY_FIELD = "0.5.10"  # ... as "Current value: mem_fraction_static=F" (pool_configurator)
MM_RUNTIME_RESERVE = "0.5.18"  # multimodal models: the VLM embedding cache (+ feature-transport pools) leaves the KV budget
DSA_POOL = "0.5.3"  # the DSA (NSA) KV pool with its indexer rows: DeepSeek-V3.2-style models run from here
DSA_BUDGET_INDEXER = "0.5.3.post1"  # DSA tokens counted with the indexer's rows (0.5.3: latent rows only)
DSA_BACKENDS_BY_PLATFORM = "0.5.10"  # fp8 KV no longer forces flashmla_auto / flashmla_kv on every GPU (ROCm: tilelang)
DSA_BLACKWELL_FP8_USER_BACKENDS = "0.5.11"  # fp8 on SM100 keeps a user's --nsa-*-backend (0.5.10 forced trtllm)
DSA_ROCM_PRESHUFFLE_PAGE = "0.5.12"  # DSA on ROCm: 64 x index_kpool pages (aiter preshuffle path; before: page 1)
DSA_BUDGET_SCALED_ROW = "0.5.17"  # DSA fp8 tokens counted on the allocated block-scaled row (before: 576 B/layer)
DSA_SHARED_INDEXER_ELIDED = "0.5.18"  # shared-top-k DSA layers (GLM-5.2) keep no index-K row (before: every layer)
DSV4_REFUSAL_MESSAGE = "0.5.14"  # a budget the weights fill: "Loaded weights leave no GPU memory ..." (before:
#   "Not enough memory. Please try to increase --mem-fraction-static.", model_executor/pool_configurator.py)
DSV4_SWA_FLOOR_CHECK = "0.5.16"  # validate_swa_pool_size refuses an SWA pool below sliding_window + page_size
# DeepSeek-V4's MXFP4 routed experts (layers/quantization/fp8.py, arg_groups/.../deepseek_v4.py), by release:
DSV4_FP4_AITER = "0.5.13"  # ROCm aiter keeps native MXFP4 (E8M0 scales), intermediate padded to 256
DSV4_FP4_SM120_FLASHINFER = "0.5.16"  # SM120 defaults to flashinfer_mxfp4 (E8M0 scales kept)
DSV4_FP4_AITER_PAD_128 = "0.5.17"  # the aiter pad drops to 128 (V4-Pro TP8: 384 stays 384, not 512)
DSV4_FP4_FLASHINFER_DEFAULT = "0.5.19"  # SM90 and SM100 default to flashinfer_mxfp4 (E8M0 scales kept); before, the
#   FP8 MoE method staged each 32-element block's scale as float32 (0.625 B per expert weight, not 0.53125)
DSV4_HIP_ROPE_PER_LAYER = "0.5.13"  # on ROCm every V4 attention layer keeps its own bf16 cos/sin RoPE tables (MQALayer, `if _is_hip`)
DSV4_ROPE_COS_SIN = "0.5.13"  # each V4 attention layer also builds a rotary_emb (get_rope_wrapper): one cos_sin_cache
#   per rope setting (get_rope's _ROPE_DICT), float32 on CUDA, bf16 on ROCm until 0.5.22 (rotary_embedding/base.py)
DSV4_ROPE_PLAIN_SWA = "0.5.18"  # the uncompressed (SWA-only) layers' rotary_emb is plain RoPE over max_position
#   (before: deepseek_yarn over original_max_position x factor, like the compressed layers)
ROPE_CACHE_FP32_HIP = "0.5.22"  # RotaryEmbedding keeps its cos_sin_cache in float32 on HIP too
DSV4_NEWEST_READ = "0.5.23"  # the newest release whose DeepSeek-V4 pool code was read

# --- speculative-decoding drafts (managers/scheduler.py, speculative/eagle_worker_v2.py, models/deepseek_nextn.py)
NEXTN_FP4_UNQUANTIZED = "0.4.8"  # a modelopt_fp4 checkpoint's DeepSeek-family NextN draft layer is built without
#   quantization (DeepseekModelNextN: `quant_config = None` for modelopt_fp4): bf16 experts and projections
DRAFT_HEAD_IN_BUDGET = "0.5.14"  # the draft loads before the target's pool is sized (Scheduler.init_memory_pools),
#   and its own embedding and lm_head are freed for the target's only when its pool is allocated
#   (EagleDraftWorker.alloc_memory_pool -> init_lm_head): the target's budget pays for them

# --- MoE runners (arg_groups/model_overrides/)
K3_AUTO_FLASHINFER_MXFP4 = "0.5.17"  # Kimi-K3's `auto` MoE runner on SM100/SM103 is flashinfer_mxfp4
#   (arg_groups/overrides.py _kimi_k3_moe_runner_overrides; 0.5.17 refuses it without the SiTU cubin pool)
K3_FLASHINFER_SITU_BUNDLED = "0.5.18"  # ... FlashInfer ships the SiTU kernels: no SGLANG_TRTLLM_GEN_MOE_CUBIN_POOL
K3_MEGAMOE_ANY_RUNNER = "0.5.18"  # Mxfp4MoEMethod takes DeepGEMM's layout under the megamoe all-to-all whatever the
#   runner (use_mega_moe; 0.5.17: only under the deep_gemm runner)
K3_AUTO_FLASHINFER_SM107 = "0.5.19"  # ... and on SM107 (arg_groups/model_overrides/kimi_k3.py)

# --- weight offload (srt/utils/offloader.py, srt/offloader.py before 0.5.3; models/deepseek_v2.py)
OFFLOAD_V2_ANY_EXPERT_FORMAT = "0.5.3"  # OffloaderV2 names the NVFP4 block scales only where the experts have them
#   (before: always, so _ModuleOffloader's assertion stops a start that offloads any other MoE layer)

# --- the environment (sglang/srt/environ.py)
SGL_PREFIX_RENAMED = "0.5.3"  # importing environ.py copies each legacy SGL_X to SGLANG_X, over a value already set

OLDEST = Version("0.4.0")  # the oldest release whose sizing was read in full
OLDEST_TABLE = Version("0.2.15")  # the oldest release whose default-fraction table was read
NEWEST_READ = Version("0.5.23")  # the newest release whose sizing was read


@dataclass(frozen=True)
class SizingRules:
    """The sizing rules of one declared SGLang release."""

    release: Version  # the release the rules are taken from (the declared one, or 0.2.15 for older)
    declared: str | None  # the version the manifest states, as written

    def has(self, change: str) -> bool:
        """Whether this release has the change that came in release `change`."""
        return self.release >= _release(change)

    @property
    def older_than_known(self) -> bool:
        """The declared release predates 0.4.0, the oldest whose sizing kvcheck has read."""
        declared = _parse(self.declared) if self.declared is not None else None
        return declared is not None and declared < OLDEST

    @property
    def newer_than_known(self) -> bool:
        """The declared release is past 0.5.23 (its post and local builds are 0.5.23), so 0.5.23's rules stand in."""
        declared = _parse(self.declared) if self.declared is not None else None
        return declared is not None and declared.release > NEWEST_READ.release


@cache
def _release(text: str) -> Version:
    return Version(text)


def _parse(text: str) -> Version | None:
    try:
        return Version(text)
    except InvalidVersion:
        return None


def rules_for(version: str | None) -> SizingRules:
    """The rules of `version`; no (or an unreadable) version means the newest rules.

    A post or local build (`0.5.23.post1`, `0.5.23+cu129`) is compared as the version it is, so it
    gets every change of its release. A release before 0.4.0 has none of the changes listed here,
    which is 0.4.0's sizing with its own default-fraction table; before 0.2.15, 0.2.15's table.
    """
    parsed = _parse(version) if version is not None else None
    if parsed is None:
        return SizingRules(release=Version("9999"), declared=version)
    return SizingRules(release=max(parsed, OLDEST_TABLE), declared=version)
