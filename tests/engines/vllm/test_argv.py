"""vLLM's command line as its FlexibleArgumentParser reads it, against the 0.32.0 catalogue."""

from __future__ import annotations

import pytest

from kvcheck.engines import get_engine
from kvcheck.engines.flags import FlagError
from kvcheck.engines.vllm.catalogue import AUTO, human_readable_int

ENGINE = get_engine("vllm")


def parse(*words: str) -> tuple[dict[str, object], list[tuple[int, str, str]]]:
    argv = ["vllm", "serve", *words]
    start = ENGINE.launch_index(argv)
    assert start == 2
    parsed = ENGINE.parse_argv(argv, version="0.32.0", start=start)
    return ({o.key: o.value for o in parsed.occurrences},
            [(p.index, p.kind, p.message) for p in parsed.problems])


def test_the_model_is_the_positional_argument_and_short_aliases_resolve() -> None:
    args, problems = parse("/models/llama", "-tp", "4", "-dp=2", "--max-model-len", "32K")
    assert args == {"model": "/models/llama", "tensor_parallel_size": 4, "data_parallel_size": 2,
                    "max_model_len": 32768}
    assert problems == []


def test_underscores_and_dashes_are_one_flag_and_no_booleans_turn_off() -> None:
    args, problems = parse("m", "--max_model_len=4096", "--no-enable-prefix-caching", "--enable_chunked_prefill")
    assert args == {"model": "m", "max_model_len": 4096, "enable_prefix_caching": False,
                    "enable_chunked_prefill": True}
    assert problems == []


def test_dotted_keys_merge_into_the_json_config_and_give_the_role() -> None:
    args, problems = parse("m", "--kv-transfer-config.kv_connector", "NixlConnector",
                           "--kv_transfer_config.kv_role=kv_consumer",
                           "--kv-transfer-config.kv_connector_extra_config.backends+", "UCX,TCP")
    assert problems == []
    assert args["kv_transfer_config"] == {"kv_connector": "NixlConnector", "kv_role": "kv_consumer",
                                          "kv_connector_extra_config": {"backends": ["UCX", "TCP"]}}
    assert ENGINE.role_mode(args) == "decode"


@pytest.mark.parametrize(("config", "mode"), [
    ('{"kv_connector":"ExampleConnector","kv_role":"kv_producer"}', "prefill"),
    ('{"kv_connector":"ExampleConnector","kv_role":"kv_consumer"}', "decode"),
    ('{"kv_connector":"LMCacheConnectorV1","kv_role":"kv_both"}', "kv_both"),
    ('{"kv_role":"kv_producer"}', None),  # a role without a connector: no transfer instance (is_kv_transfer_instance)
])
def test_role_mode_comes_from_kv_role(config: str, mode: str | None) -> None:
    args, problems = parse("m", "--kv-transfer-config", config)
    assert problems == []
    assert ENGINE.role_mode(args) == mode


def test_a_connector_without_a_role_is_a_problem_not_a_unified_server() -> None:
    # KVTransferConfig.__post_init__: "Please specify kv_role when kv_connector is set"
    _, problems = parse("m", "--kv-transfer-config", '{"kv_connector":"LMCacheConnectorV1"}')
    assert [message for _, _, message in problems] == [
        "'kv-transfer-config': 'kv_connector' 'LMCacheConnectorV1' is set without a 'kv_role' (one of kv_producer, "
        "kv_consumer, kv_both): \"Please specify kv_role when kv_connector is set\"; vLLM 0.32.0 refuses it before "
        "any model loads"]


def test_no_transfer_config_is_a_unified_server() -> None:
    assert ENGINE.role_mode({}) is None


def test_unknown_and_misused_flags_are_problems_at_their_own_token() -> None:
    _, problems = parse("m", "--max-modl-len", "4096", "--max-model-len.kv_role", "x", "-O3", "--block-size", "abc")
    assert problems == [
        (3, "unknown", "unknown vLLM flag 'max-modl-len' (vLLM 0.32.0) (did you mean 'max-model-len'?)"),
        (5, "value", "'--max-model-len.kv_role': 'max-model-len' is not a JSON config flag, so it takes no "
                     "dotted keys (vLLM exits with status 2)"),
        (9, "value", "'block-size' must be an integer, not 'abc'"),
    ]


def test_optimization_level_shorthand() -> None:
    args, problems = parse("m", "-O3")
    assert (args["optimization_level"], problems) == ("3", [])


@pytest.mark.parametrize(("text", "value"), [
    ("32k", 32000), ("32K", 32768), ("25.6k", 25600), ("131072", 131072), ("1M", 2**20), ("1m", 10**6),
])
def test_human_readable_ints_follow_vllm(text: str, value: int) -> None:
    assert human_readable_int("max-model-len", text) == value


@pytest.mark.parametrize("text", ["auto", "AUTO", "-1"])
def test_auto_max_model_len_is_minus_one(text: str) -> None:
    assert human_readable_int("max-model-len", text, auto=True) == AUTO


