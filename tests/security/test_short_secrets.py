"""Secrets kvcheck was given are never printed, whatever their length (issue 20, class 8).

The redactor searched only for values of 8 characters or more, so a 5-character `--token-env` token
that a server echoed in its reason phrase or in a redirect's path reached the report. A secret kvcheck
is handed (the --token-env token, the HF_TOKEN it sends to the Hub, a secret-named value of a manifest)
is now hidden at any length, in every format and on stderr; values kvcheck only guesses are secrets
(a manifest's other env values) keep the 8-character floor, so that "1" and "true" stay readable.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvcheck.redact import manifest_secrets, redact_text
from tests.security.helpers import RawServer, attack, healthy_routes, send_body

FORMATS = ("json", "table", "markdown", "junit", "github", "sarif")
TOKENS = ("k3Y9z", "Zq")


def echoing_routes(token: str) -> dict[str, dict]:
    """Servers that echo the token back: in a reason phrase (401 and 500), in a redirect's path."""
    return {
        "reason phrase 401": {"/server_info": send_body(b"{}", status=f"401 Unauthorized {token}"),
                              "/v1/models": send_body(b"{}", status=f"401 Who is {token}")},
        "reason phrase 500": {"/server_info": send_body(b"{}", status=f"500 {token} failed"),
                              "/v1/models": send_body(b"{}", status=f"500 {token}")},
        "redirect path": {
            "/server_info": send_body(b"", status="302 Found", headers={"location": f"/login/{token}/next"}),
            f"/login/{token}/next": send_body(b"", status="302 Found", headers={"location": f"ftp://h/{token}"}),
            "/v1/models": send_body(b"", status="302 Found", headers={"location": f"http://a..b/{token}"}),
        },
    }


@pytest.mark.parametrize("token", TOKENS)
@pytest.mark.parametrize("case", ["reason phrase 401", "reason phrase 500", "redirect path"])
def test_a_short_token_a_server_echoes_is_not_in_the_audit_report(token: str, case: str) -> None:
    with RawServer(echoing_routes(token)[case]) as server, RawServer(healthy_routes()) as good:
        for fmt in FORMATS:
            out = attack("audit", server.url, good.url, "--context-length", "131072", "--format", fmt,
                         "--token-env", "AUDIT_TOKEN", "--timeout", "3", "--retries", "0",
                         env={"AUDIT_TOKEN": token})
            assert out.exit_code == 3, (fmt, out.stderr)
            assert token not in out.stdout, fmt
            assert token not in out.stderr, fmt
            assert "REDACTED" in out.stdout, fmt  # it was there, and was hidden
            if fmt == "json":
                assert {r["status"] for r in json.loads(out.stdout)["roles"]} == {"error", "pass"}


@pytest.mark.parametrize("token", TOKENS)
@pytest.mark.parametrize("case", ["reason phrase 401", "redirect path"])
def test_a_short_token_is_not_in_the_probe_report_nor_its_progress_lines(token: str, case: str) -> None:
    routes = echoing_routes(token)[case]
    routes["/generate"] = routes["/server_info"]
    with RawServer(routes) as server:
        out = attack("probe", server.url, "--context-length", "1000", "--format", "json",
                     "--token-env", "PROBE_TOKEN", env={"PROBE_TOKEN": token})
    assert out.exit_code == 3, out.stderr
    assert token not in out.stdout
    assert token not in out.stderr


def test_a_short_hf_token_the_hub_echoes_is_not_in_the_report(tmp_path: Path) -> None:
    manifest = tmp_path / "hub.yaml"
    manifest.write_text('name: hub\ncontext_length: 32768\nmodel: {path: org/model}\nengine: {version: "0.5.23"}\n'
                        "gpu: H100\nroles:\n  server: {gpus: [0]}\n")
    routes = {"/org/model/resolve/main/config.json": send_body(b"", status="302 Found",
                                                                headers={"location": "/echo/hf7Kq/config.json"}),
              "/echo/hf7Kq/config.json": send_body(b"", status="302 Found", headers={"location": "ftp://h/"})}
    with RawServer(routes) as hub:
        out = attack("verify", str(manifest), "--mode", "estimate", "--format", "json",
                     env={"HF_ENDPOINT": hub.url, "HF_HUB_OFFLINE": "", "HF_TOKEN": "hf7Kq"})
    assert out.exit_code == 3, out.stderr
    [found] = json.loads(out.stdout)["findings"]
    assert found["rule"] == "KV305"
    assert "hf7Kq" not in out.stdout and "hf7Kq" not in out.stderr


def test_a_secret_the_manifest_names_is_hidden_at_any_length_and_guesses_keep_their_floor() -> None:
    secrets = manifest_secrets({"api-key": "s3c", "tp-size": 8}, {"HF_TOKEN": "hf_x", "MODE": "fast", "LOG": "1",
                                                                   "DATABASE_URL": "pg://db:5432/application"})
    assert secrets == frozenset({"s3c", "hf_x", "pg://db:5432/application"})  # MODE, LOG: guesses under 8
    assert redact_text("the engine was started with s3c and hf_x", secrets) == (
        "the engine was started with REDACTED and REDACTED"
    )
    # a secret-named value that is a plain figure or boolean is not searched for (it would blank every 1)
    assert manifest_secrets({"api-key": "1"}) == frozenset()
