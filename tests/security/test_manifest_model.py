"""`audit --manifest`: a server that serves another model than the manifest's is an error (KV311)."""

from __future__ import annotations

import json

import pytest

from tests.audit.servers import models_payload, server_info_payload
from tests.security.helpers import RawServer, attack, send_json

MANIFEST = (
    "context_length: 131072\n"
    "model: {path: Qwen/Qwen3-8B}\n"
    'engine: {version: "0.5.23"}\n'
    "roles:\n"
    "  server: {gpus: [0]}\n"
)


def server(model_path: str) -> RawServer:
    info = server_info_payload(max_total_num_tokens=681280, extra_args={"model_path": model_path, "tp_size": 1})
    return RawServer({"/server_info": send_json(info), "/v1/models": send_json(models_payload(131072))})


@pytest.mark.parametrize(("served", "exit_code", "rules"), [
    ("Qwen/Qwen3-8B", 0, []),
    ("/models/Qwen3-8B", 0, []),  # the folder the Hub id was downloaded to
    ("meta-llama/Llama-3.1-8B-Instruct", 3, ["KV311"]),  # KV3xx: this role was not checked
])
def test_the_served_model_must_be_the_manifests(tmp_path, served, exit_code, rules):
    manifest = tmp_path / "deploy.yaml"
    manifest.write_text(MANIFEST)
    with server(served) as live:
        out = attack("audit", "--manifest", str(manifest), "--endpoint", f"server={live.url}", "--retries", "0",
                     "--format", "json")
    assert out.exit_code == exit_code, out.stdout + out.stderr
    report = json.loads(out.stdout)
    assert [f["rule"] for f in report["findings"] if f["rule"] != "KV308"] == rules
    if rules:
        message = next(f["message"] for f in report["findings"] if f["rule"] == "KV311")
        assert message == f"{live.url} serves {served!r}, not the manifest's model 'Qwen/Qwen3-8B'"
