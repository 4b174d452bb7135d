"""vLLM's pool for hybrid models (attention + Mamba2/GDN state layers), sizing/layout.py's `hybrid_layout`.

Two kinds of evidence, both held out (nothing in layout.py was chosen looking at them):
- tests/data/vllm_logs/hybrid_vllm_0.32.0.json: the figures the real vLLM 0.32.0's own functions give
  (tests/bench/vllm_hybrid_reference.py, run with the real install's interpreter): state bytes, block
  size, padded page, groups, bytes per block, blocks, concurrency and the "GPU KV cache size" line;
- tests/data/vllm_logs/hybrid_cases.json: public startup logs and docs of hybrid boots, each with its source.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
from dataclasses import replace
from pathlib import Path

import pytest
from packaging.version import Version

from kvcheck.engines.modelconfig import load_model_source
from kvcheck.engines.vllm.sizing.layout import KvLayout, kv_layout, model_dtype_of, resolve_kv_dtype
from kvcheck.engines.vllm.sizing.model import estimate_role
from kvcheck.errors import EstimateError
from kvcheck.model import EstimateInputs, RoleTarget
from tests.conftest import REPO_ROOT, run_kvcheck

DATA = REPO_ROOT / "tests" / "data"
LOGS = DATA / "vllm_logs"
MODELS = DATA / "models"
GIB = 1 << 30
QWEN35_27B = MODELS / "Qwen--Qwen3.5-27B.json"


def _layout(config: Path, *, tp: int = 1, kv: str | None = None, version: str | None = "0.32.0", sm: int | None = 90,
            args: dict | None = None, pp: int = 1, block_size: int | None = None, device: str = "cuda") -> KvLayout:
    source = load_model_source(model_config=config, model_path=None, offline=True)
    model_dtype = model_dtype_of(source.config, source.text, (args or {}).get("dtype"))
    kv_dtype = resolve_kv_dtype(kv, model_dtype, source.quant)
    return kv_layout(source.text, source.architecture, tp=tp, pp=pp, kv_dtype=kv_dtype, block_size=block_size,
                     device=device, model_dtype=model_dtype, version=Version(version) if version else None, sm=sm,
                     args=args or {})


def _reference() -> list[dict]:
    return json.loads((LOGS / "hybrid_vllm_0.32.0.json").read_text(encoding="utf-8"))["scenarios"]


@pytest.mark.parametrize("scenario", _reference(), ids=lambda s: f"{Path(s['config']).stem}-tp{s['tp']}-{s['mamba_cache_mode']}")
def test_the_layout_is_the_one_real_vllm_0_32_0_computes(scenario: dict) -> None:
    layout = _layout(DATA / scenario["config"], tp=scenario["tp"], kv=scenario["kv_cache_dtype"],
                     args={"enable_prefix_caching": scenario["mamba_cache_mode"] == "align"})
    blocks = layout.num_blocks(scenario["available_bytes"])
    got = {"mamba_state_bytes": layout.mamba_state_bytes, "block_size": layout.block_size,
           "page_bytes": layout.page_bytes, "mamba_page_padded": layout.page_bytes, "groups": layout.groups,
           "layers_per_group": layout.group_layers, "bytes_per_block": layout.bytes_per_block, "num_blocks": blocks,
           "reported_tokens": layout.reported_tokens(blocks, scenario["max_model_len"], 8192, Version("0.32.0")),
           "mamba_cache_mode": layout.mamba_cache_mode}
    assert got == {key: scenario[key] for key in got}
    assert layout.max_concurrency(blocks, scenario["max_model_len"], 8192) == pytest.approx(scenario["max_concurrency"])
    assert layout.parts["conv_state"] == scenario["state_shapes"][0]  # (kernel - 1, width): the SD layout
    assert layout.parts["ssm_state"] == scenario["state_shapes"][1]
    # the boot check: one request of max_model_len, and the length a refusal names (an eighth of the memory)
    assert layout.max_memory_usage(scenario["max_model_len"], 8192) == scenario["needed_bytes_at_max_model_len"]
    largest = layout.largest_model_len(scenario["available_bytes"] // 8, 8192, 1 << 22)
    assert largest == scenario["largest_max_model_len_eighth_memory"]
    assert [layout.parts["conv_dtype"], layout.parts["ssm_dtype"]] == scenario["state_dtypes"]


def _cases() -> list[dict]:
    return json.loads((LOGS / "hybrid_cases.json").read_text(encoding="utf-8"))["cases"]


def score(case: dict) -> dict:
    """kvcheck's figures for one logged case, beside the logged ones."""
    layout = _layout(DATA / case["model"], tp=int(case["args"].get("tensor_parallel_size", 1)),
                     kv=case["args"].get("kv_cache_dtype"), version=case["version"], sm=case["sm"], args=case["args"])
    version = Version(case["version"]) if case["version"] else None
    length = case["args"].get("max_model_len")
    batched = int(case["args"].get("max_num_batched_tokens") or 8192)
    out: dict = {"block_size": layout.block_size}
    if case["available_gib"] is not None:
        blocks = layout.num_blocks(int(case["available_gib"] * GIB))
        out["tokens"] = layout.reported_tokens(blocks, length, batched, version)
        out["concurrency"] = round(layout.max_concurrency(blocks, length, batched), 2)
    elif case["logged_tokens"] is not None:
        # no memory quoted: the block counts that print the logged size, and whether one also prints the concurrency
        fits = [n for n in range(1, 1 << 20) if layout.reported_tokens(n, length, batched, version) == case["logged_tokens"]]
        both = [n for n in fits if round(layout.max_concurrency(n, length, batched), 2) == case["logged_concurrency"]]
        out["tokens"] = case["logged_tokens"] if both else None
        out["concurrency"] = case["logged_concurrency"] if both else None
        out["blocks"] = both
    return out


