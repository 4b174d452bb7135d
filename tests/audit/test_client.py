"""SglangClient against real loopback servers: figures, fallbacks, failures, TLS, tokens, redirects."""

from __future__ import annotations

import pytest

from kvcheck.engines.sglang.client import (
    REDACTED,
    ServerInfo,
    SglangClient,
    UnreadableAnswer,
    parse_prometheus,
    parse_server_info,
    redact_command,
    validate_base_url,
)
from kvcheck.errors import EndpointError, InputError

from .servers import Reply, make_tls_files, metrics_text, models_payload, server_info_payload, sglang_routes

FAST = {"timeout_s": 2.0, "retries": 0, "backoff_s": 0.0}


def test_healthy_server_gives_every_figure(serve):
    server = serve(sglang_routes(metrics=metrics_text(pool_tokens=[681280, 681280], context_len=1048576)))
    with SglangClient(server.url, **FAST) as client:
        info = client.server_info()
    assert info == ServerInfo(
        url=server.url,
        version="0.5.23",
        max_total_num_tokens=681280,
        max_req_input_len=681274,
        dp_token_capacities=(681280,),
        swa_token_capacities=(),
        context_length_arg=None,
        served_context_len=1048576,
        served_context_source="/v1/models",
        resolved_args=info.resolved_args,
        launch_command="python3 -m sglang.launch_server --model-path zai-org/GLM-5-FP8 --tp-size 8",
        endpoint="/server_info",
        metrics={
            "sglang:max_total_num_tokens": 681280.0,
            "sglang:context_len": 1048576.0,
            "sglang:page_size": 64.0,
        },
    )
    assert info.pool_tokens == 681280
    assert info.resolved_args["tp_size"] == 8
    assert info.resolved_args["kv_cache_dtype"] == "fp8_e4m3"
    assert "max_total_num_tokens" not in info.resolved_args and "internal_states" not in info.resolved_args
    assert server.paths() == ["/server_info", "/v1/models", "/metrics"]


def test_dp_attention_pool_is_the_smallest_rank(serve):
    payload = server_info_payload(
        max_total_num_tokens=700000, dp_token_capacities=[700000, 690112, 699968, 700000]
    )
    server = serve(sglang_routes(payload))
    with SglangClient(server.url, **FAST) as client:
        info = client.server_info()
    assert info.dp_token_capacities == (700000, 690112, 699968, 700000)
    assert info.max_total_num_tokens == 700000
    assert info.pool_tokens == 690112


def test_swa_capacities_are_kept_per_rank(serve):
    payload = server_info_payload(dp_token_capacities=[400000, 400000], swa_token_capacities=[90000, 91000])
    server = serve(sglang_routes(payload))
    with SglangClient(server.url, **FAST) as client:
        info = client.server_info()
    assert info.swa_token_capacities == (90000, 91000)
    assert info.pool_tokens == 400000


def test_old_release_answers_only_get_server_info(serve):
    payload = server_info_payload(max_total_num_tokens=320000, version="0.4.6")
    del payload["internal_states"]
    server = serve(sglang_routes(payload, info_path="/get_server_info"))
    with SglangClient(server.url, **FAST) as client:
        info = client.server_info()
    assert (info.endpoint, info.version, info.pool_tokens, info.dp_token_capacities) == (
        "/get_server_info",
        "0.4.6",
        320000,
        (),
    )
    assert server.paths()[:2] == ["/server_info", "/get_server_info"]


def test_served_context_falls_back_to_the_metrics_gauge(serve):
    server = serve(
        sglang_routes(served_context=None, metrics=metrics_text(pool_tokens=[681280], context_len=202752))
    )
    with SglangClient(server.url, **FAST) as client:
        info = client.server_info()
    assert (info.served_context_len, info.served_context_source) == (202752, "sglang:context_len")
    assert info.notes == ()


def test_metrics_absent_means_no_gauges(serve):
    server = serve(sglang_routes())
    with SglangClient(server.url, **FAST) as client:
        assert client.metrics() == {}
        assert client.served_context() == 1048576


def test_lora_cards_without_length_are_skipped(serve):
    models = models_payload(None)
    models["data"].append({"id": "base", "max_model_len": 131072})
    server = serve({"/v1/models": Reply(body=models)})
    with SglangClient(server.url, **FAST) as client:
        assert client.served_context() == 131072


