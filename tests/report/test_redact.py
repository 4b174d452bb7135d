"""Secrets never reach a report: argv, details, quoted engine lines, every format."""

from __future__ import annotations

import json
from pathlib import Path

from kvcheck.model import Finding, Report, RoleResult
from kvcheck.redact import redact_argv, redact_report, redact_text, redact_value, secret_values
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


def test_a_value_from_a_flags_fixed_choices_is_a_public_word_not_a_secret(tmp_path: Path) -> None:
    """--eplb-algorithm deepseek used to redact 'deepseek' everywhere, the manifest's own name included."""
    config = EXAMPLES / "single-server" / "llama-3.1-8b-instruct.config.json"
    manifest = tmp_path / "deepseek-pd.yaml"
    manifest.write_text(
        f"context_length: 131072\nmodel: {{path: meta-llama/Llama-3.1-8B-Instruct, config: {config}}}\n"
        'engine: {version: "0.5.23"}\ngpu: H100\n'
        "args: {eplb-algorithm: deepseek, api-key: sk-TOPSECRET456}\nroles:\n  server: {gpus: [0]}\n"
    )
    result = run_kvcheck("verify", str(manifest), "--mode", "estimate", "--format", "json")
    assert result.exit_code == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["source"].endswith("deepseek-pd.yaml")
    assert data["roles"][0]["argv"] == ["--eplb-algorithm", "deepseek", "--api-key", "REDACTED"]
    assert "TOPSECRET" not in result.stdout


def test_figures_are_never_redacted_whatever_their_name() -> None:
    assert redact_value({"kv_bytes_per_token": 1234.5, "max_total_tokens": 8, "api_key": None, "hf_token": True}) == {
        "kv_bytes_per_token": 1234.5, "max_total_tokens": 8, "api_key": None, "hf_token": True,
    }
    # text under a secret name is hidden, one value or several
    assert redact_value({"hf_token": "abc", "api_keys": ["k1", "k2"], "note": "ok"}) == {
        "hf_token": "REDACTED", "api_keys": ["REDACTED", "REDACTED"], "note": "ok",
    }


def test_a_secret_flag_with_several_values_hides_them_all() -> None:
    assert redact_argv(["--api-key", "k1", "k2", "--port", "30000", "--hf-token=t"]) == [
        "--api-key", "REDACTED", "REDACTED", "--port", "30000", "--hf-token=REDACTED",
    ]


def test_known_secret_values_are_hidden_wherever_they_appear() -> None:
    secrets = {"correct-horse-battery", "short"}
    assert redact_text("loading /models/correct-horse-battery/config.json", secrets) == (
        "loading /models/REDACTED/config.json"
    )
    # a secret handed to the redactor is hidden whatever its length (issue 20, class 8); the functions
    # that guess secrets by name or by value keep only long ones, below
    assert redact_text("a short word goes", secrets) == "a REDACTED word goes"
    assert secret_values({"api_key": "correct-horse-battery", "tp_size": 8}, {"HF_TOKEN": "hf_x", "PATH": "/usr/bin"}) == (
        frozenset({"correct-horse-battery"})
    )


def test_estimate_json_keeps_its_figures_and_hides_every_secret_value(tmp_path: Path) -> None:
    config = EXAMPLES / "single-server" / "llama-3.1-8b-instruct.config.json"
    manifest = tmp_path / "m.yaml"
    # the manifest's secret (engine env) and the environment's secret also appear where no name says so
    manifest.write_text(
        f"context_length: 131072\nmodel: {{path: meta-llama/Llama-3.1-8B-Instruct, config: {config}}}\n"
        'engine: {version: "0.5.23", env: {MY_PASSWORD: pw-0123456789}}\ngpu: H100\n'
        "args: {served-model-name: pw-0123456789, tokenizer-path: /t/ENVSECRET-abcdef}\nroles:\n  server: {gpus: [0]}\n"
    )
    result = run_kvcheck("verify", str(manifest), "--mode", "estimate", "--format", "json",
                         env={"DEPLOY_API_KEY": "ENVSECRET-abcdef"})
    assert result.exit_code == 0, result.stderr
    assert "pw-0123456789" not in result.stdout and "ENVSECRET" not in result.stdout
    data = json.loads(result.stdout)
    assert data["roles"][0]["argv"] == ["--served-model-name", "REDACTED", "--tokenizer-path", "/t/REDACTED"]
    assert data["roles"][0]["details"]["kv_bytes_per_token"] == 131072  # 32 layers x 8 KV heads x 128 x 2 x 2 bytes


def test_prose_after_a_secret_name_stays_readable() -> None:
    assert redact_text("--token-env DEPLOY_TOKEN: the token holds a tab") == (
        "--token-env DEPLOY_TOKEN: the token holds a tab"
    )
    assert redact_text("HF_TOKEN: abcdefghij api_key=abc API_KEY: Sk1") == (
        "HF_TOKEN: REDACTED api_key=REDACTED API_KEY: REDACTED"
    )
