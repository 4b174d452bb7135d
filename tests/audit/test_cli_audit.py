"""`kvcheck audit` end to end: the real command, real loopback servers, exact exit codes and output."""

from __future__ import annotations

import json

import pytest

from .servers import Reply, server_info_payload, sglang_routes

FAST = ("--timeout", "2", "--retries", "0")
SECRET = "sk-kvcheck-cli-test-9876543210"


def fits(pool: int = 300000, served: int = 262144):
    return sglang_routes(
        server_info_payload(max_total_num_tokens=pool, max_req_input_len=served - 6), served_context=served
    )


def test_passing_server_exits_0_with_a_table(serve, kvcheck):
    server = serve(fits())
    result = kvcheck("audit", server.url, *FAST)
    assert result.exit_code == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == f"kvcheck audit: PASS (exit 0)  {server.url}"
    assert lines[1] == "pools reported by live servers"
    row = next(line for line in lines if line.startswith(server.url))
    assert row.split() == [server.url, "PASS", "300,000", "262,144", "114.4%", "262,138", "audit"]
    assert result.stderr == ""


def test_short_pool_exits_1_and_json_names_the_shortfall(serve, kvcheck):
    server = serve(sglang_routes())
    result = kvcheck("audit", server.url, *FAST, "--format", "json")
    assert result.exit_code == 1, result.stderr
    data = json.loads(result.stdout)
    assert (data["command"], data["mode"], data["verdict"], data["exit_code"]) == (
        "audit",
        "audit",
        "fail",
        1,
    )
    [role] = data["roles"]
    assert {
        k: role[k] for k in ("name", "status", "pool_tokens", "required_tokens", "max_input_tokens", "source")
    } == {
        "name": server.url,
        "status": "fail",
        "pool_tokens": 681280,
        "required_tokens": 1048576,
        "max_input_tokens": 681274,
        "source": "audit",
    }
    assert [(f["rule"], f["severity"], f["role"]) for f in data["findings"]] == [
        ("KV101", "error", server.url)
    ]


def test_unreachable_server_exits_3_and_others_are_still_reported(serve, kvcheck, closed_port):
    server = serve(fits())
    dead = f"http://127.0.0.1:{closed_port}"
    result = kvcheck("audit", server.url, dead, *FAST, "--format", "json")
    assert result.exit_code == 3, result.stderr
    data = json.loads(result.stdout)
    assert data["verdict"] == "error"
    assert [(r["name"], r["status"], r["pool_tokens"]) for r in data["roles"]] == [
        (server.url, "pass", 300000),
        (dead, "error", None),
    ]
    [kv306] = data["findings"]
    assert (kv306["rule"], kv306["role"]) == ("KV306", dead)
    assert kv306["message"].startswith(f"{dead}/server_info: cannot connect: ")


def test_context_length_option_judges_every_server(serve, kvcheck):
    server = serve(fits())
    result = kvcheck("audit", server.url, "--context-length", "524288", *FAST, "--format", "json")
    assert result.exit_code == 1
    data = json.loads(result.stdout)
    assert data["context_length"] == 524288
    assert [f["rule"] for f in data["findings"]] == ["KV101", "KV102"]


@pytest.mark.parametrize(
    ("args", "stderr"),
    [
        (
            ("localhost:30000",),
            "kvcheck: error: 'localhost:30000' is not an http(s) URL of a server\n"
            "kvcheck: hint: each URL is a server's base, e.g. http://10.0.0.5:30000\n",
        ),
        (
            (),
            "kvcheck: error: nothing to audit\n"
            "kvcheck: hint: give server URLs, --fleet FILE, or --manifest M --endpoint ROLE=URL\n",
        ),
        (
            ("http://h:1", "--token-env", "KVCHECK_CLI_UNSET"),
            "kvcheck: error: --token-env KVCHECK_CLI_UNSET: the environment variable is not set or empty\n"
            "kvcheck: hint: export KVCHECK_CLI_UNSET=... before running kvcheck\n",
        ),
    ],
)
def test_bad_input_exits_2(kvcheck, args, stderr):
    result = kvcheck("audit", *args)
    assert (result.exit_code, result.stdout, result.stderr) == (2, "", stderr)


