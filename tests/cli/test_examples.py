"""The bundled examples end to end through the real command, as a newcomer runs them."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from xml.etree import ElementTree as ET

import pytest

from tests.conftest import EXAMPLES, REPO_ROOT, run_kvcheck, run_kvcheck_in_terminal

INCIDENT = "docs/examples/incident/manifest.yaml"
SINGLE = "docs/examples/single-server/manifest.yaml"


def test_incident_example_fails_on_prefill_with_kv101() -> None:
    result = run_kvcheck("verify", INCIDENT, "--mode", "estimate", "--format", "json")
    assert result.exit_code == 1
    report = json.loads(result.stdout)
    assert (report["verdict"], report["exit_code"], report["mode"]) == ("fail", 1, "estimate")
    assert [(r["name"], r["status"]) for r in report["roles"]] == [("prefill", "fail"), ("decode", "pass")]
    prefill = report["roles"][0]
    assert prefill["required_tokens"] == 1_048_576
    assert prefill["pool_tokens"] < 1_048_576
    assert prefill["argv"][:4] == ["--tp-size", "8", "--kv-cache-dtype", "fp8_e4m3"]
    errors = [(f["rule"], f["role"]) for f in report["findings"] if f["severity"] == "error"]
    assert errors == [("KV101", "prefill")]
    kv101 = report["findings"][0]
    assert kv101["location"] == {"file": INCIDENT, "line": 19, "column": 3}
    assert "tp-size 16 (2 nodes) would hold" in kv101["hint"]


def test_single_server_example_passes() -> None:
    result = run_kvcheck("verify", SINGLE, "--mode", "estimate", "--format", "json")
    assert result.exit_code == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["verdict"] == "pass"
    [server] = report["roles"]
    assert server["required_tokens"] == 131_072 and server["pool_tokens"] > 3 * 131_072
    assert server["details"]["mem_fraction_static"] == 0.83  # SGLang's H100 TP1 default
    assert report["findings"] == []


def test_readme_shows_what_the_main_command_prints() -> None:
    readme = (REPO_ROOT / "README.md").read_text()
    assert f"pip install . && kvcheck verify {INCIDENT} --mode estimate" in readme
    assert "pip install -e '.[dev]' && python -m pytest" in readme
    shown = re.search(r"```\n(kvcheck verify: FAIL.*?)```", readme, re.S).group(1)
    result = run_kvcheck("verify", INCIDENT, "--mode", "estimate", env={"COLUMNS": "100"})
    assert result.stdout == shown


@pytest.mark.parametrize("fmt", ["table", "json", "junit", "github", "markdown"])
def test_every_format_end_to_end(fmt: str, tmp_path: Path) -> None:
    out = tmp_path / f"report.{fmt}"
    result = run_kvcheck("verify", INCIDENT, "--mode", "estimate", "--format", fmt, "--output", str(out))
    assert result.exit_code == 1
    assert result.stdout == ""
    assert result.stderr == f"kvcheck: report written to {out} (verdict fail, exit 1)\n"
    text = out.read_text()
    if fmt == "json":
        assert json.loads(text)["verdict"] == "fail"
    elif fmt == "junit":
        cases = ET.fromstring(text).findall("testcase")
        assert [c.get("name") for c in cases] == ["prefill", "decode", "deployment"]
        assert cases[0].find("failure").get("type") == "KV101"
    elif fmt == "github":
        assert text.splitlines()[0].startswith(f"::error file={INCIDENT},line=19,col=3,title=KV101 prefill::")
    elif fmt == "markdown":
        assert text.startswith("## kvcheck verify: FAIL (exit 1)\n")
    else:
        assert text.startswith("kvcheck verify: FAIL (exit 1)")


def test_role_selection_and_strict() -> None:
    decode = run_kvcheck("verify", INCIDENT, "--mode", "estimate", "--role", "decode", "--format", "json")
    assert decode.exit_code == 0
    assert [r["name"] for r in json.loads(decode.stdout)["roles"]] == ["decode"]


def test_strict_fails_on_warnings(tmp_path: Path) -> None:
    manifest = tmp_path / "m.yaml"
    config = EXAMPLES / "single-server" / "llama-3.1-8b-instruct.config.json"
    manifest.write_text(
        f"context_length: 131072\nmodel: {{path: meta-llama/Llama-3.1-8B-Instruct, config: {config}}}\n"
        'engine: {version: "0.5.23"}\ngpu: H100\nroles:\n  server:\n    gpus: [0]\n'
        "    args: {allow-auto-truncate: true}\n"
    )
    lenient = run_kvcheck("verify", str(manifest), "--mode", "estimate", "--format", "json")
    assert lenient.exit_code == 0
    assert [f["rule"] for f in json.loads(lenient.stdout)["findings"]] == ["KV202"]
    strict = run_kvcheck("verify", str(manifest), "--mode", "estimate", "--strict", "--format", "json")
    assert strict.exit_code == 1
    assert json.loads(strict.stdout)["roles"][0]["status"] == "fail"


def test_unknown_architecture_is_exit_3_not_a_guess(tmp_path: Path) -> None:
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"architectures": ["NoSuchModelForCausalLM"], "model_type": "nosuch",
                                  "hidden_size": 1024, "num_hidden_layers": 2, "num_attention_heads": 8}))
    manifest = tmp_path / "m.yaml"
    manifest.write_text(
        'context_length: 8192\nmodel: {path: x/y, config: config.json}\nengine: {version: "0.5.23"}\n'
        "gpu: H100\nroles:\n  server: {gpus: [0]}\n"
    )
    result = run_kvcheck("verify", str(manifest), "--mode", "estimate", "--format", "json")
    assert result.exit_code == 3
    report = json.loads(result.stdout)
    assert (report["verdict"], report["roles"][0]["status"], report["roles"][0]["pool_tokens"]) == (
        "error", "error", None)
    [found] = report["findings"]
    assert found["rule"] == "KV305"
    assert "NoSuchModelForCausalLM" in found["message"] and "not understood" in found["message"]


def test_internal_error_is_exit_4_with_a_report_hint_and_no_traceback() -> None:
    code = "from kvcheck.cli import run_guarded; run_guarded(lambda: 1 // 0)"
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO_ROOT, capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(REPO_ROOT), "KVCHECK_DEBUG": ""})
    assert proc.returncode == 4
    assert "Traceback" not in proc.stderr
    assert proc.stderr.splitlines()[0] == (
        "kvcheck: internal error (a bug in kvcheck 0.1.0): ZeroDivisionError: integer division or modulo by zero"
    )
    debug = subprocess.run([sys.executable, "-c", code], cwd=REPO_ROOT, capture_output=True, text=True,
                           env={**os.environ, "PYTHONPATH": str(REPO_ROOT), "KVCHECK_DEBUG": "1"})
    assert debug.returncode == 4 and "Traceback" in debug.stderr


def test_table_on_a_terminal_uses_its_width_and_colour() -> None:
    # stdout a terminal: the table takes the terminal's width and colours; this path once crashed (exit 4)
    code, output = run_kvcheck_in_terminal("verify", str(SINGLE), "--mode", "estimate", columns=120)
    assert code == 0, output
    assert "\x1b[1;32mPASS\x1b[0m (exit 0)" in output  # coloured on a terminal
    assert "412,019" in output
    assert "internal error" not in output
