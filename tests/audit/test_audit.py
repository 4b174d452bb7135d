"""audit_endpoints and run_audit against real loopback servers: figures, findings, verdicts."""

from __future__ import annotations

import json

import pytest

from kvcheck.backends.audit import audit_endpoints
from kvcheck.commands.audit import AuditOptions, read_token
from kvcheck.commands.audit import audit as run_audit
from kvcheck.errors import InputError
from kvcheck.model import Endpoint
from kvcheck.report.formats import FORMATTERS

from .servers import Reply, metrics_text, server_info_payload, sglang_routes

QUICK = {"timeout_s": 2.0, "retries": 0, "concurrency": 8, "verify": True, "token": None, "progress": False}


def audit(servers_or_endpoints, *, context_length=None, min_headroom=1.0, **overrides):
    endpoints = [
        item if isinstance(item, Endpoint) else Endpoint(name=item.url, url=item.url)
        for item in servers_or_endpoints
    ]
    options = {**QUICK, **overrides}
    return audit_endpoints(endpoints, context_length=context_length, min_headroom=min_headroom, **options)


def rules_of(measurement):
    return [(f.rule, f.severity) for f in measurement.findings]


def test_each_endpoint_becomes_a_target_and_a_measurement(serve):
    healthy = serve(
        sglang_routes(server_info_payload(max_total_num_tokens=1100000, max_req_input_len=1048570))
    )
    short = serve(sglang_routes())
    targets, measurements = audit([healthy, short])
    assert [(t.name, t.context_length, t.min_headroom, t.engine_version) for t in targets] == [
        (healthy.url, 1048576, 1.0, "0.5.23"),
        (short.url, 1048576, 1.0, "0.5.23"),
    ]
    assert targets[0].args["tp_size"] == 8 and targets[0].args["kv_cache_dtype"] == "fp8_e4m3"
    first = measurements[0]
    assert (first.role, first.source, first.pool_tokens, first.max_input_tokens, first.context_len) == (
        healthy.url,
        "audit",
        1100000,
        1048570,
        1048576,
    )
    assert first.engine_version == "0.5.23"
    assert first.argv == (
        "python3",
        "-m",
        "sglang.launch_server",
        "--model-path",
        "zai-org/GLM-5-FP8",
        "--tp-size",
        "8",
    )
    assert first.details == {
        "url": healthy.url,
        "info_endpoint": "/server_info",
        "context_source": "served",
        "served_context_len": 1048576,
        "max_total_num_tokens": 1100000,
        "max_req_input_len": 1048570,  # the server's own; max_input_tokens is the bound the pool allows
        "dp_token_capacities": [1100000],
    }
    assert first.findings == ()
    assert measurements[1].pool_tokens == 681280


def test_dp_attention_pool_is_the_smallest_rank(serve):
    payload = server_info_payload(
        max_total_num_tokens=700000, max_req_input_len=690000, dp_token_capacities=[700000, 690112]
    )
    server = serve(sglang_routes(payload))
    _, [measurement] = audit([server])
    assert measurement.pool_tokens == 690112
    assert measurement.details["dp_token_capacities"] == [700000, 690112]
    assert measurement.findings == ()


def test_window_precedence_endpoint_then_option_then_served(serve):
    server = serve(sglang_routes())
    targets, measurements = audit(
        [Endpoint("with-own", server.url, context_length=131072), Endpoint("plain", server.url)],
        context_length=262144,
    )
    assert [(t.name, t.context_length) for t in targets] == [("with-own", 131072), ("plain", 262144)]
    assert [m.details["context_source"] for m in measurements] == ["fleet file", "--context-length"]


def test_unknown_window_is_not_a_pass(serve):
    server = serve({"/server_info": Reply(body=server_info_payload())})
    targets, [measurement] = audit([server])
    assert targets[0].context_length == 0
    assert measurement.pool_tokens == 681280
    assert rules_of(measurement) == [("KV306", "error")]
    assert "does not state the context window it serves" in measurement.findings[0].message
    assert measurement.findings[0].hint == "pass --context-length N (or context_length in the fleet file)"


