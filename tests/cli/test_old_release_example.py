"""docs/examples/old-release: a disaggregated deployment on a release before the admission fixes."""

from __future__ import annotations

import json

from tests.conftest import REPO_ROOT, run_kvcheck

OLD = "docs/examples/old-release/manifest.yaml"


def test_old_release_example_fails_with_kv201_on_both_roles() -> None:
    result = run_kvcheck("verify", OLD, "--mode", "estimate", "--format", "json")
    assert result.exit_code == 1, result.stderr
    report = json.loads(result.stdout)
    assert report["verdict"] == "fail"
    # The pools hold the window; the release is what fails.
    assert all(r["pool_tokens"] > 3 * 131_072 for r in report["roles"])
    assert [(f["rule"], f["severity"], f["role"]) for f in report["findings"]] == [
        ("KV201", "error", "prefill"),
        ("KV203", "warning", "prefill"),
        ("KV201", "error", "decode"),
        ("KV203", "warning", "decode"),
    ]
    kv201 = report["findings"][0]
    assert kv201["message"] == (
        "disaggregated prefill role runs SGLang 0.5.13.post1, which lacks the admission fixes of 0.5.22 "
        "(over-long prompts can be answered from stale KV)"
    )
    assert kv201["location"] == {"file": OLD, "line": 17, "column": 7}
    # The checksum flag does not exist in 0.5.13.post1: the fix is the upgrade, not the flag.
    assert report["findings"][1]["hint"] == (
        "SGLang 0.5.13.post1 has no KV checksum (--disaggregation-enable-kv-checksum came in 0.5.21); "
        "deploy 0.5.22 or later and add it to both roles"
    )
    # Sized with 0.5.13's defaults: no disaggregation-aware reserve yet, so both roles get
    # 512 + 1.5 x 8192 + 2 x 256 + 128 MiB = 13,440 MiB of the H100's 81,559.
    assert [r["details"]["mem_fraction_static"] for r in report["roles"]] == [0.835, 0.835]


def test_the_same_deployment_on_0_5_22_with_the_checksum_passes(tmp_path) -> None:
    text = (REPO_ROOT / OLD).read_text()
    text = text.replace('"0.5.13.post1"', '"0.5.22"').replace(
        "disaggregation-mode: prefill", "disaggregation-mode: prefill\n      disaggregation-enable-kv-checksum: true"
    ).replace("disaggregation-mode: decode", "disaggregation-mode: decode\n      disaggregation-enable-kv-checksum: true")
    (tmp_path / "manifest.yaml").write_text(text)
    config = REPO_ROOT / "docs/examples/old-release/llama-3.1-8b-instruct.config.json"
    (tmp_path / config.name).write_bytes(config.read_bytes())
    result = run_kvcheck("verify", str(tmp_path / "manifest.yaml"), "--mode", "estimate", "--format", "json")
    assert result.exit_code == 0, result.stdout
    report = json.loads(result.stdout)
    assert report["findings"] == []
    # 0.5.15's disaggregation-aware reserve: the decode role keeps more of the GPU than prefill.
    assert [r["details"]["mem_fraction_static"] for r in report["roles"]] == [0.836, 0.874]