@pytest.mark.parametrize(("text", "message"), [
    ("1.5K", "'max-model-len': decimals are not allowed with binary suffixes like K ('1.5K'); did you mean 1.5k?"),
    ("lots", "'max-model-len' must be an integer such as 32768, 32k or 32K, not 'lots'"),
    ("auto", "'max-model-len' must be an integer such as 32768, 32k or 32K, not 'auto'"),
])
def test_bad_human_readable_ints_are_refused(text: str, message: str) -> None:
    with pytest.raises(FlagError) as caught:
        human_readable_int("max-model-len", text)
    assert str(caught.value) == message


def test_launch_index_finds_vllm_serve_and_the_api_server_module() -> None:
    assert ENGINE.launch_index(["/opt/venv/bin/vllm", "serve", "m"]) == 2
    assert ENGINE.launch_index(["python", "-m", "vllm.entrypoints.openai.api_server", "--model", "m"]) == 3
    assert ENGINE.launch_index(["python", "-m", "sglang.launch_server"]) is None


def test_a_local_build_uses_its_release_catalogue_without_a_note() -> None:
    catalogue, note = ENGINE.catalogue("0.32.0+cpu")
    assert (catalogue.version, note) == ("0.32.0", None)
    _, note = ENGINE.catalogue("0.40.0")
    assert note == "no flag catalogue for vLLM 0.40.0; arguments were checked against 0.33.0, the nearest older release"


@pytest.mark.parametrize(("image", "release"), [
    ("vllm/vllm-openai:v0.32.0", "0.32.0"), ("docker.io/vllm/vllm-openai:v0.10.1.1", "0.10.1.1"),
    ("vllm/vllm-openai:latest", None), ("lmsysorg/sglang:v0.5.23", None), ("vllm/vllm-openai", None),
])
def test_the_release_an_image_tag_names(image: str, release: str | None) -> None:
    assert ENGINE.release_from_image(image) == release


def test_admission_is_max_model_len_less_one_and_dp_engines_count() -> None:
    # 0.32.0 serves prompts of max_model_len - 1 tokens and refuses max_model_len (docs/vllm.md): the bound,
    # "prompts of this many tokens or more are not served", is max_model_len
    assert ENGINE.max_input_len(4096, 16256) == 4096
    assert ENGINE.max_input_len(4096, 1920) == 1920  # a refused start's pool bounds it
    assert ENGINE.data_parallel_ranks({"data_parallel_size": 4}) == 4
    assert ENGINE.data_parallel_ranks({}) == 1


def test_a_unique_prefix_is_its_flag_and_an_ambiguous_one_is_refused() -> None:
    args, problems = parse("m", "--max-num-seq", "64", "--gpu-memory-util", "0.8")
    assert (args, problems) == ({"model": "m", "max_num_seqs": 64, "gpu_memory_utilization": 0.8}, [])
    _, problems = parse("m", "--max-num", "64")
    assert [(index, kind) for index, kind, _ in problems] == [(3, "ambiguous")]
    assert problems[0][2] == (
        "'--max-num' is an ambiguous abbreviation in vLLM 0.32.0 (matches --max-num-active-seqs, "
        "--max-num-batched-tokens, --max-num-queued-reqs, --max-num-queued-tokens, --max-num-scheduled-tokens, "
        "--max-num-seqs); vLLM exits with status 2")


def test_long_aliases_and_dp_short_forms_resolve_to_their_flag() -> None:
    args, problems = parse("m", "-pp", "2", "-dpl", "4", "-dpa=10.0.0.1", "-ep")
    assert problems == []
    assert args == {"model": "m", "pipeline_parallel_size": 2, "data_parallel_size_local": 4,
                    "data_parallel_address": "10.0.0.1", "enable_expert_parallel": True}


def test_model_given_with_the_model_flag_as_vllm_moves_it_to_the_front() -> None:
    args, problems = parse("--max-model-len", "auto", "--model", "Qwen/Qwen3-8B")
    assert (args, problems) == ({"max_model_len": AUTO, "model": "Qwen/Qwen3-8B"}, [])


def test_a_dotted_key_of_an_unknown_flag_names_the_json_flag_meant() -> None:
    _, problems = parse("m", "--kv-transfer-confg.kv_role", "kv_producer")
    assert problems == [(3, "unknown", "unknown vLLM flag 'kv-transfer-confg' in '--kv-transfer-confg.kv_role' "
                                       "(vLLM 0.32.0) (did you mean 'kv-transfer-config'?)")]


