"""Bytes per parameter of each weight, from the checkpoint's quantization config (or none)."""

from __future__ import annotations

import fnmatch
import functools
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kvcheck.errors import EstimateError

# Storage bytes per parameter, scales included (what SGLang keeps resident after loading).
FMT_BYTES = {
    "bf16": 2.0,
    "fp16": 2.0,
    "fp32": 4.0,
    "fp8": 1.0,  # per-tensor / per-channel scales: negligible
    "fp8_block": 1.0 + 4.0 / (128 * 128),  # fp32 scale per 128x128 block
    "nvfp4": 0.5 + 1.0 / 16,  # packed e2m1 + fp8 scale per 16
    "mxfp4": 0.5 + 1.0 / 32,  # packed e2m1 + e8m0 scale per 32
    "int8": 1.0,
}

# The part of FMT_BYTES each weight's separate scale tensor(s) take (the rest is the packed weight tensor): the
# caching allocator rounds each tensor on its own (sizing/allocator.py)
FMT_SCALES: dict[str, tuple[float, ...]] = {
    "fp8_block": (4.0 / (128 * 128),),
    "nvfp4": (1.0 / 16,),
    "mxfp4": (1.0 / 32,),
}


def tensor_bytes(fmt: str) -> tuple[float, ...]:
    """Bytes per weight of the packed weight tensor, then of each scale tensor beside it, in format `fmt`."""
    scales = FMT_SCALES.get(fmt, ())
    return (FMT_BYTES[fmt] - sum(scales), *scales)

_PREFIX_REWRITES = (
    ("model.language_model.", "model."),
    ("language_model.model.", "model."),
    ("language_model.", ""),
    ("backbone.", "model."),
)


# MoE module spellings of some checkpoints (MiniMax's block_sparse_moe with w1/w2/w3 experts)
_MOE_REWRITES = ((".block_sparse_moe.", ".mlp."),)
_EXPERT_MATS = {"w1": "gate_proj", "w2": "down_proj", "w3": "up_proj"}


def canonical(name: str) -> str:
    """Module names as the estimate spells them (`model.layers.N...`, `lm_head`)."""
    for old, new in _PREFIX_REWRITES:
        if name.startswith(old):
            name = new + name[len(old) :]
            break
    for old, new in _MOE_REWRITES:
        name = name.replace(old, new)
    head, _, last = name.rpartition(".")
    if last in _EXPERT_MATS and ".experts." in name:
        name = f"{head}.{_EXPERT_MATS[last]}"
    return name


def int_fmt(bits: int, group: int, symmetric: bool) -> str:
    name = f"int{bits}_g{group}_{'sym' if symmetric else 'asym'}"
    if name not in FMT_BYTES:
        per_group = 2.0 + (0 if symmetric else bits / 8)  # fp16 scale (+ packed zero point)
        FMT_BYTES[name] = bits / 8 + per_group / max(1, group)
        # fp16 scales, and the packed zero points of an asymmetric format
        FMT_SCALES[name] = (2.0 / max(1, group),) + (() if symmetric else (bits / 8 / max(1, group),))
    return name


@functools.lru_cache(maxsize=64)
def _compile(patterns: tuple[str, ...]) -> re.Pattern[str] | None:
    parts = []
    for pattern in patterns:
        if pattern.startswith("re:"):
            parts.append(f"(?:{pattern[3:]})")
            continue
        pat = canonical(pattern)
        # fnmatch.translate gives "(?s:...)\\Z"; keep the group, match the module or its children
        parts.append(fnmatch.translate(pat)[:-2])
        parts.append(fnmatch.translate(pat + ".*")[:-2])
    if not parts:
        return None
    return re.compile("(?:" + "|".join(parts) + r")\Z")


