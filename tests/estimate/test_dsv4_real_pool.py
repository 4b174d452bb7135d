"""DeepSeek-V4's pool rows against real SGLang 0.5.23's own pool class, run on the CPU.

`DeepSeekV4SingleKVPool` (mem_cache/deepseek_v4_memory_pool.py) is the class every V4 SWA, c4 and c128
pool is built from; it allocates `num_pages x bytes_per_page_padded` uint8 buffers and needs no GPU.
Building it in the real install proves kvcheck's row price (584 B padded per page to 576-byte units)
and its refusal of a bfloat16 V4 pool (the class asserts uint8 storage) on SGLang's code, not on a
reading of it. Uses the install of tests/engines/real (KVCHECK_REAL_SGLANG; skipped without it unless
KVCHECK_TEST_REAL=required).
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from kvcheck.engines.sglang.sizing import dsv4, estimate_role
from kvcheck.engines.sglang.sizing.refusals import EngineRefusal

from .helpers import role

PROBE = r"""
import json, sys, traceback, torch
from sglang.srt.mem_cache.deepseek_v4_memory_pool import DeepSeekV4SingleKVPool
out = {}
for name, dtype in (("fp8_e4m3", torch.float8_e4m3fn), ("bfloat16", torch.bfloat16)):
    for page in (256, 64, 2):  # the SWA page, and the c4 / c128 pages (256 // ratio)
        try:
            pool = DeepSeekV4SingleKVPool(4 * page, page, dtype, 448, 64, 1, "cpu", False, global_page_size=256)
            out[f"{name}/{page}"] = {"page_bytes": pool.kv_buffer[0].shape[1], "dtype": str(pool.kv_buffer[0].dtype)}
        except AssertionError as exc:
            frame = traceback.extract_tb(exc.__traceback__)[-1]
            out[f"{name}/{page}"] = {"assertion": frame.line, "file": frame.filename.split("site-packages/")[-1]}
print(json.dumps(out))
"""


def _real_python() -> Path:
    dest = os.environ.get("KVCHECK_REAL_SGLANG")
    python = Path(dest) / "venv" / "bin" / "python" if dest else None
    if python is None or not python.is_file():
        if os.environ.get("KVCHECK_TEST_REAL") == "required":
            pytest.fail(f"KVCHECK_TEST_REAL=required but no SGLang install at KVCHECK_REAL_SGLANG={dest!r}")
        pytest.skip("real SGLang not installed (KVCHECK_REAL_SGLANG)")
    return python


@pytest.fixture(scope="module")
def real_pool() -> dict:
    run = subprocess.run([str(_real_python()), "-c", PROBE], capture_output=True, text=True, timeout=300, check=False)
    assert run.returncode == 0, run.stderr[-2000:]
    return json.loads(run.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize(("page", "ratio"), [(256, 0), (64, 4), (2, 128)])
def test_fp8_rows_cost_what_kvcheck_prices(real_pool, page, ratio):
    got = real_pool[f"fp8_e4m3/{page}"]
    assert got["dtype"] == "torch.uint8"
    # kvcheck: ceil(page x 584 / 576) x 576 bytes per page -> 149,760 (585 B/token), 37,440 (585), 1,728 (864)
    assert got["page_bytes"] == dsv4._paged_bytes(256, ratio) * page == {256: 149_760, 64: 37_440, 2: 1_728}[page]


def test_a_bfloat16_v4_pool_stops_sglang_and_kvcheck_says_so(real_pool):
    for page in (256, 64, 2):
        got = real_pool[f"bfloat16/{page}"]
        assert got == {"assertion": "assert self.store_dtype == torch.uint8",
                       "file": "sglang/srt/mem_cache/deepseek_v4_memory_pool.py"}
    with pytest.raises(EngineRefusal, match="DeepSeekV4SingleKVPool.create_buffer asserts its store dtype is"):
        estimate_role(role("deepseek-ai--DeepSeek-V4-Flash", gpu="B200", tp_size=8, kv_cache_dtype="bfloat16"),
                      offline=True)
