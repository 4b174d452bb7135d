"""Dotted keys in a manifest's args (`compilation-config.cudagraph_capture_sizes: [1, 2, 4]`), taken exactly where
the engine's command line takes `--FLAG.KEY VALUE`: vLLM's JSON-typed flags from 0.9.0 (FlexibleArgumentParser,
vllm/utils/argparse_utils.py, merges them into one `--FLAG JSON`); SGLang none (plain argparse). They were all
refused (exit 2, "unknown vLLM flag 'compilation-config.cudagraph-capture-sizes'"). The folded value is what the
estimate prices and what the measured boot is given."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvcheck.engines import get_engine
from kvcheck.inputs.manifest.load import load_manifest
from tests.conftest import run_kvcheck
from tests.datapaths import MODELS

LLAMA = MODELS / "meta-llama--Meta-Llama-3.1-8B.json"
DOTTED = """\
      compilation-config.cudagraph_capture_sizes: [1, 2, 4]
      kv-transfer-config.kv_connector: NixlConnector
      kv-transfer-config.kv_role: kv_both
"""
WHOLE = """\
      compilation-config: {cudagraph_capture_sizes: [1, 2, 4]}
      kv-transfer-config: {kv_connector: NixlConnector, kv_role: kv_both}
"""


def _write(tmp_path: Path, role_args: str, *, shared: str = "  max-model-len: 32768\n", version: str = "0.32.0",
           engine: str = "vllm", name: str = "m.yaml") -> Path:
    path = tmp_path / name
    path.write_text(
        "context_length: 32768\n"
        f"model: {{path: meta-llama/Llama-3.1-8B-Instruct, config: {LLAMA}}}\n"
        f'engine: {{name: {engine}, version: "{version}"}}\n'
        "gpu: H100\n"
        f"args:\n{shared}"
        "roles:\n  server:\n    gpus: [0]\n"
        + (f"    args:\n{role_args}" if role_args else ""), encoding="utf-8")
    return path


def _estimate(path: Path) -> tuple[int, dict]:
    done = run_kvcheck("verify", str(path), "--mode", "estimate", "--format", "json")
    return done.exit_code, json.loads(done.stdout) if done.stdout.strip() else {"stderr": done.stderr}


def _errors(path: Path) -> list[str]:
    done = run_kvcheck("verify", str(path), "--mode", "estimate")
    assert (done.exit_code, done.stdout) == (2, ""), done.stderr
    assert "Traceback" not in done.stderr
    return [line for line in done.stderr.splitlines() if line.startswith(str(path))]


def test_dotted_keys_reach_the_estimate_and_the_boot_as_the_whole_value(tmp_path: Path) -> None:
    dotted, whole = _write(tmp_path, DOTTED, name="dotted.yaml"), _write(tmp_path, WHOLE, name="whole.yaml")
    code, report = _estimate(dotted)
    assert code == 0, report
    code, same = _estimate(whole)
    assert code == 0, same
    [role], [other] = report["roles"], same["roles"]
    assert role["pool_tokens"] == other["pool_tokens"]
    assert role["argv"] == other["argv"] == [
        "--max-model-len", "32768", "--compilation-config", '{"cudagraph_capture_sizes":[1,2,4]}',
        "--kv-transfer-config", '{"kv_connector":"NixlConnector","kv_role":"kv_both"}']
    assert {k: v for k, v in role["details"].items() if k != "assumptions"} == {
        k: v for k, v in other["details"].items() if k != "assumptions"}
    # the capture sizes are priced: three graphs, not the default 51
    code, default = _estimate(_write(tmp_path, "", name="default.yaml"))
    assert code == 0, default
    assert role["details"]["cudagraph_estimate_gib"] < default["roles"][0]["details"]["cudagraph_estimate_gib"]
    # the connector's settings are read as well: KV210 (kv_both on NIXL) at the dotted key's line
    [kv210] = [f for f in report["findings"] if f["rule"] == "KV210"]
    assert (kv210["location"]["line"], kv210["location"]["column"]) == (12, 7)
    # the measured boot gets the same value
    vllm = get_engine("vllm")
    [a], [b] = load_manifest(dotted).targets, load_manifest(whole).targets
    boot = vllm.launch_argv(a, host="127.0.0.1", port=8000)
    assert boot == vllm.launch_argv(b, host="127.0.0.1", port=8000)
    assert boot[boot.index("--compilation-config") + 1] == '{"cudagraph_capture_sizes":[1,2,4]}'
    assert a.args["compilation_config"] == {"cudagraph_capture_sizes": [1, 2, 4]}


def test_shared_and_role_dotted_keys_merge_as_vllm_merges_them(tmp_path: Path) -> None:
    """Shared keys first, then the role's; the same key in a role overrides the shared one."""
    path = tmp_path / "pair.yaml"
    path.write_text(
        "context_length: 32768\n"
        f"model: {{path: meta-llama/Llama-3.1-8B-Instruct, config: {LLAMA}}}\n"
        'engine: {name: vllm, version: "0.32.0"}\ngpu: H100\n'
        "args:\n  kv-transfer-config.kv_connector: NixlConnector\n  kv-transfer-config.kv_role: kv_both\n"
        "roles:\n"
        "  prefill: {gpus: [0], args: {kv-transfer-config.kv_role: kv_producer}}\n"
        "  decode: {gpus: [1], args: {kv-transfer-config.kv_role: kv_consumer,"
        " kv-transfer-config.kv_connector_extra_config.backends: [UCX]}}\n", encoding="utf-8")
    prefill, decode = load_manifest(path).targets
    assert prefill.args["kv_transfer_config"] == {"kv_connector": "NixlConnector", "kv_role": "kv_producer"}
    assert decode.args["kv_transfer_config"] == {"kv_connector": "NixlConnector", "kv_role": "kv_consumer",
                                                 "kv_connector_extra_config": {"backends": ["UCX"]}}
    vllm = get_engine("vllm")
    assert (vllm.role_mode(prefill.args), vllm.role_mode(decode.args)) == ("prefill", "decode")


