"""run_probe against deployment doubles: the incident fails with the findings that would have caught it."""

from __future__ import annotations

import socket

import pytest

from kvcheck.commands.probe import plan_probe, run_probe
from kvcheck.errors import InputError
from kvcheck.probe.options import ProbeOptions
from kvcheck.report.formats.json import request_dict

FAST = {"rate_per_s": 1000.0, "seed": 7}


def rules_by_role(report) -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    for finding in report.findings:
        out.setdefault(finding.role, set()).add(finding.rule)
    return out


def rows(report) -> list[dict]:
    """Every request row of the report, as the JSON report writes it."""
    return sorted((request_dict(row) for role in report.roles if role.probe is not None
                   for row in role.probe.requests or ()), key=lambda row: row["index"])


def test_incident_deployment_fails_with_overlong_accepted_and_cross_tenant_content(deploy) -> None:
    # Advertised 4096, pool 2048: the shape of the incident (1,048,576 advertised, 681,280 pool).
    d = deploy("incident", context_len=4096, pool_tokens=2048)
    report = run_probe(ProbeOptions(url=d.url, concurrency=1, **FAST))  # one at a time: exact findings
    assert report.exit_code == 1
    assert report.verdict == "fail"
    assert rules_by_role(report) == {
        "limits": {"KV101"},  # the pool (2,048) is below the window (4,096), as audit would say
        "/generate": {"KV401", "KV402", "KV405"},
        "/generate (stream)": {"KV401", "KV402", "KV405"},
        "/v1/completions": {"KV401", "KV402"},
        "isolation": {"KV401", "KV402", "KV405"},
    }
    assert all(f.severity == "error" for f in report.findings)
    isolation = [r for r in rows(report) if r["check"] == "over-long"]
    assert len(isolation) == 8
    assert {(r["status"], r["reported_prompt_tokens"], r["verdict"]) for r in isolation} == {(200, 1, "fail")}
    assert all("KV405" in r["rules"] for r in isolation)
    # B = min(4096 - 1, 2048 - 1) - 5 = 2042, learned from /server_info
    limits = report.roles[0]
    assert (limits.name, limits.pool_tokens, limits.max_input_tokens, limits.required_tokens) == (
        "limits", 2048, 2042, 4096)
    assert limits.status == "fail"
    assert d.request_count <= 64


def test_incident_under_concurrent_tenants_fails_with_kv401_and_kv405_in_every_group(deploy) -> None:
    d = deploy("incident", context_len=4096, pool_tokens=2048)
    report = run_probe(ProbeOptions(url=d.url, concurrency=4, **FAST))
    assert report.exit_code == 1
    found = rules_by_role(report)
    for group in ("/generate", "/generate (stream)", "isolation"):
        assert {"KV401", "KV405"} <= found[group], group
    assert d.request_count <= 64


def test_fixed_deployment_passes_with_exact_usage_echoed(deploy) -> None:
    d = deploy("fixed", context_len=4096, pool_tokens=8192)
    report = run_probe(ProbeOptions(url=d.url, **FAST))
    assert (report.exit_code, report.verdict, report.findings) == (0, "pass", ())
    assert [role.name for role in report.roles] == [
        "limits", "/generate", "/generate (stream)", "/v1/completions", "isolation"]
    by_check = {(r["endpoint"], r["stream"], r["check"]): r for r in rows(report)}
    below = by_check[("/generate", False, "below-bound")]
    assert (below["prompt_tokens"], below["status"], below["reported_prompt_tokens"], below["verdict"]) == (
        4089, 200, 4089, "ok")
    assert below["max_new_tokens"] == 5  # 4096 - 2 - 4089: the tokenizer's total check must pass
    at = by_check[("/generate", False, "at-bound")]
    assert (at["prompt_tokens"], at["status"], at["outcome"], at["verdict"]) == (4090, 400, "refused (HTTP 400)", "ok")
    assert "exceeds the maximum allowed length (4090 tokens)" in at["message"]
    stream_at = by_check[("/generate", True, "at-bound")]
    assert (stream_at["status"], stream_at["verdict"]) == (200, "ok")
    assert [r["prompt_tokens"] for r in rows(report) if r["endpoint"] == "/generate" and not r["stream"]
            and r["owner"].startswith("boundary")] == [32, 4089, 4090, 4091, 4096, 4097]
    # every request that left is in the log: 3 GETs (server_info, v1/models, metrics), the tokenizer's POST
    # that proves the ids in range, and the plan's 32 POSTs
    sent = report.roles[0].probe.sent
    assert len(sent) == d.request_count == 3 + 1 + 32
    assert [s.path for s in sent[:4]] == ["/server_info", "/v1/models", "/metrics", "/v1/tokenize"]