def test_bad_fleet_file_exits_2_with_its_line(kvcheck, tmp_path):
    fleet = tmp_path / "fleet.txt"
    fleet.write_text("http://a:1\nhttp://b:2 extra\n")
    result = kvcheck("audit", "--fleet", str(fleet))
    assert result.exit_code == 2
    assert result.stderr.splitlines()[:2] == [
        "kvcheck: error: 1 error in fleet file:",
        f"{fleet}:2:1: expected one URL per line, got 'http://b:2 extra'",
    ]


def test_fleet_file(serve, kvcheck, tmp_path):
    a, b = serve(fits()), serve(fits(pool=200000))
    fleet = tmp_path / "fleet.yaml"
    fleet.write_text(f"# two servers\nsmall-ok:\n  url: {b.url}\n  context_length: 131072\nbig: {a.url}\n")
    result = kvcheck("audit", "--fleet", str(fleet), *FAST, "--format", "json")
    assert result.exit_code == 0, result.stdout
    data = json.loads(result.stdout)
    assert [(r["name"], r["status"], r["required_tokens"]) for r in data["roles"]] == [
        ("small-ok", "pass", 131072),
        ("big", "pass", 262144),
    ]
    assert data["source"] == str(fleet)


def test_token_from_environment_never_appears(serve, kvcheck):
    payload = server_info_payload(
        max_total_num_tokens=300000, max_req_input_len=262138, extra_args={"api_key": SECRET}
    )
    payload["launch_command"] = f"python3 -m sglang.launch_server --api-key={SECRET}"
    server = serve(sglang_routes(payload, served_context=262144), token=SECRET)
    refused = kvcheck("audit", server.url, *FAST)
    assert refused.exit_code == 3
    assert f"KV306 [{server.url}] {server.url}/server_info: HTTP 401 Unauthorized" in refused.stdout
    for fmt in ("table", "json", "junit", "github", "markdown"):
        result = kvcheck(
            "audit",
            server.url,
            "--token-env",
            "KVCHECK_CLI_TOKEN",
            *FAST,
            "--format",
            fmt,
            env={"KVCHECK_CLI_TOKEN": SECRET},
        )
        assert result.exit_code == 0, (fmt, result.stdout, result.stderr)
        assert SECRET not in result.stdout + result.stderr
    assert server.requests[-1].headers["authorization"] == f"Bearer {SECRET}"


def test_tls_options(serve, kvcheck, tls_files):
    server = serve(fits(), ssl_context=tls_files.server_context())
    default = kvcheck("audit", server.url, *FAST, "--format", "json")
    assert default.exit_code == 3
    [finding] = json.loads(default.stdout)["findings"]
    assert finding["rule"] == "KV306"
    assert "TLS certificate verification failed" in finding["message"]
    assert "--ca-bundle" in finding["hint"]
    bundle = kvcheck("audit", server.url, "--ca-bundle", str(tls_files.ca_cert), *FAST)
    assert (bundle.exit_code, bundle.stderr) == (0, "")
    insecure = kvcheck("audit", server.url, "--insecure", *FAST)
    assert insecure.exit_code == 0
    assert "kvcheck: warning: --insecure: TLS certificates are NOT verified" in insecure.stderr
    both = kvcheck("audit", server.url, "--insecure", "--ca-bundle", str(tls_files.ca_cert))
    assert (both.exit_code, both.stderr) == (
        2,
        "kvcheck: error: --insecure and --ca-bundle contradict each other; choose one\n",
    )


