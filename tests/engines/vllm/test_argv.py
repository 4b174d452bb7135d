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
    ('{"kv_connector":"LMCacheConnectorV1"}', None),
])
def test_role_mode_comes_from_kv_role(config: str, mode: str | None) -> None:
    args, problems = parse("m", "--kv-transfer-config", config)
    assert problems == []
    assert ENGINE.role_mode(args) == mode


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
    assert ENGINE.max_input_len(4096, 16256) == 4095  # 0.32.0 admits max_model_len - 1 (docs/vllm.md)
    assert ENGINE.max_input_len(4096, 1920) == 1919  # a refused start's pool bounds it
    assert ENGINE.data_parallel_ranks({"data_parallel_size": 4}) == 4
    assert ENGINE.data_parallel_ranks({}) == 1
