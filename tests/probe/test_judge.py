"""The judge on every answer shape SGLang (or a front door) can give, one rule at a time."""

from __future__ import annotations

import json
import random

import httpx
import pytest

from kvcheck.probe.judge import judge
from kvcheck.probe.plan import PlannedRequest
from kvcheck.probe.prompts import make_owners
from kvcheck.probe.transport import BudgetExhausted, GuardedTransport, OriginRefused
from kvcheck.probe.wire import read_answer

OWNERS = make_owners(["me", "other"], candidates=range(1001, 1001 + 4096), rng=random.Random(3))


def planned(expect: str, *, stream: bool = False, tokens: int = 2042) -> PlannedRequest:
    return PlannedRequest(index=4, group="/generate", check="at-bound" if expect == "refuse" else "below-bound",
                          endpoint="/generate", stream=stream, owner="me", prompt_kind="ids",
                          prompt_tokens=tokens, expect=expect, max_new_tokens=16, why="B = 2042")


def native(prompt_tokens: int, completion: int, finish: dict | None, output_ids: list[int] | None = None) -> str:
    return json.dumps({"text": "x", "output_ids": output_ids or [], "meta_info": {
        "prompt_tokens": prompt_tokens, "completion_tokens": completion, "finish_reason": finish}})


def sse(*chunks: dict) -> str:
    return "".join(f"data: {json.dumps(c)}\n\n" for c in chunks) + "data: [DONE]\n\n"


def rules_of(plan: PlannedRequest, status: int, body: str, *, sse_body: bool = False) -> list[str]:
    result = judge(plan, read_answer(status, body, latency_ms=1.0, sse=sse_body), OWNERS)
    return sorted(h.rule for h in result.hits)


CASES = [
    # (expectation, status, body, sse, rules)
    ("refuse", 400, json.dumps({"error": {"message": "Input length (2042 tokens) exceeds ..."}}), False, []),
    ("refuse", 200, native(2042, 16, {"type": "length"}), False, ["KV401"]),
    ("refuse", 200, native(1, 16, {"type": "length"}), False, ["KV401", "KV402"]),
    ("refuse", 200, native(2042, 0, {"type": "length"}), False, ["KV401", "KV403"]),
    ("refuse", 200, "", False, ["KV406"]),
    ("refuse", 200, native(1, 0, {"type": "abort", "message": "too long", "status_code": 400}), False, ["KV406"]),
    ("refuse", 413, "<html>413 Request Entity Too Large</html>", False, ["KV407"]),
    # a server error is no refusal the probe can judge: a worker that crashed on the prompt (no verdict)
    ("refuse", 500, json.dumps({"error": {"message": "CUDA error: an illegal memory access"}}), False, ["KV321"]),
    ("refuse", 502, "<html>502 Bad Gateway</html>", False, ["KV321"]),
    # SGLang's own PD aborts: the decode side refused a bad transfer
    ("refuse", 500, json.dumps({"error": {"message": "KV checksum mismatch"}}), False, ["KV407"]),
    ("refuse", 500, json.dumps({"error": {"message": "Metadata corruption detected - bootstrap_room mismatch"}}),
     False, ["KV407"]),
    ("refuse", 401, "", False, ["KV320"]),
    ("refuse", 429, "", False, ["KV321"]),
    ("accept", 200, native(2041, 1, {"type": "length"}), False, []),
    ("accept", 200, native(2041, 0, {"type": "length"}), False, ["KV403"]),
    ("accept", 200, native(2040, 1, {"type": "length"}), False, ["KV402"]),
    ("accept", 200, json.dumps({"text": "x", "meta_info": {"finish_reason": {"type": "stop"}}}), False, ["KV321"]),
    ("accept", 400, json.dumps({"error": {"message": "Input length (2041 tokens) exceeds"}}), False, ["KV404"]),
    ("accept", 413, "", False, ["KV404"]),
    ("accept", 200, "<html>proxy</html>", False, ["KV321"]),
]


@pytest.mark.parametrize(("expect", "status", "body", "is_sse", "expected"), CASES)
def test_non_streaming_answers(expect, status, body, is_sse, expected) -> None:
    plan = planned(expect, tokens=2042 if expect == "refuse" else 2041)
    assert rules_of(plan, status, body, sse_body=is_sse) == expected


