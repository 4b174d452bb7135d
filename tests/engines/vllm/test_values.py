"""vLLM argument VALUES, judged as each release's parser and config classes judge them (exit 2 with file:line and
what the release takes): the catalogues carry argparse's types and choices, the bounds of the config field each
flag sets (pydantic's gt/ge/le, an enum's values), and the keys a JSON config class takes."""

from __future__ import annotations

from pathlib import Path

import pytest

from kvcheck.engines import get_engine
from kvcheck.engines.base import NodeLaunch
from kvcheck.inputs.manifest.load import load_manifest
from tests.conftest import run_kvcheck

ENGINE = get_engine("vllm")

MANIFEST = """\
name: vllm values
context_length: 4096
model: {{path: /models/llama}}
engine: {{name: vllm, version: "{version}"}}
device: cpu
args:
  {arg}
roles:
  server: {{}}
"""


def _write(tmp_path: Path, arg: str, version: str = "0.32.0") -> Path:
    path = tmp_path / "vllm.yaml"
    path.write_text(MANIFEST.format(version=version, arg=arg), encoding="utf-8")
    return path


def _refused(tmp_path: Path, arg: str, version: str = "0.32.0") -> str:
    """The one manifest error `verify --mode estimate` gives for `arg` (exit 2), without the file's name."""
    path = _write(tmp_path, arg, version)
    done = run_kvcheck("verify", str(path), "--mode", "estimate")
    assert done.exit_code == 2, done.stdout + done.stderr
    lines = done.stderr.splitlines()
    assert lines[0] == "kvcheck: error: 1 error in manifest:", done.stderr
    assert lines[1].startswith(f"{path}:7:"), lines[1]
    return lines[1].split(": ", 1)[1]


@pytest.mark.parametrize(("arg", "message"), [
    # vLLM 0.32.0's config classes (vllm/config/cache.py, parallel.py, vllm.py): argparse takes these, the
    # config refuses them when `vllm serve` builds its engine config, before any model loads
    ("block-size: 0", "args.block-size: 'block-size' must be > 0 (vLLM 0.32.0's CacheConfig.block_size; vLLM "
     "refuses to start otherwise); got 0"),
    ("gpu-memory-utilization: 1.5", "args.gpu-memory-utilization: 'gpu-memory-utilization' must be > 0 and <= 1 "
     "(vLLM 0.32.0's CacheConfig.gpu_memory_utilization; vLLM refuses to start otherwise); got 1.5"),
    ("tensor-parallel-size: 0", "args.tensor-parallel-size: 'tensor-parallel-size' must be >= 1 (vLLM 0.32.0's "
     "ParallelConfig.tensor_parallel_size; vLLM refuses to start otherwise); got 0"),
    ("max-num-seqs: 0", "args.max-num-seqs: 'max-num-seqs' must be >= 1 (vLLM 0.32.0's SchedulerConfig.max_num_seqs; "
     "vLLM refuses to start otherwise); got 0"),
    ("optimization-level: 7", "args.optimization-level: 'optimization-level' must be one of 0, 1, 2, 3 (vLLM 0.32.0's "
     "VllmConfig.optimization_level; vLLM refuses to start otherwise); got '7'"),
    # argparse's own types and choices
    ("block-size: sixteen", "args.block-size: 'block-size' must be an integer, not 'sixteen'"),
    ("kv-cache-dtype: fp9", "args.kv-cache-dtype: 'kv-cache-dtype' must be one of auto, bfloat16, float16, fp8, "
     "fp8_ds_mla, fp8_e4m3, fp8_e5m2, fp8_inc, fp8_per_token_head, int4_per_token_head, int8_per_token_head, nvfp4, "
     "nvfp4_4over6, nvfp4_ds_mla, turboquant_3bit_nc, turboquant_4bit_nc, turboquant_k3v4_nc, turboquant_k8v4, "
     "ultraquant_4bit; got 'fp9' (did you mean 'fp8'?)"),
    # union_dict_and_str: text in braces must be JSON
    ("hf-overrides: '{max_position_embeddings: 8192}'", "args.hf-overrides: 'hf-overrides' looks like a JSON object "
     "but is not valid JSON (Expecting property name enclosed in double quotes); vLLM 0.32.0's parser exits 2 on it"),
    # the JSON config classes forbid other keys
    ("compilation-config: {cudagraph_mod: FULL}", "args.compilation-config: 'compilation-config': unknown key "
     "'cudagraph_mod' for vLLM 0.32.0's CompilationConfig (did you mean 'cudagraph_mode'?); its parser exits 2 on it"),
    ("kv-transfer-config: {kv_connector: NixlConnector, kv_rol: kv_both}", "args.kv-transfer-config: "
     "'kv-transfer-config': unknown key 'kv_rol' for vLLM 0.32.0's KVTransferConfig (did you mean 'kv_role'?); its "
     "parser exits 2 on it"),
])
def test_a_value_vllm_0_32_refuses_is_exit_2_with_what_it_takes(tmp_path: Path, arg: str, message: str) -> None:
    assert _refused(tmp_path, arg) == message