@pytest.mark.parametrize(("words", "message"), [
    # the merged dict is judged as the same JSON given whole: before, a dotted key skipped both checks
    (("-cc.cudagraph_mod=FULL",), "'-cc.cudagraph_mod': 'compilation-config': unknown key 'cudagraph_mod' for vLLM "
     "0.32.0's CompilationConfig (did you mean 'cudagraph_mode'?); its parser exits 2 on it"),
    (("--compilation-config.cudagraph_mode", "FULLL"), "'--compilation-config.cudagraph_mode': 'compilation-config': "
     "'cudagraph_mode' must be one of NONE, PIECEWISE, FULL, FULL_DECODE_ONLY, FULL_AND_PIECEWISE (any case), or 0, "
     "1 or 2; got 'FULLL' (did you mean FULL?) (vLLM 0.32.0's CompilationConfig refuses it before any model loads)"),
    (("--kv-transfer-config.kv_rol=kv_both",), "'--kv-transfer-config.kv_rol': 'kv-transfer-config': unknown key "
     "'kv_rol' for vLLM 0.32.0's KVTransferConfig (did you mean 'kv_role'?); its parser exits 2 on it"),
])
def test_a_dotted_key_is_judged_as_its_config_class_judges_it(words: tuple[str, ...], message: str) -> None:
    _, problems = parse("m", *words)
    assert problems == [(3, "value", message)]


def test_dotted_compilation_keys_vllm_takes_give_the_merged_config() -> None:
    args, problems = parse("m", "-cc.cudagraph_mode=full", "-cc.cudagraph_capture_sizes+=1,2,4")
    assert problems == []
    assert args["compilation_config"] == {"cudagraph_mode": "full", "cudagraph_capture_sizes": ["1", "2", "4"]}


def test_repeated_list_items_are_appended_as_vllm_merges_them() -> None:
    """vLLM's recursive_dict_update concatenates two lists of one key (`--json-arg.key4+ value3
    --json-arg.key4+='value4,value5'`, its --help); the second item replaced the first, so the capture sizes
    512 then 8 were read as [8] and the CUDA-graph estimate priced graphs of 8 tokens."""
    args, problems = parse("m", "--compilation-config.cudagraph_capture_sizes+=512",
                           "--compilation-config.cudagraph_capture_sizes+", "8,16",
                           "--compilation-config.pass_config.fuse_norm_quant", "true",
                           "--compilation-config.pass_config.fuse_act_quant", "false")
    assert problems == []
    assert args["compilation_config"] == {"cudagraph_capture_sizes": ["512", "8", "16"],
                                          "pass_config": {"fuse_norm_quant": True, "fuse_act_quant": False}}


def test_a_dotted_key_without_its_value_is_refused() -> None:
    _, problems = parse("m", "--kv-transfer-config.kv_role")
    assert problems == [(3, "value", "'--kv-transfer-config.kv_role' expects a value")]


def test_every_dotted_value_token_belongs_to_the_merged_flag() -> None:
    argv = ["vllm", "serve", "m", "--kv-transfer-config.kv_connector", "NixlConnector",
            "--kv-transfer-config.kv_role=kv_producer"]
    parsed = ENGINE.parse_argv(argv, version="0.32.0", start=2)
    merged = next(o for o in parsed.occurrences if o.key == "kv_transfer_config")
    assert (merged.index, merged.value_indexes) == (3, (4, 5))


def test_config_is_read_only_as_two_words_and_only_once() -> None:
    _, problems = parse("m", "--config=vllm.yaml")
    assert problems == [(3, "value", "'--config=vllm.yaml': vLLM reads a config file only from '--config FILE' "
                                     "(two words); with '=' it parses the flag and never reads the file")]
    _, problems = parse("m", "--config", "a.yaml", "--config", "b.yaml")
    assert (5, "value", "a second --config: vLLM allows one and stops ('More than one config file specified!')") \
        in problems


def test_a_removed_flag_is_refused_with_its_release_and_replacement() -> None:
    from dataclasses import replace

    from kvcheck.engines.flags import RemovedFlag
    from kvcheck.engines.vllm.argv import parse_vllm_argv

    catalogue, _ = ENGINE.catalogue("0.32.0")
    older = replace(catalogue, removed={"--disable-log-requests": RemovedFlag(
        "--disable-log-requests", "0.10.2", "--no-enable-log-requests")})
    parsed = parse_vllm_argv(["m", "--disable-log-requests"], older)
    assert [(p.index, p.kind, p.message) for p in parsed.problems] == [
        (1, "removed", "'--disable-log-requests' was removed in vLLM 0.32.0 (last in 0.10.2); "
                       "use '--no-enable-log-requests'")]


def test_dynamo_vllm_workers_start_vllm() -> None:
    assert ENGINE.launch_index(["python3", "-m", "dynamo.vllm", "--model", "m"]) == 3
    assert ENGINE.window_flag == "max-model-len" and ENGINE.image_entrypoint == ("vllm", "serve")


@pytest.mark.parametrize(("args", "gpus"), [
    ({}, 1),
    ({"tensor_parallel_size": 4, "pipeline_parallel_size": 2}, 8),
    ({"tensor_parallel_size": 2, "data_parallel_size": 4}, 8),
    ({"tensor_parallel_size": 1, "data_parallel_size": 32, "data_parallel_size_local": 8}, 8),  # one node's ranks
    ({"tensor_parallel_size": 8, "nnodes": 2}, 8),  # TP across two nodes: 4 GPUs a node x 2
    ({"prefill_context_parallel_size": 2, "tensor_parallel_size": 2}, 4),
])
def test_gpus_an_instance_needs(args: dict[str, int], gpus: int) -> None:
    assert ENGINE.gpus_needed(args) == gpus
