"""A real SGLang 0.5.23 prefill role and decode role booted side by side on CPU by `kvcheck verify`
(Mooncake over TCP, decode with the CPU retraction backup), each measured with its exact arguments.

Their pools differ so that their admission bounds do: prefill admits prompts below 2,042 tokens,
decode (a 2,400-token pool less its 512-token reservation) below 1,889. KV104 says which prompts fall
between the two and KV107 fails the decode role. The checksum stays off: in 0.5.23 it asserts CUDA
tensors and kills a CPU prefill at its first transfer (tests/data/real-engines/README row).
"""

from __future__ import annotations

import json
import time
import uuid
from pathlib import Path

import pytest
import yaml

from tests.conftest import REPO_ROOT, run_kvcheck
from tests.engines.real.conftest import BOOT_TIMEOUT_S, SGLANG_VERSION, TAG_VAR, RealSglang, wait_until_gone

pytestmark = [pytest.mark.real_engine, pytest.mark.slow]

WINDOW = 2048


def pd_manifest(real: RealSglang, path: Path, tag: str, prefill_pool: int, decode_pool: int) -> Path:
    doc = {
        "name": "real sglang prefill and decode on cpu",
        "context_length": WINDOW,
        "model": {"path": str(real.model)},
        "engine": {
            "version": SGLANG_VERSION,
            "command": real.command(),
            "env": {"SGLANG_USE_CPU_ENGINE": "1", "MOONCAKE_PROTOCOL": "tcp", "SGLANG_HOST_IP": "127.0.0.1",
                    TAG_VAR: tag},
        },
        "args": {"device": "cpu", "attention-backend": "torch_native", "context-length": WINDOW,
                 "disaggregation-transfer-backend": "mooncake"},
        "roles": {
            "prefill": {"args": {"disaggregation-mode": "prefill", "max-total-tokens": prefill_pool}},
            "decode": {"args": {"disaggregation-mode": "decode", "max-total-tokens": decode_pool,
                                "disaggregation-decode-retraction-backup": "cpu_tensor"}},
        },
    }
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def test_prefill_and_decode_booted_side_by_side_disagree_on_their_bounds(real_sglang: RealSglang, tmp_path: Path) -> None:
    tag = uuid.uuid4().hex
    manifest = pd_manifest(real_sglang, tmp_path / "deploy.yaml", tag, prefill_pool=3000, decode_pool=2400)
    start = time.monotonic()
    done = run_kvcheck("verify", str(manifest), "--format", "json", "--timeout", str(BOOT_TIMEOUT_S),
                       "--logs-dir", str(tmp_path / "logs"), cwd=REPO_ROOT, timeout=BOOT_TIMEOUT_S + 120)
    wall_s = time.monotonic() - start
    assert wait_until_gone(tag, within_s=10) == [], "engine processes outlived kvcheck verify"
    assert done.stdout, done.stderr
    report = json.loads(done.stdout)
    (tmp_path / "report.json").write_text(json.dumps(report, indent=1))
    assert done.exit_code == 1, (json.dumps(report, indent=1)[:5000], done.stderr[-3000:])
    roles = {r["name"]: (r["status"], r["pool_tokens"], r["max_input_tokens"]) for r in report["roles"]}
    assert roles == {"prefill": ("pass", 3000, WINDOW - 6), "decode": ("fail", 2400, 2400 - 512 + 1)}, roles
    found = [(f["rule"], f["severity"], f["role"]) for f in report["findings"]]
    assert ("KV107", "error", "decode") in found and ("KV104", "warning", None) in found, found
    [kv104] = [f for f in report["findings"] if f["rule"] == "KV104"]
    assert kv104["message"] == (
        "prefill admits prompts below 2,042 tokens but decode below 1,889: prompts of 1,889 to 2,041 tokens "
        "pass prefill and then wait at decode with no error")
    print(f"two roles side by side: {wall_s:.1f} s")