@dataclass(frozen=True)
class QuantScheme:
    """Maps a canonical module name to a storage format."""

    method: str  # "none", "fp8", "modelopt", "compressed-tensors", "mxfp4", "awq", "gptq", ...
    default_fmt: str  # format of quantized linear layers
    unquantized_fmt: str  # model dtype (bf16 / fp16)
    ignore: tuple[str, ...] = ()
    per_module: tuple[tuple[str, str], ...] = ()  # MIXED_PRECISION: canonical prefix -> format
    targets_experts_only: bool = False
    kv_cache_fp8: bool = False  # checkpoint says kv_cache_quant_algo FP8
    lm_head_quantized: bool = False

    @property
    def quantized(self) -> bool:
        return self.method != "none"

    def fmt(self, name: str) -> str:
        """Storage format of the linear module `name` (canonical spelling)."""
        if not self.quantized:
            return self.unquantized_fmt
        if name == "lm_head" and not self.lm_head_quantized and not self.per_module:
            return self.unquantized_fmt
        if self.per_module:
            return self._mixed(name)
        regex = _compile(self.ignore)
        if regex is not None and regex.match(name):
            return self.unquantized_fmt
        if self.targets_experts_only and ".experts." not in name:
            return self.unquantized_fmt
        return self.default_fmt

    def _mixed(self, name: str) -> str:
        table = dict(self.per_module)
        probe = name
        while probe:
            if probe in table:
                return table[probe]
            probe = probe.rpartition(".")[0]
        return self.unquantized_fmt

    def bytes_per_param(self, name: str) -> float:
        return FMT_BYTES[self.fmt(name)]


def _algo_fmt(algo: str, *, group: int | None, block: Any = None) -> str | None:
    algo = algo.upper()
    if algo in ("FP8", "FP8_PER_CHANNEL_PER_TOKEN", "FP8_PB_WO", "W8A8_FP8"):
        return "fp8_block" if block else "fp8"
    if algo in ("NVFP4", "W4A16_NVFP4", "NVFP4_AWQ", "W4A8_NVFP4_FP8"):
        return "nvfp4"
    if algo in ("MXFP4", "W4A16_MXFP4"):
        return "mxfp4"
    if algo in ("MXFP8",):
        return "fp8"
    if algo in ("W4A8_AWQ", "W4A16_AWQ", "INT4_AWQ"):
        return int_fmt(4, group or 128, True)
    if algo in ("INT8_SQ", "W8A8_INT8"):
        return "int8"
    return None


def quant_scheme(quant: Mapping[str, Any] | None, *, model_dtype: str, quantization_arg: str | None) -> QuantScheme:
    """Read the checkpoint's quantization (or `--quantization` for online methods)."""
    unq = "fp16" if model_dtype == "float16" else "bf16"
    if not quant:
        return _online_scheme(quantization_arg, unq)
    method = str(quant.get("quant_method") or "").lower()
    kv_fp8 = str(quant.get("kv_cache_quant_algo") or "").upper() == "FP8"
    ignore = tuple(
        str(p)
        for key in ("ignore", "ignored_layers", "modules_to_not_convert", "exclude_modules")
        for p in (quant.get(key) or ())
    )
    if method == "fp8" or method == "fbgemm_fp8":
        block = quant.get("weight_block_size")
        return QuantScheme("fp8", "fp8_block" if block else "fp8", unq, ignore=ignore, kv_cache_fp8=kv_fp8)
    if method in ("modelopt", "modelopt_fp8", "modelopt_fp4", "modelopt_mixed"):
        return _modelopt_scheme(quant, unq, ignore, kv_fp8)
    if method == "compressed-tensors":
        return _compressed_tensors_scheme(quant, unq, ignore, kv_fp8)
    if method == "mxfp4":
        return QuantScheme("mxfp4", "mxfp4", unq, ignore=ignore)
    if method in ("awq", "awq_marlin", "gptq", "gptq_marlin"):
        bits = int(quant.get("bits") or quant.get("w_bit") or 4)
        group = int(quant.get("group_size") or quant.get("q_group_size") or 128)
        symmetric = bool(quant.get("sym", method.startswith("gptq")))
        return QuantScheme(method, int_fmt(bits, group if group > 0 else 1 << 30, symmetric), unq, ignore=ignore)
    raise EstimateError(
        f"quantization method {method or '<unnamed>'!r} is not understood by the estimate model",
        hint="set estimate.weights_gib_per_gpu in the manifest (the 'mem usage' of a 'Load weight end' line)",
    )


