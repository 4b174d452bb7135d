"""DeepSeek-V4's routed experts as each release loads them per GPU, and a start SGLang refuses
predicted as the refusal it is (exit 1, KV120 with the release's own message), not a pool."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from kvcheck.engines.sglang.sizing import dsv4
from kvcheck.engines.sglang.sizing.model import estimate_role
from kvcheck.model import EstimateInputs, RoleTarget
from tests.conftest import run_kvcheck
from tests.datapaths import MODELS

PRO = MODELS / "deepseek-ai--DeepSeek-V4-Pro.json"


def _fmt(version: str, vendor: str, sm: int | None, **kw: str) -> dsv4.ExpertFormat:
    return dsv4.expert_format("mxfp4", version=version, vendor=vendor, sm=sm, env=kw.pop("env", {}),  # type: ignore[arg-type]
                              moe_runner_backend=kw.get("backend"), moe_a2a_backend=kw.get("a2a"))


@pytest.mark.parametrize(("version", "sm", "fmt", "align"), [
    ("0.5.12", 90, "mxfp4_marlin_fp32_kept", 64),  # no pad at create_weights; the repack pads to 64
    ("0.5.14", 90, "mxfp4_marlin_fp32_kept", 128),  # the float32 w13/w2_weight_scale_inv stay registered
    ("0.5.15", 120, "mxfp4_marlin_fp32_kept", 128),
    ("0.5.16", 90, "mxfp4", 128),  # 0.5.16 deletes the loader scales (and loads them as E8M0)
    ("0.5.20", 90, "mxfp4", 64),  # SM90 keeps the logical width at create_weights from 0.5.20
    ("0.5.23", 120, "mxfp4", 128),
])
def test_marlin_keeps_the_loader_scales_until_0_5_16(version, sm, fmt, align) -> None:
    got = _fmt(version, "nvidia", sm, backend="marlin")
    assert (got.fmt, got.inter_align) == (fmt, align)
    assert dsv4.FMT_BYTES["mxfp4_marlin_fp32_kept"] == 0.5 + 1 / 32 + 4 / 32


def test_the_inferencex_launch_on_hopper_is_the_refusal_it_logged() -> None:
    # InferenceX #2128's dsv4_fp8_h200_sglang.sh passes --moe-runner-backend marlin: 0.5.14's marlin keeps the
    # float32 loader scales beside its E8M0 ones, and SM90 holds wo_a in bf16 (0.5.14's server_args.py turns
    # SGLANG_OPT_FP8_WO_A_GEMM off below SM100): 125.63 GiB per H200 against the logged 125.65 (-0.01 %; 125.16 with
    # wo_a in FP8; the FP8 method's float32 scales alone gave 119.44, -4.9 %), so the 0.88 start is refused as SGLang
    # refused it
    est = _estimate("0.5.14", "H200", 0.88, moe_runner_backend="marlin", max_running_requests=8)
    loaded = est.details["weights_gib_per_gpu"] + est.details["load_overhead_gib"]
    assert loaded == pytest.approx(125.634, abs=0.005)
    assert est.pool_tokens == 0 and est.pool_range == (0, 0)
    [kv120] = [f for f in est.findings if f.rule == "KV120"]
    assert kv120.message.startswith("the engine would refuse to start: Loaded weights leave no GPU memory for the "
                                    "KV cache under --mem-fraction-static=0.88.")
    # 0.5.16 frees the float32 scales: the experts drop from 0.65625 to 0.53125 B per weight (112.59 GiB of
    # experts at the FP8 method's 0.625 B: 118.22 -> 95.70), and the start fits
    later = _estimate("0.5.16", "H200", 0.88, moe_runner_backend="marlin", max_running_requests=8)
    assert est.details["weights_gib_per_gpu"] - later.details["weights_gib_per_gpu"] == pytest.approx(
        112.588 * (0.65625 - 0.53125) / 0.625, abs=0.005)
    assert later.pool_tokens > 0


@pytest.mark.parametrize(("version", "vendor", "sm", "extra", "fmt", "align"), [
    ("0.5.14", "nvidia", 90, {}, "mxfp4_fp32_scales", 1),  # Hopper before flashinfer_mxfp4: float32 scales
    ("0.5.19", "nvidia", 90, {}, "mxfp4", 1),  # flashinfer_mxfp4 (W4A16 cutlass) keeps E8M0 scales
    ("0.5.18", "nvidia", 100, {}, "mxfp4_fp32_scales", 1),
    ("0.5.18", "nvidia", 100, {"a2a": "deepep"}, "mxfp4", 1),  # DeepGEMM repacks the scales to UE8M0
    ("0.5.23", "nvidia", 100, {}, "mxfp4", 1),
    ("0.5.12", "nvidia", 120, {}, "mxfp4_fp32_scales", 1),
    ("0.5.15", "nvidia", 120, {}, "mxfp4_marlin_fp32_kept", 128),  # SM120's marlin default, 0.5.13-0.5.15
    ("0.5.16", "nvidia", 120, {}, "mxfp4", 1),
    ("0.5.23", "nvidia", 90, {"backend": "triton"}, "mxfp4_fp32_scales", 1),
    ("0.5.12", "amd", None, {}, "mxfp4_fp32_scales", 1),
    ("0.5.15", "amd", None, {}, "mxfp4", 256),
    ("0.5.17", "amd", None, {}, "mxfp4", 128),
    ("0.5.23", "nvidia", 90, {"env": {"SGLANG_DSV4_FP4_DEQUANT": "1"}}, "fp8", 1),
])
def test_fp4_experts_take_the_format_the_release_loads(version, vendor, sm, extra, fmt, align) -> None:
    got = _fmt(version, vendor, sm, **extra)
    assert (got.fmt, got.inter_align) == (fmt, align)
    assert dsv4.FMT_BYTES["mxfp4_fp32_scales"] == 0.625 and dsv4.FMT_BYTES["mxfp4"] == 0.53125


def _estimate(version: str, gpu: str, fraction: float, **args):
    target = RoleTarget(name="server", context_length=1, min_headroom=1.0, engine_version=version,
                        args={"tp_size": 8, "mem_fraction_static": fraction, **args}, argv_args=(), gpu=gpu,
                        model_config=PRO, estimate=EstimateInputs())
    return estimate_role(target, offline=True)


def test_v4_pro_on_hopper_weighs_what_the_release_loads() -> None:
    # InferenceX #2128 logged 125.65 GiB per H200 at TP8 (a 0.5.14-0.5.15 era image): float32 scales
    # give 119.06 (-5.2 %), 119.31 (-5.0 %) with the rotary_emb's float32 cos_sin_cache (256 MiB: every V4-Pro
    # layer is compressed, one rope setting); E8M0 scales, what 0.5.23 holds, 102.42 (kvcheck gave 101.92 for
    # every release: -19 %); then the caching allocator's rounding (sizing/allocator.py): 2 MiB in 0.5.14
    # (embedding, lm_head), 93 MiB with E8M0 scales (each layer's w13 and w2 scales, 63 and 31.5 MiB, leave 1.5);
    # then wo_a in bf16 on SM90 (every release: SGLANG_OPT_FP8_WO_A_GEMM off), 61 x 8 MiB a rank more at TP8
    assert _estimate("0.5.14", "H200", 0.95).details["weights_gib_per_gpu"] == pytest.approx(119.313 + WO_A, abs=0.001)
    assert _estimate("0.5.23", "H200", 0.95).details["weights_gib_per_gpu"] == pytest.approx(102.514 + WO_A, abs=0.001)
    # MI355X 0.5.15 pads each rank's 384-wide experts to 512 (aiter CK kernel), 0.5.17 keeps 384; from 0.5.13
    # every layer also holds its own bf16 RoPE cos/sin tables on ROCm (MQALayer's `if _is_hip`: 61 x 128 MiB);
    # the rotary_emb's table is bf16 on ROCm before 0.5.22 (128 MiB); HIP holds wo_a in bf16 from 0.5.14
    assert _estimate("0.5.15", "MI355X", 0.95).details["weights_gib_per_gpu"] == pytest.approx(
        134.200 + 61 / 8 + WO_A, abs=0.001)
    assert _estimate("0.5.17", "MI355X", 0.95).details["weights_gib_per_gpu"] == pytest.approx(
        102.264 + 61 / 8 + 0.125 + WO_A, abs=0.001)
    # 0.5.20 keeps FP8 wo_a on gfx950 (aiter's mxscale GEMM)
    assert _estimate("0.5.20", "MI355X", 0.95).details["weights_gib_per_gpu"] == pytest.approx(
        _estimate("0.5.17", "MI355X", 0.95).details["weights_gib_per_gpu"] - WO_A, abs=0.001)


FLASH = MODELS / "deepseek-ai--DeepSeek-V4-Flash.json"
# V4-Pro's wo_a at TP8 in bf16 rather than FP8 (a float32 scale per 128 x 128): 61 layers of 512 x 16384 weights
WO_A = 61 * (512 * 16384 - 4 * 512 * 16384 / (128 * 128)) / 2**30


def _rope_gib(config: Path, version: str, vendor: str, **override: object) -> float:
    text = {**json.loads(config.read_text()), **override}
    fmt = _fmt(version, vendor, 90 if vendor == "nvidia" else None)
    parts = dsv4.weights_bytes(
        text, stage=range(int(text["num_hidden_layers"])), tp=8, attn_tp=8, ep=1, dense_fmt="fp8", expert_fmt=fmt.fmt,
        first_stage=True, last_stage=True, hip_rope_per_layer=vendor == "amd" and fmt.hip_rope_per_layer,
        rope_cache_entry_bytes=fmt.rope_cache_entry_bytes, rope_plain_swa=fmt.rope_plain_swa,
    )
    return parts["rope_tables"] / 2**30


@pytest.mark.parametrize(("config", "version", "vendor", "gib"), [
    # 0.5.12 builds only the complex64 freqs_cis per rope setting (V4-Flash: two, its first two layers are
    # uncompressed; V4-Pro: one), 256 MiB each at 1M positions
    (FLASH, "0.5.12", "nvidia", 0.5),
    (PRO, "0.5.12", "nvidia", 0.25),
    # 0.5.13 on: each setting's rotary_emb adds a float32 cos_sin_cache of 1M x 64 on CUDA (256 MiB)
    (FLASH, "0.5.13", "nvidia", 1.0),
    (PRO, "0.5.14", "nvidia", 0.5),
    (FLASH, "0.5.23", "nvidia", 1.0),
    # ROCm: bf16 until 0.5.22 (128 MiB), plus (0.5.13 on) every layer's own bf16 cos/sin (128 MiB a layer);
    # 0.5.12 has neither the rotary_emb nor the per-layer copies
    (FLASH, "0.5.12", "amd", 0.5),
    (FLASH, "0.5.13", "amd", 0.75 + 43 / 8),
    (FLASH, "0.5.21", "amd", 0.75 + 43 / 8),
    (FLASH, "0.5.22", "amd", 1.0 + 43 / 8),
])
def test_rope_tables_per_release_and_platform(config, version, vendor, gib) -> None:
    assert _rope_gib(config, version, vendor) == pytest.approx(gib, abs=1e-9)


def test_uncompressed_layers_take_plain_rope_from_0_5_18() -> None:
    # with a YaRN span (original x factor = 512K) shorter than max_position (1M), the uncompressed layers'
    # table is 512K rows while they use deepseek_yarn (before 0.5.18) and 1M rows as plain RoPE (0.5.18 on)
    scaling = {"type": "yarn", "factor": 8, "original_max_position_embeddings": 65536, "beta_fast": 32, "beta_slow": 1}
    freqs = 0.5  # two complex64 freqs_cis over max_position
    assert _rope_gib(FLASH, "0.5.17", "nvidia", rope_scaling=scaling) == pytest.approx(freqs + 0.25, abs=1e-9)
    assert _rope_gib(FLASH, "0.5.18", "nvidia", rope_scaling=scaling) == pytest.approx(freqs + 0.375, abs=1e-9)


@pytest.mark.parametrize(("version", "message"), [
    ("0.5.12", "Not enough memory. Please try to increase --mem-fraction-static. Current value: mem_fraction_static=0.8"),
    ("0.5.14", "Loaded weights leave no GPU memory for the KV cache under --mem-fraction-static=0.8. Raise "
               "--mem-fraction-static above 0.874 (minimum viable = 1 - available/pre = 0.8731)."),
])
def test_weights_that_fill_the_budget_are_the_release_s_refusal(version, message) -> None:
    est = _estimate(version, "H200", 0.8)
    assert est.pool_tokens == 0
    [kv120] = [f for f in est.findings if f.rule == "KV120"]
    assert kv120.message == f"the engine would refuse to start: {message}"


@pytest.mark.parametrize(("version", "suffix"), [
    ("0.4.6", ""),
    ("0.5.5", " Current value: self.server_args.mem_fraction_static=0.6"),
    ("0.5.11", " Current value: mem_fraction_static=0.6"),
])
def test_older_releases_word_the_refusal_their_way(version, suffix) -> None:
    target = RoleTarget(name="server", context_length=1, min_headroom=1.0, engine_version=version,
                        args={"tp_size": 8, "mem_fraction_static": 0.6}, argv_args=(), gpu="H200",
                        model_config=MODELS / "meta-llama--Meta-Llama-3.1-405B.json", estimate=EstimateInputs())
    est = estimate_role(target, offline=True)
    assert est.pool_tokens == 0
    [kv120] = [f for f in est.findings if f.rule == "KV120"]
    assert kv120.message == ("the engine would refuse to start: Not enough memory. Please try to increase "
                             f"--mem-fraction-static.{suffix}")


def test_the_logged_refusal_with_its_own_weights_is_a_refusal() -> None:
    target = RoleTarget(name="server", context_length=1, min_headroom=1.0, engine_version="0.5.14",
                        args={"tp_size": 8, "mem_fraction_static": 0.88}, argv_args=(), gpu="H200",
                        model_config=PRO, estimate=EstimateInputs(weights_gib_per_gpu=125.65))
    est = estimate_role(target, offline=True)
    assert est.pool_tokens == 0
    [kv120] = [f for f in est.findings if f.rule == "KV120"]
    # the log's own minimum is 0.9113: the H200 TP8 profile holds 0.56 GiB less free memory than it
    assert "Raise --mem-fraction-static above 0.915 (minimum viable = 1 - available/pre = 0.9149)" in kv120.message


def test_a_priced_pool_under_the_swa_floor_is_refused_not_unchecked() -> None:
    # B200 TP8 at 0.6056: a few full-token pages fit, and their SWA pool (0.1 of them, 256 tokens) is
    # below window 128 + page 256: SGLang's validate_swa_pool_size stops the start (was exit 3 here)
    est = estimate_role(RoleTarget(
        name="server", context_length=1, min_headroom=1.0, engine_version="0.5.23",
        args={"tp_size": 8, "mem_fraction_static": 0.6056}, argv_args=(), gpu="B200", model_config=PRO,
        estimate=EstimateInputs()), offline=True)
    assert est.pool_tokens == 0
    [kv120] = [f for f in est.findings if f.rule == "KV120"]
    assert kv120.message == (
        "the engine would refuse to start: SWA pool (256 tokens) cannot hold even one request: the prefill admission "
        "floor is sliding_window_size (128) + page_size (256). Increase --swa-full-tokens-ratio or the total KV budget.")


MANIFEST = """\
name: refused
context_length: 131072
model:
  path: deepseek-ai/DeepSeek-V4-Pro
  config: pro.json
