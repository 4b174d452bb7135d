"""Predict a vLLM role's KV pool the way vLLM sizes it (docs/estimate.md, vLLM): the worker's available
memory (sizing/memory.py), the blocks it buys (sizing/layout.py), the null block, per worker."""

from __future__ import annotations

import math
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from kvcheck.engines.base import PoolEstimate
from kvcheck.engines.modelconfig import ModelSource, load_model_source
from kvcheck.engines.offload import NO_OFFLOAD, WeightOffload, budget_offload, ignored
from kvcheck.engines.vllm import compilation as compilation_settings
from kvcheck.engines.vllm import serving
from kvcheck.engines.vllm.sizing import maxlen, scope
from kvcheck.engines.vllm.sizing import memory as mem
from kvcheck.engines.vllm.sizing import offload as offloading
from kvcheck.engines.vllm.sizing.jsonargs import json_arg
from kvcheck.engines.vllm.sizing.layout import (
    MODEL_DTYPE_BYTES,
    KvLayout,
    arg_flag,
    is_hybrid,
    kv_layout,
    model_dtype_of,
    resolve_kv_dtype,
)
from kvcheck.engines.vllm.sizing.moe import MoeSplit, moe_split
from kvcheck.engines.vllm.sizing.weights import (
    HYBRID_COUNTED,
    MXFP4_EXPERT_PAD,
    MXFP4_WEIGHTS_BAND,
    attention_unquantized,
    config_weights_bytes,
    hybrid_weights_bytes,
    layer_bytes,
    linear_bytes,
    stage_layer_counts,
    vision_tower_bytes,
    vision_tower_loaded,
)
from kvcheck.errors import EstimateError
from kvcheck.gpus import GpuProfile, GpuProfiles, as_profiles
from kvcheck.model import Finding, RoleTarget
from kvcheck.policy.registry import finding

GIB = mem.GIB
CHUNKED_PREFILL_OPTIONAL_FROM = (0, 11, 1)  # EngineArgs honours enable_chunked_prefill=False for generation
THROUGHPUT_MODE_FROM = (0, 17, 0)  # --performance-mode; throughput doubles the default batch and sequences


def _int_arg(args: Mapping[str, Any], name: str, default: int | None = None) -> int | None:
    value = args.get(name)
    if value is None:
        return default
    try:
        return int(value)
    except (TypeError, ValueError) as exc:
        raise EstimateError(f"--{name.replace('_', '-')} {value!r} is not a whole number") from exc


@dataclass(frozen=True)
class _Inputs:
    """A role's settings as vLLM resolves them."""

    tp: int
    pp: int
    dp: int
    device: str
    utilization: float
    utilization_other: float
    utilization_defaulted: bool
    explicit_kv_bytes: int | None
    max_model_len: int
    max_model_len_auto: bool
    derived_len: int
    length_refusal: str | None  # vLLM's ValueError for a --max-model-len above the model's derived length
    batched_tokens: int
    max_num_seqs: int
    eager: bool
    num_blocks_override: int | None


def _device(target: RoleTarget) -> str:
    """cuda, or cpu for a role of vLLM's CPU build: vLLM 0.32.0 has no --device flag, so the manifest says
    so with `gpu: cpu`, or a role that names no GPU sets VLLM_CPU_KVCACHE_SPACE (only the CPU backend reads it)."""
    device = target.device or serving.args_device(target.args) or "cuda"
    if device == "cpu" or str(target.gpu or "").strip().lower() == "cpu":
        return "cpu"
    if not target.gpu and target.env.get("VLLM_CPU_KVCACHE_SPACE", "").strip():
        return "cpu"
    return device


def _gpu(target: RoleTarget, profiles: GpuProfiles) -> GpuProfile:
    if not target.gpu:
        raise EstimateError(f"role {target.name!r} names no GPU type",
                            hint="set gpu: (e.g. H100, H200, B200) in the manifest, or --kv-cache-memory-bytes")
    return profiles.get(target.gpu)


def _inputs(target: RoleTarget, text: Mapping[str, Any], device: str, device_gib: float | None,
            gpu_name: str, version: Any) -> _Inputs:
    args = target.args
    tp = _int_arg(args, "tensor_parallel_size", 1)
    pp = _int_arg(args, "pipeline_parallel_size", 1)
    dp = _int_arg(args, "data_parallel_size", 1)
    if tp is None or pp is None or dp is None or min(tp, pp, dp) < 1:
        raise EstimateError("--tensor-parallel-size, --pipeline-parallel-size and --data-parallel-size must be at least 1")
    if (_int_arg(args, "decode_context_parallel_size", 1) or 1) > 1 or (_int_arg(args, "prefill_context_parallel_size", 1) or 1) > 1:
        raise EstimateError("context parallelism (--decode-context-parallel-size, --prefill-context-parallel-size) "
                            "is not priced by the vLLM estimate model")
    util_arg = args.get("gpu_memory_utilization")
    central, other = mem.default_utilization(version)
    if util_arg is not None:
        central = other = float(util_arg)
    if not 0 < central <= 1:
        raise EstimateError(f"--gpu-memory-utilization {central} is outside (0, 1]: vLLM refuses it")
    explicit = _int_arg({"kv_cache_memory_bytes": serving.explicit_kv_bytes(args, device, target.engine_version)},
                        "kv_cache_memory_bytes")
    cpu_space = target.env.get("VLLM_CPU_KVCACHE_SPACE", "").strip()
    if device == "cpu" and cpu_space:
        if not cpu_space.isdigit():  # vLLM reads it with int(): "0.5" stops its start with a ValueError
            raise EstimateError(f"VLLM_CPU_KVCACHE_SPACE={cpu_space!r} is not a whole number of GiB: vLLM's CPU "
                                "backend reads it with int() and does not start",
                                hint="set VLLM_CPU_KVCACHE_SPACE to a whole number of GiB, or --kv-cache-memory-bytes")
        explicit = int(cpu_space) * (1 << 30)  # platforms/cpu.py: the legacy setting wins
    release = version.release if version is not None else None
    derived_len = maxlen.derive(text, release, disable_sliding_window=bool(args.get("disable_sliding_window")))
    derived = derived_len.length
    raw_len = args.get("max_model_len")
    auto = raw_len in (-1, "-1", "auto")
    # unset or auto: the derived length (LongRoPE: its original_max_position_embeddings); auto then fits it
    # to the pool
    default_len = derived_len.longrope_default or derived
    max_len = default_len if raw_len is None or auto else int(raw_len)
    refused = None if raw_len is None or auto else maxlen.refusal(max_len, derived_len, release, target.env)
    big = device_gib is not None and device_gib * GIB >= 160 * GIB
    large = device_gib is not None and device_gib >= 70 and "a100" not in gpu_name.lower()
    default_batched, default_seqs = (16384, 1024) if big else (8192, 1024) if large else (2048, 256)
    if args.get("performance_mode") == "throughput" and (release is None or release >= THROUGHPUT_MODE_FROM):
        default_batched, default_seqs = 2 * default_batched, 2 * default_seqs  # EngineArgs doubles the unset ones
    batched = _int_arg(args, "max_num_batched_tokens") or _default_batched(args, default_batched, max_len, release)
    seqs = _int_arg(args, "max_num_seqs") or default_seqs
    return _Inputs(tp=tp, pp=pp, dp=dp, device=device, utilization=central, utilization_other=other,
                   utilization_defaulted=util_arg is None, explicit_kv_bytes=explicit, max_model_len=max_len,
                   max_model_len_auto=auto, derived_len=derived, length_refusal=refused, batched_tokens=batched, max_num_seqs=seqs,
                   eager=bool(args.get("enforce_eager")), num_blocks_override=_int_arg(args, "num_gpu_blocks_override"))


