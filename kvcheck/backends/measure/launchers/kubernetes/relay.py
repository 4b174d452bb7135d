"""A loopback HTTP relay to one pod's port through the API server's pod proxy.

Measure mode asks every engine the same way: plain HTTP GETs to a base URL (`boot.py`). In a cluster
the engine's port is reachable only through the API server, with the kubeconfig's credentials, which
the `kubernetes` client holds. The relay listens on 127.0.0.1 (a free port), forwards each GET to
`/api/v1/namespaces/NS/pods/POD:PORT/proxy/PATH` and answers with the pod's status and body, so the
measurement reads `/server_info` through the API server without a port-forward and without handing
credentials to another HTTP client. It answers only GET, only on loopback, only for one pod.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

ProxyGet = Callable[[str, float], tuple[int, bytes]]  # (path with query, timeout_s) -> (status, body)
RELAY_TIMEOUT_S = 10.0


class PodRelay:
    """Serves http://127.0.0.1:PORT/PATH from `proxy_get(PATH)` until `close()`."""

    def __init__(self, proxy_get: ProxyGet) -> None:
        relay = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - http.server's name
                status, body = relay.proxy_get(self.path, RELAY_TIMEOUT_S)
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - http.server's name
                return None

        self.proxy_get = proxy_get
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.port = int(self._server.server_address[1])
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="kvcheck-k8s-relay", daemon=True
        )
        self._thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5.0)
