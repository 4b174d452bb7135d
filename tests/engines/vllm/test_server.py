"""vLLM's server client on the real answers of a vLLM 0.32.0 server (tests/data/vllm), and what it refuses."""

from __future__ import annotations

import contextlib
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from kvcheck.engines import get_engine
from kvcheck.errors import EndpointError
from tests.conftest import run_kvcheck
from tests.datapaths import TEST_DATA

VLLM_DATA = TEST_DATA / "vllm"
REAL = {
    "/metrics": (VLLM_DATA / "0.32.0-cpu-pass.metrics.txt").read_bytes(),
    "/v1/models": (VLLM_DATA / "0.32.0-cpu-pass.v1_models.json").read_bytes(),
    "/version": (VLLM_DATA / "0.32.0-cpu-pass.version.json").read_bytes(),
}


@contextlib.contextmanager
def serving(answers: dict[str, bytes | int]) -> Iterator[str]:
    """A loopback server that gives `answers` (path -> body, or a status); its base URL."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802  (http.server's name)
            answer = answers.get(self.path, 404)
            status, body = (answer, b"not here") if isinstance(answer, int) else (200, answer)
            self.send_response(status)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}"
    finally:
        server.shutdown()
        server.server_close()


@contextlib.contextmanager
def client(answers: dict[str, bytes | int]) -> Iterator[Any]:
    """The engine's client against `serving(answers)`."""
    with serving(answers) as url, get_engine("vllm").server_client(url, retries=0) as vllm:
        yield vllm


def test_the_real_answers_give_the_usable_pool_window_and_version() -> None:
    with client(REAL) as vllm:
        info = vllm.server_info()
    # cache_config_info: num_gpu_blocks="128", block_size="128", kv_cache_size_tokens="16384"
    assert (info.pool_tokens, info.served_context_len, info.max_req_input_len, info.version) == (
        127 * 128, 4096, 4096, "0.32.0")
    assert info.metrics["vllm:cache_config_info:usable_tokens"] == 127 * 128
    assert info.metrics["vllm:cache_config_info:kv_cache_size_tokens"] == 16384
    assert info.endpoint == "/metrics (vllm:cache_config_info)"


def test_each_data_parallel_engine_states_its_own_pool() -> None:
    metrics = (
        b'vllm:cache_config_info{block_size="16",engine="0",num_gpu_blocks="1000"} 1.0\n'
        b'vllm:cache_config_info{block_size="16",engine="1",num_gpu_blocks="900"} 1.0\n'
    )
    with client({**REAL, "/metrics": metrics}) as vllm:
        info = vllm.server_info()
    assert info.dp_token_capacities == (999 * 16, 899 * 16)
    assert info.pool_tokens == 899 * 16


@pytest.mark.parametrize(("answers", "message"), [
    ({"/metrics": b"# nothing\nprocess_cpu_seconds_total 1.0\n"},
     "http://127.0.0.1:PORT/metrics: no vllm:cache_config_info series: not a vLLM server's metrics, or a release "
     "without it"),
    ({"/metrics": b'vllm:cache_config_info{block_size="16",num_gpu_blocks="None"} 1.0\n'},
     "http://127.0.0.1:PORT/metrics: vllm:cache_config_info has num_gpu_blocks='None' and block_size='16', not counts"),
    ({"/metrics": b'vllm:cache_config_info{block_size="16",num_gpu_blocks="99999999999"} 1.0\n'},
     "http://127.0.0.1:PORT/metrics: vllm:cache_config_info has num_gpu_blocks='99999999999' and block_size='16', "
     "not counts"),
    ({"/metrics": 404}, "http://127.0.0.1:PORT/metrics: HTTP 404 Not Found: not here"),
    ({"/v1/models": b'{"data": [{"max_model_len": "lots"}]}'},
     "http://127.0.0.1:PORT/v1/models: max_model_len is 'lots', not a token count"),
])
def test_what_is_not_a_vllm_pool_fails_closed(answers: dict[str, bytes | int], message: str) -> None:
    with client({**REAL, **answers}) as vllm, pytest.raises(EndpointError) as caught:
        vllm.server_info()
    assert caught.value.message == message.replace("http://127.0.0.1:PORT", vllm.url)


AUDIT_MANIFEST = """\
name: vllm audit
context_length: {window}
model: {{path: /tmp/kvcheck-real-vllm/tiny-llama}}
engine: {{name: vllm, version: "0.32.0"}}
args: {{max-model-len: 4096}}
roles:
  server: {{gpus: [0]}}
"""


@pytest.mark.parametrize(("window", "code", "rules"), [(4096, 0, []), (8192, 1, ["KV102"]), (20000, 1, ["KV101", "KV102"])])
def test_audit_of_a_vllm_role_reads_the_real_answers(tmp_path: Path, window: int, code: int,
                                                     rules: list[str]) -> None:
    manifest = tmp_path / "audit.yaml"
    manifest.write_text(AUDIT_MANIFEST.format(window=window), encoding="utf-8")
    with serving(REAL) as url:
        done = run_kvcheck("audit", "--manifest", str(manifest), "--endpoint", f"server={url}", "--format", "json")
    assert done.exit_code == code, done.stdout + done.stderr
    report = json.loads(done.stdout)
    [role] = report["roles"]
    assert (role["pool_tokens"], role["max_input_tokens"], role["source"]) == (127 * 128, 4096, "audit")
    assert sorted(f["rule"] for f in report["findings"]) == rules


def test_a_bare_url_audit_finds_the_engine_that_answers() -> None:
    # no manifest, no fleet engine: SGLang's client finds no /server_info (404), vLLM's reads the answers
    with serving(REAL) as url:
        done = run_kvcheck("audit", url, "--format", "json", "--retries", "0")
    assert done.exit_code == 0, done.stdout + done.stderr
    [role] = json.loads(done.stdout)["roles"]
    assert (role["pool_tokens"], role["max_input_tokens"], role["details"]["engine_version"]) == (
        127 * 128, 4096, "0.32.0")


def test_a_bare_url_that_no_engine_reads_reports_the_default_engines_answer() -> None:
    with serving({"/metrics": b"# nothing\n", "/v1/models": b'{"data": []}'}) as url:
        done = run_kvcheck("audit", url, "--format", "json", "--retries", "0")
    assert done.exit_code == 3
    [kv306] = [f for f in json.loads(done.stdout)["findings"] if f["rule"] == "KV306"]
    assert "/server_info" in kv306["message"] or "/get_server_info" in kv306["message"]