def test_slow_server_times_out(serve):
    server = serve({"/server_info": Reply(body=server_info_payload(), delay_s=5)})
    with SglangClient(server.url, timeout_s=0.3, retries=1, backoff_s=0) as client:
        with pytest.raises(EndpointError) as caught:
            client.server_info()
    assert caught.value.message == f"{server.url}/server_info: no complete answer within 0.3 s (2 attempts)"
    assert caught.value.exit_code == 3
    assert server.paths() == ["/server_info", "/server_info"]


def test_500_is_retried_until_success(serve):
    routes = sglang_routes()
    routes["/server_info"] = [Reply(500, "boom"), Reply(503, "starting"), Reply(body=server_info_payload())]
    server = serve(routes)
    with SglangClient(server.url, timeout_s=2, retries=2, backoff_s=0) as client:
        info = client.server_info()
    assert info.pool_tokens == 681280
    assert server.paths()[:3] == ["/server_info"] * 3


def test_500_after_all_retries_is_an_error(serve):
    server = serve({"/server_info": Reply(500, "scheduler died")})
    with SglangClient(server.url, timeout_s=2, retries=1, backoff_s=0) as client:
        with pytest.raises(EndpointError) as caught:
            client.server_info()
    assert caught.value.message == (
        f"{server.url}/server_info: HTTP 500 Internal Server Error after 2 attempts: scheduler died"
    )


def test_other_json_is_not_sglang(serve):
    server = serve({"/server_info": Reply(body={"name": "some other service", "version": "1.0"})})
    with SglangClient(server.url, **FAST) as client:
        with pytest.raises(EndpointError) as caught:
            client.server_info()
    assert caught.value.message == (
        f"{server.url}/server_info: the answer is JSON but not SGLang's server info "
        "(neither max_total_num_tokens nor internal_states)"
    )


def test_html_is_not_json(serve):
    server = serve(
        {"/server_info": Reply(body="<html><body>Welcome to nginx!</body></html>", content_type="text/html")}
    )
    with SglangClient(server.url, **FAST) as client:
        with pytest.raises(EndpointError) as caught:
            client.server_info()
    assert caught.value.message == (
        f"{server.url}/server_info: the answer is not JSON "
        "(text/html: '<html><body>Welcome to nginx!</body></html>')"
    )


def test_no_info_endpoint_at_all(serve):
    server = serve({})
    with SglangClient(server.url, **FAST) as client:
        with pytest.raises(
            EndpointError, match=r"neither /server_info nor /get_server_info exists \(HTTP 404\)"
        ):
            client.server_info()


def test_unreachable_server(closed_port):
    with SglangClient(f"http://127.0.0.1:{closed_port}", timeout_s=2, retries=1, backoff_s=0) as client:
        with pytest.raises(EndpointError) as caught:
            client.server_info()
    assert caught.value.message.startswith(
        f"http://127.0.0.1:{closed_port}/server_info: cannot connect (2 attempts): "
    )
    assert "reachable" in caught.value.hint


def test_payload_without_pool_figure_fails_closed():
    payload = {"internal_states": [{"memory_usage": {"weight": 3.0}}], "version": "0.5.23"}
    with pytest.raises(EndpointError, match="SGLang answered without a pool figure"):
        parse_server_info(payload, url="http://h:1", endpoint="/server_info")


def test_non_count_pool_is_rejected():
    with pytest.raises(EndpointError, match=r"max_total_num_tokens is '12k', not a token count"):
        parse_server_info({"max_total_num_tokens": "12k"}, url="http://h:1", endpoint="/server_info")


def test_server_secrets_are_redacted():
    payload = server_info_payload(
        extra_args={"api_key": "sk-live-123", "admin_api_key": "adm", "hf_token": "hf_x"}
    )
    payload["launch_command"] = (
        "python3 -m sglang.launch_server --api-key sk-live-123 --admin-api-key=adm --tp 8"
    )
    info = parse_server_info(payload, url="http://h:1", endpoint="/server_info")
    assert (
        info.resolved_args["api_key"],
        info.resolved_args["admin_api_key"],
        info.resolved_args["hf_token"],
    ) == (
        REDACTED,
        REDACTED,
        REDACTED,
    )
    assert info.launch_command == (
        f"python3 -m sglang.launch_server --api-key {REDACTED} --admin-api-key={REDACTED} --tp 8"
    )
    assert "sk-live-123" not in repr(info)