def test_fixed_engine_with_a_pool_below_the_window_fails_the_limits_row_and_the_promise(deploy) -> None:
    d = deploy("fixed", context_len=4096, pool_tokens=2048)
    report = run_probe(ProbeOptions(url=d.url, **FAST))
    assert report.exit_code == 1
    assert [(f.rule, f.role) for f in report.findings] == [("KV101", "limits"), ("KV404", "/generate")]
    assert report.findings[0].message == (
        "pool holds 2,048 tokens, below the 4,096-token window (served context length (/v1/models max_model_len)); "
        "short by 2,048 "
        "tokens: prompts the window promises cannot all be served"
    )
    assert [(r.name, r.status) for r in report.roles][0] == ("limits", "fail")
    assert "#3 /generate promised (4089 tokens)" in report.findings[1].message
    assert "exceeds the maximum allowed length (2042 tokens)" in report.findings[1].message


def test_silent_truncation_is_caught_by_the_usage_figures(deploy) -> None:
    d = deploy("truncate", context_len=4096, pool_tokens=8192)
    report = run_probe(ProbeOptions(url=d.url, **FAST))
    assert report.exit_code == 1
    assert set().union(*rules_by_role(report).values()) == {"KV401", "KV402"}
    beyond = next(r for r in rows(report) if r["check"] == "beyond-window" and r["endpoint"] == "/generate")
    assert (beyond["prompt_tokens"], beyond["reported_prompt_tokens"], beyond["rules"]) == (4097, 4090, ["KV401", "KV402"])
    assert report.roles[0].probe.limits.allow_auto_truncate is True


@pytest.mark.parametrize(("behaviour", "status", "advice"), [
    ("unavailable", 503, "the server is overloaded, draining or has no healthy backend behind the router"),
    ("refuse-all", 400, "check that the URL is the deployment's SGLang front door (/generate)"),
])
def test_a_front_door_that_refuses_the_control_request_stops_there_with_exit_3(deploy, behaviour, status,
                                                                                advice) -> None:
    d = deploy(behaviour)
    report = run_probe(ProbeOptions(url=d.url, **FAST))
    assert (report.exit_code, [(f.rule, f.role) for f in report.findings]) == (3, [("KV320", "limits")])
    message = report.findings[0].message
    assert f"the control request (32 tokens, far below every limit) was refused with HTTP {status}" in message
    assert "nothing else was sent" in message
    assert report.findings[0].hint.startswith(advice)
    # the limits GETs, the tokenizer's POST, then the one control POST: no over-long prompt reached a server
    # that refuses everything
    assert [(s.method, s.path) for s in d.seen if s.method == "POST"] == [("POST", "/v1/tokenize"), ("POST", "/generate")]


def test_dry_run_sends_nothing(deploy) -> None:
    d = deploy("incident")
    plan = plan_probe(ProbeOptions(url=d.url, context_length=1048576, pool_tokens=681280, dry_run=True, seed=1))
    assert d.request_count == 0
    lengths = [(r.check, r.prompt_tokens, r.expect) for r in plan.requests if r.endpoint == "/generate"
               and not r.stream and r.owner.startswith("boundary")]
    # B = min(1048575, 681279) - 5 = 681274; W - 7 = 1048569
    assert lengths == [
        ("control", 32, "accept"), ("below-bound", 681273, "accept"), ("promised", 1048569, "accept"),
        ("at-bound", 681274, "refuse"), ("above-bound", 681275, "refuse"), ("window", 1048576, "refuse"),
        ("beyond-window", 1048577, "refuse"),
    ]
    assert len(plan.requests) == 33  # 7 + 2 stream + 4 openai + 4 tenants x (2 rounds x 2 + 1)
    assert d.request_count == 0


def test_dry_run_without_limits_is_an_input_error() -> None:
    with pytest.raises(InputError, match="--dry-run sends nothing"):
        plan_probe(ProbeOptions(url="http://127.0.0.1:1", dry_run=True))


def test_a_plan_larger_than_max_requests_is_refused_before_sending(deploy) -> None:
    d = deploy("fixed")
    with pytest.raises(InputError, match="up to 44 requests with these options, more than --max-requests 20"):
        run_probe(ProbeOptions(url=d.url, max_requests=20, **FAST))
    assert d.request_count == 0


def test_bounds_hold_at_the_exact_budget(deploy) -> None:
    d = deploy("incident", context_len=4096, pool_tokens=2048)
    # 7 planned POSTs and up to 10 others (limits GETs, the tokenizer's POST, /health after a lost answer)
    options = ProbeOptions(url=d.url, max_requests=17, tenants=0, openai=False, stream=False, concurrency=2, **FAST)
    report = run_probe(options)
    assert d.request_count <= 17
    assert report.exit_code == 1
    assert [r["check"] for r in rows(report)] == [
        "control", "below-bound", "promised", "at-bound", "above-bound", "window", "beyond-window"]