def _default_batched(args: Mapping[str, Any], default: int, max_model_len: int, release: tuple[int, ...] | None) -> int:
    """The batch vLLM profiles when --max-num-batched-tokens is unset: with chunked prefill off, a whole
    prompt of max_model_len runs in one step, so EngineArgs raises the default to it (from 0.11.1; up to 0.11.0
    V1 turned chunked prefill back on for every generative model). An unknown release reads as the newest."""
    if args.get("enable_chunked_prefill") is False and (release is None or release >= CHUNKED_PREFILL_OPTIONAL_FROM):
        return max(max_model_len, default)
    return default


def _weights(target: RoleTarget, source: ModelSource, inp: _Inputs, model_bytes: int,
             assumptions: list[str]) -> tuple[float, float, str]:
    """(bytes, band fraction, source) of the most loaded worker's weights."""
    if target.estimate.weights_gib_per_gpu is not None:
        assumptions.append("weights per GPU from estimate.weights_gib_per_gpu")
        return float(target.estimate.weights_gib_per_gpu) * GIB, 0.0, "override"
    split, experts = _moe_split(target, source, inp)
    if split is not None and split.differs_from_tp(experts):
        if source.checkpoint_bytes:  # the index states the checkpoint's total only, not the experts' share
            raise EstimateError(
                f"{split.describe(experts)}: the routed experts are not split by tp x pp as the rest is, and "
                "model.safetensors.index.json gives only the checkpoint's total size, not the routed experts' "
                "share", hint="set estimate.weights_gib_per_gpu (the `Model loading took` figure of a boot), or "
                "estimate from config.json alone (model.config without the checkpoint folder)")
        assumptions.append(split.describe(experts))
    if source.checkpoint_bytes:
        assumptions.append("weights: model.safetensors.index.json total_size / (tp x pp)")
        return source.checkpoint_bytes / (inp.tp * inp.pp), mem.WEIGHTS_INDEX_BAND, "checkpoint-index"
    hybrid = is_hybrid(source.text, source.architecture)
    if hybrid and source.architecture not in HYBRID_COUNTED:
        raise EstimateError(
            f"{source.architecture} has recurrent-state (GDN/Mamba) layers, whose weights the vLLM estimate does not "
            "count from config.json (counted: Qwen3-Next, Qwen3.5/3.6, NemotronH)",
            hint="give the checkpoint (model_path with model.safetensors.index.json), estimate.weights_gib_per_gpu, "
            "or --kv-cache-memory-bytes")
    linear, scheme = linear_bytes(source.quant, model_bytes, target.args.get("quantization"))
    if hybrid:
        tied = bool(source.text.get("tie_word_embeddings", source.config.get("tie_word_embeddings", False)))
        tower = source.vision if vision_tower_loaded(target.args) else None
        data_vit = str(target.args.get("mm_encoder_tp_mode") or "weights") == "data"
        release = mem.release(target.engine_version)
        total = hybrid_weights_bytes(source.text, source.architecture, vision=tower, tp=inp.tp, pp=inp.pp,
                                     model_bytes=model_bytes, linear=linear, quant=source.quant, tied=tied,
                                     vision_tp=1 if data_vit else inp.tp, scheme=scheme,
                                     release=release.release if release is not None else None, moe_split=split)
        assumptions.append(f"weights counted from config.json as vLLM's {source.architecture} allocates them "
                           f"(state mixers, attention, MLP/MoE{', vision tower' if tower else ''}; MTP "
                           f"layers not loaded; linear layers {scheme}, +-{mem.WEIGHTS_BAND:.0%})")
        return total, mem.WEIGHTS_BAND, "config"
    tied = bool(source.text.get("tie_word_embeddings", source.config.get("tie_word_embeddings", False)))
    attention = float(model_bytes) if attention_unquantized(source.quant) else None
    mxfp4 = scheme == "mxfp4"
    layers = int(source.text.get("num_hidden_layers") or source.text.get("n_layers") or
                 source.text.get("num_layers") or 0)
    stages = stage_layer_counts(layers, inp.pp, target.env) if layers else None
    total = config_weights_bytes(source.text, tp=inp.tp, pp=inp.pp, model_bytes=model_bytes, linear=linear, tied=tied,
                                 attention_bytes=attention, moe_pad=MXFP4_EXPERT_PAD if mxfp4 else None,
                                 moe_split=split, stages=stages)
    vision = vision_tower_bytes(source.vision, tp=inp.tp, model_bytes=model_bytes,
                                text_hidden=int(source.text.get("hidden_size") or 0))
    if vision:
        total += vision
        assumptions.append(f"vision tower and projector counted: {vision / GIB:.2f} GiB per GPU")
    band = MXFP4_WEIGHTS_BAND if mxfp4 else mem.WEIGHTS_BAND
    assumptions.append(f"weights counted from config.json (linear layers {scheme}, +-{band:.0%})")
    return total, band, "config"


def _layer_figures(target: RoleTarget, source: ModelSource, inp: _Inputs, model_dtype: str) -> offloading.LayerFigures:
    """One worker's decoder layers as the weights count them (offloading.LayerFigures); for a hybrid, whose layers
    are not counted one by one, twice the worker's mean layer for every kind."""
    model_bytes = MODEL_DTYPE_BYTES.get(model_dtype, 2)
    linear, scheme = linear_bytes(source.quant, model_bytes, target.args.get("quantization"))
    split, experts = _moe_split(target, source, inp)
    layers = int(source.text.get("num_hidden_layers") or 1)
    try:
        if is_hybrid(source.text, source.architecture):
            raise EstimateError("a hybrid's layers are not counted one by one")
        common: dict[str, Any] = dict(
            tp=inp.tp, model_bytes=model_bytes, linear=linear,
            attention_bytes=float(model_bytes) if attention_unquantized(source.quant) else None,
            moe_pad=MXFP4_EXPERT_PAD if scheme == "mxfp4" else None, moe_split=split)
        first_dense = source.text.get("first_k_dense_replace")
        first_moe = layers if not experts else first_dense if isinstance(first_dense, int) and first_dense > 0 else 0
        return offloading.LayerFigures(layer_bytes(source.text, dense=True, **common),
                                       layer_bytes(source.text, dense=False, **common), first_moe, True)
    except EstimateError:
        weights, _, _ = _weights(target, source, inp, model_bytes, [])
        largest = 2 * weights / max(1, math.ceil(layers / inp.pp))  # twice the worker's mean layer
        return offloading.LayerFigures(largest, largest, layers, False)


