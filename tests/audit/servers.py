"""Real HTTP(S) servers on loopback that answer like SGLang (or deliberately unlike it), for audit tests.

Each `FakeServer` listens on 127.0.0.1 on an ephemeral port in a background thread, serves the routes
it was given, records every request (path and headers), and stops with its threads on `close()`.
"""

from __future__ import annotations

import json
import shutil
import ssl
import subprocess
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from tests.doubles import sglang_http


@dataclass
class Reply:
    """One scripted answer: status, body, content type, extra headers, and a delay before answering."""

    status: int = 200
    body: bytes | str | Mapping[str, Any] | list[Any] = b""
    content_type: str | None = None
    headers: Mapping[str, str] = field(default_factory=dict)
    delay_s: float = 0.0

    def encoded(self) -> tuple[bytes, str]:
        if isinstance(self.body, (dict, list)):
            return json.dumps(self.body).encode(), self.content_type or "application/json"
        if isinstance(self.body, str):
            return self.body.encode(), self.content_type or "text/plain; charset=utf-8"
        return bytes(self.body), self.content_type or "application/octet-stream"


Route = Reply | list[Reply] | Callable[["RecordedRequest"], Reply]


@dataclass(frozen=True)
class RecordedRequest:
    path: str
    headers: Mapping[str, str]


class FakeServer:
    """A loopback HTTP(S) server with scripted routes. A list route answers its replies in turn, then
    repeats the last one; a callable route decides per request. Unknown paths answer 404."""

    def __init__(
        self,
        routes: Mapping[str, Route],
        *,
        token: str | None = None,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        self.routes = dict(routes)
        self.token = token
        self.requests: list[RecordedRequest] = []
        self._lock = threading.Lock()
        self._served: dict[str, int] = {}
        self._stop = threading.Event()
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), self._handler_class())
        self._httpd.daemon_threads = True
        if ssl_context is not None:
            self._httpd.socket = ssl_context.wrap_socket(self._httpd.socket, server_side=True)
        self.scheme = "https" if ssl_context is not None else "http"
        self.port = self._httpd.server_address[1]
        self._thread = threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05})
        self._thread.daemon = True
        self._thread.start()

    @property
    def url(self) -> str:
        return f"{self.scheme}://127.0.0.1:{self.port}"

    def paths(self) -> list[str]:
        return [r.path for r in self.requests]

    def close(self) -> None:
        self._stop.set()  # wakes handlers sleeping in a delay
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(timeout=5)

    def __enter__(self) -> FakeServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _reply_for(self, request: RecordedRequest) -> Reply:
        if self.token is not None and request.headers.get("authorization") != f"Bearer {self.token}":
            return Reply(401, {"error": "unauthorized"})
        route = self.routes.get(request.path)
        if route is None:
            return Reply(404, {"detail": "Not Found"})
        if callable(route):
            return route(request)
        if isinstance(route, list):
            with self._lock:
                index = self._served.get(request.path, 0)
                self._served[request.path] = index + 1
            return route[min(index, len(route) - 1)]
        return route

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            disable_nagle_algorithm = True  # headers and body are two writes: no 40 ms delayed-ACK stall

            def do_GET(self) -> None:  # noqa: N802 (http.server's naming)
                recorded = RecordedRequest(self.path, {k.lower(): v for k, v in self.headers.items()})
                with server._lock:
                    server.requests.append(recorded)
                reply = server._reply_for(recorded)
                if reply.delay_s and server._stop.wait(reply.delay_s):
                    return
                body, content_type = reply.encoded()
                try:
                    self.send_response(reply.status)
                    self.send_header("Content-Type", content_type)
                    self.send_header("Content-Length", str(len(body)))
                    for key, value in reply.headers.items():
                        self.send_header(key, value)
                    self.end_headers()
                    self.wfile.write(body)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up (timeout test): nothing to answer

            def log_message(self, format: str, *args: Any) -> None:
                pass  # keep test output clean

        return Handler