def _online_scheme(quantization_arg: str | None, unq: str) -> QuantScheme:
    """An unquantized checkpoint, possibly quantized online by `--quantization`."""
    if quantization_arg in (None, "", "unquant"):
        return QuantScheme("none", unq, unq)
    if quantization_arg in ("fp8", "w8a8_fp8", "modelopt_fp8"):
        # online FP8: linear layers in decoder blocks, per-channel scales
        return QuantScheme("fp8-online", "fp8", unq, ignore=("lm_head", "model.embed_tokens"))
    raise EstimateError(
        f"--quantization {quantization_arg} on an unquantized checkpoint is not understood by the estimate model",
        hint="set estimate.weights_gib_per_gpu in the manifest (the 'mem usage' of a 'Load weight end' line)",
    )


def _modelopt_scheme(quant: Mapping[str, Any], unq: str, ignore: tuple[str, ...], kv_fp8: bool) -> QuantScheme:
    """NVIDIA ModelOpt: one quant_algo, or MIXED_PRECISION with a format per quantized layer."""
    algo = str(quant.get("quant_algo") or "").upper()
    group = quant.get("group_size")
    if algo == "MIXED_PRECISION":
        table = []
        for name, spec in (quant.get("quantized_layers") or {}).items():
            spec_algo = str((spec or {}).get("quant_algo") or "")
            fmt = _algo_fmt(spec_algo, group=(spec or {}).get("group_size"))
            if fmt is None:
                raise EstimateError(f"modelopt quant_algo {spec_algo!r} is not understood by the estimate model")
            table.append((canonical(name), fmt))
        return QuantScheme("modelopt", "nvfp4", unq, ignore=ignore, per_module=tuple(table), kv_cache_fp8=kv_fp8)
    fmt = _algo_fmt(algo, group=group)
    if fmt is None:
        raise EstimateError(f"modelopt quant_algo {algo!r} is not understood by the estimate model")
    return QuantScheme("modelopt", fmt, unq, ignore=ignore, kv_cache_fp8=kv_fp8)


def _compressed_tensors_scheme(
    quant: Mapping[str, Any], unq: str, ignore: tuple[str, ...], kv_fp8: bool
) -> QuantScheme:
    """compressed-tensors: one weight format over its config groups (several are not understood)."""
    groups = quant.get("config_groups") or {}
    fmts = set()
    experts_only = False
    for group in groups.values():
        weights = (group or {}).get("weights") or {}
        bits = int(weights.get("num_bits") or 8)
        wtype = str(weights.get("type") or "int")
        gsize = weights.get("group_size")
        if wtype == "float" and bits == 4:
            fmts.add("nvfp4" if (gsize or 16) == 16 else "mxfp4")
        elif wtype == "float" and bits == 8:
            fmts.add("fp8_block" if weights.get("strategy") == "block" else "fp8")
        elif wtype == "int":
            fmts.add("int8" if bits == 8 else int_fmt(bits, int(gsize or 128), bool(weights.get("symmetric", True))))
        targets = [str(t) for t in (group or {}).get("targets") or ()]
        if targets and all("expert" in t for t in targets):
            experts_only = True
    if len(fmts) != 1:
        raise EstimateError(
            f"compressed-tensors config with weight formats {sorted(fmts) or 'none'} is not understood "
            "by the estimate model",
            hint="set estimate.weights_gib_per_gpu in the manifest",
        )
    kv_scheme = quant.get("kv_cache_scheme") or {}
    kv_fp8 = kv_fp8 or (kv_scheme.get("type") == "float" and int(kv_scheme.get("num_bits") or 0) == 8)
    return QuantScheme(
        "compressed-tensors", fmts.pop(), unq, ignore=ignore, targets_experts_only=experts_only, kv_cache_fp8=kv_fp8
    )
