"""`kvcheck audit` of a decode server judges its real admission bound: the pool less the tokens it
reserves per request (--num-reserved-decode-tokens), not the max_req_input_len it states."""

from __future__ import annotations

import json

from tests.conftest import run_kvcheck

from .servers import server_info_payload, sglang_routes

WINDOW = 262_144


def decode_info(pool: int, **extra) -> dict:
    args = {"disaggregation_mode": "decode", "disaggregation_enable_kv_checksum": True, **extra}
    return server_info_payload(max_total_num_tokens=pool, max_req_input_len=min(WINDOW - 1, pool - 1) - 5,
                               extra_args=args)


def audit(url: str) -> tuple[int, dict]:
    done = run_kvcheck("audit", url, "--context-length", str(WINDOW), "--format", "json", "--retries", "0")
    assert done.stdout, done.stderr
    return done.exit_code, json.loads(done.stdout)


def test_a_decode_server_whose_pool_holds_the_window_but_not_the_reservation_fails_kv107(serve) -> None:
    server = serve(sglang_routes(decode_info(WINDOW + 100), served_context=WINDOW))
    code, report = audit(server.url)
    assert code == 1
    [role] = report["roles"]
    assert (role["pool_tokens"], role["max_input_tokens"]) == (WINDOW + 100, WINDOW + 100 - 512 + 1)
    [kv107] = [f for f in report["findings"] if f["rule"] == "KV107"]
    assert kv107["severity"] == "error"
    assert kv107["hint"].startswith(f"give the role a pool of at least {WINDOW - 7 + 512:,} tokens")


def test_the_servers_own_reservation_is_read_from_its_arguments(serve) -> None:
    server = serve(sglang_routes(decode_info(WINDOW + 100, num_reserved_decode_tokens=64), served_context=WINDOW))
    code, report = audit(server.url)
    assert code == 0, report["findings"]
    [role] = report["roles"]
    assert role["max_input_tokens"] == WINDOW - 6  # the reservation no longer binds: the window's own bound


def test_a_decode_pool_of_the_window_plus_the_reservation_passes(serve) -> None:
    server = serve(sglang_routes(decode_info(WINDOW - 7 + 512), served_context=WINDOW))
    code, report = audit(server.url)
    assert code == 0, report["findings"]
    assert report["roles"][0]["max_input_tokens"] == WINDOW - 6