engine:
  version: "0.5.14"
gpu: H200
args:
  tp-size: 8
  mem-fraction-static: 0.8
roles:
  server:
    gpus: [0, 1, 2, 3, 4, 5, 6, 7]
"""


def test_a_refused_start_fails_the_gate_with_the_engine_s_message(tmp_path: Path) -> None:
    shutil.copy(PRO, tmp_path / "pro.json")
    (tmp_path / "m.yaml").write_text(MANIFEST)
    done = run_kvcheck("verify", str(tmp_path / "m.yaml"), "--mode", "estimate", "--format", "json")
    assert done.exit_code == 1, done.stderr
    report = json.loads(done.stdout)
    rules = {f["rule"]: f["message"] for f in report["findings"]}
    assert rules["KV120"].startswith("the engine would refuse to start: Loaded weights leave no GPU memory for the "
                                     "KV cache under --mem-fraction-static=0.8.")
    assert rules["KV101"].startswith("no KV pool:")


def test_v4_on_rocm_keeps_an_explicit_fraction() -> None:
    # the V4 override sets attention_backend dsv4 before attention_hook's aiter x0.85 (context > 8192)
    # runs, so SGLang keeps 0.9 as given; a Llama on the same card with aiter gets 0.765
    target = RoleTarget(name="server", context_length=1, min_headroom=1.0, engine_version="0.5.23",
                        args={"tp_size": 4, "mem_fraction_static": 0.9}, argv_args=(), gpu="MI300X",
                        model_config=MODELS / "deepseek-ai--DeepSeek-V4-Flash.json", estimate=EstimateInputs())
    est = estimate_role(target, offline=True)
    assert (est.details["attention_backend"], est.mem_fraction_static) == ("dsv4", 0.9)
    llama = estimate_role(RoleTarget(
        name="server", context_length=1, min_headroom=1.0, engine_version="0.5.23",
        args={"tp_size": 4, "mem_fraction_static": 0.9}, argv_args=(), gpu="MI300X",
        model_config=MODELS / "meta-llama--Meta-Llama-3.1-70B.json", estimate=EstimateInputs()), offline=True)
    assert (llama.details["attention_backend"], llama.mem_fraction_static) == ("aiter", 0.765)
