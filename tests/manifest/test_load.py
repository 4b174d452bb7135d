"""Loading a valid manifest: merged args, the exact argv, locations and the catalogue rules."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from kvcheck.engines.sglang.catalogue import FlagError, load_catalogue, parse_human_readable_int
from kvcheck.engines.sglang.serving import disaggregation_mode
from kvcheck.errors import InputError, ManifestError
from kvcheck.inputs.manifest.load import load_manifest
from kvcheck.model import Location
from tests.conftest import run_kvcheck

MANIFEST = """\
name: prod
context_length: 1048576
model:
  path: zai-org/GLM-5.2-FP8
  config: glm.json
engine:
  version: "0.5.23"
  env: {A: "1"}
gpu: H200
args:
  tp: 8
  mem_fraction_static: 0.85
  --kv-cache-dtype: fp8_e4m3
  context-length: 1Mi
  enable-metrics: true
  allow-auto-truncate: false
roles:
  prefill:
    gpus: [0, 1, 2, 3, 4, 5, 6, 7]
    env: {A: "2", B: "3"}
    args: {disaggregation-mode: prefill, chunked-prefill-size: 16384, mem-fraction-static: 0.8}
  decode:
    gpu: B200
    gpus: [0, 1, 2, 3, 4, 5, 6, 7]
    args:
      disaggregation-mode: decode
      cuda-graph-bs-decode: [1, 2, 4]
      json-model-override-args: {rope_scaling: null}
policy:
  min_headroom: 1.1
  ignore: [KV203]
  severity: {KV104: error}
