"""`kvcheck audit URL` of a vLLM server named by no manifest: the server's engine judges it, so the
findings and their fixes speak vLLM (its flags, its words), not the registry's default engine."""

from __future__ import annotations

import json

from tests.datapaths import TEST_DATA

from .servers import Reply

FAST = ("--timeout", "2", "--retries", "0")
VLLM_DATA = TEST_DATA / "vllm"
# the real answers of a vLLM 0.32.0 server on CPU: 128 blocks of 128 (pool 16,256), max_model_len 4096
REAL = {
    "/metrics": Reply(body=(VLLM_DATA / "0.32.0-cpu-pass.metrics.txt").read_bytes(), content_type="text/plain"),
    "/v1/models": Reply(body=(VLLM_DATA / "0.32.0-cpu-pass.v1_models.json").read_bytes(),
                        content_type="application/json"),
    "/version": Reply(body=(VLLM_DATA / "0.32.0-cpu-pass.version.json").read_bytes(),
                      content_type="application/json"),
}


def test_a_bare_vllm_url_short_of_the_window_gets_vllm_fixes(serve, kvcheck):
    server = serve(REAL)
    result = kvcheck("audit", server.url, *FAST, "--context-length", "32768", "--format", "json")
    assert result.exit_code == 1, result.stderr
    report = json.loads(result.stdout)
    role = report["roles"][0]
    assert (role["pool_tokens"], role["max_input_tokens"]) == (16256, 4096)
    found = {f["rule"]: f for f in report["findings"]}
    assert sorted(found) == ["KV101", "KV102"]
    assert "--gpu-memory-utilization" in found["KV101"]["hint"]
    assert "mem-fraction-static" not in found["KV101"]["hint"]
    assert found["KV102"]["hint"] == "set max-model-len: 32768 in the role's args if the model supports it, or advertise 4,096"


def test_the_table_of_a_vllm_audit_names_no_sglang_flag(serve, kvcheck):
    server = serve(REAL)
    result = kvcheck("audit", server.url, *FAST, "--context-length", "32768")
    assert result.exit_code == 1, result.stderr
    assert "mem-fraction-static" not in result.stdout
    assert "context-length:" not in result.stdout
    assert "SGLang" not in result.stdout


# a vLLM server whose /v1/models lists no max_model_len (a proxy that rewrote the card, a release or a
# LoRA-only listing without it): the pool is read, the longest prompt it admits is not
NO_WINDOW = {**REAL, "/v1/models": Reply(body=b'{"object": "list", "data": [{"id": "m", "object": "model"}]}',
                                          content_type="application/json")}


def test_a_vllm_server_that_states_no_max_model_len_is_not_checked(serve, kvcheck):
    server = serve(NO_WINDOW)
    result = kvcheck("audit", server.url, *FAST, "--context-length", "8192", "--format", "json")
    assert result.exit_code == 3, result.stderr
    report = json.loads(result.stdout)
    assert report["verdict"] == "error"
    role = report["roles"][0]
    assert (role["status"], role["pool_tokens"], role["max_input_tokens"]) == ("error", 16256, None)
    assert [f["rule"] for f in report["findings"]] == ["KV306"]
    assert report["findings"][0]["message"] == (
        f"{server.url}: the server does not state the longest prompt it admits (no /v1/models max_model_len), "
        "so it cannot be checked against the 8,192-token window"
    )


def test_a_vllm_server_without_max_model_len_whose_pool_is_short_still_fails(serve, kvcheck):
    server = serve(NO_WINDOW)
    result = kvcheck("audit", server.url, *FAST, "--context-length", "32768", "--format", "json")
    assert result.exit_code == 1, result.stderr
    report = json.loads(result.stdout)
    assert report["verdict"] == "fail"
    assert sorted(f["rule"] for f in report["findings"]) == ["KV101", "KV306"]
    assert report["roles"][0]["pool_tokens"] == 16256


def test_the_same_vllm_server_with_a_short_max_model_len_is_kv102(serve, kvcheck):
    server = serve(REAL)
    result = kvcheck("audit", server.url, *FAST, "--context-length", "8192", "--format", "json")
    assert result.exit_code == 1, result.stderr
    assert [f["rule"] for f in json.loads(result.stdout)["findings"]] == ["KV102"]


# the same server with --max-model-len 16384: vLLM starts it (16,384 is its reported KV cache size), but one
# of the 128 blocks is its null block, so a request of max_model_len tokens does not fit the 16,256 left
AT_CAPACITY = {**REAL, "/v1/models": Reply(
    body=(VLLM_DATA / "0.32.0-cpu-pass.v1_models.json").read_bytes().replace(b'"max_model_len":4096',
                                                                          b'"max_model_len":16384'),
    content_type="application/json")}


def test_a_vllm_request_of_max_model_len_that_just_fits_is_no_kv307(serve, kvcheck):
    # 16,257 tokens: the longest request's KV is 16,256 (its last sampled token is never fed back), which fits
    fits = {**REAL, "/v1/models": Reply(
        body=(VLLM_DATA / "0.32.0-cpu-pass.v1_models.json").read_bytes().replace(b'"max_model_len":4096',
                                                                              b'"max_model_len":16257'),
        content_type="application/json")}
    result = kvcheck("audit", serve(fits).url, *FAST, "--context-length", "8192", "--format", "json", "--strict")
    assert result.exit_code == 0, result.stdout + result.stderr
    assert json.loads(result.stdout)["findings"] == []


def test_a_vllm_max_model_len_not_below_its_kv_cache_is_kv307_in_vllm_words(serve, kvcheck):
    server = serve(AT_CAPACITY)
    result = kvcheck("audit", server.url, *FAST, "--context-length", "8192", "--format", "json")
    assert result.exit_code == 0, result.stderr  # a warning: the 8,192-token window fits
    report = json.loads(result.stdout)
    assert report["roles"][0]["pool_tokens"] == 16256
    assert [(f["rule"], f["severity"], f["message"]) for f in report["findings"]] == [(
        "KV307", "warning",
        "max_model_len 16,384 (/v1/models) admits a request whose KV (16,383 tokens) exceeds the KV cache's 16,256 "
        "usable tokens (vllm:cache_config_info: 128 blocks of 128, one of them vLLM's null block; GPU KV cache "
        "size 16,384 tokens): the smallest engine's KV cache cannot hold a request of that length",
    )]
    strict = kvcheck("audit", server.url, *FAST, "--context-length", "8192", "--strict")
    assert strict.exit_code == 1, strict.stderr
    for sglang_word in ("server info", "max_req_input_len", "max_total_num_tokens", "DP rank", "SGLang"):
        assert sglang_word not in strict.stdout
