"""Secrets a manifest carries under names that do not look secret, and URL credentials: never printed,
in any format, in the quoted lines of an engine that crashed, or on stderr."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from tests.conftest import EXAMPLES
from tests.security.helpers import attack

SECRETS = ("Pa55w0rdXYZ", "admin:Pa55w0rdXYZ", "ghp_abcdefghijklmnopqrstuvwxyz0123456789", "Tok3nPa55", "tokuser")
FORMATS = ("json", "table", "markdown", "junit", "github")

MANIFEST = """\
name: secrets
context_length: 131072
model:
  path: meta-llama/Llama-3.1-8B-Instruct
  config: {config}
engine:
  version: "0.5.23"
{command}  env:
    DATABASE_URL: postgres://admin:Pa55w0rdXYZ@db.internal:5432/app
    GITHUB_PAT: ghp_abcdefghijklmnopqrstuvwxyz0123456789
    NCCL_DEBUG: INFO
gpu: H100
args:
  tokenizer-path: https://tokuser:Tok3nPa55@hub.internal/llama
roles:
  server:
    gpus: [0]
"""

# An "engine" that crashes quoting what it was given: its last lines end up in the report.
CRASHING_ENGINE = """\
import os, sys
print("Traceback (most recent call last):", flush=True)
print(f"  connecting to {os.environ['DATABASE_URL']} as {os.environ['GITHUB_PAT']}: {sys.argv}", flush=True)
print("RuntimeError: cannot start", flush=True)
sys.exit(1)
"""


def manifest(tmp_path: Path, *, crash: bool) -> Path:
    command = ""
    if crash:
        engine = tmp_path / "engine.py"
        engine.write_text(CRASHING_ENGINE)
        command = f"  command: [{json.dumps(sys.executable)}, {json.dumps(str(engine))}]\n"
    config = EXAMPLES / "single-server" / "llama-3.1-8b-instruct.config.json"
    path = tmp_path / "deploy.yaml"
    path.write_text(MANIFEST.format(config=json.dumps(str(config)), command=command))
    return path


def leaks(text: str) -> list[str]:
    return [secret for secret in SECRETS if secret in text]


@pytest.mark.parametrize("fmt", FORMATS)
def test_the_quoted_lines_of_a_crashed_engine_hide_every_manifest_value(tmp_path, fmt):
    out = attack("verify", str(manifest(tmp_path, crash=True)), "--no-gpu-check", "--format", fmt, timeout=120)
    assert out.exit_code == 3, out.stderr
    assert "connecting to REDACTED as REDACTED" in out.stdout.replace("\\n", "\n")
    assert leaks(out.stdout + out.stderr) == []


@pytest.mark.parametrize("fmt", FORMATS)
def test_estimate_reports_hide_url_credentials(tmp_path, fmt):
    out = attack("verify", str(manifest(tmp_path, crash=False)), "--mode", "estimate", "--format", fmt)
    assert out.exit_code == 0, out.stderr
    assert leaks(out.stdout + out.stderr) == []
    if fmt == "json":
        assert "https://REDACTED@hub.internal/llama" in out.stdout


@pytest.mark.parametrize("url", ["http://user:s3cretPa55@[::1", "ftp://user:s3cretPa55@host/", "http://user:s3cretPa55@host"])
def test_a_rejected_url_never_echoes_its_password(url):
    out = attack("audit", url, "--context-length", "131072")
    assert out.exit_code == 2, out.stderr
    assert "s3cretPa55" not in out.stderr + out.stdout
