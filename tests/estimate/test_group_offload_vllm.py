"""vLLM's prefetch offload (`--offload-group-size`, `--offload-num-in-group`, `--offload-prefetch-step`, from 0.17.0):
PrefetchOffloader moves every parameter of the last num_in_group of every group_size layers of the make_layers stack
as it builds the model, and keeps a StaticBufferPool of prefetch_step copies of each distinct parameter on the GPU,
allocated after the weights are measured and before the memory profile, which counts it from 0.27.0
(model_executor/offloader/prefetch.py, config/offload.py, v1/worker/gpu_model_runner.py in 0.17.0-0.32.0). The
estimate ignored the flags: the same pool with them as without."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import run_kvcheck
from tests.datapaths import MODELS
from tests.estimate.helpers import one_role_manifest

LLAMA_8B = MODELS / "meta-llama--Meta-Llama-3.1-8B.json"
DEEPSEEK_V3 = MODELS / "deepseek-ai--DeepSeek-V3.json"
# Llama-3.1-8B's decoder layer on one GPU, bf16: q/o 2 x 4096 x 4096, k/v 2 x 4096 x 1024, MLP 3 x 4096 x 14336,
# two RMSNorms of 4096: every parameter PrefetchOffloader moves of one layer, and one StaticBufferPool slot
LLAMA_8B_LAYER = (2 * 4096 * 4096 + 2 * 4096 * 1024 + 3 * 4096 * 14336) * 2 + 2 * 4096 * 2
BLOCK = 16 * 32 * 2 * 8 * 128 * 2  # a 16-token block of Llama-3.1-8B's bf16 KV cache


def _write(tmp_path: Path, name: str, args: str, *, version: str = "0.32.0", gpu: str = "H100",
           window: int = 131072, config: Path = LLAMA_8B, gpus: str = "[0]") -> Path:
    body = f"max-model-len: {window}{', ' + args if args else ''}"
    path = one_role_manifest(tmp_path, config, body, name=name, version=version, gpu=gpu, gpus=gpus,
                             window=window)
    return path


def _verify(tmp_path: Path, name: str, args: str, **kw: object) -> tuple[int, dict]:
    done = run_kvcheck("verify", str(_write(tmp_path, name, args, **kw)), "--mode", "estimate",  # type: ignore[arg-type]
                       "--format", "json")
    return done.exit_code, json.loads(done.stdout)


def test_the_moved_layers_less_one_staging_layer_come_out_of_the_pool_to_the_byte(tmp_path: Path) -> None:
    """Llama-3.1-8B on one H100, groups of 4: layers 3, 7, ..., 31 move (8 of 32), and the pool keeps one layer's
    copy: 7 layers' bytes more for the KV cache, priced (no KV113)."""
    code, plain = _verify(tmp_path, "plain", "")
    assert code == 0, plain
    code, moved = _verify(tmp_path, "moved", "offload-group-size: 4, offload-num-in-group: 1, offload-prefetch-step: 1")
    assert code == 0, moved
    [a], [b] = plain["roles"], moved["roles"]
    assert moved["findings"] == []
    net = 7 * LLAMA_8B_LAYER  # 3,053,568,000 bytes
    assert b["details"]["weights_off_gpu_bytes"] == [round(net * 0.98), net, round(net * 1.02)]
    grown = b["details"]["num_gpu_blocks"] - a["details"]["num_gpu_blocks"]
    assert grown in (net // BLOCK, net // BLOCK + 1)  # 1,456 blocks, whatever the remainder of the plain pool
    assert b["pool_tokens"] - a["pool_tokens"] == grown * 16
    assert b["details"]["pool_range"][1] > a["details"]["pool_range"][1]
    [note] = [x for x in b["details"]["assumptions"] if x.startswith("--offload-group-size")]
    assert note.startswith(
        "--offload-group-size 4 --offload-num-in-group 1 --offload-prefetch-step 1: vLLM's PrefetchOffloader moves "
        "every parameter of 8 of the 32 layers on each GPU to the CPU (the last 1 of every 4; "
        "model_executor/offloader/prefetch.py) as it builds the model: 3.250 GiB off the GPU, less the 1 staging copy "
        "of a moved layer (0.406 GiB) kept on it")
    assert note.endswith("2.844 GiB net, priced from the layers' count (+-2%)")


def test_before_0_27_the_profile_does_not_count_the_staging_pool(tmp_path: Path) -> None:
    """vLLM 0.25.0: non_kv_cache_memory is the weights measured before post_init plus the torch peak's increase
    over the profile, so the pool allocated between them is not taken from the KV cache: all 8 layers count."""
    code, moved = _verify(tmp_path, "moved", "offload-group-size: 4", version="0.25.0")
    assert code == 0, moved
    [role] = moved["roles"]
    assert role["details"]["weights_off_gpu_bytes"][1] == 8 * LLAMA_8B_LAYER
    assert any("are not counted by the profile up to 0.26: they take GPU memory beyond --gpu-memory-utilization"
               in x for x in role["details"]["assumptions"])


# review8 finding 1: Llama-3.1-8B on one H100, 68 GiB of explicit KV cache; groups of 2 with a prefetch step of 16
# move 16 layers and keep 16 staging copies on the GPU, a net of nothing on every release
KVB68 = "kv-cache-memory-bytes: 73014444032"
G2S16 = "offload-group-size: 2, offload-prefetch-step: 16"


@pytest.mark.parametrize("version", ["0.25.0", "0.32.0"])
def test_an_explicit_cache_counts_the_staging_copies_on_every_release(tmp_path: Path, version: str) -> None:
    """The 68 GiB cache does not fit beside Llama-3.1-8B's weights (KV220, exit 1); the offload moves 16 layers and
    keeps 16 copies of them on the GPU, which up to 0.26 the profiler does not count but the GPU still holds: the
    same refused start on 0.25.0 as on 0.32.0 (0.25.0 passed, the copies charged nowhere)."""
    code, plain = _verify(tmp_path, "plain", KVB68, version=version)
    assert code == 1 and [f["rule"] for f in plain["findings"]][0] == "KV220", plain
    code, moved = _verify(tmp_path, "moved", f"{KVB68}, {G2S16}", version=version)
    assert code == 1, moved
    [kv220] = [f for f in moved["findings"] if f["rule"] == "KV220"]
    assert "--kv-cache-memory-bytes asks for 68.00 GiB" in kv220["message"]
    assert moved["roles"][0]["pool_tokens"] == 0


def test_before_0_27_staging_copies_larger_than_the_memory_outside_the_budget_refuse_the_start(
        tmp_path: Path) -> None:
    """vLLM 0.25.0 at --gpu-memory-utilization 0.95: the KV cache takes the whole budget as if the 6.5 GiB of
    staging copies were not there, and an H100 has 3.96 GiB outside it: out of memory (KV220, exit 1), where
    kvcheck passed a larger pool than without the offload. 0.32.0 counts the copies and passes."""
    code, plain = _verify(tmp_path, "plain", "gpu-memory-utilization: 0.95", version="0.25.0")
    assert code == 0, plain
    code, moved = _verify(tmp_path, "moved", f"gpu-memory-utilization: 0.95, {G2S16}", version="0.25.0")
    assert code == 1, moved
    [kv220] = [f for f in moved["findings"] if f["rule"] == "KV220"]
    assert "PrefetchOffloader keeps 6.37 GiB of staging copies" in kv220["message"]
    code, counted = _verify(tmp_path, "counted", f"gpu-memory-utilization: 0.95, {G2S16}", version="0.32.0")
    assert code == 0, counted


def test_before_0_27_staging_copies_near_the_memory_outside_the_budget_are_not_checked(tmp_path: Path) -> None:
    """At 0.9 an H100 has 7.92 GiB outside the budget: 6.5 GiB of copies may fit or may not beside the CUDA graphs
    vLLM 0.25.0 captures there, so the role is not checked (KV305, exit 3), never passed; one copy fits (exit 0)."""
    code, moved = _verify(tmp_path, "moved", G2S16, version="0.25.0")
    assert code == 3, moved
    assert [f["rule"] for f in moved["findings"]] == ["KV305"]
    assert "beyond the --gpu-memory-utilization budget" in moved["findings"][0]["message"]
    code, one = _verify(tmp_path, "one", "offload-group-size: 2", version="0.25.0")
    assert code == 0, one


def test_more_staging_slots_than_moved_layers_cost_the_pool(tmp_path: Path) -> None:
    """Groups of 16 move layers 15 and 31; a prefetch step of 4 still allocates 4 slots: 2 layers' bytes less."""
    code, moved = _verify(tmp_path, "moved", "offload-group-size: 16, offload-prefetch-step: 4")
    assert code == 0, moved
    assert moved["roles"][0]["details"]["weights_off_gpu_bytes"][1] == (2 - 4) * LLAMA_8B_LAYER


def test_a_start_refused_with_every_weight_on_the_gpu_that_quantized_experts_may_let_through_is_not_checked(
        tmp_path: Path) -> None:
    """DeepSeek-V3 (FP8) at TP8 on H100s: no room for a KV cache with every weight on the GPU (KV220, exit 1);
    groups of 4 move 15 of the 61 layers, all routed-expert ones (the last dense one is layer 2). The FP8 MoE
    method may replace the expert parameters after loading, so the figure moves no expert bytes: a bound whose
    small end is refused and whose high end holds a pool, KV305 (exit 3) rather than a priced pass."""
    args = "tensor-parallel-size: 8"
    kw = dict(gpu="H100", window=32768, config=DEEPSEEK_V3, gpus="[0, 1, 2, 3, 4, 5, 6, 7]")
    code, plain = _verify(tmp_path, "plain", args, **kw)
    assert code == 1 and [f["rule"] for f in plain["findings"]] == ["KV220", "KV101"]
    code, moved = _verify(tmp_path, "moved", args + ", offload-group-size: 4", **kw)
    assert code == 3, moved
    assert [f["rule"] for f in moved["findings"]] == ["KV305"]
    assert "with no routed-expert bytes off the GPU vLLM would not start" in moved["findings"][0]["message"]


GPT_OSS_120B = MODELS / "openai--gpt-oss-120b.json"


def test_mxfp4_experts_replaced_after_loading_are_not_credited_as_moved(tmp_path: Path) -> None:
    """gpt-oss-120b on one H100 (vLLM 0.32.0, 0.85): the MXFP4 TRITON backends delete w13/w2_weight and re-store
    the swizzled experts on the GPU as plain attributes (fused_moe/oracle/mxfp4.py:1381-1386,
    quantization/mxfp4.py:361-372), which the PrefetchOffloader does not move. Without the offload vLLM has no
    room for the cache (KV220, exit 1); with groups of 2 the estimate priced 29 GiB of experts off the GPU and
    passed (review8 finding 2). Now the figure moves no expert bytes: not checked (KV305, exit 3), never a pass."""
    kw = dict(config=GPT_OSS_120B)
    code, plain = _verify(tmp_path, "plain", "gpu-memory-utilization: 0.85", **kw)
    assert code == 1 and [f["rule"] for f in plain["findings"]][0] == "KV220", plain
    code, moved = _verify(tmp_path, "moved", "gpu-memory-utilization: 0.85, offload-group-size: 2", **kw)
    assert code == 3, moved
    assert [f["rule"] for f in moved["findings"]] == ["KV305"]
    assert "mxfp4 MoE method may replace" not in moved["findings"][0]["message"]  # the note says why, not KV305


def test_a_quantized_moe_offload_that_starts_either_way_is_a_bound(tmp_path: Path) -> None:
    """gpt-oss-120b on an H200 starts with every weight on the GPU: the offload is KV113, the figure the pool
    without the offload's experts moved, the high end with them."""
    kw = dict(config=GPT_OSS_120B, gpu="H200")
    code, plain = _verify(tmp_path, "plain", "", **kw)
    code2, moved = _verify(tmp_path, "moved", "offload-group-size: 2", **kw)
    assert code2 == code, moved
    rules = [f["rule"] for f in moved["findings"]]
    assert "KV113" in rules
    [role] = moved["roles"]
    low, point, high = role["details"]["weights_off_gpu_bytes"]
    assert point <= 0 < high
    assert role["pool_tokens"] <= plain["roles"][0]["pool_tokens"] + 16 * 36  # no expert credited
    [note] = [x for x in role["details"]["assumptions"] if x.startswith("--offload-group-size")]
    assert "the figure moves no routed-expert bytes" in note


def test_moved_layers_of_two_kinds_are_a_bound(tmp_path: Path) -> None:
    """Groups of 2 on DeepSeek-V3 move layer 1 (dense) and 3, 5, ... (routed experts): the pool keeps a copy of each
    distinct parameter, and a dense and an expert layer share their attention's, which the count does not split:
    the figure charges both whole layers (KV113), the high end only the larger. The FP8 MoE method may replace the
    expert parameters after loading, so the figure moves no expert bytes either."""
    kw = dict(gpu="H200", window=32768, config=DEEPSEEK_V3, gpus="[0, 1, 2, 3, 4, 5, 6, 7]")
    code, moved = _verify(tmp_path, "moved", "tensor-parallel-size: 8, offload-group-size: 2", **kw)
    assert code == 0, moved
    [kv113] = moved["findings"]
    [role] = moved["roles"]
    assert (kv113["rule"], kv113["severity"]) == ("KV113", "warning")
    assert kv113["message"] == (
        "--offload-group-size 2 --offload-num-in-group 1 --offload-prefetch-step 1 is not priced: the pool is "
        f"predicted with no routed-expert bytes off the GPU ({role['pool_tokens']:,} tokens), "
        f"and the weights vLLM moves to the CPU leave a larger one, up to {role['details']['pool_range'][1]:,} tokens "
        "(the estimate's range); a role that fails here may fit")
    assert kv113["location"]["line"] == 5
    low, point, high = role["details"]["weights_off_gpu_bytes"]
    assert low <= point <= 0 < high


def test_offload_params_is_a_bound(tmp_path: Path) -> None:
    """--offload-params moves the parameters whose names it matches, which config.json does not size: the figure
    moves nothing (a prefetch step of 1 against 8 moved layers can only free memory), KV113 names the flags."""
    code, plain = _verify(tmp_path, "plain", "")
    code, moved = _verify(tmp_path, "moved", "offload-group-size: 4, offload-params: [mlp]")
    assert code == 0, moved
    assert moved["roles"][0]["pool_tokens"] == plain["roles"][0]["pool_tokens"]
    assert [f["rule"] for f in moved["findings"]] == ["KV113"]
    assert moved["findings"][0]["message"].startswith(
        "--offload-group-size 4 --offload-num-in-group 1 --offload-prefetch-step 1 --offload-params is not priced")
    assert moved["roles"][0]["details"]["weights_off_gpu_bytes"][2] == round(7 * LLAMA_8B_LAYER * 1.02)


def test_one_offloader_is_built_the_other_flags_are_ignored(tmp_path: Path) -> None:
    """create_offloader builds the prefetch backend when --offload-group-size is set under `auto`, UVA under `uva`:
    --cpu-offload-gb beside the group flags was a KV113 bound on a budget vLLM never moves."""
    _, group = _verify(tmp_path, "group", "offload-group-size: 4")
    _, both = _verify(tmp_path, "both", "offload-group-size: 4, cpu-offload-gb: 8")
    assert both["findings"] == [] and both["roles"][0]["pool_tokens"] == group["roles"][0]["pool_tokens"]
    assert any("--cpu-offload-gb 8 is ignored" in x for x in both["roles"][0]["details"]["assumptions"])
    _, uva = _verify(tmp_path, "uva", "cpu-offload-gb: 8")
    _, named = _verify(tmp_path, "named", "offload-group-size: 4, cpu-offload-gb: 8, offload-backend: uva")
    assert named["roles"][0]["details"]["pool_range"] == uva["roles"][0]["details"]["pool_range"]
    assert [f["rule"] for f in named["findings"]] == ["KV113"]


@pytest.mark.parametrize(("args", "column", "reason"), [
    ("offload-group-size: 4, offload-num-in-group: 5", 54,
     "offload_num_in_group (5) must be <= offload_group_size (4)"),
    ("offload-group-size: 4, offload-prefetch-step: 0", 54,
     "offload_prefetch_step (0) must be >= 1 when prefetch offloading is enabled (offload_group_size > 0)"),
    ("offload-backend: prefetch", 31, "offload_num_in_group (1) must be <= offload_group_size (0)"),
])
def test_settings_vllm_refuses_before_any_model_loads_are_exit_2(tmp_path: Path, args: str, column: int,
                                                                  reason: str) -> None:
    """OffloadConfig.validate_offload_config (config/offload.py) raises while EngineArgs builds the config."""
    path = _write(tmp_path, "refused", args)
    done = run_kvcheck("verify", str(path), "--mode", "estimate")
    assert done.exit_code == 2
    assert done.stderr.splitlines()[0] == (
        f"kvcheck: error: {path}:5:{column}: role server: vLLM 0.32.0 refuses these offload settings before any model "
        f"loads: OffloadConfig raises '{reason}' (config/offload.py)")