@pytest.mark.parametrize(("arg", "message"), [
    # vllm/config/compilation.py (the same in 0.13.0, 0.18.0, 0.32.0 and 0.33.0): a key check alone passed these,
    # and an estimate sized a server that vLLM refuses to build
    ("compilation-config: {cudagraph_mode: FULLL}", "'cudagraph_mode' must be one of NONE, PIECEWISE, FULL, "
     "FULL_DECODE_ONLY, FULL_AND_PIECEWISE (any case), or 0, 1 or 2; got 'FULLL' (did you mean FULL?)"),
    ("compilation-config: {cudagraph_mode: 3}", "'cudagraph_mode' must be one of NONE, PIECEWISE, FULL, "
     "FULL_DECODE_ONLY, FULL_AND_PIECEWISE (any case), or 0, 1 or 2; got 3"),
    ("compilation-config: {mode: vllm_compil}", "'mode' must be one of NONE, STOCK_TORCH_COMPILE, DYNAMO_TRACE_ONCE, "
     "VLLM_COMPILE (any case), or 0 to 3; got 'vllm_compil' (did you mean VLLM_COMPILE?) (\"Invalid compilation "
     "mode\")"),
    ("compilation-config: {mode: '3'}", "'mode' must be one of NONE, STOCK_TORCH_COMPILE, DYNAMO_TRACE_ONCE, "
     "VLLM_COMPILE (any case), or 0 to 3; got '3' (\"Invalid compilation mode\")"),
    ("compilation-config: {max_cudagraph_capture_size: lots}", "'max_cudagraph_capture_size' must be an integer; got "
     "'lots'"),
    ("compilation-config: {cudagraph_capture_sizes: [1, two, 4]}", "'cudagraph_capture_sizes' must be a list of "
     "integers; got [1, 'two', 4]"),
])
def test_a_compilation_config_value_vllm_refuses_is_exit_2(tmp_path: Path, arg: str, message: str) -> None:
    assert _refused(tmp_path, arg) == (f"args.compilation-config: 'compilation-config': {message} (vLLM 0.32.0's "
                                       "CompilationConfig refuses it before any model loads)")