@pytest.mark.parametrize("case", _cases(), ids=lambda c: c["id"])
def test_each_logged_hybrid_boot_is_reproduced(case: dict) -> None:
    assert case["set"] == "held-out" and case["source"].startswith("https://")
    assert (LOGS / case["log"]).is_file()
    got = score(case)
    if case["logged_block_size"] is not None:
        assert got["block_size"] == case["logged_block_size"]
    if case["logged_tokens"] is not None:
        assert got["tokens"] == case["logged_tokens"]
        assert got["concurrency"] == case["logged_concurrency"]


def test_the_logged_cases_pin_the_release_rules() -> None:
    """What each log decides: 0.24.0's align mode (2 blocks per state group) and its concurrency-based line;
    the 0.11 build's `num_blocks // groups x block` line and one block per state group."""
    cases = {case["id"]: case for case in _cases()}
    rtx = cases["rtx5090-qwen3.6-35b-a3b-nvfp4-v0.24.0-a"]
    assert score(rtx)["block_size"] == 2096  # 16 x cdiv(2,146,304 B of state, 16 x 1,024 B of fp8 KV per token)
    none_mode = dict(rtx, args={**rtx["args"], "enable_prefix_caching": False})
    assert score(none_mode)["tokens"] != rtx["logged_tokens"]  # 299 / 66 blocks per request, not 299 / 69
    nxt = score(cases["2gpu-qwen3-next-80b-int4-tp2-fp8e5m2-dev0.11"])
    assert nxt["blocks"] == [338, 339] and nxt["block_size"] == 1072
    newer = dict(cases["2gpu-qwen3-next-80b-int4-tp2-fp8e5m2-dev0.11"], version="0.24.0")
    assert score(newer)["tokens"] is None  # the concurrency-based line of 0.20.1+ prints no 90,048 here


def test_the_mode_follows_the_release_and_prefix_caching() -> None:
    nxt = LOGS / "configs" / "Qwen3-Next-80B-A3B-Instruct.json"
    modes = [_layout(config, version=version, args=args).mamba_cache_mode for config, version, args in (
        (nxt, "0.11.0", {"enable_prefix_caching": True}),  # up to 0.11.x prefix caching is off for hybrids
        (QWEN35_27B, "0.24.0", {}),  # off by default for hybrids until 0.25.x
        (QWEN35_27B, "0.24.0", {"enable_prefix_caching": True}),
        (QWEN35_27B, "0.26.0", {}),  # on by default from 0.26.0
        (QWEN35_27B, "0.32.0", {}),
        (QWEN35_27B, "0.32.0", {"enable_prefix_caching": False}))]
    assert modes == ["none", "none", "align", "align", "align", "none"]
    # Mamba2 hybrids with prefix caching on: "all" up to 0.27.x (refused), "align" from 0.28.0
    nano = MODELS / "nvidia--NVIDIA-Nemotron-3-Nano-30B-A3B-BF16.json"
    assert _layout(nano, version="0.28.0").mamba_cache_mode == "align"
    assert _layout(nano, version="0.11.0", args={"enable_prefix_caching": True}).mamba_cache_mode == "none"
    with pytest.raises(EstimateError, match="SSD kernel's chunk size"):  # 0.11.1 keeps it for Mamba2 layers
        _layout(nano, version="0.11.1", args={"enable_prefix_caching": True})
    assert _layout(nano, version="0.26.0", args={"mamba_cache_mode": "align"}).mamba_cache_mode == "align"
    with pytest.raises(EstimateError, match="does not serve Qwen3_5ForConditionalGeneration"):
        _layout(QWEN35_27B, version="0.16.0")


