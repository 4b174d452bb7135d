"""Untrusted strings in every output format: role names with newlines and escape sequences (from file
names), a server's version string. None may forge a GitHub workflow command, reach a terminal as an
escape sequence, or make the JUnit XML invalid."""

from __future__ import annotations

import json
import re
from xml.etree import ElementTree as ET

import pytest

from tests.audit.servers import models_payload, server_info_payload
from tests.conftest import REPO_ROOT
from tests.security.helpers import RawServer, attack, send_json

LOG = REPO_ROOT / "tests" / "data" / "logs" / "sglang-qwen35-9b-2x4090-tp2.log"
FORGED = "srv\n::error file=deploy.yaml,line=1::forged\x1b[31m\x07"
HOSTILE_VERSION = "0.5.23\n::error::forged by the server\x1b]0;owned\x07\x1b[2J"


def check_output(fmt: str, text: str) -> None:
    """What must hold of one format's output, whatever the strings in the report."""
    assert "\x1b" not in text and "\x07" not in text and "\r" not in text
    if fmt == "github":  # a workflow command is a line that starts with ::; only kvcheck's annotations may
        commands = [line for line in text.splitlines() if line.startswith("::")]
        assert all(re.match(r"::(error|warning|notice) (file|title)=", line) for line in commands), commands
        assert not any(line.startswith(("::error file=deploy.yaml", "::error::forged")) for line in text.splitlines())
    else:  # a runner reads `::` after leading blanks too: no line of another format may start so
        assert not [line for line in text.splitlines() if line.lstrip().startswith("::")]
    if fmt == "junit":
        suite = ET.fromstring(text.split("\n", 1)[1])  # parses: no control character in the XML
        # a viewer shows an attribute's &#10; as a line break: a case's name is one line, its newline escaped
        assert not [case.get("name") for case in suite.iter("testcase") if "\n" in (case.get("name") or "")]
    if fmt == "markdown":  # every row of a table has its header's number of cells
        for table in re.findall(r"(?:^\|.*\n)+", text, flags=re.M):
            cells = {len(re.findall(r"(?<!\\)\|", row)) for row in table.splitlines()}
            assert len(cells) == 1, table


@pytest.mark.parametrize("fmt", ["github", "junit", "markdown", "table", "json"])
def test_a_role_name_from_a_file_name_cannot_forge_output(tmp_path, fmt):
    log = tmp_path / FORGED
    log.write_text(LOG.read_text())
    out = attack("logs", str(log), "--format", fmt)
    assert out.exit_code == 0, out.stderr
    check_output(fmt, out.stdout)
    if fmt == "json":
        names = [role["name"] for role in json.loads(out.stdout)["roles"]]
        assert names == [f"{FORGED}[TP0]"]  # JSON keeps the exact name, escaped by JSON itself


@pytest.mark.parametrize("fmt", ["github", "junit", "markdown", "table"])
def test_a_server_version_string_cannot_forge_output(fmt):
    info = server_info_payload(version=HOSTILE_VERSION)
    routes = {"/server_info": send_json(info), "/v1/models": send_json(models_payload(131072))}
    with RawServer(routes) as server:
        out = attack("audit", server.url, "--retries", "0", "--format", fmt)
    assert out.exit_code in (0, 1, 3), out.stderr
    check_output(fmt, out.stdout)


ROLE = "x\n::error title=pwn::owned"


def _manifest(tmp_path, body: str):
    config = REPO_ROOT / "docs" / "examples" / "single-server" / "llama-3.1-8b-instruct.config.json"
    path = tmp_path / "m.yaml"
    path.write_text(f"context_length: 1048576\nmodel: {{path: m, config: {config}}}\nengine: {{version: '0.5.23'}}\n"
                    f"gpu: H100\nroles:\n{body}")
    return path


@pytest.mark.parametrize("command", ["verify", "plan"])
@pytest.mark.parametrize("fmt", ["table", "github", "markdown", "junit"])
def test_a_role_name_with_a_newline_in_a_manifest_cannot_forge_a_workflow_command(tmp_path, command, fmt):
    # the findings' [role], their locations and the plan's lines held the raw newline (table format)
    path = _manifest(tmp_path, '  "x\\n::error title=pwn::owned": {gpus: [0]}\n')
    out = attack(command, str(path), *(("--mode", "estimate") if command == "verify" else ()), "--format", fmt)
    assert out.exit_code == 1, out.stderr
    check_output(fmt, out.stdout)
    check_output("table", out.stderr)
    if fmt == "table":
        assert f"[{ROLE.replace(chr(10), chr(92) + 'n')}]" in out.stdout  # shown, escaped


def test_a_key_with_a_newline_cannot_forge_a_workflow_command_on_stderr(tmp_path):
    path = _manifest(tmp_path, '  "x\\n::error title=pwn::owned": {gpus: [0], bogus: 1}\n')
    out = attack("verify", str(path), "--mode", "estimate")
    assert out.exit_code == 2
    check_output("table", out.stderr)
    assert "\\::error title=pwn::owned" in out.stderr  # the line the key's newline starts is neutralised


@pytest.mark.parametrize("fmt", ["junit", "table", "github", "markdown"])
def test_a_role_name_quoted_in_a_cross_role_finding_cannot_forge_a_workflow_command(tmp_path, fmt):
    # KV104 quotes both roles' names in its message; JUnit wrote that message's raw newline as a text line,
    # so the line after it started with `::error` on stdout, where a GitHub runner obeys it
    example = REPO_ROOT / "docs" / "examples" / "incident"
    (tmp_path / "glm-5.2-fp8.config.json").write_text((example / "glm-5.2-fp8.config.json").read_text())
    manifest = (example / "manifest.yaml").read_text().replace("  prefill:\n", '  "x\\n::error title=pwn::owned":\n')
    path = tmp_path / "m.yaml"
    path.write_text(manifest)
    out = attack("verify", str(path), "--mode", "estimate", "--format", fmt)
    assert out.exit_code == 1, out.stderr
    assert "KV104" in out.stdout
    check_output(fmt, out.stdout)


@pytest.mark.parametrize("name", ["x[/]", "y\n::error title=pwn::owned"])
def test_a_fleet_name_in_the_plain_http_token_warning_is_shown_as_written(tmp_path, name):
    # the warning was Rich markup with the names in it: "x[/]" stopped audit (MarkupError, exit 4), and a
    # newline started a stderr line `::error ...`, which a GitHub runner obeys
    fleet = tmp_path / "fleet.yaml"
    fleet.write_text(json.dumps({name: "http://10.255.255.1:30000"}) + "\n")
    out = attack("audit", "--fleet", str(fleet), "--token-env", "KVCHECK_T", "--timeout", "0.5", "--retries", "0",
                 env={"KVCHECK_T": "tok"})
    assert out.exit_code == 3, out.stderr
    check_output("table", out.stderr)
    shown = name.replace("\n", "\\n")
    assert f"kvcheck: warning: the token is sent over plain HTTP to {shown}; use https:// where you can" in out.stderr
