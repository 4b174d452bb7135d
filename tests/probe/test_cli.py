"""`kvcheck probe` end to end: the real command against deployment doubles, exact exit codes and output."""

from __future__ import annotations

import json

from tests.conftest import run_kvcheck

FAST = ("--rate", "1000", "--seed", "5")


def test_incident_fails_with_exit_1_and_the_findings_in_json(deploy) -> None:
    d = deploy("incident", context_len=4096, pool_tokens=2048)
    r = run_kvcheck("probe", d.url, "--format", "json", "--concurrency", "1", *FAST)
    assert r.exit_code == 1, r.stderr
    report = json.loads(r.stdout)
    assert (report["command"], report["mode"], report["verdict"], report["exit_code"]) == ("probe", "probe", "fail", 1)
    assert report["context_length"] == 4096
    found = {(f["rule"], f["role"]) for f in report["findings"]}
    assert {("KV401", "/generate"), ("KV405", "/generate"), ("KV401", "isolation"), ("KV405", "isolation")} <= found
    requests = next(role for role in report["roles"] if role["name"] == "isolation")["details"]["requests"]
    over = [row for row in requests if row["check"] == "over-long"]
    assert {(row["status"], row["verdict"]) for row in over} == {(200, "fail")}
    assert all(row["latency_ms"] is not None for row in requests)
    assert d.request_count <= 64


def test_fixed_passes_with_exit_0_and_a_request_table(deploy) -> None:
    d = deploy("fixed")
    r = run_kvcheck("probe", d.url, *FAST)
    assert r.exit_code == 0, r.stderr
    assert "kvcheck probe: PASS (exit 0)" in r.stdout
    assert "requests sent" in r.stdout
    table_rows = [line for line in r.stdout.splitlines() if "refused (HTTP 400)" in line]
    # /generate at/above/window/beyond, /v1/completions at/window, 4 tenants' over-long x 2 rounds
    assert len(table_rows) == 4 + 2 + 8
    assert d.request_count == 36  # 3 GETs, POST /v1/tokenize, 32 planned POSTs


def test_dry_run_prints_the_plan_and_sends_nothing(deploy) -> None:
    d = deploy("incident")
    r = run_kvcheck("probe", d.url, "--dry-run", "--context-length", "1048576", "--pool", "681280", "--seed", "1")
    assert r.exit_code == 0, r.stderr
    assert d.request_count == 0
    assert "admission bound   B = 681274 tokens" in r.stdout
    assert "33 requests planned" in r.stdout
    line = next(x for x in r.stdout.splitlines() if x.split()[:1] == ["3"])
    assert line.split() == ["3", "/generate", "no", "promised", "1048569", "accept", "boundary-3"]

    r = run_kvcheck("probe", d.url, "--dry-run", "--context-length", "4096", "--pool", "2048", "--format", "json")
    assert r.exit_code == 0
    plan = json.loads(r.stdout)
    assert [q["prompt_tokens"] for q in plan["requests"][:3]] == [32, 2041, 4089]
    assert d.request_count == 0


def test_bad_options_exit_2_with_every_problem_and_send_nothing(deploy, tmp_path) -> None:
    d = deploy("fixed")
    bundle = tmp_path / "ca.pem"
    bundle.write_text("not a cert")
    r = run_kvcheck("probe", d.url, "--concurrency", "0", "--rate", "-1", "--tenants", "1",
                    "--insecure", "--ca-bundle", str(bundle))
    assert r.exit_code == 2
    assert r.stdout == ""
    assert r.stderr.splitlines() == [
        "kvcheck: error: --concurrency must be an integer of at least 1, got 0",
        "--tenants must be 0 (skip the isolation check) or at least 2",
        "--rate must be a positive number, got -1.0",
        "--insecure and --ca-bundle contradict each other; give one",
    ]
    assert d.request_count == 0

    r = run_kvcheck("probe", "ftp://example.com/x")
    assert (r.exit_code, r.stdout) == (2, "")
    assert "only http:// and https:// URLs" in r.stderr

    r = run_kvcheck("probe", d.url, "--max-requests", "10")
    assert r.exit_code == 2
    assert "up to 44 requests with these options, more than --max-requests 10" in r.stderr
    assert d.request_count == 0


def test_router_without_server_info_is_exit_3_unless_the_limits_are_given(deploy) -> None:
    d = deploy("fixed", server_info=False)
    r = run_kvcheck("probe", d.url, "--format", "json", *FAST)
    assert r.exit_code == 3
    report = json.loads(r.stdout)
    assert [(f["rule"], f["role"]) for f in report["findings"]] == [("KV320", "limits")]
    r = run_kvcheck("probe", d.url, "--context-length", "4096", "--pool", "8192", *FAST)
    assert r.exit_code == 0, r.stdout


def test_bearer_token_comes_from_the_environment_and_is_never_printed(deploy) -> None:
    d = deploy("fixed", token="s3cret-token")
    r = run_kvcheck("probe", d.url, "--format", "json", *FAST)
    assert r.exit_code == 3
    assert "HTTP 401" in json.loads(r.stdout)["findings"][0]["message"]

    r = run_kvcheck("probe", d.url, "--format", "json", "--token-env", "PROBE_TOKEN", *FAST,
                    env={"PROBE_TOKEN": "s3cret-token"})
    assert r.exit_code == 0, r.stdout
    assert "s3cret-token" not in r.stdout + r.stderr
    assert "sk-secret-never-shown" not in r.stdout

    r = run_kvcheck("probe", d.url, "--token-env", "PROBE_TOKEN_UNSET")
    assert r.exit_code == 2
    assert "--token-env PROBE_TOKEN_UNSET: that environment variable is not set or empty" in r.stderr


def test_url_with_an_impossible_port_or_credentials_is_exit_2_and_never_echoes_the_password() -> None:
    # port 99999 used to be planned and then reported as unreachable (exit 3)
    r = run_kvcheck("probe", "http://127.0.0.1:99999", "--context-length", "1000", "--pool", "2000", "--dry-run")
    assert (r.exit_code, r.stderr) == (2, "kvcheck: error: 'http://127.0.0.1:99999': port 99999 is not a TCP port (1-65535)\n")
    r = run_kvcheck("probe", "ftp://user:hunter2@10.0.0.5", "--context-length", "1000", "--pool", "2000", "--dry-run")
    assert (r.exit_code, r.stderr) == (2, "kvcheck: error: credentials in the URL are not accepted; pass --token-env NAME\n")