def _weight_offload(target: RoleTarget, source: ModelSource, inp: _Inputs, model_dtype: str) -> WeightOffload:
    """The weight bytes an offload backend takes off a GPU worker before vLLM profiles its memory
    (kvcheck.engines.offload); none on the CPU backend, whose weights are in host memory anyway.

    --cpu-offload-gb (UVA): vLLM moves the parameters of the layers make_layers builds
    (model_executor/models/utils.py:630 in 0.11.0, :913 in 0.32.0; from 0.31 also vision towers, interfaces.py:394),
    in the model class's order, each whole, while fewer than `cpu_offload_gb x 2^30` bytes have moved:
    maybe_offload_to_cpu (utils.py:543-589 in 0.11.0, up to 0.14), then UVAOffloader
    (model_executor/offloader/uva.py:74-124, budget at base.py:174 in 0.32.0), whose --cpu-offload-params may
    narrow the set. A bound: the point figure keeps every weight on the GPU; the high end moves the budget plus the
    largest layer. --offload-group-size (prefetch, from 0.17.0): sizing/offload.py."""
    if inp.device == "cpu":
        return NO_OFFLOAD
    args = target.args
    chosen = offloading.backend(args)
    gib = args.get("cpu_offload_gb") or 0
    moves_budget = isinstance(gib, int | float) and gib > 0
    if chosen == "prefetch":
        version = mem.release(target.engine_version)
        scheme = linear_bytes(source.quant, 2, args.get("quantization"))[1]
        band = MXFP4_WEIGHTS_BAND if scheme == "mxfp4" else mem.WEIGHTS_BAND
        # A quantized MoE method may replace the expert parameters in process_weights_after_loading: MXFP4 on the
        # TRITON backends (gpt-oss on Hopper) deletes w13/w2_weight and re-stores the swizzled tensors as plain
        # attributes (0.32.0 fused_moe/oracle/mxfp4.py:1381-1386, quantization/mxfp4.py:361-372), made on the GPU,
        # which the PrefetchOffloader then prunes (prefetch.py:755-767) or cannot re-point: the experts stay.
        # No quantized method is shown to keep them as parameters, so every one is a bound.
        replaced = (f"vLLM's {scheme} MoE method may replace the routed experts' parameters after loading "
                    "(process_weights_after_loading; MXFP4 on the TRITON backends re-stores them on the GPU as "
                    "plain attributes, which the PrefetchOffloader does not move)"
                    if scheme != "none" and _moe_split(target, source, inp)[1] > 1 else "")
        offload = offloading.prefetch_offload(
            target, _layer_figures(target, source, inp, model_dtype),
            num_layers=int(source.text.get("num_hidden_layers") or 1), pp=inp.pp,
            release=version.release if version is not None else None, band=band, experts_replaced=replaced)
        if moves_budget:
            offload = replace(offload, note=f"{offload.note}; --cpu-offload-gb {gib:g} is ignored: vLLM builds one "
                              "offloader, the prefetch one when --offload-group-size is set (base.py create_offloader)")
        return offload
    grouped = offloading.int_arg(args, "offload_group_size", 0) > 0
    if chosen != "uva" or not moves_budget:
        return ignored("vLLM", "--offload-group-size is ignored under --offload-backend uva, and no --cpu-offload-gb "
                       "moves anything") if chosen == "uva" and grouped else NO_OFFLOAD
    figures = _layer_figures(target, source, inp, model_dtype)
    offload = budget_offload("vLLM", gib, max(figures.dense_bytes, figures.moe_bytes),
                             "model_executor/offloader/uva.py, models/utils.py")
    if grouped:
        offload = replace(offload, note=f"{offload.note}; --offload-group-size is ignored under --offload-backend uva")
    return offload


def _moe_split(target: RoleTarget, source: ModelSource, inp: _Inputs) -> tuple[MoeSplit | None, int]:
    """(how vLLM places the routed experts, their count), None for a dense model (sizing/moe.py)."""
    text = source.text
    experts = next((text[k] for k in ("n_routed_experts", "num_experts", "num_local_experts")
                    if isinstance(text.get(k), int) and not isinstance(text.get(k), bool) and text[k] > 0), 0)
    if experts <= 1:
        return None, 0
    version = mem.release(target.engine_version)
    return moe_split(target.args, target.env, version.release if version is not None else None, tp=inp.tp,
                     dp=inp.dp, architecture=source.architecture), experts


def _device_memory(target: RoleTarget, device: str, profiles: GpuProfiles | Mapping[str, GpuProfile] | Path | None,
                   ) -> tuple[GpuProfile | None, mem.DeviceTotal | None]:
    """The named GPU and its memory, where the pool is profiled from it or the GPU is named; (None, None) for a
    KV cache sized explicitly with no GPU named. A CPU role sizes its cache from what it states, or not at all."""
    args = target.args
    explicit_any = serving.explicit_kv_bytes(args, device, target.engine_version) is not None or (
        device == "cpu" and target.env.get("VLLM_CPU_KVCACHE_SPACE", "").strip())
    if explicit_any and not (target.gpu and device != "cpu"):
        return None, None
    if device == "cpu" and args.get("kv_cache_memory_bytes") is not None:  # a release that ignores it
        raise EstimateError(f"vLLM {target.engine_version}'s CPU backend ignores --kv-cache-memory-bytes (its "
                            "worker reads it from 0.20.0) and sizes the pool from VLLM_CPU_KVCACHE_SPACE, else "
                            "from its own default (4 GiB in 0.11.0, half a NUMA node's RAM in 0.14.0-0.19.0), "
                            "which the estimate does not assume",
                            hint="set VLLM_CPU_KVCACHE_SPACE (GiB) in the role's env")
    if device == "cpu":
        raise EstimateError("a vLLM CPU role without --kv-cache-memory-bytes or VLLM_CPU_KVCACHE_SPACE sizes "
                            "its pool from the host's free RAM, which the estimate cannot know",
                            hint="set VLLM_CPU_KVCACHE_SPACE (GiB) or --kv-cache-memory-bytes")
    gpu = _gpu(target, as_profiles(profiles))
    return gpu, mem.device_total(gpu.name, gpu.memory_total_mib, target.estimate.gpu_memory_mib)


