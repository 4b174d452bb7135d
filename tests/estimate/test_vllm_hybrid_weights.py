"""The weights a vLLM worker loads for a hybrid model (sizing/weights.py `hybrid_weights_bytes`).

Three kinds of evidence, none used to choose the count:
- the bytes the real vLLM 0.32.0's own model classes allocate for shrunk copies of the real configs
  (tests/bench/vllm_hybrid_weights_reference.py writes tests/data/vllm_hybrid_weights/reference_vllm_0.32.0.json);
- the real configs' counts derived here by hand from their fields (the layer shapes of models/qwen3_next.py,
  qwen3_5.py, qwen3_vl.py, nemotron_h.py and layers/mamba/mamba_mixer2.py);
- the total parameters their model cards publish.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from dataclasses import replace
from pathlib import Path

import pytest

from kvcheck.engines.modelconfig import load_model_source
from kvcheck.engines.vllm.sizing.model import estimate_role
from kvcheck.engines.vllm.sizing.weights import hybrid_weights_bytes, linear_bytes
from kvcheck.errors import EstimateError
from kvcheck.model import EstimateInputs, RoleTarget
from tests.conftest import REPO_ROOT, run_kvcheck

DATA = REPO_ROOT / "tests" / "data"
MODELS = DATA / "models"
TINY = DATA / "vllm_hybrid_weights"
GIB = 1 << 30
QWEN35_27B = MODELS / "Qwen--Qwen3.5-27B.json"
QWEN35_35B = MODELS / "Qwen--Qwen3.5-35B-A3B.json"
NANO = MODELS / "nvidia--NVIDIA-Nemotron-3-Nano-30B-A3B-BF16.json"
NANO_FP4 = MODELS / "nvidia--NVIDIA-Nemotron-3-Nano-30B-A3B-NVFP4.json"


def _count(config: Path, *, tp: int = 1, args: dict | None = None, release: tuple[int, ...] | None = None,
           vision: bool = True) -> float:
    source = load_model_source(model_config=config, model_path=None, offline=True)
    linear, scheme = linear_bytes(source.quant, 2, (args or {}).get("quantization"))
    tied = bool(source.text.get("tie_word_embeddings", source.config.get("tie_word_embeddings", False)))
    return hybrid_weights_bytes(source.text, source.architecture, vision=source.vision if vision else None, tp=tp,
                                pp=1, model_bytes=2, linear=linear, quant=source.quant, tied=tied, scheme=scheme,
                                release=release)


def _qwen35_vision(tp: int, out: int) -> float:
    """Qwen3.5's ViT (1152 wide, 27 blocks, MLP 4304, 16-pixel patches x 2 frames x 3 channels, 2304
    positions, 2x2 merge into `out`), bf16: patch embedding and positions replicated, the rest split."""
    hv, inter, ctx = 1152, 4304, 1152 * 4
    replicated = 3 * 2 * 16 * 16 * hv + hv + 2304 * hv
    block = 4 * hv + 3 * hv * hv + 3 * hv + hv * hv + hv + hv * inter + inter + inter * hv + hv
    merger = 2 * hv + ctx * ctx + ctx + ctx * out + out
    return (replicated + (27 * block + merger) / tp) * 2


def _qwen35_27b(tp: int) -> float:
    """Qwen3.5-27B by hand: hidden 5120; 48 GDN layers (16 key heads x 128, 48 value heads x 128, kernel 4),
    16 gated-attention layers (24 heads x 256, 4 KV heads), dense MLP 17408 in all 64, vocab 248320 untied."""
    h, key, value, nv = 5120, 16 * 128, 48 * 128, 48
    gdn = ((h * (2 * key + 2 * value) + h * 2 * nv + value * h) / tp * 2   # in_proj_qkv+z, in_proj_b+a, out_proj
           + (2 * key + value) * 4 / tp * 2 + nv / tp * 2 + nv / tp * 4 + 128 * 2)  # conv1d, dt_bias, A_log fp32, norm
    kv_rank = 4 / tp
    attention = (h * 24 * 2 * 256 / tp + 2 * h * kv_rank * 256 + 24 * 256 * h / tp) * 2 + 2 * 256 * 2
    mlp = 3 * h * 17408 / tp * 2
    layers = 48 * gdn + 16 * attention + 64 * (mlp + 2 * h * 2)
    return layers + 2 * 248320 * h / tp * 2 + h * 2 + _qwen35_vision(tp, 5120)


@pytest.mark.parametrize("tp", [1, 2, 4])
def test_qwen35_27b_is_counted_as_vllm_builds_it(tp: int) -> None:
    assert _count(QWEN35_27B, tp=tp) == pytest.approx(_qwen35_27b(tp), rel=1e-12)


def test_qwen35_35b_a3b_counts_its_experts_shared_expert_and_routers() -> None:
    """hidden 2048, 40 layers (30 GDN: 16 x 128 keys, 32 x 128 values; 10 attention: 16 heads x 256, 2 KV
    heads), 256 experts of 512 and a shared expert of 512 in every layer; TP 2 halves the KV heads."""
    tp, h, key, value, nv = 2, 2048, 16 * 128, 32 * 128, 32
    gdn = ((h * (2 * key + 2 * value) + h * 2 * nv + value * h) / tp * 2
           + (2 * key + value) * 4 / tp * 2 + nv / tp * 2 + nv / tp * 4 + 128 * 2)
    attention = (h * 16 * 2 * 256 / tp + 2 * h * 1 * 256 + 16 * 256 * h / tp) * 2 + 2 * 256 * 2
    moe = (256 * 3 * h * 512 / tp + 3 * h * 512 / tp) * 2 + (h * 256 + h) * 2  # experts, shared; router + gate
    expected = 30 * gdn + 10 * attention + 40 * (moe + 2 * h * 2) + 2 * 248320 * h / tp * 2 + h * 2
    expected += _qwen35_vision(tp, 2048)
    assert _count(QWEN35_35B, tp=tp) == pytest.approx(expected, rel=1e-12)


def _nano(tp: int, *, fp4_excluded: tuple[set[int], set[int]] | None = None) -> float:
    """Nemotron-3-Nano by hand: hidden 2688; 23 Mamba2 layers (64 heads x 64, 8 groups of 128 state, kernel
    4, conv bias), 6 attention layers (32 heads x 128, 2 KV heads), 23 MoE layers (128 squared-ReLU experts
    of 1856, a shared expert of 3712, an fp32 router and correction bias); vocab 131072 untied.
    `fp4_excluded`: (Mamba layers, attention layers) the NVFP4 checkpoint keeps in bf16."""
    h, d_inner, conv_dim, heads = 2688, 64 * 64, 64 * 64 + 2 * 8 * 128, 64
    pattern = "MEMEM*EMEMEM*EMEMEM*EMEMEM*EMEMEM*EMEMEMEM*EMEMEMEME"
    fp4 = 0.5625
    total = 0.0
    for i, kind in enumerate(pattern):
        lin = 2.0 if fp4_excluded is None else fp4
        if kind == "M":
            lin = 2.0 if fp4_excluded is not None and i in fp4_excluded[0] else lin
            total += (h * (d_inner + conv_dim + heads) + d_inner * h) / tp * lin
            total += (conv_dim * 4 + conv_dim) / tp * 2 + heads / tp * 4 + 2 * heads / tp * 2 + d_inner / tp * 2
        elif kind == "*":
            lin = 2.0 if fp4_excluded is not None and i in fp4_excluded[1] else lin
            kv_rank = max(1, 2 // tp) if tp > 2 else 2 / tp
            total += (h * 32 * 128 / tp + 2 * h * kv_rank * 128 + 32 * 128 * h / tp) * lin
        else:
            total += (128 * 2 * h * 1856 + 2 * h * 3712) / tp * lin + h * 128 * 4 + 128 * 4
        total += h * 2
    return total + 2 * 131072 * h / tp * 2 + h * 2


@pytest.mark.parametrize("tp", [1, 4])
def test_nemotron3_nano_is_counted_by_its_pattern(tp: int) -> None:
    # TP 4 exceeds the 2 KV heads: each worker keeps one (replicated); the 8 groups split evenly
    assert _count(NANO, tp=tp) == pytest.approx(_nano(tp), rel=1e-12)


def test_the_nvfp4_checkpoint_keeps_its_excluded_layers_in_bf16() -> None:
    quant = json.loads((MODELS / "nvidia--NVIDIA-Nemotron-3-Nano-30B-A3B-NVFP4.hf_quant_config.json").read_text())
    excluded = quant["quantization"]["exclude_modules"]
    mamba = {int(m.group(1)) for e in excluded if (m := re.fullmatch(r"backbone\.layers\.(\d+)\.mixer\.in_proj", e))}
    attention = {int(m.group(1)) for e in excluded if (m := re.fullmatch(r"backbone\.layers\.(\d+)\.mixer\.q_proj", e))}
    assert len(mamba) == 6 and len(attention) == 6
    fp4 = _count(NANO_FP4)
    assert fp4 == pytest.approx(_nano(1, fp4_excluded=(mamba, attention)), rel=1e-12)
    assert fp4 < _count(NANO) / 3  # the experts in 4.5 bits: 18.0 GiB against 58.8 GiB


def test_the_mixed_precision_checkpoint_prices_each_listed_layer_by_its_own_scheme() -> None:
    """Qwen3.6-27B-NVFP4 lists each layer's scheme (FP8 GDN and attention projections, NVFP4 MLPs); what it
    does not list (in_proj_a/b, the vision tower) stays bf16."""
    h, key, value, nv = 5120, 16 * 128, 48 * 128, 48
    gdn = (h * (2 * key + 2 * value) + value * h) * 1.0 + h * 2 * nv * 2 + (2 * key + value) * 4 * 2 + nv * 6 + 256
    attention = (h * 24 * 2 * 256 + 2 * h * 4 * 256 + 24 * 256 * h) * 1.0 + 2 * 256 * 2
    mlp = 3 * h * 17408 * 0.5625
    expected = 48 * gdn + 16 * attention + 64 * (mlp + 2 * h * 2) + 2 * 248320 * h * 2 + h * 2 + _qwen35_vision(1, 5120)
    assert _count(MODELS / "nvidia--Qwen3.6-27B-NVFP4.json") == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize("pattern", ["re:.*linear_attn.*", "model.layers.*.linear_attn*", "linear_attn"])
def test_each_spelling_of_an_exclusion_keeps_those_layers_in_bf16(pattern: str) -> None:
    """The shrunk Qwen3-Next (hidden 256, 3 GDN layers: 2 x 32 keys, 4 x 32 values) in FP8 with its GDN
    projections left out: in_proj_qkvz 256 x 384, in_proj_ba 256 x 8, out_proj 128 x 256 each at 2 B, not 1."""
    text = json.loads((TINY / "qwen3-next-tiny.json").read_text(encoding="utf-8"))

    def count(quant: dict) -> float:
        return hybrid_weights_bytes(text, "Qwen3NextForCausalLM", vision=None, tp=1, pp=1, model_bytes=2, linear=1.0,
                                    quant=quant, tied=False)

    assert count({"ignore": [pattern]}) - count({}) == 3 * (256 * 384 + 256 * 8 + 128 * 256) * (2 - 1)
    # layer 3's gated attention (4 heads x 64 doubled, 2 KV heads, o_proj): a whole dotted name, not a prefix of one
    assert count({"ignore": ["model.layers.3.self_attn"]}) - count({}) == 256 * (8 * 64 + 2 * 2 * 64) + 4 * 64 * 256
    assert count({"ignore": ["model.layers.3.self_at"]}) == count({})


def _reference() -> list[dict]:
    return json.loads((TINY / "reference_vllm_0.32.0.json").read_text(encoding="utf-8"))["cases"]


@pytest.mark.parametrize("case", _reference(), ids=lambda c: f"{c['config']}-lmo{int(c['language_model_only'])}")
def test_the_count_is_what_real_vllm_0_32_0_allocates(case: dict) -> None:
    assert _count(TINY / case["config"], tp=case["tp"], vision=not case["language_model_only"]) == case["bytes"]


@pytest.mark.skipif(not os.environ.get("KVCHECK_REAL_VLLM"), reason="KVCHECK_REAL_VLLM not set (the real vLLM install)")
def test_the_reference_file_is_what_real_vllm_allocates_now() -> None:
    python = Path(os.environ["KVCHECK_REAL_VLLM"]) / "venv" / "bin" / "python"
    proc = subprocess.run([str(python), str(REPO_ROOT / "tests" / "bench" / "vllm_hybrid_weights_reference.py")],
                          capture_output=True, text=True, timeout=600, check=True, cwd=REPO_ROOT)
    assert json.loads(proc.stdout) == json.loads((TINY / "reference_vllm_0.32.0.json").read_text(encoding="utf-8"))


# Total parameters the model cards state, rounded to the billion (Qwen3.5: 27B, 35B, ...), and counting the MTP
# layer a vLLM worker without a draft does not load: the count is within 1.5% of each.
PUBLIC_PARAMS = [
    (QWEN35_27B, 27e9),  # huggingface.co/Qwen/Qwen3.5-27B: 27B
    (QWEN35_35B, 35e9),  # huggingface.co/Qwen/Qwen3.5-35B-A3B: 35B total
    (MODELS / "Qwen--Qwen3.5-122B-A10B.json", 122e9),  # 122B total
    (MODELS / "Qwen--Qwen3.5-397B-A17B.json", 397e9),  # 397B total
    (NANO, 31.6e9),  # Nemotron-3-Nano-30B-A3B: 31.6B total (replicate.com/nvidia/nemotron-3-nano-30b-a3b)
    (MODELS / "nvidia--NVIDIA-Nemotron-3-Ultra-550B-A55B-BF16.json", 550e9),
    (MODELS / "nvidia--Nemotron-H-56B-Base-8K.json", 56e9),
]


@pytest.mark.parametrize(("config", "params"), PUBLIC_PARAMS, ids=lambda v: v.stem if isinstance(v, Path) else "")
def test_the_count_is_the_model_cards_total(config: Path, params: float) -> None:
    bf16_params = _count(config) / 2  # fp32 A_log/A/routers count double: under 0.1% of any of these
    assert abs(bf16_params / params - 1) < 0.015


def test_the_vision_tower_follows_the_flags_that_drop_or_replicate_it() -> None:
    source = load_model_source(model_config=QWEN35_27B, model_path=None, offline=True)
    target = _target(QWEN35_27B, max_model_len=131072)
    full = estimate_role(target, offline=True).details["weights_gib_per_gpu"]
    assert full == round(_qwen35_27b(1) / GIB, 3)
    for args in ({"language_model_only": True}, {"limit_mm_per_prompt": '{"image": 0, "video": 0}'}):
        dropped = estimate_role(replace(target, args={**target.args, **args}), offline=True).details
        assert dropped["weights_gib_per_gpu"] == round((_qwen35_27b(1) - _qwen35_vision(1, 5120)) / GIB, 3)
    images_only = estimate_role(replace(target, args={**target.args, "limit_mm_per_prompt": '{"video": 0}'}),
                                offline=True).details
    assert images_only["weights_gib_per_gpu"] == full
    tp2 = {**target.args, "tensor_parallel_size": 2}
    split = estimate_role(replace(target, args=tp2), offline=True).details["weights_gib_per_gpu"]
    data = estimate_role(replace(target, args={**tp2, "mm_encoder_tp_mode": "data"}), offline=True).details
    replicated = _qwen35_vision(1, 5120) - _qwen35_vision(2, 5120)
    assert data["weights_gib_per_gpu"] == round((_qwen35_27b(2) + replicated) / GIB, 3)
    assert split == round(_qwen35_27b(2) / GIB, 3)
    assert source.vision is not None


def test_qwen35s_ba_projection_is_replicated_for_marlin_from_0_22_0() -> None:
    h, nv = 5120, 48
    gptq = {"quantization": "gptq"}
    before = _count(QWEN35_27B, tp=4, args=gptq, release=(0, 21, 0))
    after = _count(QWEN35_27B, tp=4, args=gptq, release=(0, 22, 0))
    assert after - before == pytest.approx(48 * h * 2 * nv * (1 - 1 / 4) * 0.53, rel=1e-12)
    assert _count(QWEN35_27B, tp=4, release=(0, 22, 0)) == pytest.approx(_qwen35_27b(4), rel=1e-12)  # bf16: split


def test_an_uncounted_hybrid_is_still_refused_without_its_weights() -> None:
    falcon = DATA / "vllm_logs" / "configs" / "falcon-h1-shaped.json"
    with pytest.raises(EstimateError, match="does not count from config.json") as caught:
        estimate_role(_target(falcon, max_model_len=32768), offline=True)
    assert "weights_gib_per_gpu" in (caught.value.hint or "")
    with pytest.raises(EstimateError, match="not counted from config.json"):
        hybrid_weights_bytes({}, "FalconH1ForCausalLM", vision=None, tp=1, pp=1, model_bytes=2, linear=2, quant=None,
                             tied=False)


def _target(config: Path, **args: object) -> RoleTarget:
    return RoleTarget(name="server", context_length=int(args.get("max_model_len", 262144)), min_headroom=1.0,  # type: ignore[arg-type]
                      engine_version="0.32.0", args=dict(args), argv_args=(), gpu="H100", model_config=config,
                      engine="vllm", env={}, estimate=EstimateInputs())


def test_verify_and_plan_estimate_a_qwen35_pool_from_its_config(tmp_path: Path) -> None:
    manifest = tmp_path / "qwen35.yaml"
    manifest.write_text(
        "context_length: 131072\n"
        f"model: {{path: Qwen/Qwen3.5-27B, config: {QWEN35_27B}}}\n"
        'engine: {name: vllm, version: "0.32.0"}\n'
        "gpu: H100\n"
        "roles:\n"
        "  server:\n"
        "    gpus: [0]\n"
        "    args: {max-model-len: 131072, gpu-memory-utilization: 0.9}\n")
    result = run_kvcheck("verify", str(manifest), "--mode", "estimate", "--format", "json")
    assert result.exit_code == 0, result.stderr + result.stdout
    role = json.loads(result.stdout)["roles"][0]
    details = role["details"]
    assert (details["weights_source"], details["weights_gib_per_gpu"]) == ("config", round(_qwen35_27b(1) / GIB, 3))
    blocks = details["num_gpu_blocks"]
    assert 0 <= details["available_kv_gib"] * GIB - blocks * details["bytes_per_block"] < details["bytes_per_block"] + 0.001 * GIB
    assert role["pool_tokens"] == (blocks - 1 - 3 * 2) * 784 > 131072  # align mode: 2 blocks in each of 3 state groups
    plan = run_kvcheck("plan", str(manifest), "--format", "json")
    assert plan.exit_code == 0, plan.stderr + plan.stdout
    planned = json.loads(plan.stdout)["roles"][0]
    assert planned["pool_tokens"] == role["pool_tokens"]
    assert planned["details"]["plan"]["largest_context_tokens"] == role["pool_tokens"]
    tight = manifest.read_text().replace("0.9}", "0.75}")  # 59.4 GiB less 51 GiB of weights: no 131072 window
    manifest.write_text(tight)
    refused = run_kvcheck("verify", str(manifest), "--mode", "estimate", "--format", "json")
    assert refused.exit_code == 1, refused.stderr + refused.stdout
    assert "KV220" in {f["rule"] for f in json.loads(refused.stdout)["findings"]}