def test_failures_are_findings_and_others_still_reported(serve, closed_port):
    good = serve(sglang_routes())
    html = serve({"/server_info": Reply(body="<html>hello</html>", content_type="text/html")})
    other = serve({"/server_info": Reply(body={"status": "ok"})})
    slow = serve({"/server_info": Reply(body=server_info_payload(), delay_s=5)})
    dead = Endpoint("dead", f"http://127.0.0.1:{closed_port}")
    targets, measurements = audit([good, html, other, slow, dead], timeout_s=0.5, context_length=262144)
    assert [m.pool_tokens for m in measurements] == [681280, None, None, None, None]
    assert [rules_of(m) for m in measurements] == [[]] + [[("KV306", "error")]] * 4
    messages = [m.findings[0].message for m in measurements[1:]]
    assert messages[0] == f"{html.url}/server_info: the answer is not JSON (text/html: '<html>hello</html>')"
    assert messages[1].startswith(f"{other.url}/server_info: the answer is JSON but not SGLang's server info")
    assert messages[2] == f"{slow.url}/server_info: no complete answer within 0.5 s"
    assert messages[3].startswith(f"http://127.0.0.1:{closed_port}/server_info: cannot connect: ")
    assert [t.context_length for t in targets] == [262144] * 5


def test_erroring_server_recovers_on_retry(serve):
    routes = sglang_routes()
    routes["/server_info"] = [Reply(500, "warming up"), Reply(body=server_info_payload())]
    server = serve(routes)
    _, [measurement] = audit([server], retries=1)
    assert measurement.pool_tokens == 681280
    assert server.paths()[:2] == ["/server_info", "/server_info"]


def test_old_release(serve):
    payload = server_info_payload(max_total_num_tokens=320000, max_req_input_len=131066, version="0.4.6")
    del payload["internal_states"]
    server = serve(sglang_routes(payload, info_path="/get_server_info", served_context=131072))
    targets, [measurement] = audit([server])
    assert (measurement.pool_tokens, measurement.engine_version, measurement.details["info_endpoint"]) == (
        320000,
        "0.4.6",
        "/get_server_info",
    )
    assert targets[0].engine_version == "0.4.6"


def test_figures_that_disagree_are_kv307_and_the_smallest_is_judged(serve):
    payload = server_info_payload(max_total_num_tokens=681280, max_req_input_len=681274)
    server = serve(
        sglang_routes(
            payload,
            served_context=1048576,
            metrics=metrics_text(pool_tokens=[681280, 655360], context_len=524288),
        )
    )
    _, [measurement] = audit([server])
    assert measurement.pool_tokens == 655360
    assert rules_of(measurement) == [("KV307", "warning")] * 3
    assert [f.message for f in measurement.findings] == [
        "the sglang:max_total_num_tokens gauge says 655,360 tokens (smallest rank), server info says 681,280",
        "/v1/models serves max_model_len 1,048,576 but the sglang:context_len gauge says 524,288",
        "server info's max_req_input_len 681,274 is not below the pool of 655,360 tokens: "
        "the smallest rank refuses prompts that figure admits",
    ]
    assert measurement.details["metrics"] == {
        "sglang:max_total_num_tokens": 655360.0,
        "sglang:context_len": 524288.0,
        "sglang:page_size": 64.0,
    }


def test_started_context_differs_from_served(serve):
    payload = server_info_payload(context_length=262144)
    server = serve(sglang_routes(payload, served_context=131072))
    _, [measurement] = audit([server])
    assert [f.message for f in measurement.findings] == [
        "the server was started with --context-length 262,144 but serves a context of 131,072 tokens"
    ]