def test_manifest_mode(serve, kvcheck, tmp_path):
    manifest = tmp_path / "deploy.yaml"
    manifest.write_text(
        "context_length: 262144\n"
        "model: {path: Qwen/Qwen3-8B}\n"
        'engine: {version: "0.5.23"}\n'
        "args: {tp-size: 8}\n"
        "roles:\n"
        "  prefill: {gpus: [0,1,2,3,4,5,6,7], args: {disaggregation-mode: prefill, disaggregation-enable-kv-checksum: true}}\n"
        "  decode: {gpus: [0,1,2,3,4,5,6,7], args: {disaggregation-mode: decode, disaggregation-enable-kv-checksum: true}}\n"
        "policy: {min_headroom: 1.2}\n"
    )

    def role(mode: str, pool: int):
        extra = {"disaggregation_mode": mode, "disaggregation_enable_kv_checksum": True, "model_path": "Qwen/Qwen3-8B"}
        payload = server_info_payload(max_total_num_tokens=pool, max_req_input_len=262138, extra_args=extra)
        return serve(sglang_routes(payload, served_context=262144))

    prefill, decode = role("prefill", 330000), role("decode", 300000)
    endpoints = ("--endpoint", f"prefill={prefill.url}", "--endpoint", f"decode={decode.url}")
    result = kvcheck("audit", "--manifest", str(manifest), *endpoints, *FAST, "--format", "json")
    assert result.exit_code == 1, result.stderr
    data = json.loads(result.stdout)
    assert [(r["name"], r["status"], r["required_tokens"]) for r in data["roles"]] == [
        ("prefill", "pass", 314573),
        ("decode", "fail", 314573),
    ]
    assert [(f["rule"], f["role"]) for f in data["findings"]] == [("KV101", "decode")]
    relaxed = kvcheck("audit", "--manifest", str(manifest), *endpoints, "--min-headroom", "1.0", *FAST)
    assert relaxed.exit_code == 0, relaxed.stdout
    wrong = kvcheck("audit", "--manifest", str(manifest), "--endpoint", f"decod={decode.url}")
    assert (wrong.exit_code, wrong.stderr) == (
        2,
        "kvcheck: error: --endpoint decod=...: the manifest has no role 'decod' (did you mean 'decode'?); "
        "its roles are: prefill, decode\n",
    )


def test_output_file_and_retry(serve, kvcheck, tmp_path):
    routes = fits()
    routes["/server_info"] = [Reply(503, "starting"), routes["/server_info"]]
    server = serve(routes)
    out = tmp_path / "report.json"
    result = kvcheck("audit", server.url, "--retries", "1", "--format", "json", "--output", str(out))
    assert (result.exit_code, result.stdout) == (0, "")
    assert result.stderr == f"kvcheck: report written to {out} (verdict pass, exit 0)\n"
    assert json.loads(out.read_text())["roles"][0]["pool_tokens"] == 300000