"""


@pytest.fixture
def loaded(tmp_path: Path):
    path = tmp_path / "prod.yaml"
    path.write_text(MANIFEST)
    (tmp_path / "glm.json").write_text("{}")
    return load_manifest(path)


def test_roles_merge_over_shared_args_in_order(loaded) -> None:
    prefill, decode = loaded.targets
    assert prefill.args == {
        "tp_size": 8,
        "mem_fraction_static": 0.8,
        "kv_cache_dtype": "fp8_e4m3",
        "context_length": 1048576,
        "enable_metrics": True,
        "allow_auto_truncate": False,
        "disaggregation_mode": "prefill",
        "chunked_prefill_size": 16384,
    }
    assert prefill.argv_args == (
        "--tp-size", "8", "--mem-fraction-static", "0.8", "--kv-cache-dtype", "fp8_e4m3",
        "--context-length", "1048576", "--enable-metrics", "--disaggregation-mode", "prefill",
        "--chunked-prefill-size", "16384",
    )
    assert decode.argv_args[-6:] == (
        "--cuda-graph-bs-decode", "1", "2", "4", "--json-model-override-args", '{"rope_scaling":null}',
    )


def test_role_fields(loaded, tmp_path: Path) -> None:
    prefill, decode = loaded.targets
    assert (prefill.gpu, decode.gpu) == ("H200", "B200")
    assert prefill.gpus == (0, 1, 2, 3, 4, 5, 6, 7)
    assert prefill.env == {"A": "2", "B": "3"} and decode.env == {"A": "1"}
    assert prefill.model_config == (tmp_path / "glm.json").resolve()
    assert prefill.required_tokens == 1153434  # ceil(1.1 x 1048576)
    assert disaggregation_mode(prefill.args) == "prefill"
    assert prefill.engine_command == ("python3", "-m", "sglang.launch_server")


def test_locations_point_at_the_key_that_set_each_value(loaded) -> None:
    prefill, decode = loaded.targets
    file = loaded.display_path
    assert prefill.location == Location(file, 18, 3)
    assert prefill.arg_locations["mem_fraction_static"] == Location(file, 21, 71)
    assert decode.arg_locations["mem_fraction_static"] == Location(file, 12, 3)
    assert decode.arg_locations["tp_size"] == Location(file, 11, 3)


def test_policy_is_carried(loaded) -> None:
    assert loaded.policy.min_headroom == 1.1
    assert loaded.policy.ignore == frozenset({"KV203"})
    assert loaded.policy.severity == {"KV104": "error"}


@pytest.mark.parametrize(
    ("text", "value"),
    [("131072", 131072), (131072, 131072), ("128k", 128000), ("1Mi", 1048576), ("25.6k", 25600), ("2Gi", 2**31)],
)
def test_human_readable_ints_follow_sglang(text, value) -> None:
    assert parse_human_readable_int("context-length", text) == value


@pytest.mark.parametrize("text", ["1.5Mi", "128K", "1 M", "", True])
def test_human_readable_ints_rejected_like_sglang(text) -> None:
    with pytest.raises(FlagError):
        parse_human_readable_int("context-length", text)


def test_catalogue_resolution() -> None:
    catalogue, note = load_catalogue("0.5.23")
    assert note is None
    assert catalogue.resolve("tensor_parallel_size").name == "--tp-size"
    assert catalogue.resolve("--mem-frac").name == "--mem-fraction-static"
    with pytest.raises(FlagError, match="ambiguous"):
        catalogue.resolve("cuda-graph-max-bs")


def test_newer_release_uses_the_nearest_older_catalogue() -> None:
    catalogue, note = load_catalogue("0.5.24")
    assert catalogue.version == "0.5.23"
    assert note == (
        "no flag catalogue for SGLang 0.5.24; arguments were checked against 0.5.23, the nearest older release"
    )
    with pytest.raises(InputError, match="not a version number"):
        load_catalogue("latest")


def test_a_flag_of_a_newer_release_is_unknown_in_an_older_one(tmp_path: Path) -> None:
    data = json.loads(Path("profiles/sglang/flags-0.5.23.json").read_text())
    old = {f["flag"] for f in json.loads(Path("profiles/sglang/flags-0.5.20.json").read_text())["flags"]}
    new_only = sorted(f["flag"] for f in data["flags"] if f["flag"] not in old and f["type"] == "bool"
                      and f["store_true"])
    assert new_only, "0.5.23 adds store-true flags over 0.5.20"
    path = tmp_path / "m.yaml"
    path.write_text(
        f'context_length: 8192\nmodel: {{path: m}}\nengine: {{version: "0.5.20"}}\n'
        f"roles:\n  s: {{gpus: [0], args: {{{new_only[0][2:]}: true}}}}\n"
    )
    with pytest.raises(ManifestError, match=rf"unknown SGLang flag '{new_only[0][2:]}' \(SGLang 0.5.20\)"):
        load_manifest(path)


def test_schema_command_prints_a_json_schema() -> None:
    result = run_kvcheck("schema")
    assert result.exit_code == 0
    schema = json.loads(result.stdout)
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    assert schema["oneOf"] == [{"$ref": "#/$defs/Manifest"}, {"$ref": "#/$defs/Overlay"}]
    manifest = schema["$defs"]["Manifest"]
    assert manifest["required"] == ["context_length", "model", "engine", "roles"]
    assert manifest["additionalProperties"] is False
    assert set(manifest["properties"]) == {
        "name", "context_length", "model", "engine", "gpu", "device", "args", "roles", "policy", "estimate", "launcher",
    }
    device = {"anyOf": [{"enum": ["gpu", "cuda", "cpu"], "type": "string"}, {"type": "null"}]}
    assert {k: manifest["properties"]["device"][k] for k in ("anyOf", "default")} == {**device, "default": None}
    role = schema["$defs"]["RoleSpec"]["properties"]
    assert role["device"]["anyOf"] == device["anyOf"]  # a role may run elsewhere than the others


@pytest.mark.parametrize("policy", ["ignore: [KV301]", "severity: {KV305: warning}", "ignore: [KV306]"])
def test_measurement_failures_cannot_be_silenced(tmp_path: Path, policy: str) -> None:
    path = tmp_path / "m.yaml"
    path.write_text(
        'context_length: 8192\nmodel: {path: m}\nengine: {version: "0.5.23"}\n'
        f"roles:\n  s: {{gpus: [0]}}\npolicy:\n  {policy}\n"
    )
    with pytest.raises(ManifestError, match="cannot be ignored or downgraded"):
        load_manifest(path)


def test_relative_paths_are_relative_to_the_manifest(tmp_path: Path, monkeypatch) -> None:
    deploy = tmp_path / "deploy"
    (deploy / "weights").mkdir(parents=True)
    (deploy / "serve.sh").write_text("#!/bin/sh\n")
    path = deploy / "m.yaml"
    path.write_text(
        'context_length: 8192\nmodel: {path: ./weights}\n'
        'engine: {version: "0.5.23", command: [./serve.sh, --flag]}\nroles:\n  s: {gpus: [0]}\n'
    )
    monkeypatch.chdir(tmp_path)
    [target] = load_manifest(Path("deploy/m.yaml")).targets
    assert target.model_path == str((deploy / "weights").resolve())
    assert target.engine_command == (str((deploy / "serve.sh").resolve()), "--flag")
    path.write_text(
        'context_length: 8192\nmodel: {path: org/model}\nengine: {version: "0.5.23"}\nroles:\n  s: {gpus: [0]}\n'
    )
    [hub] = load_manifest(path).targets
    assert hub.model_path == "org/model"
    assert hub.engine_command == ("python3", "-m", "sglang.launch_server")


def test_missing_model_config_is_bad_input(tmp_path: Path) -> None:
    path = tmp_path / "m.yaml"
    path.write_text('context_length: 8192\nmodel: {path: m, config: cfg/config.json}\nengine: {version: "0.5.23"}\n'
                    "roles:\n  a: {gpus: [0]}\n  b: {gpus: [1]}\n")
    with pytest.raises(ManifestError) as caught:
        load_manifest(path)
    assert [i.render() for i in caught.value.issues] == [
        f"{path}:2:26: model.config: no such file: {tmp_path / 'cfg/config.json'} "
        "(model.config is relative to the manifest's folder)"
    ]


@pytest.mark.parametrize(("target", "what"), [("/dev/zero", "a character device"), ("folder", "a folder")])
def test_a_model_config_that_is_not_a_file_says_what_it_is(tmp_path: Path, target: str, what: str) -> None:
    # it said "no such file" for a path that exists
    (tmp_path / "folder").mkdir()
    path = tmp_path / "m.yaml"
    path.write_text(f'context_length: 8192\nmodel: {{path: m, config: {target}}}\nengine: {{version: "0.5.23"}}\n'
                    "roles:\n  a: {gpus: [0]}\n")
    with pytest.raises(ManifestError) as caught:
        load_manifest(path)
    shown = target if target.startswith("/") else tmp_path / target
    assert [i.render() for i in caught.value.issues] == [
        f"{path}:2:26: model.config: {shown} is {what}, not a file (model.config names the model's config file)"
    ]


@pytest.mark.parametrize(("text", "message"), [
    ("context_length: 99999999999999999999", "context_length: Input should be less than or equal to 2147483647"),
    ("engine: {version: \"0.5.23\", command: [\"\"]}", "engine.command[0]: String should have at least 1 character"),
])
def test_absurd_values_are_bad_input(tmp_path: Path, text: str, message: str) -> None:
    base = {"context_length": "context_length: 8192", "engine": 'engine: {version: "0.5.23"}'}
    key = text.split(":")[0]
    base[key] = text
    path = tmp_path / "m.yaml"
    path.write_text(f"{base['context_length']}\nmodel: {{path: m}}\n{base['engine']}\nroles:\n  a: {{gpus: [0]}}\n")
    with pytest.raises(ManifestError, match=re.escape(message)):
        load_manifest(path)


def test_a_merge_key_is_overridden_by_the_mappings_own_keys(tmp_path: Path) -> None:
    # YAML's merge rule: the mapping's own `args` wins over the merged one; kvcheck called it a duplicate
    # key (exit 2), while a repeated key of the mapping itself stays one
    config = Path("docs/examples/vllm/config.json").resolve()
    text = (f"name: t\ncontext_length: 65536\nmodel: {{path: m, config: {config}}}\n"
            "engine: {name: vllm, version: \"0.32.0\"}\ngpu: H100\nroles:\n"
            "  a: &base\n    gpus: [0]\n    args: {max-model-len: 65536}\n"
            "  b:\n    <<: *base\n    args: {max-model-len: 4096}\n")
    (tmp_path / "m.yaml").write_text(text)
    result = run_kvcheck("verify", str(tmp_path / "m.yaml"), "--mode", "estimate", "--format", "json")
    assert result.exit_code == 1, result.stderr
    report = json.loads(result.stdout)
    assert [(f["rule"], f["role"], f["location"]["line"]) for f in report["findings"]] == [("KV102", "b", 12)]
    (tmp_path / "m.yaml").write_text(text + "    args: {max-model-len: 65536}\n")
    result = run_kvcheck("verify", str(tmp_path / "m.yaml"), "--mode", "estimate")
    assert (result.exit_code, result.stdout) == (2, "")
    assert "m.yaml:13:5: roles.b.args: duplicate key" in result.stderr
