"""Kimi-K3's MXFP4 experts: which path SGLang's Mxfp4MoEMethod takes for a release, device and runner, and what
that path holds on the device once the model is loaded (weights.Mxfp4ExpertLayout).

KimiK3MoE hands its compressed-tensors MXFP4 experts to Mxfp4MoEMethod (models/kimi_k3.py, `Mxfp4Config(
is_checkpoint_mxfp4_serialized=True)`, 0.5.17 to 0.5.23; a Kimi-K3 run labelled older is a K3 branch carrying
0.5.17's code). Its process_weights_after_loading (layers/quantization/mxfp4.py) takes the first of:

- marlin (not under the megamoe all-to-all): create_weights pads each rank's intermediate to 128 and the hidden
  size to 256; prepare_moe_mxfp4_layer_for_marlin repacks the weights (4 bits each), re-makes the scales as
  one-byte E8M0 and the zero biases as new bf16 tensors. SM90, SM100 and SM120 only ("MXFP4 Marlin requires SM90+.").
- deep_gemm, or the megamoe all-to-all whatever the runner (0.5.18 on; in 0.5.17 only under the deep_gemm runner):
  no padding; the scales become packed UE8M0 int32 (DeepGEMM transform_sf_into_required_layout: the K/32 scale
  columns padded to a multiple of 4); megamoe re-points the weights at DeepGEMM's own layout of them; the zero
  biases live on as made.
- flashinfer_mxfp4: FusedMoE pads the hidden size to 256. SM90: FlashInfer's CUTLASS kernels, the intermediate
  padded to 128 after loading (_process_weights_for_sm90_cutlass), biases re-made padded in bf16, three float32
  per-expert SwiGLU vectors; SM120 the same with four (_process_weights_for_sm120_cutlass); SM100 (trtllm-gen):
  the intermediate padded to 128 in create_weights, the biases re-made in float32, three per-expert vectors.
  On any other device Mxfp4MoEMethod stops ("requires SM90, SM100, or SM120").
- aiter (ROCm with SGLANG_USE_AITER): no biases, each rank's intermediate padded to 128 under
  SGLANG_AITER_K3_OPT (else 256), the hidden size to 256, and aiter's shuffle_scale (aiter/ops/shuffle.py) pads
  the scales' K/32 columns to a multiple of 8.
- triton_kernel: triton_kernels' swizzled layouts, the intermediate padded to 64, biases re-made in float32.
- otherwise (the `auto` runner left unresolved, another runner, ROCm without aiter): `upcast_from_mxfp(...,
  torch.bfloat16)` from triton_kernels materialises the experts in bf16 (their scales freed, the biases left as
  made): about 3.8 times the MXFP4 bytes.

`auto` becomes flashinfer_mxfp4 for Kimi-K3 on SM100/SM103 from 0.5.17 (arg_groups/overrides.py
`_kimi_k3_moe_runner_overrides`; 0.5.17 also requires the SiTU cubin pool) and SM107 from 0.5.19
(arg_groups/model_overrides/kimi_k3.py), nowhere else: SGLang's own resolution leaves it `auto` on H100/H200.
SGLang keys that override on `hf_config.architectures[0]` and registers it for KimiK3ForConditionalGeneration
only (0.5.17 overrides.py:507, 0.5.19 to 0.5.23 model_overrides/kimi_k3.py:172): KimiK3LinearForCausalLM (an
EntryClass of the same models/kimi_k3.py from 0.5.19) keeps `auto` on every GPU, and no SiTU refusal applies to it.
Off ROCm create_weights makes zero bf16 w13/w2 biases (`create_bias = with_bias or not _is_hip`).

The last two paths import triton_kernels, which no release from 0.5.17 to 0.5.23 depends on (their wheels'
Requires-Dist): as the release installs, the load stops with ModuleNotFoundError. That is the path priced as the
role's outcome (a refused start); the bf16 (or swizzled) bytes the path holds where the package is installed are
priced too, for the range and the message.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from packaging.version import Version

from kvcheck.engines.sglang.sizing import releases as rel
from kvcheck.engines.sglang.sizing.weights import Mxfp4ExpertLayout
from kvcheck.gpus import GpuProfile

K3_FIRST_RELEASE = "0.5.17"  # models/kimi_k3.py; a K3 run labelled older is a K3 branch carrying this code
# The architectures SGLang registers `_kimi_k3_overrides` (attention backend) and `_kimi_k3_moe_runner_overrides`
# (`auto` runner, 0.5.17's SiTU refusal) for, 0.5.17 to 0.5.23 (`_register_for`, keyed on architectures[0])
K3_OVERRIDE_ARCHS = frozenset({"KimiK3ForConditionalGeneration"})


@dataclass(frozen=True)
class ExpertPath:
    """The path Mxfp4MoEMethod takes (`name`), its layout, the estimate's note, and why SGLang would not load
    the role that way (`refusal`, with the fix in `hint`; None: it loads)."""

    name: str
    layout: Mxfp4ExpertLayout
    note: str
    refusal: str | None = None
    hint: str | None = None
    unchecked: str | None = None  # why the estimate cannot tell whether the path loads (KV305)


def _get_bool_env_var(value: object) -> bool:
    """SGLang's get_bool_env_var (utils/common.py), which mxfp4.py reads its variables with: on for 'true' and '1'
    only (not EnvBool's 'yes')."""
    return value is not None and str(value).lower() in ("true", "1")


def k3_rules(version: str | None) -> rel.SizingRules:
    """The release rules for Kimi-K3 code: a K3 run labelled older than the first release with the model is a K3
    branch that carries it (the MI355X sweep's 0.5.15.post1.dev reads SGLANG_AITER_K3_OPT, only that code does)."""
    rules = rel.rules_for(version)
    return rel.rules_for(K3_FIRST_RELEASE) if rules.release < Version(K3_FIRST_RELEASE) else rules


def _auto_runner(gpu: GpuProfile, rules: rel.SizingRules, arch: str) -> str:
    """What Kimi-K3's `auto` MoE runner resolves to (_kimi_k3_moe_runner_overrides, for K3_OVERRIDE_ARCHS only)."""
    if arch not in K3_OVERRIDE_ARCHS:
        return "auto"
    if gpu.sm in (100, 103) and rules.has(rel.K3_AUTO_FLASHINFER_MXFP4):
        return "flashinfer_mxfp4"
    if gpu.sm == 107 and rules.has(rel.K3_AUTO_FLASHINFER_SM107):
        return "flashinfer_mxfp4"
    return "auto"


def kimi_k3_expert_path(
    env: Mapping[str, str], version: str | None, args: Mapping[str, Any], gpu: GpuProfile, a2a: str,
    arch: str = "KimiK3ForConditionalGeneration",
) -> ExpertPath:
    """The path Kimi-K3's MXFP4 experts take on `gpu` under the role's runner, all-to-all backend and env, for
    architecture `arch` (architectures[0]: only K3_OVERRIDE_ARCHS get the `auto` override)."""
    rules = k3_rules(version)
    runner = str(args.get("moe_runner_backend") or "auto")
    if runner == "megamoe":  # 0.5.18 on: an alias of --moe-a2a-backend megamoe (handle_moe_runner_backend_alias)
        runner, a2a = "auto", "megamoe"
    given = runner
    if runner == "auto" and not gpu.is_rocm:
        runner = _auto_runner(gpu, rules, arch)
    mega = a2a == "megamoe" and rules.has(rel.K3_MEGAMOE_ANY_RUNNER)
    major = gpu.sm // 10 if gpu.sm is not None else None
    bias = 0 if gpu.is_rocm else 2  # create_bias = with_bias or not _is_hip: bf16 zeros off ROCm
    if runner == "marlin" and not mega:
        return _marlin(major)
    if runner == "deep_gemm" or mega:
        layout = Mxfp4ExpertLayout(scale_k_align=4, bias_bytes=bias, bias_as_made=bool(bias))
        which = "the megamoe all-to-all" if mega and runner != "deep_gemm" else "the deep_gemm runner"
        return ExpertPath("deep_gemm", layout, f"Kimi-K3 MXFP4 experts on {which}: unpadded, scales packed as "
                          "UE8M0 int32 (K/32 columns to a multiple of 4)"
                          + (", zero w13/w2 biases kept in bf16 as made" if bias else ""),
                          unchecked=_deep_gemm_unchecked(gpu, which))
    if runner == "flashinfer_mxfp4":
        return _flashinfer(gpu.sm, given, rules, env)
    if gpu.is_rocm and _get_bool_env_var(env.get("SGLANG_USE_AITER")):
        k3_opt = _get_bool_env_var(env.get("SGLANG_AITER_K3_OPT"))
        layout = Mxfp4ExpertLayout(inter_align=128 if k3_opt else 256, hidden_align=256, scale_k_align=8)
        return ExpertPath("aiter", layout, (
            "Kimi-K3 MXFP4 experts on the aiter path (SGLANG_USE_AITER): each rank's intermediate padded to "
            f"{128 if k3_opt else 256}{' (SGLANG_AITER_K3_OPT)' if k3_opt else ''}, the hidden size to 256, the "
            "scales' K/32 columns to a multiple of 8 (aiter shuffle_scale)"))
    if runner == "triton_kernel":
        layout = Mxfp4ExpertLayout(inter_align=64, bias_bytes=0 if gpu.is_rocm else 4)
        return ExpertPath(
            "triton_kernel", layout,
            "Kimi-K3 MXFP4 experts on the triton_kernel runner: intermediate padded to 64, biases re-made in "
            "float32, triton_kernels' swizzled layouts priced at the packed bytes",
            refusal=_no_triton_kernels(version, "the triton_kernel runner's weight swizzle (triton_kernels.matmul)"),
            hint=_fix(gpu, rules, arch))
    return _fallback(gpu, given, runner, rules, version, bias, arch)


SITU_POOL_ENV = "SGLANG_TRTLLM_GEN_MOE_CUBIN_POOL"


def situ_pool_refusal(env: Mapping[str, str], version: str | None, args: Mapping[str, Any], gpu: GpuProfile,
                      arch: str = "KimiK3ForConditionalGeneration") -> str | None:
    """SGLang 0.5.17's refusal of Kimi-K3 on SM100/SM103 under `auto` or flashinfer_mxfp4 without the trtllm-gen SiTU
    cubin pool, else None. arg_groups/overrides.py `_kimi_k3_moe_runner_overrides` (0.5.17) raises RuntimeError while
    the arguments resolve when `trtllm_gen_moe.available()` is false: SGLANG_TRTLLM_GEN_MOE_CUBIN_POOL unset or empty
    (environ.py: `EnvStr(None)`, no packaged default) or not a directory holding the pool. The directory itself is
    not checked here: a set variable is taken at its word. From 0.5.18 FlashInfer ships the SiTU kernels and the
    guard is gone; a K3 branch labelled before 0.5.17 is not known to carry it (the 0.5.16 B200 server started).
    The override is registered for K3_OVERRIDE_ARCHS only: no refusal for another `arch`."""
    if arch not in K3_OVERRIDE_ARCHS:
        return None
    rules = rel.rules_for(version)
    if not rules.has(rel.K3_AUTO_FLASHINFER_MXFP4) or rules.has(rel.K3_FLASHINFER_SITU_BUNDLED):
        return None
    if gpu.is_rocm or gpu.sm not in (100, 103) or env.get(SITU_POOL_ENV):
        return None
    if str(args.get("moe_runner_backend") or "auto") not in ("auto", "flashinfer_mxfp4"):
        return None
    return ("SGLang 0.5.17 stops while it resolves the arguments: \"Kimi-K3 on Blackwell with moe_runner_backend='auto' "
            f"or 'flashinfer_mxfp4' requires a valid {SITU_POOL_ENV}.\" (arg_groups/overrides.py "
            f"_kimi_k3_moe_runner_overrides; {SITU_POOL_ENV} is unset in the role's environment and has no default)")


def _deep_gemm_unchecked(gpu: GpuProfile, which: str) -> str | None:
    """Why the estimate cannot tell whether DeepGEMM's MXFP4 path loads Kimi-K3 on `gpu` (None: SM100/SM103, where
    it runs). Mxfp4MoEMethod calls it 'DeepGEMM fp8_fp4 grouped GEMM (SM100 MXF8F6F4 UMMA)' (0.5.23
    quantization/mxfp4.py:400) and process_weights_after_loading imports DeepGEMM's transform_sf_into_required_layout
    on every device (:669-670); no release from 0.5.17 to 0.5.23 guards the runner by GPU while the arguments
    resolve. Whether the load or the first forward stops on SM90, ROCm or another GPU (DeepGEMM's own architecture
    dispatch, a CUDA-only package) is not in SGLang's source: not a pass."""
    if not gpu.is_rocm and gpu.sm in (100, 103):
        return None
    where = "ROCm" if gpu.is_rocm else f"SM{gpu.sm}"
    return (f"Kimi-K3's MXFP4 experts on {which} use DeepGEMM's fp8_fp4 grouped GEMM, an SM100 kernel (Mxfp4MoEMethod: "
            "'SM100 MXF8F6F4 UMMA'), and process_weights_after_loading imports DeepGEMM on every device; SGLang does "
            f"not refuse it on {where} while the arguments resolve, and whether it loads there is not in its source")


def _marlin(major: int | None) -> ExpertPath:
    layout = Mxfp4ExpertLayout(inter_align=128, hidden_align=256, bias_bytes=2)
    note = ("Kimi-K3 MXFP4 experts on marlin: each rank's intermediate padded to 128, the hidden size to 256, "
            "weights repacked, scales as E8M0, zero biases re-made in bf16")
    if major in (9, 10, 12):
        return ExpertPath("marlin", layout, note)
    return ExpertPath("marlin", layout, note,
                      refusal="Mxfp4MoEMethod.process_weights_after_loading stops: 'MXFP4 Marlin requires SM90+.' "
                              "(marlin's MXFP4 kernels run on SM90, SM100 and SM120 only)",
                      hint="run Kimi-K3 on Hopper or Blackwell GPUs (or MI355X with SGLANG_USE_AITER=1)")


def _flashinfer(sm: int | None, given: str, rules: rel.SizingRules, env: Mapping[str, str]) -> ExpertPath:
    major = sm // 10 if sm is not None else None
    why = "the `auto` runner (flashinfer_mxfp4 for Kimi-K3 here)" if given == "auto" else "flashinfer_mxfp4"
    if major == 9:
        layout = Mxfp4ExpertLayout(inter_align=128, hidden_align=256, bias_bytes=2, expert_scalars=3)
        return ExpertPath("flashinfer_cutlass_sm90", layout, (
            f"Kimi-K3 MXFP4 experts on {why}, FlashInfer's SM90 CUTLASS kernels: intermediate and hidden size "
            "padded after loading (to 128 and 256), zero biases re-made padded in bf16"))
    if major == 12:
        layout = Mxfp4ExpertLayout(inter_align=128, hidden_align=256, bias_bytes=2, expert_scalars=4)
        return ExpertPath("flashinfer_cutlass_sm120", layout, (
            f"Kimi-K3 MXFP4 experts on {why}, FlashInfer's SM120 CUTLASS kernels: intermediate and hidden size "
            "padded after loading (to 128 and 256), zero biases re-made padded in bf16"))
    if major == 10:
        layout = Mxfp4ExpertLayout(inter_align=128, hidden_align=256, bias_bytes=4, expert_scalars=3)
        note = (f"Kimi-K3 MXFP4 experts on {why}, the trtllm-gen kernel: intermediate padded to 128, hidden size "
                "to 256, zero w13/w2 biases re-made in float32")
        if sm in (100, 103) and not rules.has(rel.K3_FLASHINFER_SITU_BUNDLED):
            note += ("; SGLang 0.5.17 wants the SiTU cubin pool, taken to be unpacked where "
                     f"{SITU_POOL_ENV} points" if env.get(SITU_POOL_ENV) else
                     f"; a K3 branch labelled before 0.5.17 is taken to find the SiTU cubin pool ({SITU_POOL_ENV})")
        return ExpertPath("flashinfer_trtllm", layout, note)
    return ExpertPath(
        "flashinfer_mxfp4", Mxfp4ExpertLayout(), f"Kimi-K3 MXFP4 experts on {why}",
        refusal="Mxfp4MoEMethod stops: 'moe_runner_backend=flashinfer_mxfp4 requires SM90, SM100, or SM120.'",
        hint="use --moe-runner-backend marlin on Hopper or Blackwell, or SGLANG_USE_AITER=1 on MI355X")


def _fallback(
    gpu: GpuProfile, given: str, runner: str, rules: rel.SizingRules, version: str | None, bias: int, arch: str
) -> ExpertPath:
    """The last branch: triton_kernels' upcast_from_mxfp materialises the experts in bf16."""
    if gpu.is_rocm:
        why = f"ROCm without SGLANG_USE_AITER, runner {given}"
    elif runner == "auto":
        why = f"the `auto` runner stays unresolved on SM{gpu.sm}"
        if arch not in K3_OVERRIDE_ARCHS:
            why += (f" (SGLang's `auto` -> flashinfer_mxfp4 override is registered for "
                    f"{', '.join(sorted(K3_OVERRIDE_ARCHS))} only, not {arch})")
    else:
        why = f"the {runner} runner has no MXFP4 path of its own"
    layout = Mxfp4ExpertLayout(inter_align=64, upcast_bf16=True, bias_bytes=bias, bias_as_made=bool(bias))
    note = (f"Kimi-K3 MXFP4 experts take Mxfp4MoEMethod's last resort ({why}): upcast to bf16 through "
            "triton_kernels, each rank's intermediate padded to 64" + (", zero biases kept as made" if bias else ""))
    return ExpertPath("bf16_upcast", layout, note,
                      refusal=f"{why}, so " + _no_triton_kernels(version, "the bf16 upcast (upcast_from_mxfp)"),
                      hint=_fix(gpu, rules, arch))


def _no_triton_kernels(version: str | None, what: str) -> str:
    release = f"SGLang {version}" if version else "SGLang"
    return (f"Mxfp4MoEMethod.process_weights_after_loading imports triton_kernels for {what}, a package "
            f"{release} does not install (no release from 0.5.17 to 0.5.23 depends on it): the load stops with "
            "ModuleNotFoundError: No module named 'triton_kernels'")


def _fix(gpu: GpuProfile, rules: rel.SizingRules, arch: str) -> str:
    """The runner or setting that keeps Kimi-K3's experts in MXFP4 on this device."""
    if gpu.is_rocm:
        return "set SGLANG_USE_AITER=1 (aiter's MXFP4 experts; SGLANG_AITER_K3_OPT=1 pads them to 128, not 256)"
    if gpu.sm == 90:
        return "use --moe-runner-backend marlin (or flashinfer_mxfp4, FlashInfer's SM90 CUTLASS kernels)"
    if gpu.sm is not None and gpu.sm // 10 == 10 and arch not in K3_OVERRIDE_ARCHS:
        return "use --moe-runner-backend flashinfer_mxfp4 (`auto` is not overridden for this architecture), marlin or deep_gemm"
    if gpu.sm is not None and gpu.sm // 10 == 10:
        return ("leave --moe-runner-backend auto (flashinfer_mxfp4 on SM100/SM103"
                + ("/SM107" if rules.has(rel.K3_AUTO_FLASHINFER_SM107) else "") + "), or use marlin or deep_gemm")
    if gpu.sm is not None and gpu.sm // 10 == 12:
        return "use --moe-runner-backend marlin or flashinfer_mxfp4"
    return "SGLang has no MXFP4 kernels for Kimi-K3's experts on this GPU: marlin and flashinfer_mxfp4 need SM90+"
