"""Hostile servers against audit: each test runs the attack on a real loopback socket and checks that
kvcheck ends in bounded time and memory with "could not check" (exit 3), never a pass or a crash."""

from __future__ import annotations

import json

import pytest

from tests.audit.servers import models_payload, server_info_payload
from tests.security.helpers import (
    PEAK_MIB_LIMIT,
    RawServer,
    attack,
    gzip_bomb,
    healthy_routes,
    send_body,
    send_json,
    trickle_headers,
)

FORMATS = ("json", "junit", "github", "table", "markdown")


def roles(outcome) -> dict[str, dict]:
    return {role["name"]: role for role in json.loads(outcome.stdout)["roles"]}


def codes(outcome) -> list[tuple[str, str]]:
    return [(f["role"], f["rule"]) for f in json.loads(outcome.stdout)["findings"]]


def test_stacked_gzip_is_capped_after_every_layer():
    bomb = gzip_bomb(2048, 2)  # 2 GiB of zeros, gzip'd twice: about 5 KB on the wire
    assert len(bomb) < 16_000
    routes = {"/server_info": send_body(bomb, headers={"content-encoding": "gzip, gzip"})}
    with RawServer(routes) as server:
        out = attack("audit", server.url, "--context-length", "131072", "--retries", "0", "--format", "json",
                     process=True)
    assert out.exit_code == 3, out.stderr
    [(role, code)] = codes(out)
    assert code == "KV306"
    message = json.loads(out.stdout)["findings"][0]["message"]
    assert "larger than 32 MiB after gzip decoding" in message
    assert out.peak_mib < PEAK_MIB_LIMIT
    assert out.seconds < 20


def test_a_server_trickling_its_headers_is_cut_at_the_timeout():
    with RawServer({"/server_info": trickle_headers}) as server:
        out = attack("audit", server.url, "--context-length", "131072", "--timeout", "2", "--retries", "0",
                     "--format", "json", timeout=40, process=True)
    assert out.exit_code == 3, out.stderr
    assert codes(out) == [(server.url, "KV306")]
    assert "no complete answer within 2 s" in json.loads(out.stdout)["findings"][0]["message"]
    assert out.seconds < 8
    assert out.peak_mib < PEAK_MIB_LIMIT


def test_deep_json_from_one_server_is_one_kv306_and_the_others_are_still_audited():
    deep = b"[" * 100_000 + b"]" * 100_000
    with RawServer({"/server_info": send_body(deep)}) as bad, RawServer(healthy_routes()) as good:
        out = attack("audit", bad.url, good.url, "--context-length", "131072", "--retries", "0", "--format", "json",
                     process=True)
    assert out.exit_code == 3, out.stderr
    assert codes(out) == [(bad.url, "KV306")]
    assert "nested deeper than 64 levels" in json.loads(out.stdout)["findings"][0]["message"]
    by_name = roles(out)
    assert (by_name[good.url]["status"], by_name[good.url]["pool_tokens"]) == ("pass", 681280)
    assert by_name[bad.url]["status"] == "error"
    assert out.peak_mib < PEAK_MIB_LIMIT


def raw_info(figure: str) -> bytes:
    """A server info whose pool figure is written as the raw JSON text `figure`."""
    payload = server_info_payload(max_total_num_tokens=123456789, dp_token_capacities=[123456789])
    return json.dumps(payload).replace("123456789", figure).encode()


IMPOSSIBLE = {
    "2^62": str(2**62),
    "2^31": str(2**31),
    "10^4000": "1" + "0" * 4000,
    "1e400": "1e400",
    "5000 digits": "9" * 5000,
    "negative": "-5",
    "fraction": "681280.5",
    "NaN": "NaN",
}


@pytest.mark.parametrize("figure", IMPOSSIBLE.values(), ids=IMPOSSIBLE.keys())
def test_an_impossible_pool_figure_is_could_not_check_in_every_format(figure):
    routes = {"/server_info": send_body(raw_info(figure)), "/v1/models": send_json(models_payload(131072))}
    with RawServer(routes) as server:
        for fmt in FORMATS:
            out = attack("audit", server.url, "--retries", "0", "--format", fmt)
            assert out.exit_code == 3, (fmt, out.stdout, out.stderr)
            assert "KV306" in out.stdout, fmt
            assert "Traceback" not in out.stderr
            if fmt == "json":
                assert codes(out) == [(server.url, "KV306")]
                assert roles(out)[server.url]["pool_tokens"] is None


def test_the_largest_figure_a_server_can_hold_is_still_judged():
    routes = {"/server_info": send_body(raw_info(str(2**31 - 1))), "/v1/models": send_json(models_payload(131072))}
    with RawServer(routes) as server:
        out = attack("audit", server.url, "--retries", "0", "--format", "json")
    assert out.exit_code == 0, out.stderr
    assert roles(out)[server.url]["pool_tokens"] == 2**31 - 1


def test_a_key_given_twice_in_server_info_is_ambiguous():
    text = json.dumps(server_info_payload(max_total_num_tokens=10, dp_token_capacities=[500000]))
    text = text.replace('"max_total_num_tokens": 10', '"max_total_num_tokens": 10, "max_total_num_tokens": 500000')
    routes = {"/server_info": send_body(text.encode()), "/v1/models": send_json(models_payload(131072))}
    with RawServer(routes) as server:
        out = attack("audit", server.url, "--retries", "0", "--format", "json")
    assert out.exit_code == 3, out.stderr
    assert codes(out) == [(server.url, "KV306")]
    message = json.loads(out.stdout)["findings"][0]["message"]
    assert "the key 'max_total_num_tokens' is given 2 times in one object (10, then 500000): ambiguous" in message
