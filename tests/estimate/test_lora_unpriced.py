"""LoRA adapters' memory comes out of the KV pool in both engines, and the estimate does not price it: the role
is not estimated (KV305, exit 3), never passed on a pool that leaves the adapters out."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.estimate.helpers import verify_estimate

MODELS = Path(__file__).resolve().parents[1] / "data" / "models"
LLAMA = Path(__file__).resolve().parents[2] / "docs" / "examples" / "single-server" / "llama-3.1-8b-instruct.config.json"


def _verify(tmp_path: Path, engine: str, args: str) -> tuple[int, dict]:
    return verify_estimate(tmp_path, LLAMA, args, engine=engine, version="0.32.0" if engine == "vllm" else "0.5.23",
                           window=32768)


@pytest.mark.parametrize(("engine", "args"), [
    ("sglang", "enable-lora: true, max-loras-per-batch: 8, max-lora-rank: 64"),
    ("sglang", "lora-paths: [adapter=/models/lora-a]"),
    ("vllm", "enable-lora: true, max-loras: 8, max-lora-rank: 64"),
])
def test_a_lora_role_is_not_estimated(tmp_path: Path, engine: str, args: str) -> None:
    """SGLang's maybe_init_lora_manager and vLLM's LoRA manager allocate the adapters' slots after the weights
    and before the pool is sized; the pool was predicted as without LoRA (452,544 tokens for vLLM here)."""
    code, report = _verify(tmp_path, engine, args)
    assert code == 3
    [role] = report["roles"]
    assert role["pool_tokens"] is None
    [kv305] = [f for f in report["findings"] if f["rule"] == "KV305"]
    assert "LoRA" in kv305["message"] or "--enable-lora" in kv305["message"]


def test_a_vllm_lora_role_with_its_kv_memory_set_is_estimated(tmp_path: Path) -> None:
    # --kv-cache-memory-bytes fixes the pool: vLLM skips its memory profile, so the adapters do not move it
    code, report = _verify(tmp_path, "vllm", "enable-lora: true, kv-cache-memory-bytes: 8589934592, max-model-len: 32768")
    assert code == 0, report
    # 8 GiB over Llama-8B's 131,072 B a token, less the null block of 16
    assert report["roles"][0]["pool_tokens"] == 8589934592 // (32 * 8 * 128 * 2 * 2) - 16
