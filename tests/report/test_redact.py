"""Secrets never reach a report: argv, details, quoted engine lines, every format."""

from __future__ import annotations

import json
from pathlib import Path

from kvcheck.model import Finding, Report, RoleResult
from kvcheck.redact import redact_argv, redact_report, redact_text
from tests.conftest import EXAMPLES, run_kvcheck


def test_quoted_engine_lines_lose_their_secrets() -> None:
    line = "server_args={'model_path': 'm', 'api_key': 'sk-TOPSECRET456', 'max_total_tokens': 5, 'tp_size': 1}"
    assert redact_text(line) == (
        "server_args={'model_path': 'm', 'api_key': 'REDACTED', 'max_total_tokens': 5, 'tp_size': 1}"
    )
    assert redact_text("--admin-api-key=abc --hf-token x --tokenizer-path t Bearer abc.def") == (
        "--admin-api-key=REDACTED --hf-token REDACTED --tokenizer-path t Bearer REDACTED"
    )
    assert redact_text("max_total_num_tokens=100, max_tokens=5") == "max_total_num_tokens=100, max_tokens=5"


def test_argv_values_of_secret_flags_are_hidden() -> None:
    assert redact_argv(["python3", "--api-key", "k1", "--tp-size", "8", "--admin-api-key=k2"]) == [
        "python3", "--api-key", "REDACTED", "--tp-size", "8", "--admin-api-key=REDACTED",
    ]


def test_report_details_and_findings_are_scrubbed() -> None:
    report = Report("verify", "measure", "m.yaml", 8, (
        RoleResult("p", "error", None, 8, None, "measure", (0,), ("e", "--api-key", "sk-1"),
                   {"engine_env": {"HF_TOKEN": "hf_abcdefghijklmnopqrstuvwx", "CUDA_VISIBLE_DEVICES": "0"}}),
    ), (Finding("KV301", "error", "p", "engine exited: 'api_key': 'sk-2'", hint="unset HF_TOKEN=hf_3"),))
    clean = redact_report(report)
    assert clean.roles[0].argv == ("e", "--api-key", "REDACTED")
    assert clean.roles[0].details == {"engine_env": {"HF_TOKEN": "REDACTED", "CUDA_VISIBLE_DEVICES": "0"}}
    assert clean.findings[0].message == "engine exited: 'api_key': 'REDACTED'"
    assert clean.findings[0].hint == "unset HF_TOKEN=REDACTED"


def test_estimate_report_never_prints_a_manifest_secret(tmp_path: Path) -> None:
    config = EXAMPLES / "single-server" / "llama-3.1-8b-instruct.config.json"
    manifest = tmp_path / "m.yaml"
    manifest.write_text(
        f"context_length: 131072\nmodel: {{path: meta-llama/Llama-3.1-8B-Instruct, config: {config}}}\n"
        'engine: {version: "0.5.23", env: {HF_TOKEN: hf_SUPERSECRET1234567890}}\ngpu: H100\n'
        "args: {api-key: sk-TOPSECRET456}\nroles:\n  server: {gpus: [0]}\n"
    )
    for fmt in ("json", "table", "junit", "github", "markdown"):
        result = run_kvcheck("verify", str(manifest), "--mode", "estimate", "--format", fmt)
        assert result.exit_code == 0, result.stderr
        assert "TOPSECRET" not in result.stdout and "SUPERSECRET" not in result.stdout
    data = json.loads(run_kvcheck("verify", str(manifest), "--mode", "estimate", "--format", "json").stdout)
    assert data["roles"][0]["argv"] == ["--api-key", "REDACTED"]