@pytest.mark.parametrize(("version", "arg", "message"), [
    # KVTransferConfig (vllm/config.py of 0.8.5, vllm/config/kv_transfer.py of 0.11.0-0.33.0): a key check
    # alone passed these, and the prefill/decode pair rules then had no role to read
    ("0.32.0", "kv-transfer-config: {kv_connector: NixlConnector, kv_role: kv_consumr}",
     "'kv_role' must be one of kv_producer, kv_consumer, kv_both; got 'kv_consumr' (did you mean 'kv_consumer'?) "
     "(\"Unsupported kv_role\")"),
    ("0.32.0", "kv-transfer-config: {kv_connector: NixlConnector}",
     "'kv_connector' 'NixlConnector' is set without a 'kv_role' (one of kv_producer, kv_consumer, kv_both): "
     "\"Please specify kv_role when kv_connector is set\""),
    ("0.32.0", "kv-transfer-config: '{\"kv_connector\": \"NixlConnector\", \"kv_role\": \"producer\"}'",
     "'kv_role' must be one of kv_producer, kv_consumer, kv_both; got 'producer' (did you mean 'kv_producer'?) "
     "(\"Unsupported kv_role\")"),
    ("0.32.0", "kv-transfer-config: {kv_connector: NixlConnector, kv_role: kv_both, kv_load_failure_policy: retry}",
     "'kv_load_failure_policy' must be recompute or fail; got 'retry'"),
    # before 0.16.0 the catalogue lists no KVTransferConfig keys; the role rules were there all along
    ("0.10.0", "kv-transfer-config: {kv_connector: NixlConnector, kv_role: consumer}",
     "'kv_role' must be one of kv_producer, kv_consumer, kv_both; got 'consumer' (did you mean 'kv_consumer'?) "
     "(\"Unsupported kv_role\")"),
])
def test_a_kv_transfer_config_vllm_refuses_is_exit_2(tmp_path: Path, version: str, arg: str, message: str) -> None:
    assert _refused(tmp_path, arg, version) == (f"args.kv-transfer-config: 'kv-transfer-config': {message}; vLLM "
                                                f"{version} refuses it before any model loads")


def test_a_misspelt_kv_role_on_a_pair_is_exit_2_not_a_pass(tmp_path: Path) -> None:
    """The newcomer's case: with the role misspelt the pair rules (KV104, KV110) found no pair and exit was 0."""
    path = tmp_path / "pair.yaml"
    path.write_text(MANIFEST.format(version="0.32.0", arg="{}").replace("args:\n  {}\nroles:\n  server: {}\n", (
        "roles:\n"
        "  prefill: {args: {kv-transfer-config: {kv_connector: NixlConnector, kv_role: kv_consumr}}}\n"
        "  decode: {args: {kv-transfer-config: {kv_connector: NixlConnector, kv_role: kv_consumer}}}\n")))
    done = run_kvcheck("verify", str(path), "--mode", "estimate")
    assert done.exit_code == 2, done.stdout + done.stderr
    assert f"{path}:7:" in done.stderr and "got 'kv_consumr' (did you mean 'kv_consumer'?)" in done.stderr


def test_a_dotted_kv_role_is_checked_like_the_whole_json() -> None:
    done = run_kvcheck("import", "--cmd", "vllm serve m --kv-transfer-config.kv_connector=NixlConnector "
                       "--kv-transfer-config.kv_role=kv_consumr", "--engine-version", "0.32.0")
    assert done.exit_code == 2, done.stdout + done.stderr
    assert ("--cmd:1:14: '--kv-transfer-config.kv_connector': 'kv-transfer-config': 'kv_role' must be one of "
            "kv_producer, kv_consumer, kv_both; got 'kv_consumr'") in done.stderr


@pytest.mark.parametrize("value", ["none", "None", 0, "full_and_piecewise", 2])
def test_a_compilation_config_value_vllm_takes_is_taken_as_written(tmp_path: Path, value: object) -> None:
    """vLLM looks CUDAGraphMode up by `value.upper()` and takes the enum's plain values: no refusal, and the
    args reach the engine unchanged."""
    [target] = load_manifest(_write(tmp_path, f"compilation-config: {{cudagraph_mode: {value}, mode: none}}")).targets
    assert target.args["compilation_config"] == {"cudagraph_mode": value, "mode": "none"}


def test_the_choices_of_an_older_release_are_its_own(tmp_path: Path) -> None:
    """Before 0.18.0 --block-size had argparse choices (vllm/config/cache.py BlockSize); 0.8.x had no 1."""
    assert _refused(tmp_path, "block-size: 7", "0.11.0") == (
        "args.block-size: 'block-size' must be one of 1, 8, 16, 32, 64, 128; got 7")
    assert _refused(tmp_path, "block-size: 1", "0.8.0") == (
        "args.block-size: 'block-size' must be one of 8, 16, 32, 64, 128; got 1 (did you mean one of '16', '128'?)")


