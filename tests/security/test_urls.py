"""URLs the network layer cannot use (issue 20, class 5): bad input from the user, KV306 from a server.

An empty or over-long host label, invalid punycode or an encoded CR LF raised inside httpx or the IDNA
codec and ended the run with exit 4 and no report. Now `kvcheck.http.url_problem` names what is wrong
before anything is sent: given on the command line, in a fleet file or in HF_ENDPOINT it is exit 2
naming the URL; in a server's redirect it is that server's KV306 while the other servers are judged.
"""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest

from kvcheck.http import url_problem
from tests.security.helpers import RawServer, attack, healthy_routes, send_body

LABEL = "its host has an empty or over-long label"
PUNYCODE = "its host is not valid punycode"
HOST_CHARS = "its host holds characters a host name cannot hold"
CONTROL = "its path holds a control character"

BAD_URLS = {
    "empty label": ("http://a..b:30000", LABEL),
    "a lone dot": ("http://.:30000", LABEL),
    "64-character label": ("http://" + "a" * 64 + ".example:30000", LABEL),
    "254-character host": ("http://" + ".".join(["a" * 50] * 5) + ".abc:30000", "its host is longer than 253"),
    "invalid punycode": ("http://xn--a.example:30000", PUNYCODE),
    "punycode of a forbidden code point": ("http://xn--zz-zzz.example:30000", PUNYCODE),
    "encoded CR LF in the host": ("http://host%0d%0a.example:30000", HOST_CHARS),
    "encoded CR LF in the path": ("http://10.0.0.5:30000/v1%0d%0aX-Injected:%201", CONTROL),
}
CASES = [pytest.param(url, why, id=name) for name, (url, why) in BAD_URLS.items()]


@pytest.mark.parametrize(("url", "why"), CASES)
def test_a_bad_url_on_the_command_line_is_bad_input_naming_it(url: str, why: str) -> None:
    for command in (("audit", url, "--context-length", "131072"), ("probe", url, "--context-length", "1000")):
        out = attack(*command)
        assert out.exit_code == 2, (command, out.stderr)
        assert f"kvcheck: error: {url!r} is not a usable URL: {why}" in out.stderr
        assert "internal error" not in out.stderr


@pytest.mark.parametrize(("url", "why"), CASES)
def test_a_bad_url_in_a_fleet_file_is_bad_input_at_its_line(tmp_path: Path, url: str, why: str) -> None:
    lines = tmp_path / "fleet.txt"
    lines.write_text(f"# the fleet\nhttp://10.0.0.5:30000\n{url}\n")
    mapping = tmp_path / "fleet.yaml"
    mapping.write_text(f"good: http://10.0.0.5:30000\nbad:\n  url: {json.dumps(url)}\n  role: decode\n")
    for fleet, line in ((lines, 3), (mapping, 3)):
        out = attack("audit", "--fleet", str(fleet), "--context-length", "131072")
        assert out.exit_code == 2, out.stderr
        assert f"{fleet}:{line}" in out.stderr
        assert f"{url!r} is not a usable URL: {why}" in out.stderr


@pytest.mark.parametrize(("url", "why"), CASES)
def test_a_bad_hf_endpoint_is_bad_input_naming_it(tmp_path: Path, url: str, why: str) -> None:
    manifest = tmp_path / "hub.yaml"
    manifest.write_text('name: hub\ncontext_length: 32768\nmodel: {path: org/model}\nengine: {version: "0.5.23"}\n'
                        "gpu: H100\nroles:\n  server: {gpus: [0]}\n")
    out = attack("verify", str(manifest), "--mode", "estimate", env={"HF_ENDPOINT": url, "HF_HUB_OFFLINE": ""})
    assert out.exit_code == 2, out.stderr
    assert f"kvcheck: error: HF_ENDPOINT: {url!r} is not a usable URL: {why}" in out.stderr


REDIRECTS = {
    "empty label": ("http://a..b/server_info", LABEL),
    "64-character label": ("http://" + "a" * 64 + ".example/server_info", LABEL),
    "invalid punycode": ("http://xn--a.example/server_info", "its Location cannot be parsed"),
    "punycode, scheme-relative": ("//xn--zz-zzz.example/", "its Location cannot be parsed"),
    "encoded CR LF in the host": ("http://host%0d%0a.example/", HOST_CHARS),
    "encoded CR LF in the path": ("/server_info%0d%0aSet-Cookie:%20a=1", CONTROL),
}