def _stages(target: RoleTarget, text: Mapping[str, Any], pp: int) -> list[int] | None:
    """Each pipeline stage's layers as vLLM splits them (weights.stage_layer_counts); a VLLM_PP_LAYER_PARTITION vLLM
    refuses is exit 2 before anything is priced."""
    if layers := int(text.get("num_hidden_layers") or text.get("n_layers") or text.get("num_layers") or 0):
        return stage_layer_counts(layers, pp, target.env)
    return None


def estimate_role(
    target: RoleTarget,
    *,
    profiles: GpuProfiles | Mapping[str, GpuProfile] | Path | None = None,
    offline: bool | None = None,
) -> PoolEstimate:
    """The role's pool as vLLM would size it; EstimateError where the model cannot predict it."""
    version = mem.release(target.engine_version)
    if version is not None and version.release < mem.V1_FROM.release:
        raise EstimateError(f"vLLM {target.engine_version} sizes its pool with the V0 engine, which the vLLM "
                            "estimate model does not reproduce (V1, from 0.8.0, only)")
    args = target.args
    assumptions: list[str] = []
    source = load_model_source(model_config=target.model_config, model_path=target.model_path,
                               override_args=json_arg(args.get("hf_overrides"), "--hf-overrides"), offline=offline)
    text = source.text
    scope.check_speculative(args)
    offloading.check_config(target)
    device = _device(target)
    gpu, total = _device_memory(target, device, profiles)
    inp = _inputs(target, text, device, total.gib if total else None, gpu.name if gpu else "", version)
    stages = _stages(target, text, inp.pp)
    model_dtype = model_dtype_of(source.config, text, args.get("dtype"))
    kv_dtype = resolve_kv_dtype(args.get("kv_cache_dtype"), model_dtype, source.quant)
    if arg_flag(args, "enable_lora") and inp.explicit_kv_bytes is None:
        # the LoRA manager's slots (--max-loras x every target module at --max-lora-rank) are allocated with the
        # model, before vLLM profiles its memory: they come out of the KV cache
        raise EstimateError(
            "--enable-lora: vLLM allocates the adapters' slots with the model, before it profiles its memory, "
            "and the vLLM estimate model does not price them",
            hint="set --kv-cache-memory-bytes, or measure the role")
    connector = serving.kv_transfer_config(args) or {}
    if "lmcache" in str(connector.get("kv_connector") or "").lower() and inp.explicit_kv_bytes is None:
        raise EstimateError(
            f"the {connector.get('kv_connector')} KV connector allocates GPU buffers of its own before vLLM sizes "
            "its pool, which the vLLM estimate model does not price",
            hint="set --kv-cache-memory-bytes, or measure the role")
    heads = text.get("num_attention_heads")
    if isinstance(heads, int) and heads % inp.tp:
        raise EstimateError(f"vLLM refuses it: the model's {heads} attention heads are not divisible by "
                            f"--tensor-parallel-size {inp.tp}")
    layout = kv_layout(text, source.architecture, tp=inp.tp, pp=inp.pp, kv_dtype=kv_dtype,
                       block_size=_int_arg(args, "block_size"), device=device, model_dtype=model_dtype,
                       version=version, sm=gpu.sm if gpu else None, args=args, stages=stages)
    # after the layout, so a config it refuses keeps its specific reason; before any figure is made
    scope.check_architecture(source.architecture)
    if layout.mamba_layers:
        assumptions.append(
            f"hybrid model: {layout.full_layers} attention and {layout.mamba_layers} state layers; vLLM raises the "
            f"attention block to {layout.block_size} tokens so one attention page ({layout.page_bytes:,} B) holds "
            f"a state layer's {layout.mamba_state_bytes:,} B, pads the state page to it, and groups the layers "
            f"{layout.group_layers} a group ({layout.full_groups} attention + {layout.mamba_groups} state groups); "
            f"mamba_cache_mode {layout.mamba_cache_mode}: each request also holds "
            f"{layout.mamba_blocks_per_request} block(s) per state group")
    elif not args.get("block_size"):
        assumptions.append(f"block size {layout.block_size}: vLLM's default for this layout on {device}")

    parts: OrderedDict[str, Any] = OrderedDict()
    offload = _weight_offload(target, source, inp, model_dtype)
    if inp.explicit_kv_bytes is not None:
        avail = (inp.explicit_kv_bytes,) * 3
        parts["kv_cache_memory_bytes"] = inp.explicit_kv_bytes
        assumptions.append("KV memory set explicitly: vLLM skips its memory profile (gpu_memory_utilization is ignored)")
    else:
        assert total is not None
        avail = _profiled(target, source, inp, total, model_dtype, version, parts, assumptions, gpu, offload)
        if offload.active:  # net bytes off each GPU: (low end, figure, high end)
            parts["weights_off_gpu_bytes"] = [round(offload.low_bytes), round(offload.point_bytes),
                                              round(offload.high_bytes)]
    if gpu is None and device != "cpu" and not args.get("block_size"):
        # No GPU named and the KV memory given: the CUDA build (16-token blocks) and the CPU build (128) are
        # both possible, and vLLM 0.32.0's arguments cannot tell them apart. The point figure is the smaller
        # pool (the null block costs a CPU pool more), the range covers both.
        try:
            cpu_layout = kv_layout(text, source.architecture, tp=inp.tp, pp=inp.pp, kv_dtype=kv_dtype,
                                   block_size=None, device="cpu", model_dtype=model_dtype, version=version, args=args,
                                   stages=stages)
        except EstimateError as exc:  # a hybrid: the CPU build's layout is not priced, so neither build is certain
            raise EstimateError(f"no GPU named, so vLLM's CPU build is possible: {exc.message}",
                                hint="name the GPU (gpu: in the manifest) so the CUDA build's layout is priced") from exc
        both = [_finish(target, source, inp, each, avail, parts, list(assumptions), gpu, kv_dtype, model_dtype)
                for each in (layout, cpu_layout)]
        best = min(both, key=lambda est: est.pool_tokens)
        low = min(est.pool_range[0] for est in both)
        high = max(est.pool_range[1] for est in both)
        note = ("no GPU named: the CUDA build's 16-token blocks and the CPU build's 128 are both possible; the "
                f"smaller pool is the figure, the range covers both ({both[0].pool_tokens:,} / {both[1].pool_tokens:,})")
        details = dict(best.details)
        details["pool_range"] = [low, high]
        details["assumptions"] = [*best.assumptions, note]
        return replace(best, pool_range=(low, high), details=details, assumptions=(*best.assumptions, note))
    oom = _allocation_oom(target, source, inp, layout, total, gpu, model_dtype, avail[2], assumptions, offload)
    if oom is None and total is not None and gpu is not None and inp.explicit_kv_bytes is None \
            and inp.num_blocks_override is None:
        oom = _staging_oom(target, inp, total, gpu, offload)
    return _finish(target, source, inp, layout, avail, parts, assumptions, gpu, kv_dtype, model_dtype, oom=oom,
                   offload=offload)