def test_server_info_below_every_rank(serve):
    payload = server_info_payload(
        max_total_num_tokens=600000, max_req_input_len=599994, dp_token_capacities=[700000, 690000]
    )
    server = serve(sglang_routes(payload))
    _, [measurement] = audit([server])
    assert measurement.pool_tokens == 600000
    assert [f.message for f in measurement.findings] == [
        "server info's max_total_num_tokens 600,000 is below every DP rank's token_capacity (smallest 690,000)"
    ]


def test_results_keep_input_order_under_concurrency(serve):
    servers = [
        serve(sglang_routes(server_info_payload(max_total_num_tokens=100000 + i, max_req_input_len=1000)))
        for i in range(12)
    ]
    _, measurements = audit(servers, concurrency=4)
    assert [m.pool_tokens for m in measurements] == [100000 + i for i in range(12)]


# -- run_audit: the command's behaviour ------------------------------------------------------------


def render_all(report) -> str:
    return "\n".join(FORMATTERS[name]().render(report) for name in sorted(FORMATTERS))


def test_run_audit_verdicts(serve, closed_port):
    big = serve(
        sglang_routes(
            server_info_payload(max_total_num_tokens=300000, max_req_input_len=262138), served_context=262144
        )
    )
    report = run_audit(AuditOptions(urls=(big.url,), timeout_s=2, retries=0))
    assert (report.verdict, report.exit_code, report.command, report.mode) == ("pass", 0, "audit", "audit")
    assert [(r.name, r.status, r.pool_tokens, r.required_tokens) for r in report.roles] == [
        (big.url, "pass", 300000, 262144)
    ]
    report = run_audit(AuditOptions(urls=(big.url,), context_length=524288, timeout_s=2, retries=0))
    assert (report.verdict, report.exit_code) == ("fail", 1)
    assert [f.rule for f in report.findings] == ["KV101", "KV102"]
    report = run_audit(
        AuditOptions(urls=(big.url, f"http://127.0.0.1:{closed_port}"), timeout_s=2, retries=0)
    )
    assert (report.verdict, report.exit_code) == ("error", 3)
    assert [(r.status, r.pool_tokens) for r in report.roles] == [("pass", 300000), ("error", None)]


def test_run_audit_headroom(serve):
    server = serve(
        sglang_routes(
            server_info_payload(max_total_num_tokens=300000, max_req_input_len=262138), served_context=262144
        )
    )
    report = run_audit(AuditOptions(urls=(server.url,), min_headroom=1.2, timeout_s=2, retries=0))
    assert [(r.status, r.required_tokens) for r in report.roles] == [("fail", 314573)]


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (AuditOptions(), "nothing to audit"),
        (
            AuditOptions(endpoints=("prefill=http://h:1",)),
            "--endpoint ROLE=URL pairs servers with a manifest's roles: it needs --manifest",
        ),
        (
            AuditOptions(urls=("http://h:1",), insecure=True, ca_bundle="ca.pem"),
            "--insecure and --ca-bundle contradict each other; choose one",
        ),
        (
            AuditOptions(urls=("http://h:1",), token_env="KVCHECK_TEST_UNSET_TOKEN"),
            "--token-env KVCHECK_TEST_UNSET_TOKEN: the environment variable is not set or empty",
        ),
        (AuditOptions(urls=("h:1",)), "'h:1' is not an http(s) URL of a server"),
    ],
)
def test_run_audit_input_errors(options, message, monkeypatch):
    monkeypatch.delenv("KVCHECK_TEST_UNSET_TOKEN", raising=False)
    with pytest.raises(InputError) as caught:
        run_audit(options)
    assert (caught.value.message, caught.value.exit_code) == (message, 2)


def test_read_token_takes_a_name():
    assert read_token("T", {"T": " abc \n"}) == "abc"
    with pytest.raises(InputError, match="takes the NAME of an environment variable"):
        read_token("T=abc", {})


