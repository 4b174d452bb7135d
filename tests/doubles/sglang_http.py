"""SGLang's HTTP answers about itself, for every test double: /server_info, /get_server_info, /v1/models.

One place knows their shapes (SGLang 0.5.23's build_server_info, see docs/sglang-internals.md,
"/server_info and other endpoints") and which path answers what. The engine double
(fake_sglang.py), the probe's deployment double (tests/probe/deployment.py) and the audit's scripted
servers (tests/audit/servers.py) build their payloads and route their GETs through it.

Stdlib only, and no import from the `tests` package: fake_sglang.py runs it as a sibling module.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler
from typing import Any

SERVER_INFO = "/server_info"
GET_SERVER_INFO = "/get_server_info"  # the older spelling; 0.5.23 keeps it as a deprecated alias
MODELS = "/v1/models"
DEPRECATED_WARNING = (
    "Endpoint '/get_server_info' is deprecated and will be removed in a future version. "
    "Please use '/server_info' instead."
)


def admission_bound(context_len: int, pool_tokens: int) -> int:
    """max_req_input_len as SGLang's TP worker derives it: prompts of this many tokens or more are refused."""
    return min(context_len - 1, pool_tokens - 1) - 5


def server_info_payload(
    resolved_args: Mapping[str, Any],
    *,
    max_total_num_tokens: int | None,
    max_req_input_len: int | None,
    internal_states: Iterable[Mapping[str, Any]] | None = None,
    launch_command: str | None = None,
    startup_time: float | None = None,
    version: str | None = "0.5.23",
    scheduler_status: bool = True,
) -> dict[str, Any]:
    """A /server_info body in SGLang's key order: the resolved server arguments, the launch command and
    status, the first scheduler's pool figures, per-DP-rank states, version and frontend.

    `scheduler_status=False` gives the slimmer body of releases before 0.5 (arguments, pool figures and
    version only). `internal_states=None` and `startup_time=None` leave those keys out.
    """
    payload: dict[str, Any] = dict(resolved_args)
    if scheduler_status:
        payload["launch_command"] = launch_command
        payload["status"] = "ready"
    payload["max_total_num_tokens"] = max_total_num_tokens
    payload["max_req_input_len"] = max_req_input_len
    if startup_time is not None:
        payload["startup_time"] = startup_time
    if internal_states is not None:
        payload["internal_states"] = [dict(state) for state in internal_states]
    payload["version"] = version
    if scheduler_status:
        payload["frontend"] = "python"
    return payload


def models_payload(model_id: str, max_model_len: int | None, **fields: Any) -> dict[str, Any]:
    """/v1/models: one model whose max_model_len is the served context length."""
    return {"object": "list", "data": [{"id": model_id, "object": "model", **fields, "max_model_len": max_model_len}]}


def send_json(handler: BaseHTTPRequestHandler, status: int, payload: Any) -> None:
    """Write one JSON answer (bytes are sent as they are)."""
    body = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
    handler.send_response(status)
    handler.send_header("Content-Type", "application/json")
    handler.send_header("Content-Length", str(len(body)))
    handler.end_headers()
    handler.wfile.write(body)


@dataclass
class Endpoints:
    """What a server double answers about itself, by path.

    `info_paths`: where the server info is served; 0.5.23 answers both spellings, older releases only
    /get_server_info. `on_deprecated` runs when a client uses /get_server_info on a server that also
    has /server_info (SGLang logs a warning then). `health` adds /health and /ready answering 200.
    """

    server_info: Mapping[str, Any] | None
    models: Mapping[str, Any] | None = None
    info_paths: tuple[str, ...] = (SERVER_INFO, GET_SERVER_INFO)
    health: bool = False
    on_deprecated: Callable[[], None] | None = None

    def routes(self) -> dict[str, Mapping[str, Any]]:
        """Path -> JSON body of every GET these endpoints answer."""
        routes: dict[str, Mapping[str, Any]] = {}
        if self.server_info is not None:
            routes.update((path, self.server_info) for path in self.info_paths)
        if self.models is not None:
            routes[MODELS] = self.models
        if self.health:
            routes["/health"] = routes["/ready"] = {}
        return routes

    def answer(self, handler: BaseHTTPRequestHandler) -> bool:
        """Answer the handler's GET if its path is one of these endpoints; False leaves it to the caller."""
        path = handler.path.split("?")[0]
        payload = self.routes().get(path)
        if payload is None:
            return False
        if path == GET_SERVER_INFO and SERVER_INFO in self.info_paths and self.on_deprecated is not None:
            self.on_deprecated()
        send_json(handler, 200, payload)
        return True