@dataclass(frozen=True)
class _Oom:
    """A KV cache vLLM would allocate without sizing it to the memory, and cannot: a refused start (KV220)."""

    reason: str
    hint: str
    arg: str  # the args key the finding points at


def _allocation_oom(target: RoleTarget, source: ModelSource, inp: _Inputs, layout: KvLayout,
                    total: mem.DeviceTotal | None, gpu: GpuProfile | None, model_dtype: str, high: int,
                    assumptions: list[str], offload: WeightOffload) -> _Oom | None:
    """A cache vLLM allocates as it is told rather than as the memory allows, when the named GPU cannot hold
    it. --num-gpu-blocks-override replaces the blocks --kv-cache-memory-bytes would buy, so it is the one
    checked when both are set. One the GPU cannot hold with every weight on it, but may once --cpu-offload-gb
    moves some, is not called a refused start: the estimate cannot tell (EstimateError)."""
    if total is None or gpu is None or inp.device == "cpu" or (
            inp.num_blocks_override is None and inp.explicit_kv_bytes is None):
        return None

    def refused(moved: WeightOffload) -> _Oom | None:
        if inp.num_blocks_override is not None:
            return _override_oom(target, source, inp, layout, total, gpu, model_dtype, high, assumptions, moved)
        return _explicit_cache_oom(target, source, inp, total, gpu, model_dtype, assumptions, moved)

    if offload.priced:
        return refused(offload)
    oom = refused(NO_OFFLOAD)
    if oom is not None and offload.unpriced and refused(offload) is None:
        blocks = inp.num_blocks_override or layout.num_blocks(inp.explicit_kv_bytes or 0)
        offload.check_start(oom.reason, layout.usable_tokens(blocks))
    return oom


# The share of the memory outside --gpu-memory-utilization that uncounted staging copies may take before the
# estimate cannot tell whether vLLM starts: the rest is what vLLM takes there after its profile (CUDA graphs on
# releases that do not subtract them, the allocator's fragmentation), which the estimate does not price there.
STAGING_SHARE_OUTSIDE = 0.5


def _staging_oom(target: RoleTarget, inp: _Inputs, total: mem.DeviceTotal, gpu: GpuProfile,
                  offload: WeightOffload) -> _Oom | None:
    """Why a profiled pool cannot be allocated beside staging copies the profiler does not count (vLLM's
    PrefetchOffloader up to 0.26, sizing/offload.py), or None when it can.

    Up to 0.26 non_kv_cache_memory leaves the StaticBufferPool out (utils/mem_utils.py:279-312 and
    v1/worker/gpu_worker.py:486-523 in 0.25.0), so vLLM allocates the KV cache to the full --gpu-memory-utilization
    budget with the pool already on the GPU: the pool must fit in the memory outside the budget. A pool larger than
    all of it runs out of memory for certain (KV220); one larger than what is left of it at the other end of the
    device's band, or beside the CUDA graphs vLLM captures later, cannot be checked (EstimateError)."""
    fewest, most = offload.staging_outside_bytes
    if most <= 0:
        return None
    util = inp.utilization
    least_util, most_util = sorted((inp.utilization, inp.utilization_other))
    outside_most = ((total.gib + total.band_gib) - mem.ceil_requested(total.gib + total.band_gib, least_util)) * GIB
    outside_least = max(0.0, (total.gib - total.band_gib)
                        - mem.ceil_requested(total.gib - total.band_gib, most_util)) * GIB
    if fewest > outside_most:
        return _Oom(
            f"vLLM {target.engine_version}'s PrefetchOffloader keeps {fewest / GIB:,.2f} GiB of staging copies on "
            f"each GPU, which its memory profile does not count (up to 0.26): it sizes the KV cache to the whole "
            f"--gpu-memory-utilization {util:g} budget, and a {gpu.name} has only {outside_most / GIB:,.2f} GiB "
            "beyond it: the cache allocation runs out of GPU memory (torch.OutOfMemoryError) and vLLM does not "
            "start", "lower --offload-prefetch-step or --gpu-memory-utilization so the staging copies fit beside "
            "the budget, or use vLLM 0.27.0 or later, whose profiler counts them", "offload_prefetch_step")
    if most > outside_least * STAGING_SHARE_OUTSIDE:
        raise EstimateError(
            f"vLLM {target.engine_version}'s PrefetchOffloader keeps up to {most / GIB:,.2f} GiB of staging copies "
            "on each GPU beyond the --gpu-memory-utilization budget (its memory profile does not count them up to "
            f"0.26), next to the {outside_least / GIB:,.2f} GiB a {gpu.name} has outside it, which the CUDA graphs "
            "and other memory captured after the profile share: the estimate cannot tell whether vLLM starts",
            hint="measure the role, lower --offload-prefetch-step or --gpu-memory-utilization, or use vLLM 0.27.0 "
            "or later")
    return None


def _room_beside_weights(target: RoleTarget, source: ModelSource, inp: _Inputs, total: mem.DeviceTotal,
                         model_dtype: str, assumptions: list[str], what: str,
                         offload: WeightOffload) -> tuple[float, float]:
    """(the most bytes a cache can take beside the weights, the weights at the light end of their band, less
    the most --cpu-offload-gb may move), so a cache above it fails for certain; where the weights are not counted
    (a hybrid's, from config.json), the whole GPU."""
    try:
        weights, band, _ = _weights(target, source, inp, MODEL_DTYPE_BYTES.get(model_dtype, 2), [])
    except EstimateError:
        assumptions.append(f"the weights are not known (this hybrid's are not counted from config.json): "
                           f"{what} is checked against the whole GPU only")
        weights, band = 0.0, 0.0
    light = max(0.0, weights * (1 - band) - offload.high_bytes + offload.gpu_staging_bytes)
    return (total.gib + total.band_gib) * GIB - light, light


def _explicit_cache_oom(target: RoleTarget, source: ModelSource, inp: _Inputs, total: mem.DeviceTotal,
                        gpu: GpuProfile, model_dtype: str, assumptions: list[str], offload: WeightOffload) -> _Oom | None:
    """Why an explicit --kv-cache-memory-bytes cannot be allocated beside the weights, or None when it can.

    vLLM skips its memory profile and allocates the cache as given: a cache larger than the GPU's memory less
    the weights (at the light end of their band, so the verdict is certain) fails the start with a CUDA out
    of memory. Checked only where the GPU is named."""
    room = _room_beside_weights(target, source, inp, total, model_dtype, assumptions, "the explicit cache", offload)
    if inp.explicit_kv_bytes is None or inp.explicit_kv_bytes <= room[0]:
        return None
    return _Oom(
        f"--kv-cache-memory-bytes asks for {inp.explicit_kv_bytes / GIB:,.2f} GiB of KV cache, but a {gpu.name} "
        f"holds {total.gib:,.2f} GiB, of which the weights{_staged(offload)} take at least {room[1] / GIB:,.2f} GiB per GPU: the "
        "cache allocation runs out of GPU memory (torch.OutOfMemoryError) and vLLM does not start",
        "lower --kv-cache-memory-bytes below what the weights leave, or drop it and size the pool with "
        "--gpu-memory-utilization (vLLM then profiles)", "kv_cache_memory_bytes")