def test_the_ssm_dtype_follows_the_config_and_the_flag() -> None:
    assert _layout(QWEN35_27B).parts["ssm_dtype"] == "float32"  # Qwen3.5's mamba_ssm_dtype
    assert _layout(QWEN35_27B, args={"mamba_ssm_cache_dtype": "bfloat16"}).parts["ssm_dtype"] == "bfloat16"
    # Qwen3-Next before 0.17.0: the GDN state is all in the conv (model) dtype, the flag unread
    nxt = LOGS / "configs" / "Qwen3-Next-80B-A3B-Instruct.json"
    assert _layout(nxt, version="0.11.0", args={"mamba_ssm_cache_dtype": "float32"}).parts["ssm_dtype"] == "bfloat16"
    assert _layout(nxt, version="0.24.0", args={"mamba_ssm_cache_dtype": "float32"}).parts["ssm_dtype"] == "float32"
    nano = MODELS / "nvidia--NVIDIA-Nemotron-3-Nano-30B-A3B-BF16.json"
    assert _layout(nano, version="0.12.0", args={"enable_prefix_caching": False}).parts["ssm_dtype"] == "bfloat16"
    assert _layout(nano, version="0.32.0").parts["ssm_dtype"] == "float32"


def test_a_user_block_size_is_the_alignment_from_0_20_and_a_floor_before() -> None:
    assert _layout(QWEN35_27B, block_size=64).block_size == 64 * math.ceil(3_207_168 / (64 * 4096))  # 832
    assert _layout(QWEN35_27B, block_size=64, version="0.19.0").block_size == 784
    assert _layout(QWEN35_27B, block_size=1024, version="0.19.0").block_size == 1024
    # Blackwell with 256-wide heads: FlashInfer's 32-token kernel blocks, SM 10.0 from 0.11.1, SM 10.x 0.13.0-0.17.x
    assert _layout(QWEN35_27B, version="0.17.0", sm=100).block_size == 800
    assert _layout(QWEN35_27B, version="0.17.0", sm=103).block_size == 800
    assert _layout(QWEN35_27B, version="0.24.0", sm=100).block_size == 784
    nxt = LOGS / "configs" / "Qwen3-Next-80B-A3B-Instruct.json"
    sizes = [_layout(nxt, tp=2, kv="fp8_e5m2", version=v, sm=sm).block_size
             for v, sm in (("0.11.0", 100), ("0.11.1", 100), ("0.12.0", 103), ("0.13.0", 103))]
    assert sizes == [1072, 1088, 1072, 1088]  # 16 or 32 x cdiv(548,864 B of state, 512 B of fp8 KV a token)


@pytest.mark.parametrize(("config", "kwargs", "reason"), [
    (MODELS / "nvidia--NVIDIA-Nemotron-3-Nano-30B-A3B-BF16.json", {"version": "0.24.0", "args": {"enable_prefix_caching": True}},
     "mamba_cache_mode 'all'"),
    (QWEN35_27B, {"pp": 2}, "pipeline stages"),
    (QWEN35_27B, {"args": {"speculative_config": {"method": "mtp", "num_speculative_tokens": 2}}}, "speculative decoding"),
    (QWEN35_27B, {"device": "cpu", "sm": None}, "CPU backend"),
    (MODELS / "moonshotai--Kimi-K3.json", {}, ""),
])
def test_what_is_not_reproduced_is_refused_with_its_reason(config: Path, kwargs: dict, reason: str) -> None:
    with pytest.raises(EstimateError) as caught:
        _layout(config, **kwargs)
    assert reason in caught.value.message and "does not price" in caught.value.message


def _target(config: Path, **args: object) -> RoleTarget:
    return RoleTarget(name="server", context_length=int(args.get("max_model_len", 262144)), min_headroom=1.0,  # type: ignore[arg-type]
                      engine_version="0.32.0", args=dict(args), argv_args=(), gpu="H100", model_config=config,
                      engine="vllm", env={}, estimate=EstimateInputs())


def test_an_uncounted_hybrids_weights_are_not_counted_from_its_config() -> None:
    granite = LOGS / "configs" / "granite-4.0-h-shaped.json"  # Qwen3.5/NemotronH: test_vllm_hybrid_weights.py
    with pytest.raises(EstimateError, match="recurrent-state .* weights") as caught:
        estimate_role(_target(granite, max_model_len=131072), offline=True)
    assert "weights_gib_per_gpu" in (caught.value.hint or "")


