"""SGLang's group offload (OffloaderV2: `--offload-group-size`, `--offload-num-in-group`, `--offload-prefetch-step`,
`--offload-mode`, from 0.5.1): only the DeepSeek-V2 model names what to move (its routed experts), post_init copies
the first prefetch_step offloaded layers' experts back before the pool is sized, and SGLang stops on settings its
offloader cannot run (srt/utils/offloader.py, models/deepseek_v2.py). The estimate ignored the flags: the same pool
with them as without, and a start SGLang stops on was priced as one that serves."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvcheck.engines.offload import GIB
from kvcheck.engines.sglang.sizing.offload import GroupSettings, group_offload
from tests.conftest import run_kvcheck
from tests.datapaths import MODELS
from tests.estimate.helpers import one_role_manifest

LLAMA_8B = MODELS / "meta-llama--Meta-Llama-3.1-8B.json"
DEEPSEEK_V3 = MODELS / "deepseek-ai--DeepSeek-V3.json"
EIGHT = "[0, 1, 2, 3, 4, 5, 6, 7]"
# DeepSeek-V3 (FP8, 128 x 128 fp32 block scales) at TP8: one rank's routed experts (256 x 3 x 7168 x 2048 / 8) and
# its shared expert (3 x 7168 x 2048 / 8) of one MoE layer, scales included
V3_EXPERTS = (256 + 1) * 3 * 7168 * 2048 // 8 * (1 + 4 / (128 * 128))


def _write(tmp_path: Path, name: str, args: str, *, version: str = "0.5.23", gpu: str = "H200",
           config: Path = DEEPSEEK_V3, gpus: str = EIGHT) -> Path:
    body = f"context-length: 32768{', ' + args if args else ''}"
    path = one_role_manifest(tmp_path, config, body, name=name, engine="sglang", version=version, gpu=gpu,
                             gpus=gpus, window=32768)
    return path


def _verify(tmp_path: Path, name: str, args: str, **kw: str | Path) -> tuple[int, dict]:
    done = run_kvcheck("verify", str(_write(tmp_path, name, args, **kw)), "--mode", "estimate",  # type: ignore[arg-type]
                       "--format", "json")
    return done.exit_code, json.loads(done.stdout)


def test_deepseek_v3s_moved_experts_are_a_bound_the_range_holds(tmp_path: Path) -> None:
    """Groups of 4 offload layers 3, 7, ..., 59 (15 of 61, all MoE); post_init copies layer 3's experts back: up to
    14 layers' experts leave each GPU. Which stay moved depends on the quantization method, so the figure keeps them
    (KV113, naming the mode) and the range's high end moves them."""
    code, plain = _verify(tmp_path, "plain", "tp-size: 8")
    assert code == 0, plain
    code, moved = _verify(tmp_path, "moved", "tp-size: 8, offload-group-size: 4")
    assert code == 0, moved
    [a], [b] = plain["roles"], moved["roles"]
    assert b["pool_tokens"] == a["pool_tokens"]
    assert b["details"]["pool_range"][0] == a["details"]["pool_range"][0]
    assert b["details"]["pool_range"][1] > a["details"]["pool_range"][1]
    [kv113] = moved["findings"]
    assert (kv113["rule"], kv113["severity"]) == ("KV113", "warning")
    assert kv113["message"] == (
        "--offload-group-size 4 --offload-num-in-group 1 --offload-prefetch-step 1 --offload-mode cpu is not priced: "
        f"the pool is predicted with every weight on the GPU ({b['pool_tokens']:,} tokens), and the weights SGLang "
        f"moves to the CPU leave a larger one, up to {b['details']['pool_range'][1]:,} tokens (the estimate's range); "
        "a role that fails here may fit")
    assert kv113["location"]["line"] == 5
    [note] = [x for x in b["details"]["assumptions"] if x.startswith("--offload-group-size")]
    assert f"the range's high end moves up to {14 * V3_EXPERTS / GIB:.2f} GiB per GPU" in note  # 18.45


def test_the_high_end_is_the_experts_of_the_offloaded_layers_after_the_prefetched_ones() -> None:
    experts = [0.0] * 3 + [10.0] * 58  # DeepSeek-V3's first three layers are dense
    settings = GroupSettings(group_size=2, num_in_group=1, prefetch_step=2, mode="cpu")
    # one stage: layers 1, 3, 5, ..., 59 offloaded; 1 and 3 copied back; 5..59 (28 layers) stay moved
    assert group_offload(settings, "DeepseekV3ForCausalLM", [range(61)], experts).stage_high_bytes == (280.0,)
    # two stages (31 + 30 layers, SGLang's split): each counts its own positions from its first layer
    two = group_offload(settings, "DeepseekV3ForCausalLM", [range(0, 30), range(30, 61)], experts)
    assert two.stage_high_bytes == (13 * 10.0, 13 * 10.0)


def test_a_start_refused_with_every_weight_on_the_gpu_is_not_called_refused(tmp_path: Path) -> None:
    """DeepSeek-V3 at TP8 on H100s: the weights leave no pool (KV120, exit 1); with groups of 2 up to 29 layers'
    experts may leave the GPU, so the estimate cannot tell whether SGLang starts: KV305, exit 3."""
    code, plain = _verify(tmp_path, "plain", "tp-size: 8", gpu="H100")
    assert code == 1 and plain["findings"][0]["rule"] == "KV120"
    code, moved = _verify(tmp_path, "moved", "tp-size: 8, offload-group-size: 2", gpu="H100")
    assert code == 3, moved
    [kv305] = moved["findings"]
    assert kv305["message"].startswith(
        "pool could not be estimated: with every weight on the GPU SGLang would not start (Loaded weights leave no GPU "
        "memory for the KV cache")
    assert ("and the weights --offload-group-size 2 --offload-num-in-group 1 --offload-prefetch-step 1 --offload-mode "
            "cpu moves to the CPU may leave a pool of up to ") in kv305["message"]