def server_info_payload(
    *,
    max_total_num_tokens: int | None = 681280,
    max_req_input_len: int | None = 681274,
    dp_token_capacities: list[int] | None = None,
    swa_token_capacities: list[int] | None = None,
    context_length: int | None = None,
    version: str | None = "0.5.23",
    extra_args: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """A GLM-5-FP8 TP8 server's info (a representative subset of 0.5.23's arguments), one state per DP rank."""
    capacities = dp_token_capacities if dp_token_capacities is not None else [max_total_num_tokens]
    swa = swa_token_capacities or [None] * len(capacities)
    resolved_args = {
        "model_path": "zai-org/GLM-5-FP8",
        "tp_size": 8,
        "attn_dp_size": len(capacities),
        "mem_fraction_static": 0.85,
        "page_size": 64,
        "chunked_prefill_size": 16384,
        "kv_cache_dtype": "fp8_e4m3",
        "disaggregation_mode": "null",
        "context_length": context_length,
        "max_total_tokens": None,
        "api_key": None,
    }
    states = [
        {
            "world_size": 8,
            "memory_usage": {
                "weight": 80.1,
                "kvcache": 41.2,
                "token_capacity": capacity,
                "token_capacity_swa": swa_capacity,
                "graph": {"decode": 1.5},
            },
        }
        for capacity, swa_capacity in zip(capacities, swa, strict=True)
    ]
    payload = sglang_http.server_info_payload(
        resolved_args,
        launch_command="python3 -m sglang.launch_server --model-path zai-org/GLM-5-FP8 --tp-size 8",
        max_total_num_tokens=max_total_num_tokens,
        max_req_input_len=max_req_input_len,
        startup_time=123.4,
        internal_states=states,
        version=version,
    )
    if max_total_num_tokens is None:
        del payload["max_total_num_tokens"]
    if version is None:
        del payload["version"]
    payload.update(extra_args or {})
    return payload


def models_payload(max_model_len: int | None) -> dict[str, Any]:
    return sglang_http.models_payload("glm-5", max_model_len, owned_by="sglang", root="glm-5")


def metrics_text(*, pool_tokens: list[int], context_len: int, page_size: int = 64) -> str:
    """Prometheus text as SGLang's scheduler ranks emit it (one series per tp_rank)."""
    lines = [
        "# HELP sglang:max_total_num_tokens Maximum total number of tokens in the KV cache pool.",
        "# TYPE sglang:max_total_num_tokens gauge",
    ]
    for rank, pool in enumerate(pool_tokens):
        labels = f'model_name="glm-5",engine_type="unified",tp_rank="{rank}",pp_rank="0"'
        lines.append(f"sglang:max_total_num_tokens{{{labels}}} {float(pool)}")
        lines.append(f"sglang:context_len{{{labels}}} {float(context_len)}")
        lines.append(f"sglang:page_size{{{labels}}} {float(page_size)}")
        lines.append(f"sglang:token_usage{{{labels}}} 0.12")
    return "\n".join(lines) + "\n"


def sglang_routes(
    info: Mapping[str, Any] | None = None,
    *,
    served_context: int | None = 1048576,
    metrics: str | None = None,
    info_path: str = "/server_info",
) -> dict[str, Route]:
    """The routes of a healthy SGLang server: server info, /v1/models and (optionally) /metrics."""
    endpoints = sglang_http.Endpoints(
        server_info=dict(info or server_info_payload()),
        models=models_payload(served_context) if served_context is not None else None,
        info_paths=(info_path,),
    )
    routes: dict[str, Route] = {path: Reply(body=dict(body)) for path, body in endpoints.routes().items()}
    if metrics is not None:
        routes["/metrics"] = Reply(body=metrics, content_type="text/plain; version=0.0.4")
    return routes


@dataclass(frozen=True)
class TlsFiles:
    """A self-signed CA and a server certificate for 127.0.0.1 signed by it (PEM files)."""

    ca_cert: Path
    server_cert: Path
    server_key: Path

    def server_context(self) -> ssl.SSLContext:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(str(self.server_cert), str(self.server_key))
        return context


def make_tls_files(folder: Path, san: str = "IP:127.0.0.1,DNS:localhost") -> TlsFiles | None:
    """Generate a CA and a server certificate for `san` with the openssl CLI; None when it is absent."""
    openssl = shutil.which("openssl")
    if openssl is None:
        return None
    ca_key, ca_cert = folder / "ca.key", folder / "ca.pem"
    key, csr, cert = folder / "server.key", folder / "server.csr", folder / "server.pem"
    ext = folder / "san.ext"
    ext.write_text(f"subjectAltName={san}\nbasicConstraints=CA:FALSE\n")

    def run(*args: str) -> None:
        subprocess.run([openssl, *args], check=True, capture_output=True, timeout=60)

    run(
        "req",
        "-x509",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-keyout",
        str(ca_key),
        "-out",
        str(ca_cert),
        "-days",
        "2",
        "-subj",
        "/CN=kvcheck test CA",
    )
    run(
        "req",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-keyout",
        str(key),
        "-out",
        str(csr),
        "-subj",
        "/CN=127.0.0.1",
    )
    run(
        "x509",
        "-req",
        "-in",
        str(csr),
        "-CA",
        str(ca_cert),
        "-CAkey",
        str(ca_key),
        "-CAcreateserial",
        "-out",
        str(cert),
        "-days",
        "2",
        "-extfile",
        str(ext),
    )
    return TlsFiles(ca_cert=ca_cert, server_cert=cert, server_key=key)


def router_routes(workers: list[tuple[str, str]], *, workers_route: Route | None = None) -> dict[str, Route]:
    """The routes of an sglang-router 0.3.2 as it answers on the real install: /server_info is 404,
    /get_server_info says router_manager (as text/plain), /workers lists each (url, worker_type)."""
    listing = {
        "workers": [
            {"id": f"w{index}", "url": url, "model_id": "zai-org/GLM-5-FP8", "priority": 50, "cost": 1.0,
             "worker_type": kind, "is_healthy": True, "load": 0, "connection_mode": "HTTP",
             "metadata": {"tp_size": "8"}, "disable_health_check": False}
            for index, (url, kind) in enumerate(workers)
        ],
        "total": len(workers),
        "stats": {"prefill_count": 0, "decode_count": 0, "regular_count": len(workers)},
    }
    info = {"router_manager": True, "routers_count": 1, "workers_count": len(workers)}
    return {
        "/get_server_info": Reply(body=json.dumps(info), content_type="text/plain; charset=utf-8"),
        "/workers": workers_route if workers_route is not None else Reply(body=listing),
        "/v1/models": Reply(body=json.dumps({"object": "list", "data": [{"id": "zai-org/GLM-5-FP8",
                                                                            "object": "model", "owned_by": "local"}]}),
                            content_type="text/plain; charset=utf-8"),
        "/health": Reply(body="OK"),
    }
