"""SGLang's group offload (OffloaderV2: `--offload-group-size`, `--offload-num-in-group`, `--offload-prefetch-step`,
`--offload-mode`, from 0.5.1): only the DeepSeek-V2 model names what to move (its routed experts), and SGLang stops
on settings its offloader cannot run (srt/utils/offloader.py, models/deepseek_v2.py). The estimate ignored the
flags: a start SGLang stops on was priced as one that serves."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import run_kvcheck
from tests.datapaths import MODELS

LLAMA_8B = MODELS / "meta-llama--Meta-Llama-3.1-8B.json"
DEEPSEEK_V3 = MODELS / "deepseek-ai--DeepSeek-V3.json"
EIGHT = "[0, 1, 2, 3, 4, 5, 6, 7]"


def _write(tmp_path: Path, name: str, args: str, *, version: str = "0.5.23", gpu: str = "H200",
           config: Path = DEEPSEEK_V3, gpus: str = EIGHT) -> Path:
    path = tmp_path / f"{name}.yaml"
    path.write_text(
        "context_length: 32768\n"
        f"model: {{path: some/model, config: {config}}}\n"
        f'engine: {{name: sglang, version: "{version}"}}\n'
        f"gpu: {gpu}\n"
        f"args: {{context-length: 32768{', ' + args if args else ''}}}\n"
        f"roles:\n  server: {{gpus: {gpus}}}\n", encoding="utf-8")
    return path


def _verify(tmp_path: Path, name: str, args: str, **kw: str | Path) -> tuple[int, dict]:
    done = run_kvcheck("verify", str(_write(tmp_path, name, args, **kw)), "--mode", "estimate",  # type: ignore[arg-type]
                       "--format", "json")
    return done.exit_code, json.loads(done.stdout)


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


