"""docs/examples/deepseek-v4: DeepSeek-V4-Flash on 8xB200 with MTP passes, with the pools the docs describe."""

from __future__ import annotations

import json

from tests.conftest import EXAMPLES


def test_deepseek_v4_example_passes_with_its_compressed_pools(kvcheck):
    manifest = EXAMPLES / "deepseek-v4" / "manifest.yaml"
    result = kvcheck("verify", str(manifest), "--mode", "estimate", "--format", "json")
    assert result.exit_code == 0, result.stderr
    role = json.loads(result.stdout)["roles"][0]
    details = role["details"]
    assert role["pool_tokens"] == 16_740_352
    assert details["architecture_kind"] == "dsv4"
    assert (details["page_size"], details["kv_dtype"], details["attention_backend"]) == (256, "fp8_e4m3", "dsv4")
    assert details["kv_cell_parts"]["compressed_layers_by_ratio"] == {"4": 21, "128": 20}
    assert details["swa_pool_tokens"] == 1_673_984
    assert details["max_running_requests"] == 256
    plan = kvcheck("plan", str(manifest))
    assert plan.exit_code == 0, plan.stderr