def test_ctrl_c_stops_at_once_without_waiting_for_slow_servers(serve, tmp_path):
    import os
    import signal
    import subprocess
    import sys
    import time

    from tests.conftest import REPO_ROOT

    server = serve({"/server_info": Reply(body=server_info_payload(), delay_s=120)})
    env = dict(os.environ, PYTHONPATH=str(REPO_ROOT))
    proc = subprocess.Popen(
        [sys.executable, "-m", "kvcheck", "audit", server.url, "--timeout", "120", "--retries", "0"],
        cwd=REPO_ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        for _ in range(300):  # until the request is in flight
            if server.requests:
                break
            time.sleep(0.1)
        assert server.paths() == ["/server_info"]
        proc.send_signal(signal.SIGINT)
        stdout, stderr = proc.communicate(timeout=30)  # far below the 120 s the server would take
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert (proc.returncode, stdout) == (130, "")
    assert stderr.startswith("kvcheck: interrupted")


@pytest.mark.parametrize(
    ("key", "value", "shown"),
    [("context_length", "big", "'big'"), ("context_length", -1, "-1"), ("max_total_tokens", 1.5, "1.5")],
)
def test_garbage_resolved_count_is_kv306_not_a_crash(serve, kvcheck, key, value, shown):
    # 'big' used to crash the policy (exit 4); -1 used to read "--context-length -1 is below the window"
    server = serve(sglang_routes(server_info_payload(extra_args={key: value})))
    result = kvcheck("audit", server.url, *FAST, "--format", "json")
    assert result.exit_code == 3, result.stderr
    data = json.loads(result.stdout)
    assert [(f["rule"], f["message"]) for f in data["findings"]] == [
        ("KV306", f"{server.url}/server_info: {key} is {shown}, not a token count (an integer from 0 to 2,147,483,647)")
    ]


def test_url_with_an_impossible_port_is_exit_2_not_unreachable(kvcheck):
    # it used to be tried, refused by the OS and reported as an unreachable server (exit 3)
    result = kvcheck("audit", "http://127.0.0.1:99999", *FAST)
    assert result.exit_code == 2
    assert result.stderr.splitlines()[0] == "kvcheck: error: 'http://127.0.0.1:99999': port 99999 is not a TCP port (1-65535)"


def test_credentials_are_refused_before_anything_echoes_them(kvcheck):
    result = kvcheck("audit", "ftp://user:hunter2@10.0.0.5:70000", *FAST)
    assert result.exit_code == 2
    assert "hunter2" not in result.stderr + result.stdout
    assert result.stderr.splitlines()[0] == "kvcheck: error: ftp://10.0.0.5:70000: credentials in the URL are not accepted"


def test_min_concurrency_counts_the_servers_running_request_cap(serve, kvcheck, tmp_path):
    """/server_info's internal_states[].effective_max_running_requests_per_dp bounds KV111 (it passed on the
    pool alone: 330,000 tokens hold 1.26 windows, and policy.min_concurrency 1.2 was met)."""
    manifest = tmp_path / "deploy.yaml"
    manifest.write_text(
        "context_length: 262144\n"
        "model: {path: zai-org/GLM-5-FP8}\n"
        'engine: {version: "0.5.23"}\n'
        "roles:\n"
        "  server: {}\n"
        "policy: {min_concurrency: 1.2}\n"
    )
    payload = server_info_payload(max_total_num_tokens=330000, max_req_input_len=262138)
    for state in payload["internal_states"]:
        state["effective_max_running_requests_per_dp"] = 1
    server = serve(sglang_routes(payload, served_context=262144))
    result = kvcheck("audit", "--manifest", str(manifest), "--endpoint", f"server={server.url}", *FAST,
                     "--format", "json")
    assert result.exit_code == 1, result.stdout
    [kv111] = json.loads(result.stdout)["findings"]
    assert (kv111["rule"], kv111["role"]) == ("KV111", "server")
    assert kv111["message"] == (
        "the engine runs at most 1 request at once (max_running_requests=1), below the policy's min_concurrency "
        "1.2: its pool of 330,000 tokens would hold 1.26 requests of the 262,144-token window, but "
        "max_running_requests binds, so long requests queue behind each other")


def test_an_sglang_bound_not_below_its_pool_is_kv307_in_sglang_words(serve, kvcheck):
    server = serve(sglang_routes(server_info_payload(max_total_num_tokens=262144, max_req_input_len=262144),
                                 served_context=262150))
    result = kvcheck("audit", server.url, *FAST, "--context-length", "131072", "--format", "json")
    assert result.exit_code == 0, result.stderr
    report = json.loads(result.stdout)
    assert [(f["rule"], f["severity"], f["message"]) for f in report["findings"]] == [(
        "KV307", "warning",
        "server info's max_req_input_len 262,144 is not below the pool of 262,144 tokens: "
        "the smallest rank refuses prompts that figure admits",
    )]
