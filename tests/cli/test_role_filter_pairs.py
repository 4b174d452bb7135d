"""`verify --role` that leaves out the other side of a prefill/decode pair says the pair rules did not run."""

from __future__ import annotations

import json
from pathlib import Path

from tests.conftest import EXAMPLES, run_kvcheck

CONFIG = EXAMPLES / "vllm" / "config.json"


def _manifest(tmp_path: Path) -> Path:
    # prefill serves 65,536 tokens, decode 131,072: KV110 (error) for the pair
    path = tmp_path / "pd.yaml"
    path.write_text(
        f"name: t\ncontext_length: 65536\nmodel: {{path: m, config: {CONFIG}}}\n"
        "engine: {name: vllm, version: \"0.32.0\"}\ngpu: H100\nargs: {max-model-len: 65536}\nroles:\n"
        "  prefill:\n    gpus: [0]\n    args: {kv-transfer-config: {kv_connector: NixlConnector, kv_role: kv_producer}}\n"
        "  decode:\n    gpus: [1]\n"
        "    args: {kv-transfer-config: {kv_connector: NixlConnector, kv_role: kv_consumer}, max-model-len: 131072}\n"
        "  other:\n    gpus: [2]\n", encoding="utf-8")
    return path


def test_a_role_filter_that_splits_a_pair_says_the_pair_rules_did_not_run(tmp_path: Path) -> None:
    # docs/ci.md split a long measure job over two runners with --role prefill and --role decode: each run
    # passed (exit 0) and neither ran KV110, which fails the whole deployment
    manifest = _manifest(tmp_path)
    assert run_kvcheck("verify", str(manifest), "--mode", "estimate").exit_code == 1  # KV110
    for role, partner in (("prefill", "decode"), ("decode", "prefill")):
        done = run_kvcheck("verify", str(manifest), "--mode", "estimate", "--role", role, "--format", "json")
        report = json.loads(done.stdout)
        assert (done.exit_code, [(f["rule"], f["severity"], f["role"], f["message"]) for f in report["findings"]]) == (
            0, [("KV112", "warning", role,
                 f"--role left out {partner}, the other side of this prefill/decode pair: the pair rules "
                 "(KV104, KV110) did not run")])
        assert run_kvcheck("verify", str(manifest), "--mode", "estimate", "--role", role, "--strict").exit_code == 1
    both = run_kvcheck("verify", str(manifest), "--mode", "estimate", "--role", "prefill", "--role", "decode",
                       "--format", "json")
    assert [f["rule"] for f in json.loads(both.stdout)["findings"]] == ["KV110", "KV104"]
    alone = run_kvcheck("verify", str(manifest), "--mode", "estimate", "--role", "other", "--format", "json")
    assert (alone.exit_code, json.loads(alone.stdout)["findings"]) == (0, [])