def test_cpu_offload_gb_wins_and_the_group_flags_are_ignored(tmp_path: Path) -> None:
    """create_offloader returns OffloaderV1 when --cpu-offload-gb is above 0 before it looks at the group size, so
    its `assert cpu_offload_gb == 0` for OffloaderV2 never runs: not a refusal, the --cpu-offload-gb estimate."""
    _, budget = _verify(tmp_path, "budget", "tp-size: 8, cpu-offload-gb: 10")
    code, both = _verify(tmp_path, "both", "tp-size: 8, cpu-offload-gb: 10, offload-group-size: 4, offload-mode: bad")
    assert code == 0, both
    assert both["roles"][0]["details"]["pool_range"] == budget["roles"][0]["details"]["pool_range"]
    assert [f["message"] for f in both["findings"]] == [f["message"] for f in budget["findings"]]
    assert any(x.endswith("--offload-group-size is ignored: SGLang builds OffloaderV1 when --cpu-offload-gb is set "
                          "(create_offloader), never OffloaderV2 beside it")
               for x in both["roles"][0]["details"]["assumptions"])


@pytest.mark.parametrize(("args", "kw", "column", "message"), [
    ("offload-group-size: 4", dict(config=LLAMA_8B, gpu="H100", gpus="[0]"), 31,
     "--offload-group-size 4 --offload-num-in-group 1 --offload-prefetch-step 1 --offload-mode cpu: SGLang's "
     "LlamaForCausalLM model does not name the submodule OffloaderV2 offloads (only the DeepSeek-V2 model passes "
     "offloader_kwargs to make_layers), so SGLang stops loading it"),
    ("tp-size: 8, offload-group-size: 4, offload-mode: shm_cpu", {}, 66,
     "--offload-group-size 4 --offload-num-in-group 1 --offload-prefetch-step 1 --offload-mode shm_cpu: OffloaderV2 "
     "asserts 'not yet support tp_size!=1' for --offload-mode shm_cpu as the model runner starts"),
    ("tp-size: 8, offload-group-size: 4, offload-prefetch-step: 20", {}, 66,
     "--offload-group-size 4 --offload-num-in-group 1 --offload-prefetch-step 20 --offload-mode cpu: OffloaderV2 "
     "offloads 15 of the 61 layers of each rank, and post_init prefetches the first 20: SGLang stops with an "
     "IndexError before the pool is sized"),
    ("tp-size: 8, offload-group-size: 4, offload-prefetch-step: 0", {}, 66,
     "--offload-group-size 4 --offload-num-in-group 1 --offload-prefetch-step 0 --offload-mode cpu: with no layer "
     "prefetched, the first forward finds layer 3's experts not copied back and asserts"),
    ("tp-size: 8, offload-group-size: 4, offload-mode: gpu", {}, 66,
     "--offload-mode gpu is not one SGLang has (cpu, meta, shm_cpu, sharded_gpu)"),
    ("tp-size: 8, offload-group-size: 4", dict(version="0.5.2"), 43,
     "--offload-group-size 4 --offload-num-in-group 1 --offload-prefetch-step 1 --offload-mode cpu: SGLang 0.5.2's "
     "DeepSeek-V2 model names the NVFP4 block scales (w13_blockscale_swizzled, w2_blockscale_swizzled) of every "
     "offloaded MoE layer, which these experts do not have (layer 3)"),
    ("offload-group-size: 4, ple-offload-embedding: true", dict(config=LLAMA_8B, gpu="H100", gpus="[0]"), 54,
     "SGLang refuses --ple-offload-embedding with --cpu-offload-gb or --offload-group-size"),
])
def test_settings_sglang_stops_on_are_exit_2(tmp_path: Path, args: str, kw: dict, column: int, message: str) -> None:
    path = _write(tmp_path, "refused", args, **kw)
    done = run_kvcheck("verify", str(path), "--mode", "estimate")
    assert done.exit_code == 2, done.stdout
    assert done.stderr.splitlines()[0].startswith(f"kvcheck: error: {path}:5:{column}: role server: {message}")


def test_a_class_sglang_does_not_offload_through_at_prefetch_0_is_not_checked(tmp_path: Path) -> None:
    """With no prefetch, a class without the DeepSeek-V2 model's accessor either moves nothing (no make_layers) or
    stops with a TypeError (make_layers): KV305, exit 3. Where no layer falls in a group's last, nothing moves."""
    kw: dict = dict(config=LLAMA_8B, gpu="H100", gpus="[0]")
    code, report = _verify(tmp_path, "hit", "offload-group-size: 4, offload-prefetch-step: 0", **kw)
    assert code == 3 and [f["rule"] for f in report["findings"]] == ["KV305"]
    _, plain = _verify(tmp_path, "plain", "", **kw)
    code, report = _verify(tmp_path, "miss", "offload-group-size: 100, offload-prefetch-step: 0", **kw)
    assert code == 0 and report["roles"][0]["pool_tokens"] == plain["roles"][0]["pool_tokens"]
    assert report["findings"] == []
