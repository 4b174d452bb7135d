"""`kvcheck probe` on a vLLM front door: the double of tests/probe/vllm_double.py answers as real vLLM 0.32.0."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from kvcheck.commands.probe import run_probe
from kvcheck.probe.options import ProbeOptions
from kvcheck.report.formats.json import request_dict
from tests.conftest import run_kvcheck

from .vllm_double import MODEL, VllmFrontDoor, model_folder

FAST = {"rate_per_s": 1000.0, "seed": 7}
CLI_FAST = ("--rate", "1000", "--seed", "7")
# SGLang's reader asks first and finds no /server_info; vLLM's reads the pool, the window, the version;
# then the model name (for /v1/completions) and the tokenizer's POST that proves the ids in range
AUTODETECT_GETS = [("GET", "/server_info"), ("GET", "/get_server_info"), ("GET", "/metrics"), ("GET", "/v1/models"),
                   ("GET", "/version"), ("GET", "/v1/models"), ("POST", "/tokenize")]


@pytest.fixture
def vllm() -> Iterator[Callable[..., VllmFrontDoor]]:
    started: list[VllmFrontDoor] = []

    def start(behaviour: str = "fixed", **kwargs: object) -> VllmFrontDoor:
        door = VllmFrontDoor(behaviour, **kwargs).__enter__()  # type: ignore[arg-type]
        started.append(door)
        return door

    yield start
    for door in started:
        door.__exit__(None, None, None)


def rows(report) -> list[dict]:
    return sorted((request_dict(row) for role in report.roles if role.probe is not None
                   for row in role.probe.requests or ()), key=lambda row: row["index"])


def found(report) -> list[tuple[str, str | None]]:
    return [(f.rule, f.role) for f in report.findings]


def test_a_vllm_server_is_found_by_itself_and_passes_with_exact_lengths(vllm) -> None:
    d = vllm("fixed")
    report = run_probe(ProbeOptions(url=d.url, **FAST))
    assert (report.exit_code, report.verdict, report.findings) == (0, "pass", ())
    assert [role.name for role in report.roles] == ["limits", "/v1/completions", "/v1/completions (stream)",
                                                    "isolation"]
    limits = report.roles[0]
    # the pool of /metrics' cache_config_info: (128 blocks - vLLM's null block) x 128; B = max_model_len
    assert (limits.pool_tokens, limits.required_tokens, limits.max_input_tokens, limits.source) == (
        127 * 128, 4096, 4096, "server_info")
    assert d.seen[:7] == AUTODETECT_GETS
    boundary = [(r["check"], r["stream"], r["prompt_tokens"], r["status"], r["reported_prompt_tokens"], r["verdict"])
                for r in rows(report) if r["owner"].startswith("boundary")]
    assert boundary == [
        ("control", False, 32, 200, 32, "ok"),
        ("below-bound", False, 4095, 200, 4095, "ok"),  # max_model_len - 1: the longest prompt vLLM serves
        ("at-bound", False, 4096, 400, None, "ok"),
        ("above-bound", False, 4097, 400, None, "ok"),
        ("at-bound", True, 4096, 400, None, "ok"),
    ]
    by_check = {(r["check"], r["stream"]): r for r in rows(report) if r["owner"].startswith("boundary")}
    assert by_check[("at-bound", False)]["message"] == (
        "max_tokens must be at least 1, got 0. (parameter=max_tokens, value=0)")
    assert by_check[("above-bound", False)]["message"].startswith(
        "This model's maximum context length is 4096 tokens. However, your prompt contains at least 4097 input tokens")
    # the tokenizer answered: tenants' short prompts are text markers, and every id sent lies in the vocabulary
    isolation = [r for r in rows(report) if r["owner"].startswith("tenant")]
    assert [r["prompt"] for r in isolation if r["check"] == "short"] == ["text"] * 8
    completions = [b for (method, path), b in zip(d.seen[7:], d.bodies[1:], strict=True)
                   if (method, path) == ("POST", "/v1/completions")]
    assert len(completions) == 5 + 20
    ids = {i for body in completions if isinstance(body["prompt"], list) for i in body["prompt"]}
    assert ids and max(ids) < 8192
    assert {body["model"] for body in completions} == {MODEL}
    assert all(body["request_id"].startswith("kvcheck-probe-") for body in completions)
    assert [body["stream_options"] for body in completions if body["stream"]] == [{"include_usage": True}]
    notes = report.roles[0].probe.notes
    assert "token ids proven in range by the deployment's tokenizer (POST /tokenize)" in " ".join(notes)
    assert "vLLM's front door is its OpenAI API: every check is sent to /v1/completions" in notes
    assert "front door: vLLM's (found from its answers)" in notes


def test_engine_vllm_asks_only_vllm_s_endpoints(vllm) -> None:
    d = vllm("fixed")
    report = run_probe(ProbeOptions(url=d.url, engine="vllm", tenants=0, **FAST))
    assert report.exit_code == 0
    assert d.seen[:5] == [("GET", "/metrics"), ("GET", "/v1/models"), ("GET", "/version"), ("GET", "/v1/models"),
                          ("POST", "/tokenize")]
    assert not any(path in ("/generate", "/server_info", "/v1/tokenize") for _, path in d.seen)


def test_a_router_that_truncates_is_kv401_and_kv402_with_vllm_s_fix(vllm) -> None:
    d = vllm("truncate")
    report = run_probe(ProbeOptions(url=d.url, tenants=2, rounds=1, **FAST))
    assert report.exit_code == 1
    assert found(report) == [
        ("KV401", "/v1/completions"), ("KV402", "/v1/completions"),
        ("KV401", "/v1/completions (stream)"), ("KV402", "/v1/completions (stream)"),
        ("KV401", "isolation"), ("KV402", "isolation")]
    kv401 = report.findings[0]
    assert "#3 /v1/completions at-bound (4096 tokens): B = 4096 tokens: prompts of B tokens or more are refused, " \
           "yet it was answered HTTP 200, finish length, prompt_tokens 4095" in kv401.message
    assert kv401.hint.startswith("vLLM refuses prompts of max_model_len tokens or more with HTTP 400")
    assert "sent 4096 prompt tokens, the answer reports 4095" in report.findings[1].message


def test_a_front_door_that_serves_stale_pages_is_kv405(vllm) -> None:
    d = vllm("leak")
    report = run_probe(ProbeOptions(url=d.url, tenants=2, rounds=1, concurrency=1, **FAST))
    assert report.exit_code == 1
    assert ("KV405", "isolation") in found(report)
    kv405 = next(f for f in report.findings if f.rule == "KV405" and f.role == "isolation")
    assert "carries content of" in kv405.message and "TENANT-" in kv405.message
    assert "kv_load_failure_policy=recompute" in kv405.hint


def test_a_router_without_vllm_s_metrics_needs_engine_or_the_limits(vllm) -> None:
    d = vllm("fixed", router=True)
    report = run_probe(ProbeOptions(url=d.url, **FAST))
    assert (report.exit_code, found(report)) == (3, [("KV320", "limits")])
    assert "--context-length and --pool was not given" in report.findings[0].message

    # named as vLLM's, the window on /v1/models is enough: vLLM's bound is max_model_len, whatever the pool
    d = vllm("fixed", router=True)
    report = run_probe(ProbeOptions(url=d.url, engine="vllm", tenants=2, rounds=1, **FAST))
    assert (report.exit_code, report.findings) == (0, ())
    limits = report.roles[0]
    assert (limits.pool_tokens, limits.required_tokens, limits.max_input_tokens) == (None, 4096, 4096)
    assert any("a router in front of vLLM servers" in note for note in report.roles[0].probe.limits.notes)


def test_no_tokenizer_and_no_local_model_is_kv322_and_nothing_is_generated(vllm) -> None:
    d = vllm("fixed", tokenize=False)
    report = run_probe(ProbeOptions(url=d.url, engine="vllm", **FAST))
    assert (report.exit_code, found(report)) == (3, [("KV322", "limits")])
    assert "POST /tokenize answered HTTP 404" in report.findings[0].message
    assert "the model path '/models/tiny-llama' is not a folder with config.json" in report.findings[0].message
    assert report.findings[0].hint.endswith("POST /tokenize (a server with its tokenizer, or a router that has one)")
    assert ("POST", "/v1/completions") not in d.seen


def test_the_model_root_s_config_proves_the_ids_without_a_tokenizer(vllm, tmp_path: Path) -> None:
    folder = model_folder(tmp_path, 8192)
    d = vllm("fixed", tokenize=False, model=str(folder))
    report = run_probe(ProbeOptions(url=d.url, engine="vllm", tenants=2, rounds=1, **FAST))
    assert (report.exit_code, report.findings) == (0, ())
    assert any(f"token ids proven in range by vocab_size 8192 in {folder / 'config.json'}" in note
               for note in report.roles[0].probe.notes)


def test_an_unavailable_backend_stops_after_the_control(vllm) -> None:
    d = vllm("unavailable")
    report = run_probe(ProbeOptions(url=d.url, **FAST))
    assert (report.exit_code, found(report)) == (3, [("KV320", "limits")])
    assert "/v1/completions: the control request (32 tokens, far below every limit) was refused with HTTP 503" \
           in report.findings[0].message
    assert [s for s in d.seen if s == ("POST", "/v1/completions")] == [("POST", "/v1/completions")]


def test_cli_engine_option_end_to_end(vllm) -> None:
    d = vllm("fixed")
    r = run_kvcheck("probe", d.url, "--engine", "vllm", "--tenants", "2", "--rounds", "1", "--format", "json",
                    *CLI_FAST)
    assert r.exit_code == 0, r.stderr
    report = json.loads(r.stdout)
    assert (report["verdict"], report["findings"]) == ("pass", [])
    r = run_kvcheck("probe", d.url, "--engine", "vlm", *CLI_FAST)
    assert r.exit_code == 2
    assert "--engine 'vlm' is not a known engine (known: sglang, vllm)" in r.stderr


def test_dry_run_with_engine_vllm_plans_the_openai_front_door(vllm) -> None:
    d = vllm("fixed")
    r = run_kvcheck("probe", d.url, "--engine", "vllm", "--dry-run", "--context-length", "4096", "--pool", "16256",
                    "--format", "json", "--tenants", "0")
    assert r.exit_code == 0, r.stderr
    plan = json.loads(r.stdout)
    assert [(q["endpoint"], q["stream"], q["check"], q["prompt_tokens"], q["expect"]) for q in plan["requests"]] == [
        ("/v1/completions", False, "control", 32, "accept"),
        ("/v1/completions", False, "below-bound", 4095, "accept"),
        ("/v1/completions", False, "at-bound", 4096, "refuse"),
        ("/v1/completions", False, "above-bound", 4097, "refuse"),
        ("/v1/completions", True, "at-bound", 4096, "refuse"),
    ]
    assert d.seen == []


# Answers of real vLLM 0.32.0, word for word (max_model_len 4096): a streamed 4,095-token prompt with
# stream_options.include_usage, and a 4,097-token prompt refused.
REAL_STREAM = (
    'data: {"id":"cmpl-98911402b46a3756","object":"text_completion","created":1796178932,"model":'
    '"/tmp/kvcheck-real-vllm/tiny-llama","choices":[{"index":0,"text":"ure","logprobs":null,"finish_reason":"length",'
    '"stop_reason":null,"prompt_token_ids":null,"token_ids":null}]}\n\n'
    'data: {"id":"cmpl-98911402b46a3756","object":"text_completion","created":1796178932,"model":'
    '"/tmp/kvcheck-real-vllm/tiny-llama","choices":[],"usage":{"prompt_tokens":4095,"total_tokens":4096,'
    '"completion_tokens":1},"system_fingerprint":"vllm-0.32.0-1b7a4b8e"}\n\ndata: [DONE]\n\n'
)
REAL_REFUSAL = (
    '{"error":{"message":"This model\'s maximum context length is 4096 tokens. However, your prompt contains at '
    'least 4097 input tokens, which exceeds this limit even without any output tokens. Please reduce the length of '
    'the input prompt. (parameter=input_tokens, value=4097)","type":"BadRequestError","param":"input_tokens",'
    '"code":400}}'
)


def test_vllm_s_stream_and_refusal_are_read_as_they_are() -> None:
    from kvcheck.probe.wire import read_answer

    served = read_answer(200, REAL_STREAM, latency_ms=1.0, sse=True)
    assert (served.kind, served.finish_type, served.prompt_tokens, served.completion_tokens) == (
        "success", "length", 4095, 1)
    # a stream cut before its finish reason is no success, whatever came before
    cut = read_answer(200, REAL_STREAM.split("\n\n")[1] + "\n\n", latency_ms=1.0, sse=True)
    assert (cut.kind, cut.prompt_tokens, cut.message) == ("empty", 4095, "the stream ended without a finish reason")
    refused = read_answer(400, REAL_REFUSAL, latency_ms=1.0, sse=False)
    assert (refused.kind, refused.abort_status) == ("error", 400)
    assert refused.message.startswith("This model's maximum context length is 4096 tokens.")


def test_an_engine_without_a_front_door_is_bad_input_and_never_asked(vllm, monkeypatch) -> None:
    from kvcheck.engines.vllm.engine import VllmEngine
    from kvcheck.errors import InputError

    monkeypatch.setattr(VllmEngine, "probe_front_door", lambda self: None)
    d = vllm("fixed")
    with pytest.raises(InputError, match="--engine vllm: kvcheck probe cannot talk to that engine's front door"):
        run_probe(ProbeOptions(url=d.url, engine="vllm", **FAST))
    assert d.seen == []
    # found from a bare URL, an engine the probe cannot talk to is skipped: SGLang's reader alone asked
    report = run_probe(ProbeOptions(url=d.url, **FAST))
    assert (report.exit_code, found(report)) == (3, [("KV320", "limits")])
    assert d.seen == [("GET", "/server_info"), ("GET", "/get_server_info")]