def test_a_hybrid_with_its_weights_given_is_profiled_like_any_role() -> None:
    target = _target(QWEN35_27B, max_model_len=131072)
    given = replace(target, estimate=EstimateInputs(weights_gib_per_gpu=50.0))
    est = estimate_role(given, offline=True)
    details = est.details
    assert details["weights_source"] == "override" and details["mamba_cache_mode"] == "align"  # 0.32.0: prefix caching on
    blocks = details["num_gpu_blocks"]
    per_block = 16 * 784 * 4096  # 16 layers a group, 784-token pages of 2 x 4 heads x 256 x 2 B
    assert details["bytes_per_block"] == per_block
    assert 0 <= details["available_kv_gib"] * GIB - blocks * per_block < per_block + 0.001 * GIB
    assert est.pool_tokens == (blocks - 1 - 3 * 2) * 784
    assert est.pool_range[0] <= est.pool_tokens <= est.pool_range[1]


def test_a_hybrid_role_naming_no_gpu_is_refused_since_the_cpu_build_is_possible() -> None:
    target = _target(QWEN35_27B, max_model_len=131072, kv_cache_memory_bytes=20 * GIB)
    unnamed = replace(target, gpu=None)
    with pytest.raises(EstimateError, match="no GPU named, so vLLM's CPU build is possible") as caught:
        estimate_role(unnamed, offline=True)
    assert "name the GPU" in (caught.value.hint or "")


def test_the_pool_of_an_explicit_cache_is_the_full_attention_share() -> None:
    est = estimate_role(_target(QWEN35_27B, max_model_len=262144, kv_cache_memory_bytes=20 * GIB), offline=True)
    details = est.details
    # 20 GiB / (16 layers x 3,211,264 B) = 417 blocks; a request: the null block out, 2 blocks in each of 3 state groups
    assert (details["block_size"], details["num_gpu_blocks"], details["mamba_cache_mode"]) == (784, 417, "align")
    assert est.pool_tokens == (417 - 1 - 3 * 2) * 784
    assert details["kv_cache_groups"] == {"attention": 1, "state": 3, "layers_per_group": 16}
    assert details["max_concurrency_at_window"] == round(417 / (335 + 6), 2)
    assert details["vllm_reported_kv_cache_tokens"] == int(417 / 341 * 262144)
    assert any("raises the attention block to 784" in a for a in est.assumptions)


def test_kvcheck_verify_estimates_a_qwen35_role_end_to_end(tmp_path: Path) -> None:
    manifest = tmp_path / "qwen35.yaml"
    manifest.write_text(
        "context_length: 262144\n"
        f"model: {{path: Qwen/Qwen3.5-27B, config: {QWEN35_27B}}}\n"
        'engine: {name: vllm, version: "0.32.0"}\n'
        "gpu: H100\n"
        "roles:\n"
        "  server:\n"
        "    gpus: [0]\n"
        "    args: {max-model-len: 262144, kv-cache-memory-bytes: 21474836480}\n")
    result = run_kvcheck("verify", str(manifest), "--mode", "estimate", "--format", "json")
    assert result.exit_code == 0, result.stderr + result.stdout
    role = json.loads(result.stdout)["roles"][0]
    assert role["pool_tokens"] == 410 * 784
    small = manifest.read_text().replace("21474836480", "4294967296")  # 4 GiB: 83 blocks, 331 needed
    manifest.write_text(small)
    refused = run_kvcheck("verify", str(manifest), "--mode", "estimate", "--format", "json")
    assert refused.exit_code == 1, refused.stderr
    assert "KV220" in {f["rule"] for f in json.loads(refused.stdout)["findings"]}


@pytest.mark.skipif(not os.environ.get("KVCHECK_REAL_VLLM"), reason="KVCHECK_REAL_VLLM not set (the real vLLM install)")
def test_the_reference_file_is_what_real_vllm_prints_now() -> None:
    python = Path(os.environ["KVCHECK_REAL_VLLM"]) / "venv" / "bin" / "python"
    proc = subprocess.run([str(python), str(REPO_ROOT / "tests" / "bench" / "vllm_hybrid_reference.py")],
                          capture_output=True, text=True, timeout=600, check=True, cwd=REPO_ROOT)
    assert json.loads(proc.stdout) == json.loads((LOGS / "hybrid_vllm_0.32.0.json").read_text(encoding="utf-8"))