def _override_oom(target: RoleTarget, source: ModelSource, inp: _Inputs, layout: KvLayout, total: mem.DeviceTotal,
                  gpu: GpuProfile, model_dtype: str, high: int, assumptions: list[str],
                  offload: WeightOffload) -> _Oom | None:
    """Why --num-gpu-blocks-override cannot be allocated, or None when it can.

    vLLM (v1/core/kv_cache_utils.py, may_override_num_blocks and get_kv_cache_configs) replaces the blocks it
    profiled with the override and allocates override x bytes per block whatever the memory holds: more than
    the GPU has beside the weights (their light end, so the verdict is certain) is a CUDA out of memory at
    start, never a pool of that size."""
    n = inp.num_blocks_override
    if n is None:
        return None
    need = n * layout.bytes_per_block
    room = _room_beside_weights(target, source, inp, total, model_dtype, assumptions, "--num-gpu-blocks-override",
                                offload)
    if need <= room[0]:
        if need > high:
            assumptions.append(
                f"--num-gpu-blocks-override {n:,} takes {need / GIB:,.2f} GiB, more than the "
                f"{high / GIB:,.2f} GiB --gpu-memory-utilization leaves for KV at best: vLLM allocates it beyond "
                "its budget and might run out of memory capturing CUDA graphs; measure")
        return None
    return _Oom(
        f"--num-gpu-blocks-override {n:,} makes vLLM allocate {n:,} blocks of {layout.bytes_per_block:,} B "
        f"({need:,} B, {need / GIB:,.2f} GiB) of KV cache whatever the memory holds, but a {gpu.name} holds "
        f"{total.gib:,.2f} GiB, of which the weights take at least {room[1] / GIB:,.2f} GiB per GPU, leaving at "
        f"most {max(room[0], 0) / GIB:,.2f} GiB: the cache allocation runs out of GPU memory "
        "(torch.OutOfMemoryError) and vLLM does not start",
        f"lower --num-gpu-blocks-override to at most {max(int(room[0]), 0) // layout.bytes_per_block:,} blocks, or "
        "drop it and let vLLM size the pool from --gpu-memory-utilization", "num_gpu_blocks_override")


def _profiled(target: RoleTarget, source: ModelSource, inp: _Inputs, total: mem.DeviceTotal, model_dtype: str,
              version: Any, parts: dict[str, Any], assumptions: list[str],
              gpu: GpuProfile | None = None, offload: WeightOffload = NO_OFFLOAD) -> tuple[int, int, int]:
    """(central, low, high) available KV bytes of a profiled boot: requested less weights, non-torch memory,
    the activation peak and the CUDA-graph estimate, each at its band's end for the range; the high end with
    the weights --cpu-offload-gb may move off the GPU (the others with none moved)."""
    text, args = source.text, target.args
    model_bytes = MODEL_DTYPE_BYTES.get(model_dtype, 2)
    weights, w_band, weights_src = _weights(target, source, inp, model_bytes, assumptions)
    gpu_name = gpu.name if gpu else ""
    peer_c, peer_lo, peer_hi = mem.tp_non_torch_gib(version, gpu_name=gpu_name, tp=inp.tp, pp=inp.pp)
    compilation = json_arg(args.get("compilation_config"), "--compilation-config")
    raw_pass = compilation.get("pass_config")
    pass_config: Mapping[str, Any] = raw_pass if isinstance(raw_pass, dict) else {}
    compiled = (not inp.eager and compilation_settings.compiled(compilation)
                and pass_config.get("fuse_allreduce_rms", True) is not False)
    fusion, fusion_known = mem.fusion_workspace_bytes(
        version, gpu_name=gpu_name, sm=gpu.sm if gpu else None, tp=inp.tp, pp=inp.pp, dp=inp.dp, compiled=compiled,
        hidden=mem._i(text, "hidden_size", "n_embd", default=4096),
        dtype_bytes=model_bytes, batched_tokens=inp.batched_tokens)
    fusion_low = fusion if fusion_known else 0  # an unstated release may predate the fusion (0.17.0)
    non_torch = (mem.NON_TORCH_GIB + peer_c) * GIB + fusion
    non_torch_ends = ((mem.NON_TORCH_GIB + mem.NON_TORCH_BAND_GIB + peer_hi) * GIB + fusion,   # end -1
                      max(0.0, (mem.NON_TORCH_GIB - mem.NON_TORCH_BAND_GIB + peer_lo) * GIB) + fusion_low)  # +1
    peak = mem.activation_peak(text, tp=inp.tp, batched_tokens=inp.batched_tokens, max_num_seqs=inp.max_num_seqs,
                               version=version, env=target.env, gpu_name=gpu_name)
    moe = any(isinstance(text.get(k), int) and text[k] > 1 for k in ("n_routed_experts", "num_experts", "num_local_experts"))
    band = mem.ACTIVATION_BAND_MOE if moe else mem.ACTIVATION_BAND
    cg_on, cg_other = mem.cudagraph_subtracted(version, target.env, inp.eager)
    graph = mem.cudagraph_bytes(inp.max_num_seqs, compilation)
    if compilation_settings.graphs_off(compilation):
        cg_on = cg_other = False
    v2_zero = cg_on and mem.v2_runner_skips_graph_estimate(version, text, target.env)
    if v2_zero:
        assumptions.append("vLLM's V2 model runner, this release's default for a dense model, subtracts no CUDA-graph "
                           "estimate (profile_cudagraph_memory returns 0 up to 0.28); a feature it does not support "
                           "falls back to V1, which does: the pool's low end keeps the estimate")

    runner = mem.runner_buffer_bytes(batched_tokens=inp.batched_tokens, hidden=mem._i(text, "hidden_size", "n_embd",
                                     default=4096), dtype_bytes=model_bytes, max_num_seqs=inp.max_num_seqs,
                                     max_model_len=inp.max_model_len)
    consumed = mem.total_consumed_extra_bytes(version, weights, runner)
    if consumed[2]:
        assumptions.append(
            "from vLLM 0.27.0 the profiler counts every byte of free memory lost since its first snapshot: the "
            f"runner's buffers ({consumed[0] / GIB:.2f} GiB, counted) and the allocator's fragmentation after the "
            f"profile run, which the deployment does not say which size: the range allows up to "
            f"{(consumed[2] - consumed[0]) / GIB:.2f} GiB for it")
    def available(end: int) -> int:
        """end 0 central, -1 low (everything at its largest), +1 high."""
        util = inp.utilization if end >= 0 else min(inp.utilization, inp.utilization_other)
        if end > 0:
            util = max(inp.utilization, inp.utilization_other)
        tot = total.gib + end * total.band_gib
        requested = mem.ceil_requested(tot, util) * GIB
        w = weights * (1 - end * w_band)
        w -= offload.moved(end, w)
        nt = non_torch if end == 0 else non_torch_ends[0] if end < 0 else non_torch_ends[1]
        nt += consumed[0] if end == 0 else consumed[2] if end < 0 else consumed[1]
        a = peak.at(end, band)
        g = mem.graph_bytes_at(end, graph, on=cg_on, other=cg_other, v2_zero=v2_zero)
        return int(requested - w - max(nt, 0.0) - a - g)

    avail = (available(0), available(-1), available(1))
    parts.update(
        device_total_gib=round(total.gib, 3), device_total_source=total.source,
        gpu_memory_utilization=inp.utilization, gpu_memory_utilization_defaulted=inp.utilization_defaulted,
        requested_gib=round(mem.ceil_requested(total.gib, inp.utilization), 3),
        weights_gib_per_gpu=round(weights / GIB, 3), weights_source=weights_src,
        non_torch_gib=round(non_torch / GIB, 3), total_consumed_extra_gib=round(consumed[0] / GIB, 3),
        flashinfer_allreduce_workspace_gib=round(fusion / GIB, 3),
        activation_peak_gib=round(peak.at(0, band) / GIB, 3),
        cudagraph_estimate_gib=round(graph / GIB, 3) if cg_on and not v2_zero else 0.0,
        cudagraph_subtracted=cg_on,
    )
    assumptions.append(f"device memory: {total.source}")
    assumptions.extend(offload.notes())
    assumptions.append(
        f"activation peak of the profiling run ({inp.batched_tokens} batched tokens, {inp.max_num_seqs} sequences) "
        f"is a model: the forward pass {band[0]}x-{band[1]}x{' beside the fused-MoE buffers' if peak.moe_workspace else ''}, the "
        f"sampler {peak.sampler_bytes[1]:g}-{peak.sampler_bytes[2]:g} B per logit by release; non-torch memory "
        f"+-{mem.NON_TORCH_BAND_GIB} GiB")
    if peak.note:
        assumptions.append(peak.note)
    if peer_hi != peer_lo:
        assumptions.append(
            f"tensor parallelism on NVSwitch GPUs: NCCL's lazily connected buffers {peer_lo:g}-{peer_hi:g} GiB "
            f"({peer_c:g} GiB the figure, fitted on one vLLM 0.19.0 source; NCCL's own, not knowable from vLLM)")
    if fusion:
        assumptions.append(
            f"FlashInfer all-reduce fusion workspace {fusion / GIB:.2f} GiB per GPU (default from vLLM 0.17.0 at TP "
            f"2-8 on SM 9.0/10.x; buffers rounded to a {mem.MULTICAST_GRANULARITY_MIB} MiB granularity, fitted)"
            + ("" if fusion_known else "; the release is not stated, so the range also covers a release without it"))
    if inp.utilization != inp.utilization_other:
        assumptions.append(f"--gpu-memory-utilization unset and this release's default not read: "
                           f"{inp.utilization:g} is the figure, {inp.utilization_other:g} is in the range")
    if cg_on != cg_other:
        assumptions.append("release not stated: the range covers vLLM with and without the CUDA-graph estimate "
                           "subtracted (default from 0.21.0)")
    elif cg_on:
        assumptions.append(f"CUDA-graph memory estimate subtracted ({mem.CUDAGRAPH_BAND[0]}x-"
                           f"{mem.CUDAGRAPH_BAND[1]}x in the range)")
    return avail