def test_router_without_server_info_needs_the_limits_as_options(deploy) -> None:
    d = deploy("fixed", server_info=False)
    report = run_probe(ProbeOptions(url=d.url, **FAST))
    assert report.exit_code == 3
    assert [(f.rule, f.role) for f in report.findings] == [("KV320", "limits")]
    assert "--context-length and --pool was not given" in report.findings[0].message
    # SGLang's reader first, then vLLM's (its pool is on /metrics): neither reads a router's answers
    assert [(s.method, s.path) for s in d.seen] == [("GET", "/server_info"), ("GET", "/get_server_info"),
                                                    ("GET", "/metrics")]

    d2 = deploy("fixed", server_info=False)
    report = run_probe(ProbeOptions(url=d2.url, context_length=4096, pool_tokens=8192, **FAST))
    assert (report.exit_code, report.findings) == (0, ())
    assert report.roles[0].probe.limits.source == "options"


def test_an_unreachable_front_door_is_an_error_after_one_post() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    report = run_probe(ProbeOptions(url=f"http://127.0.0.1:{port}", context_length=4096, pool_tokens=8192, **FAST))
    assert report.exit_code == 3
    assert [f.rule for f in report.findings] == ["KV320"]  # the network, not the vocabulary (KV322)
    sent = report.roles[0].probe.sent
    assert [(s.method, s.path) for s in sent if s.method == "POST"] == [("POST", "/v1/tokenize")]


def test_redirects_to_another_host_are_never_followed(deploy) -> None:
    elsewhere = deploy("fixed", host="127.0.0.2")
    d = deploy("fixed", redirect_to=elsewhere.url)
    report = run_probe(ProbeOptions(url=d.url, context_length=4096, pool_tokens=8192, **FAST))
    assert elsewhere.request_count == 0
    assert report.exit_code == 3
    assert [(f.rule, f.role) for f in report.findings] == [("KV320", "limits")]
    assert "POST /v1/tokenize: HTTP 307: redirect not followed" in report.findings[0].message
    # /server_info's redirect is refused by the transport before it leaves; one POST, then the probe stops
    assert [(s.method, s.path) for s in d.seen] == [
        ("GET", "/server_info"), ("GET", "/v1/models"), ("POST", "/v1/tokenize")]


def test_ids_only_server_gets_token_prompts_for_every_tenant(deploy) -> None:
    # no tokenizer, so no /v1/tokenize: the ids are proven in range by --vocab-size
    d = deploy("incident", context_len=4096, pool_tokens=2048, has_tokenizer=False)
    report = run_probe(ProbeOptions(url=d.url, vocab_size=8192, **FAST))
    assert {r["prompt"] for r in rows(report)} == {"ids"}
    assert "KV405" in rules_by_role(report)["isolation"]
    assert report.exit_code == 1


def test_non_http_urls_are_refused() -> None:
    with pytest.raises(InputError, match="only http:// and https:// URLs"):
        run_probe(ProbeOptions(url="file:///etc/passwd"))


def test_request_timeout_bounds_every_request_the_first_gets_included() -> None:
    """A front door that accepts connections and never answers: each request waits --request-timeout, no more."""
    import threading
    import time

    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        listener.settimeout(0.2)
        while not stop.is_set():
            try:
                held.append(listener.accept()[0])  # read nothing, answer nothing
            except OSError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        started = time.monotonic()
        report = run_probe(ProbeOptions(url=f"http://127.0.0.1:{listener.getsockname()[1]}", context_length=4096,
                                        pool_tokens=8192, request_timeout_s=1.0, **FAST))
        elapsed = time.monotonic() - started
    finally:
        stop.set()
        thread.join()
        for conn in held:
            conn.close()
        listener.close()
    assert report.exit_code == 3
    sent = report.roles[0].probe.sent
    assert [s.method for s in sent][:1] == ["GET"] and [s.method for s in sent].count("POST") == 1
    # GETs (server_info and its fallback, /v1/models) and the control POST, 1 s each: far below the old 30 s
    assert elapsed < 1.0 * len(sent) + 5, (elapsed, [(s.method, s.path, s.error) for s in sent])


def test_a_smaller_pool_given_with_pool_is_judged_where_the_server_states_a_larger_one(deploy) -> None:
    """--pool names the smallest role's pool: a front door stating more (the role that answered) does not
    override it. 8,192 stated, 2,000 given, a 4,096-token window: the limits row fails (exit 1), the prompts
    still aim at the bound the server admits, and the larger --pool of a second run is not used."""
    d = deploy("fixed", context_len=4096, pool_tokens=8192)
    report = run_probe(ProbeOptions(url=d.url, pool_tokens=2000, **FAST))
    assert report.exit_code == 1
    assert [(f.rule, f.role) for f in report.findings] == [("KV101", "limits")]
    assert report.findings[0].message.startswith("pool holds 2,000 tokens, below the 4,096-token window")
    assert "--pool 2,000 is below the 8,192 tokens the server states: the limits row judges the smaller figure" in (
        report.roles[0].probe.limits.notes)
    below = {(r["endpoint"], r["stream"], r["check"]): r for r in rows(report)}[("/generate", False, "below-bound")]
    assert (below["prompt_tokens"], below["verdict"]) == (4089, "ok")
    larger = run_probe(ProbeOptions(url=d.url, pool_tokens=100000, **FAST))
    assert (larger.exit_code, larger.findings) == (0, ())