def test_token_protected_server_and_the_token_never_shows(serve, monkeypatch):
    secret = "sk-kvcheck-test-0123456789"
    monkeypatch.setenv("KVCHECK_TEST_TOKEN", secret)
    payload = server_info_payload(extra_args={"api_key": secret})
    payload["launch_command"] = f"python3 -m sglang.launch_server --api-key {secret} --tp-size 8"
    server = serve(sglang_routes(payload), token=secret)
    refused = run_audit(AuditOptions(urls=(server.url,), timeout_s=2, retries=0))
    assert [(f.rule, f.message) for f in refused.findings] == [
        ("KV306", f"{server.url}/server_info: HTTP 401 Unauthorized")
    ]
    report = run_audit(
        AuditOptions(urls=(server.url,), token_env="KVCHECK_TEST_TOKEN", timeout_s=2, retries=0)
    )
    assert [r.pool_tokens for r in report.roles] == [681280]
    assert server.requests[-1].headers["authorization"] == f"Bearer {secret}"
    text = render_all(report) + render_all(refused)
    assert secret not in text
    assert "REDACTED" in text


def test_redirect_to_another_host_gets_no_token(serve, monkeypatch):
    monkeypatch.setenv("KVCHECK_TEST_TOKEN", "tok-123")
    other = serve(sglang_routes())
    target = other.url.replace("127.0.0.1", "localhost") + "/server_info"
    front = serve({"/server_info": Reply(301, headers={"Location": target})}, token="tok-123")
    report = run_audit(
        AuditOptions(urls=(front.url,), token_env="KVCHECK_TEST_TOKEN", timeout_s=2, retries=0)
    )
    assert [r.pool_tokens for r in report.roles] == [681280]
    assert report.roles[0].details["redirected_to"] == target
    assert front.requests[0].headers["authorization"] == "Bearer tok-123"
    assert all("authorization" not in r.headers for r in other.requests)


def test_tls_default_ca_bundle_and_insecure(serve, tls_files, capsys):
    server = serve(sglang_routes(), ssl_context=tls_files.server_context())
    refused = run_audit(AuditOptions(urls=(server.url,), timeout_s=3, retries=0))
    assert [f.rule for f in refused.findings] == ["KV306"]
    assert "TLS certificate verification failed" in refused.findings[0].message
    assert "--ca-bundle" in refused.findings[0].hint
    verified = run_audit(
        AuditOptions(urls=(server.url,), ca_bundle=tls_files.ca_cert, timeout_s=3, retries=0)
    )
    assert [r.pool_tokens for r in verified.roles] == [681280]
    assert "TLS certificates are NOT verified" not in capsys.readouterr().err
    insecure = run_audit(AuditOptions(urls=(server.url,), insecure=True, timeout_s=3, retries=0))
    assert [r.pool_tokens for r in insecure.roles] == [681280]
    assert "--insecure: TLS certificates are NOT verified" in capsys.readouterr().err


def test_fleet_file_findings_point_at_their_line(serve, tmp_path, closed_port):
    server = serve(sglang_routes())
    fleet = tmp_path / "fleet.yaml"
    fleet.write_text(
        f"live: {server.url}\ngone:\n  url: http://127.0.0.1:{closed_port}\n  context_length: 4096\n"
    )
    report = run_audit(AuditOptions(fleet=fleet, timeout_s=2, retries=0))
    assert [(r.name, r.status, r.required_tokens) for r in report.roles] == [
        ("live", "fail", 1048576),
        ("gone", "error", 4096),
    ]
    kv306 = [f for f in report.findings if f.rule == "KV306"]
    assert [(f.role, f.location.render()) for f in kv306] == [("gone", f"{fleet}:2:1")]
    assert report.source == str(fleet)


# -- manifest mode -----------------------------------------------------------------------------------