def test_redact_command_keeps_token_counts():
    assert (
        redact_command("x --max-total-tokens 5 --context-length 9")
        == "x --max-total-tokens 5 --context-length 9"
    )


def test_prometheus_min_over_ranks_and_odd_labels():
    text = (
        "# TYPE sglang:max_total_num_tokens gauge\n"
        'sglang:max_total_num_tokens{tp_rank="0",note="a}b \\"q\\""} 500000.0\n'
        'sglang:max_total_num_tokens{tp_rank="1"} 499968 1712000000000\n'
        "sglang:context_len 131072\n"
        "garbage line\n"
        "sglang:token_usage 0.5\n"
        "sglang:token_usage{tp_rank=\"0\"} NaN\n"  # not a wanted gauge: never read, never judged
    )
    assert parse_prometheus(text) == {"sglang:max_total_num_tokens": 499968.0, "sglang:context_len": 131072.0}


@pytest.mark.parametrize(
    ("line", "shown"),
    [
        ("sglang:max_total_num_tokens -5", "-5.0"),
        ("sglang:max_total_num_tokens 200000.5", "200000.5"),
        ("sglang:context_len 1e300", "1e+300"),
        ("sglang:page_size NaN", "nan"),
        ("sglang:num_pages +Inf", "inf"),
        ("sglang:max_total_num_tokens 4294967296", "4294967296.0"),
    ],
)
def test_an_impossible_count_gauge_on_any_rank_is_unreadable(line, shown):
    name = line.split()[0]
    text = f'{name}{{tp_rank="0"}} 4096\n{line}\n'  # rank 0 is sane: the impossible rank still counts
    with pytest.raises(UnreadableAnswer) as caught:
        parse_prometheus(text, where="http://h/metrics")
    assert caught.value.message == (
        f"http://h/metrics: the {name} gauge is {shown}, not a token count (an integer from 0 to 2,147,483,647)"
    )


def test_an_impossible_size_gauge_is_unreadable():
    with pytest.raises(UnreadableAnswer) as caught:
        parse_prometheus("sglang:kv_cache_memory_usage_gb -1.5\n", where="/metrics")
    assert caught.value.message == "/metrics: the sglang:kv_cache_memory_usage_gb gauge is -1.5, not a size in GB"
    assert parse_prometheus("sglang:kv_cache_memory_usage_gb 41.25\n") == {"sglang:kv_cache_memory_usage_gb": 41.25}


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("localhost:30000", "'localhost:30000' is not an http(s) URL of a server"),
        ("ftp://h/x", "'ftp://h/x' is not an http(s) URL of a server"),
        ("http://u:p@h:1", "http://h:1: credentials in the URL are not accepted"),
        ("http://h:1/?a=b", "http://h:1: the server URL must not carry a query or fragment"),
    ],
)
def test_bad_urls_are_input_errors(url, message):
    with pytest.raises(InputError) as caught:
        validate_base_url(url)
    assert caught.value.message == message
    assert caught.value.exit_code == 2


def test_path_prefix_behind_a_proxy_is_kept(serve):
    server = serve({"/sglang/a/server_info": Reply(body=server_info_payload())})
    with SglangClient(server.url + "/sglang/a/", **FAST) as client:
        info = client.server_info()
    assert info.url == server.url + "/sglang/a"
    assert info.pool_tokens == 681280


# -- TLS ---------------------------------------------------------------------------------------------


def test_tls_self_signed_fails_by_default(serve, tls_files):
    server = serve(sglang_routes(), ssl_context=tls_files.server_context())
    with SglangClient(server.url, timeout_s=5, retries=2, backoff_s=0) as client:
        with pytest.raises(EndpointError) as caught:
            client.server_info()
    assert caught.value.message.startswith(f"{server.url}/server_info: TLS certificate verification failed")
    assert "--ca-bundle" in caught.value.hint


def test_tls_with_ca_bundle(serve, tls_files):
    server = serve(sglang_routes(), ssl_context=tls_files.server_context())
    with SglangClient(server.url, verify=str(tls_files.ca_cert), **FAST) as client:
        assert client.server_info().pool_tokens == 681280