@pytest.mark.parametrize(("version", "form"), [
    ("0.32.0", "`optimization-level: 3`"),   # -O3 is --optimization-level 3 from 0.12.0
    ("0.11.1", "`compilation-config: {mode: 3}`"),   # -O.mode=3 in 0.11.x
    ("0.10.1", "`compilation-config: {level: 3}`"),  # -O.level=3 from 0.9.2
])
def test_a_bare_compilation_level_is_refused_where_the_parser_refuses_it(tmp_path: Path, version: str,
                                                                         form: str) -> None:
    """`--compilation-config 3` is parse_dataclass's JSON, and vLLM 0.9.2 on exits 2 on it (measured on the real
    0.32.0 parser: 'argument --compilation-config/-cc: 1 validation error for CompilationConfig')."""
    assert _refused(tmp_path, "compilation-config: 3", version) == (
        f"args.compilation-config: 'compilation-config' takes a JSON object in vLLM {version} (its parser refuses "
        f"--compilation-config 3, exit 2); the optimization level -O3 is written {form}")


@pytest.mark.parametrize("version", ["0.8.0", "0.9.1"])
def test_a_bare_compilation_level_is_taken_where_from_cli_takes_it(tmp_path: Path, version: str) -> None:
    """CompilationConfig.from_cli of 0.8.0-0.9.1 reads "0"-"3" as the level."""
    [target] = load_manifest(_write(tmp_path, "compilation-config: 3", version)).targets
    assert target.args["compilation_config"] == {"level": 3}
    argv = ENGINE.launch_argv(target, host="127.0.0.1", port=8000, node=NodeLaunch(1, "", "0"))
    assert argv[argv.index("--compilation-config") + 1] == "3"
    assert _refused(tmp_path, "compilation-config: 4", version) == (
        f"args.compilation-config: 'compilation-config': vLLM {version} takes a level 0, 1, 2 or 3 (or a config "
        "mapping), not 4")


def test_0_8_reads_its_compilation_config_as_a_python_literal(tmp_path: Path) -> None:
    """0.8.x's from_cli runs ast.literal_eval: JSON's true would stop it, so kvcheck passes Python's True."""
    [target] = load_manifest(_write(tmp_path, "compilation-config: {level: 3, use_cudagraph: true}", "0.8.0")).targets
    argv = ENGINE.launch_argv(target, host="127.0.0.1", port=8000, node=NodeLaunch(1, "", "0"))
    assert argv[argv.index("--compilation-config") + 1] == "{'level': 3, 'use_cudagraph': True}"
    assert _refused(tmp_path, """compilation-config: '{"use_cudagraph": true}'""", "0.8.0").startswith(
        "args.compilation-config: 'compilation-config' must be a level 0-3 or a Python literal mapping (vLLM 0.8.0 "
        "reads it with ast.literal_eval")


@pytest.mark.parametrize(("version", "key", "value"), [
    ("0.32.0", "optimization_level", "3"),
    ("0.11.1", "compilation_config", {"mode": 3}),
    ("0.10.1", "compilation_config", {"level": 3}),
    ("0.8.0", "compilation_config", {"level": 3}),
])
def test_minus_o3_on_a_command_line_is_what_the_release_makes_of_it(version: str, key: str, value: object) -> None:
    """-O3 in a deployment file's `vllm serve`: each release's FlexibleArgumentParser rewrites it its own way."""
    for spelling in (["-O3"], ["-O", "3"], ["-O=3"]):
        argv = ["vllm", "serve", "m", *spelling]
        parsed = ENGINE.parse_argv(argv, version=version, start=2)
        assert [p.message for p in parsed.problems] == [], (version, spelling)
        assert {o.key: o.value for o in parsed.occurrences}[key] == value, (version, spelling)


def test_0_8_has_no_dotted_keys() -> None:
    parsed = ENGINE.parse_argv(["vllm", "serve", "m", "--kv-transfer-config.kv_role", "kv_both"], version="0.8.0",
                               start=2)
    assert [p.message for p in parsed.problems] == [
        "'--kv-transfer-config.kv_role': vLLM 0.8.0 has no dotted keys (they came in 0.9.0): argparse exits 2 on it; "
        "pass the whole JSON value"]