MANIFEST = """\
name: pd
context_length: 262144
model: {path: Qwen/Qwen3-8B}
engine: {version: "0.5.23"}
args: {tp-size: 8, mem-fraction-static: 0.85}
roles:
  prefill:
    gpus: [0, 1, 2, 3, 4, 5, 6, 7]
    args: {disaggregation-mode: prefill, disaggregation-enable-kv-checksum: true}
  decode:
    gpus: [0, 1, 2, 3, 4, 5, 6, 7]
    args: {disaggregation-mode: decode, disaggregation-enable-kv-checksum: true}
policy: {min_headroom: 1.1}
"""


def pd_payload(mode: str, pool: int, limit: int, **extra) -> dict:
    args = {"disaggregation_mode": mode, "disaggregation_enable_kv_checksum": True,
            "model_path": "Qwen/Qwen3-8B", **extra}  # the manifest's model (else KV311)
    return server_info_payload(max_total_num_tokens=pool, max_req_input_len=limit, extra_args=args)


def test_manifest_mode_judges_servers_as_roles(serve, tmp_path):
    manifest = tmp_path / "deploy.yaml"
    manifest.write_text(MANIFEST)
    prefill = serve(sglang_routes(pd_payload("prefill", 300000, 262138), served_context=262144))
    decode = serve(
        sglang_routes(pd_payload("decode", 280000, 262138, mem_fraction_static=0.8), served_context=262144)
    )
    report = run_audit(
        AuditOptions(
            manifest=manifest,
            endpoints=(f"prefill={prefill.url}", f"decode={decode.url}"),
            timeout_s=2,
            retries=0,
        )
    )
    assert [(r.name, r.status, r.pool_tokens, r.required_tokens) for r in report.roles] == [
        ("prefill", "pass", 300000, 288359),
        ("decode", "fail", 280000, 288359),
    ]
    assert [(f.rule, f.role) for f in report.findings] == [("KV308", "decode"), ("KV101", "decode")]
    assert report.findings[0].message == (
        f"{decode.url} runs other settings than the manifest declares: "
        "mem-fraction-static: manifest 0.85, server 0.8"
    )
    assert report.findings[0].location.render() == f"{manifest}:5:20"
    assert (report.source, report.context_length) == (str(manifest), 262144)


def test_manifest_mode_prefill_decode_limits_differ(serve, tmp_path):
    manifest = tmp_path / "deploy.yaml"
    manifest.write_text(MANIFEST)
    prefill = serve(sglang_routes(pd_payload("prefill", 300000, 262138), served_context=262144))
    decode = serve(sglang_routes(pd_payload("decode", 300000, 250000), served_context=262144))
    report = run_audit(
        AuditOptions(
            manifest=manifest,
            endpoints=(f"prefill={prefill.url}", f"decode={decode.url}"),
            min_headroom=1.0,
            timeout_s=2,
            retries=0,
        )
    )
    assert [(f.rule, f.severity, f.role) for f in report.findings] == [("KV104", "warning", None)]
    assert [r.required_tokens for r in report.roles] == [262144, 262144]
    assert report.exit_code == 0


def test_a_role_whose_endpoint_answers_as_a_plain_server_is_an_error(serve, tmp_path):
    # it only warned (KV308) and the role could pass: its pool and limits are not the prefill role's
    manifest = tmp_path / "deploy.yaml"
    manifest.write_text(MANIFEST)
    plain = serve(sglang_routes(pd_payload("null", 300000, 262138), served_context=262144))
    swapped = serve(sglang_routes(pd_payload("prefill", 300000, 262138), served_context=262144))
    report = run_audit(
        AuditOptions(manifest=manifest, endpoints=(f"prefill={plain.url}", f"decode={swapped.url}"),
                     min_headroom=1.0, timeout_s=2, retries=0)
    )
    errors = [(f.rule, f.role, f.message) for f in report.findings if f.severity == "error"]
    assert errors == [
        ("KV311", "prefill", f"{plain.url} serves as a plain server (no disaggregation mode), not as the "
                             "manifest's prefill role"),
        ("KV311", "decode", f"{swapped.url} serves as prefill, not as the manifest's decode role"),
    ]
    # as for another model (KV311): the wrong server was asked, so the role could not be checked (exit 3)
    assert [(r.name, r.status) for r in report.roles] == [("prefill", "error"), ("decode", "error")]
    assert report.exit_code == 3