def test_tls_insecure(serve, tls_files):
    server = serve(sglang_routes(), ssl_context=tls_files.server_context())
    with SglangClient(server.url, verify=False, **FAST) as client:
        assert client.server_info().pool_tokens == 681280


def test_tls_certificate_for_another_host(serve, tmp_path):
    other = make_tls_files(tmp_path, san="DNS:sglang.example")
    if other is None:
        pytest.skip("the openssl CLI is needed to make a test certificate")
    server = serve(sglang_routes(), ssl_context=other.server_context())
    with SglangClient(server.url, verify=str(other.ca_cert), **FAST) as client:
        with pytest.raises(EndpointError) as caught:
            client.server_info()
    assert caught.value.message == (
        f"{server.url}/server_info: TLS certificate verification failed "
        "(certificate verify failed: IP address mismatch, certificate is not valid for '127.0.0.1'.)"
    )
    assert caught.value.hint == "the certificate does not name this host: use the host name it was issued for"


def test_missing_ca_bundle_is_input_error(tmp_path):
    with pytest.raises(InputError, match="does not exist"):
        SglangClient("https://127.0.0.1:1", verify=str(tmp_path / "nope.pem"))


def test_https_to_plain_http_port(serve):
    server = serve(sglang_routes())
    https_url = server.url.replace("http://", "https://")
    with SglangClient(https_url, **FAST) as client:
        with pytest.raises(EndpointError) as caught:
            client.server_info()
    assert "TLS handshake failed" in caught.value.message
    assert "http://" in caught.value.hint


# -- tokens and redirects -----------------------------------------------------------------------------


def test_token_protected_server(serve):
    server = serve(sglang_routes(), token="s3cret-token")
    with SglangClient(server.url, **FAST) as client:
        with pytest.raises(EndpointError) as caught:
            client.server_info()
    assert caught.value.message == f"{server.url}/server_info: HTTP 401 Unauthorized"
    assert "--token-env" in caught.value.hint
    with SglangClient(server.url, token="s3cret-token", **FAST) as client:
        assert client.server_info().pool_tokens == 681280
        assert "s3cret-token" not in repr(client)
    assert server.requests[-1].headers["authorization"] == "Bearer s3cret-token"


def test_wrong_token_says_so(serve):
    server = serve(sglang_routes(), token="right")
    with SglangClient(server.url, token="wrong", **FAST) as client:
        with pytest.raises(EndpointError) as caught:
            client.server_info()
    assert caught.value.hint == "the server refused the token: check the variable --token-env names"
    assert "wrong" not in caught.value.message


def test_echoed_token_is_redacted_from_messages(serve):
    server = serve({"/server_info": Reply(500, "bad header Bearer tok-XYZ")})
    with SglangClient(server.url, token="tok-XYZ", **FAST) as client:
        with pytest.raises(EndpointError) as caught:
            client.server_info()
    assert caught.value.message.endswith(f"HTTP 500 Internal Server Error: bad header Bearer {REDACTED}")


def test_same_origin_redirect_keeps_token(serve):
    server = serve(
        {
            "/server_info": Reply(307, headers={"Location": "/v2/server_info"}),
            "/v2/server_info": Reply(body=server_info_payload()),
        }
    )
    with SglangClient(server.url, token="tok", **FAST) as client:
        info = client.server_info()
    assert info.redirected_to == server.url + "/v2/server_info"
    assert [r.headers.get("authorization") for r in server.requests[:2]] == ["Bearer tok", "Bearer tok"]


def test_redirect_to_another_host_drops_the_token(serve):
    other = serve(sglang_routes())
    other_url = other.url.replace("127.0.0.1", "localhost")
    front = serve({"/server_info": Reply(302, headers={"Location": other_url + "/server_info"})})
    with SglangClient(front.url, token="tok", **FAST) as client:
        info = client.server_info()
    assert info.pool_tokens == 681280
    assert info.redirected_to == other_url + "/server_info"
    assert front.requests[0].headers["authorization"] == "Bearer tok"
    assert other.requests[0].path == "/server_info"
    assert "authorization" not in other.requests[0].headers


def test_redirect_loop_is_bounded(serve):
    server = serve({"/server_info": Reply(302, headers={"Location": "/server_info"})})
    with SglangClient(server.url, **FAST) as client:
        with pytest.raises(EndpointError, match="more than 5 redirects"):
            client.server_info()
