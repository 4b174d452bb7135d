"""The Engine's server section agrees with the SGLang client it stands for."""

from kvcheck.engines import get_engine
from kvcheck.engines.sglang.client import CONSTANT_GAUGES, SglangClient
from kvcheck.engines.sglang.serving import MAX_TOKEN_FIGURE


def test_sglang_engine_names_the_gauges_its_client_reads() -> None:
    engine = get_engine("sglang")
    assert (engine.pool_gauge, engine.context_gauge) == ("sglang:max_total_num_tokens", "sglang:context_len")
    assert {engine.pool_gauge, engine.context_gauge} <= set(CONSTANT_GAUGES)
    assert engine.max_token_figure == MAX_TOKEN_FIGURE == 2**31 - 1


def test_sglang_engine_builds_the_sglang_client() -> None:
    with get_engine("sglang").server_client("http://127.0.0.1:30000/", retries=0) as client:
        assert isinstance(client, SglangClient)
        assert client.url == "http://127.0.0.1:30000"