def _pool(layout: KvLayout, available_bytes: int, inp: _Inputs) -> int:
    return layout.usable_tokens(layout.num_blocks(available_bytes), inp.batched_tokens)


def _planned(avail: tuple[int, int, int], layout: KvLayout, inp: _Inputs, oom: _Oom | None) -> tuple[int, int, int]:
    """The KV bytes vLLM plans the pool with: none for a start that fails allocating it; override x bytes per
    block under --num-gpu-blocks-override (get_kv_cache_configs plans the pool, the one-request check and
    --max-model-len auto against it, not against the profiled memory); else the memory available."""
    if oom is not None:
        return 0, 0, 0
    if inp.num_blocks_override is not None:
        planned = inp.num_blocks_override * layout.bytes_per_block
        return planned, planned, planned
    return avail


def _might_refuse(target: RoleTarget, inp: _Inputs, pool: int, low: int, high: int) -> list[Finding]:
    """KV105 when the low end of the range cannot hold one request of max_model_len, which vLLM needs to start;
    none when the window itself lies inside the range (the estimate backend's own KV105 says it then)."""
    if low < target.required_tokens <= high:
        return []
    return [finding(
        "KV105", target.name,
        f"vLLM might refuse to start: its max_model_len ({inp.max_model_len:,} tokens) lies inside the "
        f"estimate's range {low:,}-{high:,} (predicted {pool:,}), and vLLM starts only when one request "
        "of it fits; measure",
        hint="run kvcheck verify without --mode estimate on the role's GPUs, or set --max-model-len to "
        "the advertised window",
        location=target.arg_location("max_model_len", "gpu_memory_utilization"),
    )]


def _offload_findings(target: RoleTarget, inp: _Inputs, layout: KvLayout, offload: WeightOffload, refusal: str | None,
                      high_b: int, pool: int, high: int) -> list[Finding]:
    """KV113 for a profiled pool whose weights --cpu-offload-gb may move; a start refused for memory that the moved
    weights may let through is not called refused (EstimateError). A pool fixed by --kv-cache-memory-bytes or
    --num-gpu-blocks-override does not move with the weights."""
    if inp.explicit_kv_bytes is not None or inp.num_blocks_override is not None:
        return []
    one = layout.max_memory_usage(inp.max_model_len, inp.batched_tokens)
    starts = high_b > 0 and (inp.max_model_len_auto or one <= high_b - layout.bytes_per_block)
    offload.check_start(refusal if inp.length_refusal is None else None, high if starts else 0)
    return offload.findings(target, pool, high)