def test_an_unknown_flag_before_the_dot_is_exit_2_with_the_key_meant(tmp_path: Path) -> None:
    path = _write(tmp_path, "      compilaton-config.cudagraph_capture_sizes: [1, 2, 4]\n"
                            "      kv-transfer-config.kv_rol: kv_both\n")
    assert _errors(path) == [
        f"{path}:11:7: roles.server.args.compilaton-config.cudagraph_capture_sizes: unknown vLLM flag "
        "'compilaton-config' in 'compilaton-config.cudagraph_capture_sizes' (vLLM 0.32.0) (did you mean "
        "'compilation-config.cudagraph_capture_sizes'?)",
        f"{path}:12:7: roles.server.args.kv-transfer-config.kv_rol: 'kv-transfer-config.kv_rol': unknown key "
        "'kv_rol' for vLLM 0.32.0's KVTransferConfig (did you mean 'kv-transfer-config.kv_role'?); its parser exits "
        "2 on it",
    ]


@pytest.mark.parametrize(("version", "engine", "key", "message"), [
    ("0.32.0", "vllm", "max-model-len.x: 3",
     "'max-model-len.x': 'max-model-len' is not a JSON config flag, so it takes no dotted keys (vLLM exits with "
     "status 2)"),
    ("0.8.5", "vllm", "compilation-config.level: 3",
     "'compilation-config.level': vLLM 0.8.5 has no dotted keys (they came in 0.9.0): argparse exits 2 on it; pass "
     "the whole JSON value"),
    ("0.5.23", "sglang", "json-model-override-args.rope_theta: 1000000",
     "'json-model-override-args.rope_theta': SGLang 0.5.23 takes no dotted keys: its argparse has no "
     "'--json-model-override-args.KEY' option and exits 2 on it; write the whole value, json-model-override-args: "
     "{KEY: ...}"),
    ("0.32.0", "vllm", "compilation-config.cudagraph_capture_sizes+: 1,2",
     "'compilation-config.cudagraph_capture_sizes+': a trailing '+' appends comma-separated text on vLLM's command "
     "line; in a manifest write the list itself as the key's value"),
    ("0.32.0", "vllm", "kv-transfer-config..kv_role: kv_both",
     "'kv-transfer-config..kv_role': a dotted key needs a flag before the first '.' and a name after each '.'"),
])
def test_a_dotted_key_the_engine_refuses_is_exit_2(tmp_path: Path, version: str, engine: str, key: str,
                                                   message: str) -> None:
    shared = "  tp-size: 1\n" if engine == "sglang" else "  max-model-len: 32768\n"
    path = _write(tmp_path, f"      {key}\n", shared=shared, version=version, engine=engine)
    [error] = _errors(path)
    assert error == f"{path}:11:7: roles.server.args.{key.split(':')[0]}: {message}"


def test_a_flag_given_whole_and_dotted_is_refused_not_half_dropped(tmp_path: Path) -> None:
    """vLLM appends the dotted keys' merge after every other argument, so it replaces the whole value: measured on
    the real 0.32.0 parser, `--compilation-config '{"mode":3}' --compilation-config.cudagraph_capture_sizes [1,2]`
    leaves mode unset."""
    path = _write(tmp_path, "      compilation-config.cudagraph_capture_sizes: [1, 2]\n",
                  shared="  max-model-len: 32768\n  compilation-config: {mode: 3}\n")
    assert _errors(path) == [
        f"{path}:12:7: roles.server.args.compilation-config.cudagraph_capture_sizes: sets a key inside "
        "compilation-config, which args.compilation-config gives whole: vLLM replaces a whole value with the merge of "
        "its dotted keys, so one of them would be dropped; write compilation-config one way (whole, or every key "
        "dotted)"]


def test_the_merged_value_is_judged_as_vllm_judges_it(tmp_path: Path) -> None:
    """Each key alone is no config: the merge is judged (a connector without its kv_role stops vLLM's start)."""
    path = _write(tmp_path, "      kv-transfer-config.kv_connector: NixlConnector\n")
    [error] = _errors(path)
    assert error.startswith(f"{path}:11:7: roles.server.args.kv-transfer-config.kv_connector: kv-transfer-config as "
                            "its dotted keys merge: 'kv-transfer-config': 'kv_connector' 'NixlConnector' is set "
                            "without a 'kv_role'")


def test_the_command_line_reader_takes_dotted_keys_of_hf_overrides() -> None:
    """`--hf-overrides` (union_dict_and_str) parses the merged `{...}` as JSON, so vLLM takes its dotted keys too; the
    deployment-file reader refused them as 'not a JSON config flag'."""
    parsed = get_engine("vllm").parse_argv(
        ["vllm", "serve", "m", "--hf-overrides.max_position_embeddings", "65536"], version="0.32.0", start=2)
    assert parsed.problems == ()
    assert json.loads(parsed.final["hf-overrides"].value) == {"max_position_embeddings": 65536}  # text, as given whole