STREAM_CASES = [
    # SGLang's scheduler abort: explicit, status 400 inside the chunk
    (sse({"text": "", "meta_info": {"prompt_tokens": 1, "finish_reason":
                                    {"type": "abort", "message": "Input length ...", "status_code": 400}}}), []),
    # the tokenizer's error chunk on a 200 stream
    (sse({"error": {"message": "The input (4096 tokens) is longer ...", "type": "invalid_request_error",
                    "code": 400}}), []),
    (sse({"text": "", "meta_info": {"finish_reason": {"type": "abort", "message": "gone"}}}), ["KV406"]),
    (sse({"text": "", "meta_info": {"finish_reason": {"type": "abort", "status_code": 500}}}), ["KV321"]),
    (sse({"text": "", "meta_info": {"finish_reason": {"type": "abort", "message": "KV checksum mismatch",
                                                      "status_code": 500}}}), ["KV407"]),
    (sse({"text": "", "meta_info": {"prompt_tokens": 1, "finish_reason": None}}), ["KV406"]),
    (sse({"text": "a", "meta_info": {"prompt_tokens": 2042, "completion_tokens": 3,
                                     "finish_reason": {"type": "length"}}}), ["KV401"]),
]


@pytest.mark.parametrize(("body", "expected"), STREAM_CASES)
def test_streaming_answers(body, expected) -> None:
    assert rules_of(planned("refuse", stream=True), 200, body, sse_body=True) == expected


def test_another_owners_pattern_or_marker_is_kv405_whatever_the_status() -> None:
    other = OWNERS["other"]
    leaked_ids = native(2041, 8, {"type": "length"}, output_ids=[5, *other.pattern, 6])
    assert rules_of(planned("accept", tokens=2041), 200, leaked_ids) == ["KV405"]
    leaked_text = json.dumps({"error": {"message": f"bad input near {other.marker}"}})
    assert rules_of(planned("refuse"), 400, leaked_text) == ["KV405"]
    own = native(2041, 8, {"type": "length"}, output_ids=list(OWNERS["me"].pattern))
    assert rules_of(planned("accept", tokens=2041), 200, own) == []
    partial = native(2041, 7, {"type": "length"}, output_ids=list(other.pattern[:7]))
    assert rules_of(planned("accept", tokens=2041), 200, partial) == []


def test_openai_usage_is_read_for_the_prompt_count() -> None:
    body = json.dumps({"choices": [{"text": "x", "finish_reason": "length"}],
                       "usage": {"prompt_tokens": 1, "completion_tokens": 16}})
    plan = PlannedRequest(index=12, group="/v1/completions", check="at-bound", endpoint="/v1/completions",
                          stream=False, owner="me", prompt_kind="ids", prompt_tokens=2042, expect="refuse",
                          max_new_tokens=16, why="B = 2042")
    assert rules_of(plan, 200, body) == ["KV401", "KV402"]
    error = json.dumps({"object": "error", "message": "Input length ...", "type": "BadRequestError", "code": 400})
    assert rules_of(plan, 400, error) == []


class _Clock:
    def __init__(self) -> None:
        self.now = 100.0
        self.slept: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


def _guard(clock: _Clock, **kwargs) -> GuardedTransport:
    inner = httpx.MockTransport(lambda request: httpx.Response(200, json={}))
    defaults = {"origin": ("http", "front", 80), "max_requests": 3, "rate_per_s": 2.0, "deadline_s": 101.2}
    return GuardedTransport(inner, clock=clock, sleep=clock.sleep, **{**defaults, **kwargs})


def test_transport_spaces_requests_by_the_rate_and_stops_at_the_deadline() -> None:
    clock = _Clock()
    guard = _guard(clock)
    with httpx.Client(transport=guard, base_url="http://front") as client:
        assert client.get("/a").status_code == 200
        assert client.get("/b").status_code == 200
        assert client.get("/c").status_code == 200  # starts at 101.0: 0.5 s apart at 2 req/s
        assert clock.slept == [0.5, 0.5]
        with pytest.raises(BudgetExhausted, match="--max-requests"):
            client.get("/d")
    assert [(s.seq, s.path, s.status) for s in guard.sent] == [(1, "/a", 200), (2, "/b", 200), (3, "/c", 200)]

    clock = _Clock()
    guard = _guard(clock, max_requests=10)
    with httpx.Client(transport=guard, base_url="http://front") as client:
        client.get("/a")
        client.get("/b")
        client.get("/c")
        with pytest.raises(BudgetExhausted, match="--max-duration"):
            client.get("/d")  # would start at 101.5, after the deadline 101.2
    assert len(guard.sent) == 3


def test_transport_refuses_every_other_origin() -> None:
    clock = _Clock()
    guard = _guard(clock)
    with httpx.Client(transport=guard) as client:
        for url in ("http://elsewhere/x", "https://front/x", "http://front:8080/x"):
            with pytest.raises(OriginRefused, match="only talks to the URL given"):
                client.get(url)
    assert guard.sent == []