def _finish(target: RoleTarget, source: ModelSource, inp: _Inputs, layout: KvLayout, avail: tuple[int, int, int],
            parts: Mapping[str, Any], assumptions: list[str], gpu: GpuProfile | None, kv_dtype: str,
            model_dtype: str, oom: _Oom | None = None, offload: WeightOffload = NO_OFFLOAD) -> PoolEstimate:
    central, low_b, high_b = _planned(avail, layout, inp, oom)
    pool = _pool(layout, central, inp)
    low, high = _pool(layout, low_b, inp), _pool(layout, high_b, inp)
    low, high = min(low, pool), max(high, pool)
    findings = []
    context = inp.max_model_len
    refusal: str | None = None
    upper = max(inp.derived_len, inp.max_model_len, layout.usable_tokens(layout.num_blocks(max(central, 0))) + layout.block_size)
    largest = layout.largest_model_len(central, inp.batched_tokens, upper)
    # A refused start serves no pool; its context length stays the --max-model-len it was given (the model's
    # own when unset): a refusal is KV220's to report, never an engine context of 0 (KV102 reads context_len).
    if inp.length_refusal is not None:
        refusal = inp.length_refusal  # vLLM's config check, before any memory is sized
    elif oom is not None:
        refusal = oom.reason
        pool = 0
    elif central <= 0:
        refusal = "No available memory for the cache blocks"
        pool = 0
    elif inp.max_model_len_auto:
        context = min(inp.max_model_len, largest)  # --max-model-len auto fits the window to the pool
        assumptions.append(f"--max-model-len auto: vLLM fits the window to the pool ({context:,} tokens)")
    elif layout.max_memory_usage(inp.max_model_len, inp.batched_tokens) > central - layout.bytes_per_block:
        refusal = (f"To serve at least one request with the model's max seq len ({inp.max_model_len}) ... "
                   f"the estimated maximum model length is {largest}")
    findings.extend(_offload_findings(target, inp, layout, offload, refusal if oom is None else None, high_b,
                                      pool, high))
    might_refuse = refusal is None and low_b > 0 and not inp.max_model_len_auto and (
        layout.max_memory_usage(inp.max_model_len, inp.batched_tokens) > low_b - layout.bytes_per_block)
    if might_refuse:
        assumptions.append("at the low end of the estimate's range one request of max_model_len does not fit: "
                           "vLLM might refuse to start; measure")
        findings.extend(_might_refuse(target, inp, pool, low, high))
    if refusal is not None:
        findings.append(finding(
            "KV220", target.name,
            f"vLLM would refuse to start (predicted): {refusal}",
            hint=f"set --max-model-len to at most {inp.derived_len:,} (the model's own length), or set "
            "VLLM_ALLOW_LONG_MAX_MODEL_LEN=1 in the role's env where the model is known to serve longer"
            if inp.length_refusal is not None else
            oom.hint if oom is not None else
            f"set --max-model-len to at most {largest:,}, or give the KV cache more memory" if largest else
            "give the KV cache more memory (--gpu-memory-utilization, fewer weights per GPU, a larger TP)",
            location=target.arg_location("max_model_len") if inp.length_refusal is not None else
            target.arg_location(oom.arg) if oom is not None else
            target.arg_location("max_model_len", "gpu_memory_utilization"),
        ))
        assumptions.append(f"vLLM would refuse to start: {refusal}")
    max_input = max(0, serving.max_input_len(context, pool)) if context else 0
    details: OrderedDict[str, Any] = OrderedDict()
    declared = mem.release(target.engine_version)
    stand_in = declared is not None and declared.release > mem.NEWEST_READ.release
    if stand_in:
        assumptions.append(f"vLLM {target.engine_version} is newer than {mem.NEWEST_READ}, the newest release whose "
                           f"sizing kvcheck has read; sized with {mem.NEWEST_READ}'s rules")
    details["engine"] = (f"vllm {target.engine_version or 'newest (0.32.0)'}"
                         f"{f' (sized with {mem.NEWEST_READ} rules)' if stand_in else ''} sizing model")
    details["gpu"] = gpu.name if gpu else None
    details.update(parts)
    details["available_kv_gib"] = round(central / GIB, 3)
    details["available_kv_gib_range"] = [round(low_b / GIB, 3), round(high_b / GIB, 3)]
    details["block_size"] = layout.block_size
    details["bytes_per_block"] = layout.bytes_per_block
    details["num_gpu_blocks"] = layout.num_blocks(central)
    if inp.num_blocks_override is not None:
        details["num_gpu_blocks_override"] = inp.num_blocks_override
    details["kv_bytes_per_token"] = round(layout.bytes_per_token, 2)
    details["kv_cell_parts"] = dict(layout.parts)
    details["kv_dtype"] = kv_dtype
    details["model_dtype"] = model_dtype
    details["architecture"] = source.architecture
    details["architecture_kind"] = layout.kind
    details["parallel"] = {"tp": inp.tp, "pp": inp.pp, "dp": inp.dp}
    details["max_num_batched_tokens"] = inp.batched_tokens
    details["max_num_seqs"] = inp.max_num_seqs
    details["max_model_len"] = context
    details["largest_max_model_len"] = largest
    details["derived_max_model_len"] = inp.derived_len
    details["vllm_would_refuse"] = refusal is not None
    details["vllm_refuses_length"] = inp.length_refusal is not None  # the length, before any memory is sized
    details["vllm_might_refuse"] = refusal is not None or might_refuse or low_b <= 0
    if inp.dp > 1:
        details["data_parallel_pools"] = f"{inp.dp} engines, each its own pool of this size"
    details["pool_range"] = [low, high]
    details["model_config"] = source.origin
    details["assumptions"] = assumptions
    concurrency = pool / context if context else 0.0
    if layout.mamba_layers:
        # a hybrid's requests each hold blocks in every group: vLLM's own figures ("GPU KV cache size",
        # "Maximum concurrency"), from the blocks and the groups, by release
        blocks = details["num_gpu_blocks"]
        release = mem.release(target.engine_version)
        concurrency = layout.max_concurrency(blocks, context, inp.batched_tokens) if context else 0.0
        details["kv_cache_groups"] = {"attention": layout.full_groups, "state": layout.mamba_groups,
                                      "layers_per_group": layout.group_layers}
        details["mamba_cache_mode"] = layout.mamba_cache_mode
        details["vllm_reported_kv_cache_tokens"] = (
            layout.reported_tokens(blocks, context, inp.batched_tokens, release) if context else 0)
    details["max_concurrency_at_window"] = round(concurrency, 2)
    return PoolEstimate(
        role=target.name, pool_tokens=pool, pool_range=(low, high), context_len=context,
        max_input_tokens=max_input, max_running_requests=inp.max_num_seqs,
        kv_bytes_per_token=layout.bytes_per_token, mem_fraction_static=inp.utilization,
        mem_fraction_reserved_mib=None, kv_dtype=kv_dtype, page_size=layout.block_size,
        tp_size=inp.tp, pp_size=inp.pp, attn_dp_size=inp.dp, ep_size=1,
        details=details, assumptions=tuple(assumptions), findings=tuple(findings),
    )



def _staged(offload: WeightOffload) -> str:
    """How the room checks name the staging copies they count with the weights."""
    return " and the offload's staging copies" if offload.gpu_staging_bytes else ""
