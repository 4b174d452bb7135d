"""`--cpu-offload-gb`: both engines move whole parameters of the layers make_layers builds to the CPU, in the model
class's order, until the per-GPU budget is reached (SGLang srt/utils/offloader.py OffloaderV1; vLLM
model_executor/offloader/uva.py, models/utils.py maybe_offload_to_cpu up to 0.14). Which parameters move is not
priced, so the estimate keeps every weight on the GPU for its figure, widens the range's high end by the budget plus
the largest layer, and says so (KV113); a start refused with every weight on the GPU that the moved weights may let
through is not called refused (KV305). The estimate ignored the flag: the same pool and range with or without it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import run_kvcheck
from tests.datapaths import MODELS
from tests.estimate.helpers import one_role_manifest

LLAMA_8B = MODELS / "meta-llama--Meta-Llama-3.1-8B.json"
LLAMA_70B = MODELS / "meta-llama--Meta-Llama-3.1-70B.json"
QWEN35_397B = MODELS / "Qwen--Qwen3.5-397B-A17B.json"
GIB = 1 << 30
# Llama-3.1-8B's decoder layer on one GPU, bf16: q/o 2 x 4096 x 4096, k/v 2 x 4096 x 1024, MLP 3 x 4096 x 14336,
# two RMSNorms of 4096
LLAMA_8B_LAYER = (2 * 4096 * 4096 + 2 * 4096 * 1024 + 3 * 4096 * 14336) * 2 + 2 * 4096 * 2


def _verify(tmp_path: Path, name: str, engine: str, version: str, gpu: str, window: int, args: str,
            config: Path = LLAMA_8B, gpus: str = "[0]") -> tuple[int, dict]:
    path = one_role_manifest(tmp_path, config, args, name=name, engine=engine, version=version, gpu=gpu, gpus=gpus,
                             window=window)
    done = run_kvcheck("verify", str(path), "--mode", "estimate", "--format", "json")
    return done.exit_code, json.loads(done.stdout)


@pytest.mark.parametrize(("engine", "version", "window_flag"), [("vllm", "0.32.0", "max-model-len"),
                                                                ("sglang", "0.5.23", "context-length")])
def test_the_figure_keeps_the_weights_and_the_range_holds_the_moved_ones(tmp_path: Path, engine: str, version: str,
                                                                         window_flag: str) -> None:
    base = f"{window_flag}: 131072"
    code, plain = _verify(tmp_path, "plain", engine, version, "H100", 131072, base)
    assert code == 0, plain
    code, moved = _verify(tmp_path, "moved", engine, version, "H100", 131072, base + ", cpu-offload-gb: 8")
    assert code == 0, moved
    [a], [b] = plain["roles"], moved["roles"]
    assert b["pool_tokens"] == a["pool_tokens"]  # the figure: every weight on the GPU, the smallest pool
    assert b["details"]["pool_range"][0] == a["details"]["pool_range"][0]
    # the high end: 8 GiB plus the largest layer more for the cache, give or take the pages it is counted in
    cell = 32 * 2 * 8 * 128 * 2  # Llama-3.1-8B bf16: layers x K,V x KV heads x head_dim x 2 bytes
    grown = (b["details"]["pool_range"][1] - a["details"]["pool_range"][1]) * cell
    assert abs(grown - (8 * GIB + LLAMA_8B_LAYER)) < 16 * cell
    [kv113] = moved["findings"]
    label = "vLLM" if engine == "vllm" else "SGLang"
    assert (kv113["rule"], kv113["severity"]) == ("KV113", "warning")
    assert kv113["message"] == (
        f"--cpu-offload-gb 8 is not priced: the pool is predicted with every weight on the GPU "
        f"({b['pool_tokens']:,} tokens), and the weights {label} moves to the CPU leave a larger one, up to "
        f"{b['details']['pool_range'][1]:,} tokens (the estimate's range); a role that fails here may fit")
    assert kv113["location"]["line"] == 5
    assert any(a.startswith(f"--cpu-offload-gb 8: {label} moves layer weights to the CPU") for a in
               b["details"]["assumptions"])


def test_a_vllm_start_the_moved_weights_may_let_through_is_not_called_refused(tmp_path: Path) -> None:
    """Llama-3.1-8B on one L4 at 65,536 tokens: refused with every weight on the GPU (KV220), and 8 GiB moved to the
    CPU would hold the window: the estimate cannot tell which, so the role is not checked (exit 3), never failed as
    a refused start."""
    code, plain = _verify(tmp_path, "plain", "vllm", "0.32.0", "L4", 65536, "max-model-len: 65536")
    assert code == 1 and [f["rule"] for f in plain["findings"]] == ["KV220", "KV101"]
    code, moved = _verify(tmp_path, "moved", "vllm", "0.32.0", "L4", 65536, "max-model-len: 65536, cpu-offload-gb: 8")
    assert code == 3, moved
    [kv305] = moved["findings"]
    assert kv305["rule"] == "KV305"
    assert kv305["message"].startswith(
        "pool could not be estimated: with every weight on the GPU vLLM would not start (To serve at least one "
        "request with the model's max seq len (65536) ... the estimated maximum model length is ")
    assert "and the weights --cpu-offload-gb 8 moves to the CPU may leave a pool of up to " in kv305["message"]


def test_an_explicit_cache_the_moved_weights_may_make_room_for_is_not_called_out_of_memory(tmp_path: Path) -> None:
    """Llama-3.1-70B on one H100 with a 10 GiB --kv-cache-memory-bytes: its weights alone exceed the GPU (KV220, a
    certain out of memory); with 80 GiB offloaded it may fit, so the certainty is gone."""
    args = "max-model-len: 8192, kv-cache-memory-bytes: 10737418240"
    code, plain = _verify(tmp_path, "plain", "vllm", "0.32.0", "H100", 8192, args, config=LLAMA_70B)
    assert code == 1 and plain["findings"][0]["rule"] == "KV220"
    code, moved = _verify(tmp_path, "moved", "vllm", "0.32.0", "H100", 8192, args + ", cpu-offload-gb: 80",
                          config=LLAMA_70B)
    assert code == 3, moved
    assert [f["rule"] for f in moved["findings"]] == ["KV305", "KV211"]
    # a pool the flag fixes does not move with the weights: no KV113, the same pool
    code, fixed = _verify(tmp_path, "fixed", "vllm", "0.32.0", "H100", 65536,
                          "max-model-len: 65536, kv-cache-memory-bytes: 10737418240, cpu-offload-gb: 8")
    assert code == 0, fixed
    assert "KV113" not in [f["rule"] for f in fixed["findings"]]


def test_a_logged_sglang_start_with_its_layers_offloaded_lies_inside_the_range(tmp_path: Path) -> None:
    """tests/data/logs/sglang-qwen35-397b-fp8-cpuoffload-2x4090-tp2-kt1870.log: SGLang 0.5.9, Qwen3.5-397B-A17B-FP8 on
    two RTX 4090 at TP2 with --cpu-offload-gb 400 started with 3.76 GB of weights a GPU and max_total_num_tokens=
    580364. With every weight on the GPU the estimate refuses the start (KV120, exit 1, which was its verdict); the
    offload may let it through, so the role is not checked, and the range it names holds the logged pool."""
    args = ("tp-size: 2, mem-fraction-static: 0.85, context-length: 8192, quantization: fp8, max-running-requests: 1, "
            "schedule-conservativeness: 1.3, chunked-prefill-size: 2048, attention-backend: flashinfer, "
            "disable-cuda-graph: true")
    code, plain = _verify(tmp_path, "plain", "sglang", "0.5.9", "RTX-4090", 8192, args, config=QWEN35_397B,
                          gpus="[0, 1]")
    assert code == 1 and plain["findings"][0]["rule"] == "KV120"
    code, moved = _verify(tmp_path, "moved", "sglang", "0.5.9", "RTX-4090", 8192, args + ", cpu-offload-gb: 400",
                          config=QWEN35_397B, gpus="[0, 1]")
    assert code == 3, moved
    [kv305] = moved["findings"]
    assert kv305["message"].startswith("pool could not be estimated: with every weight on the GPU SGLang would not "
                                       "start (Not enough memory. Please try to increase --mem-fraction-static.")
    high = int(kv305["message"].split("may leave a pool of up to ")[1].split(" tokens")[0].replace(",", ""))
    assert 580_364 <= high


def test_the_largest_layer_is_one_decoder_layer_as_the_weights_count_it() -> None:
    from kvcheck.engines.vllm.sizing.weights import largest_layer_bytes

    text = json.loads(LLAMA_8B.read_text())
    assert largest_layer_bytes(text, tp=1, model_bytes=2, linear=2.0) == LLAMA_8B_LAYER
    # an MoE layer is the larger one: DeepSeek-V3's routed experts over TP8
    v3 = json.loads((MODELS / "deepseek-ai--DeepSeek-V3.json").read_text())
    moe = largest_layer_bytes(v3, tp=8, model_bytes=2, linear=1.0)
    assert moe > 256 * 3 * 7168 * 2048 / 8  # the routed experts alone


def _run(tmp_path: Path, command: str, engine: str, version: str, args: str) -> tuple[int, str]:
    path = one_role_manifest(tmp_path, LLAMA_8B, args, name=f"{command}-{engine}", engine=engine, version=version)
    extra = ("--mode", "estimate") if command == "verify" else ()
    done = run_kvcheck(command, str(path), *extra)
    return done.exit_code, done.stdout + done.stderr


@pytest.mark.parametrize("command", ["verify", "plan"])
@pytest.mark.parametrize(("value", "side"), [(".inf", "no larger than 1e+18"), ("1.0e+300", "no larger than 1e+18"),
                                             ("-.inf", "no smaller than -1e+18")])
def test_vllm_an_infinite_or_absurd_offload_budget_is_bad_input(tmp_path: Path, command: str, value: str,
                                                                side: str) -> None:
    """vLLM's --cpu-offload-gb is a float: `.inf` and 1e300 were a traceback (exit 4, round(inf) in the sizing);
    vLLM itself fails on them in int(cpu_offload_gb * 1024**3) (offloader/base.py:174). Bad input, exit 2."""
    code, out = _run(tmp_path, command, "vllm", "0.32.0", f"max-model-len: 131072, cpu-offload-gb: {value}")
    assert code == 2, out
    assert f"'cpu-offload-gb' must be a finite number {side}, not " in out
    assert "Traceback" not in out


@pytest.mark.parametrize("command", ["verify", "plan"])
def test_sglang_a_huge_integer_offload_budget_is_bad_input(tmp_path: Path, command: str) -> None:
    """SGLang's --cpu-offload-gb is an integer: a 300-digit one was a traceback (exit 4, float() in the bound), then
    capped; like every integer flag it is bad input (exit 2) above 1e18, and so is infinity (not an integer)."""
    huge = "1" + "0" * 300
    code, out = _run(tmp_path, command, "sglang", "0.5.23", f"cpu-offload-gb: {huge}")
    assert code == 2, out
    assert "Traceback" not in out
    assert f"{command}-sglang.yaml:5:24: args.cpu-offload-gb: 'cpu-offload-gb' must be an integer no larger than " \
           "1e+18, not a 301-digit integer" in out, out
    code, out = _run(tmp_path, command, "sglang", "0.5.23", "cpu-offload-gb: .inf")
    assert code == 2 and "'cpu-offload-gb' must be an integer" in out, out


def test_an_offload_that_cannot_leave_a_larger_pool_is_not_told_as_one(tmp_path: Path) -> None:
    # Kimi-K3 on 8 B200s: 20 GiB moved still leaves no pool, so KV113's "a role that fails here may fit" (up to 0
    # tokens) would contradict the refusal beside it
    code, report = _verify(tmp_path, "k3", "sglang", "0.5.23", "B200", 131072, "tp-size: 8, cpu-offload-gb: 20",
                           config=MODELS / "moonshotai--Kimi-K3.json", gpus="[0,1,2,3,4,5,6,7]")
    assert code == 1
    assert report["roles"][0]["pool_tokens"] == 0
    assert [f["rule"] for f in report["findings"]] == ["KV120", "KV101"]