@pytest.mark.parametrize(("location", "why"), REDIRECTS.values(), ids=REDIRECTS.keys())
def test_a_redirect_to_a_bad_url_is_that_servers_kv306_and_the_others_are_judged(location: str, why: str) -> None:
    redirect = send_body(b"", status="302 Found", headers={"location": location})
    with RawServer({"/server_info": redirect, "/v1/models": redirect}) as bad, RawServer(healthy_routes()) as good:
        out = attack("audit", bad.url, good.url, "--context-length", "131072", "--format", "json",
                     "--timeout", "5", "--retries", "0")
    assert out.exit_code == 3, out.stderr
    report = json.loads(out.stdout)
    assert {r["name"]: r["status"] for r in report["roles"]} == {bad.url: "error", good.url: "pass"}
    [found] = report["findings"]
    assert found["rule"] == "KV306"
    assert f"redirect to an unusable URL refused: {why}" in found["message"]
    assert "\r" not in out.stdout and "\\r\\n" not in found["message"]


def test_a_probe_answered_by_a_bad_redirect_is_could_not_check() -> None:
    redirect = send_body(b"", status="302 Found", headers={"location": "http://xn--a.example/"})
    routes = {path: redirect for path in ("/server_info", "/get_server_info", "/v1/models", "/model_info", "/health")}
    with RawServer(routes) as bad:
        out = attack("probe", bad.url, "--context-length", "1000", "--format", "json")
    assert out.exit_code == 3, out.stderr
    assert [r["status"] for r in json.loads(out.stdout)["roles"]] == ["error"]


def test_a_hub_that_redirects_to_a_bad_url_is_kv305(tmp_path: Path) -> None:
    manifest = tmp_path / "hub.yaml"
    manifest.write_text('name: hub\ncontext_length: 32768\nmodel: {path: org/model}\nengine: {version: "0.5.23"}\n'
                        "gpu: H100\nroles:\n  server: {gpus: [0]}\n")
    redirect = send_body(b"", status="302 Found", headers={"location": "http://xn--a.example/config.json"})
    with RawServer({"/org/model/resolve/main/config.json": redirect}) as hub:
        out = attack("verify", str(manifest), "--mode", "estimate", "--format", "json",
                     env={"HF_ENDPOINT": hub.url, "HF_HUB_OFFLINE": ""})
    assert out.exit_code == 3, out.stderr
    [found] = json.loads(out.stdout)["findings"]
    assert found["rule"] == "KV305"
    assert "redirect to an unusable URL refused: its Location cannot be parsed" in found["message"]


@pytest.mark.parametrize("url", [
    "http://10.0.0.5:30000", "http://[::1]:30000", "https://sglang.example.", "http://exämple.example:8080",
    "http://xn--exmple-cua.example", "http://my_service.ns.svc:30000/v1", "http://" + "a" * 63 + ".example",
])
def test_urls_the_network_layer_can_use_are_accepted(url: str) -> None:
    assert url_problem(httpx.URL(url)) is None


@pytest.mark.parametrize(("url", "shown"), [
    ("u:hunter2PASS@host:30000", "'***@host:30000'"),  # no scheme: the docs' `localhost:30000` mistake
    ("http:/u:hunter2PASS@host", "'http:/***@host'"),
    ("http:\\\\u:hunter2PASS@host", "'http:\\\\\\\\***@host'"),
])
def test_a_malformed_url_with_credentials_is_refused_without_them(url: str, shown: str) -> None:
    for command in ("audit", "probe"):
        out = attack(command, url, "--context-length", "1000")
        assert out.exit_code == 2, out.stderr
        assert "hunter2PASS" not in out.stderr + out.stdout
        said = "is not an http(s) URL of a server" if command == "audit" else ": only http:// and https:// URLs"
        assert f"kvcheck: error: {shown}{' ' if command == 'audit' else ''}{said}" in out.stderr