def test_manifest_version_drift(serve, tmp_path):
    manifest = tmp_path / "deploy.yaml"
    manifest.write_text(MANIFEST)
    payload = pd_payload("prefill", 300000, 262138)
    payload["version"] = "0.5.21"
    prefill = serve(sglang_routes(payload, served_context=262144))
    report = run_audit(
        AuditOptions(manifest=manifest, endpoints=(f"prefill={prefill.url}",), timeout_s=2, retries=0)
    )
    assert [(f.rule, f.severity, f.role) for f in report.findings] == [
        ("KV308", "warning", "prefill"), ("KV201", "error", "prefill"), ("KV306", "error", "decode"),
    ]
    assert report.findings[0].message == (
        f"{prefill.url} runs other settings than the manifest declares: SGLang version: manifest 0.5.23, server 0.5.21"
    )
    # the manifest's decode role has no --endpoint: it is reported as not audited, never dropped
    assert [(r.name, r.status) for r in report.roles] == [("prefill", "fail"), ("decode", "error")]
    assert report.findings[2].message == "manifest role 'decode' has no --endpoint, so it was not audited"
    assert report.exit_code == 1


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ({}, "--manifest needs the live server of at least one role: --endpoint ROLE=URL"),
        (
            {"urls": ("http://h:1",), "endpoints": ("prefill=http://h:1",)},
            "--manifest takes its servers from --endpoint ROLE=URL, not from URLs or --fleet",
        ),
        (
            {"context_length": 5, "endpoints": ("prefill=http://h:1",)},
            "--context-length conflicts with --manifest: the manifest's context_length is the window",
        ),
    ],
)
def test_manifest_mode_input_errors(tmp_path, extra, message):
    manifest = tmp_path / "deploy.yaml"
    manifest.write_text(MANIFEST)
    with pytest.raises(InputError) as caught:
        run_audit(AuditOptions(manifest=manifest, **extra))
    assert caught.value.message == message


def test_json_report_carries_the_details(serve):
    payload = server_info_payload(dp_token_capacities=[681280, 670000], swa_token_capacities=[90000, 90000])
    server = serve(
        sglang_routes(payload, metrics=metrics_text(pool_tokens=[681280, 670000], context_len=1048576))
    )
    report = run_audit(AuditOptions(urls=(server.url,), timeout_s=2, retries=0))
    data = json.loads(FORMATTERS["json"]().render(report))
    details = data["roles"][0]["details"]
    assert details["dp_token_capacities"] == [681280, 670000]
    assert details["swa_token_capacities"] == [90000, 90000]
    assert details["metrics"]["sglang:max_total_num_tokens"] == 670000.0
    assert data["roles"][0]["pool_tokens"] == 670000


# -- the worker pool -----------------------------------------------------------------------------------


def test_run_bounded_runs_exactly_concurrency_at_once_in_input_order():
    import threading

    from kvcheck.backends.audit import run_bounded

    barrier = threading.Barrier(3, timeout=10)  # breaks unless three items run at the same time
    lock = threading.Lock()
    active, peak = 0, 0

    def work(item: int) -> int:
        nonlocal active, peak
        with lock:
            active += 1
            peak = max(peak, active)
        barrier.wait()
        with lock:
            active -= 1
        return item * 10

    assert run_bounded(list(range(12)), work, 3) == [i * 10 for i in range(12)]
    assert peak == 3


def test_run_bounded_raises_a_bug_in_the_calling_thread():
    from kvcheck.backends.audit import run_bounded

    def work(item: int) -> int:
        if item == 2:
            raise ZeroDivisionError("bug")
        return item

    with pytest.raises(ZeroDivisionError, match="bug"):
        run_bounded([0, 1, 2, 3], work, 2)
