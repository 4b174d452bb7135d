"""Ask a running SGLang server for its KV pool and limits: /server_info, /v1/models and /metrics.

Everything a live server says about its pool goes through here, so that the audit command and the
measure backend's loopback cross-check read the same fields the same way. Fail closed: an answer that
cannot be had, or is not SGLang's, raises `EndpointError` (exit 3) with the reason; never a default.

Security: TLS is verified by default; the bearer token is sent only to the origin it was given for
(a redirect to another scheme, host or port is followed without it) and never appears in a message,
a repr or a report (`redact_args` and `redact_command` also hide the server's own secrets, such as
the `api_key` that `/server_info` echoes back).
"""

from __future__ import annotations

import dataclasses
import math
import re
import ssl
import time
from collections.abc import Callable
from typing import Any

import httpx

from kvcheck import __version__
from kvcheck.engines.base import ServerInfo
from kvcheck.engines.sglang.serving import MAX_TOKEN_FIGURE
from kvcheck.errors import EndpointError, InputError
from kvcheck.http import (
    MAX_BODY_BYTES,
    MAX_REDIRECTS,
    Answer,
    HttpLimitError,
    JsonRejected,
    display_url,
    make_client,
    make_ssl_context,
    parse_json,
    tls_reason,
    validate_base_url,
)
from kvcheck.http import (
    request as http_request,
)
from kvcheck.redact import REDACTED, redact_args, redact_command

# The URL and TLS helpers moved to kvcheck.http; these names stay importable from here.
__all__ = ["MAX_BODY_BYTES", "MAX_REDIRECTS", "display_url", "make_ssl_context", "validate_base_url"]

INFO_PATHS = ("/server_info", "/get_server_info")  # 0.5.x name first; older releases only have the second
MODELS_PATH = "/v1/models"
METRICS_PATH = "/metrics"
RETRY_STATUSES = frozenset({500, 502, 503, 504})  # 503 also while a server is still starting

# Gauges SGLang sets once at startup (metrics_collector.emit_constants); one series per scheduler rank.
CONSTANT_GAUGES = (
    "sglang:max_total_num_tokens",
    "sglang:max_total_num_tokens_swa",
    "sglang:context_len",
    "sglang:page_size",
    "sglang:num_pages",
    "sglang:kv_cache_memory_usage_gb",
    "sglang:weight_memory_usage_gb",
    "sglang:startup_available_gpu_memory_gb",
)

# Keys of the server-info payload that are not ServerArgs fields (scheduler info and envelope).
NON_ARG_KEYS = frozenset(
    {
        "internal_states",
        "version",
        "launch_command",
        "status",
        "max_total_num_tokens",
        "max_req_input_len",
        "startup_time",
        "hicache_object_layout",
        "kv_event_sources",
        "kv_events",
        "frontend",
    }
)

def parse_prometheus(text: str, names: tuple[str, ...] = CONSTANT_GAUGES) -> dict[str, float]:
    """The minimum over all series (ranks) of each wanted gauge in a Prometheus text exposition."""
    wanted = set(names)
    found: dict[str, float] = {}
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        parsed = _parse_sample(line)
        if parsed is None:
            continue
        name, value = parsed
        if name not in wanted or not math.isfinite(value):
            continue
        found[name] = min(found.get(name, value), value)
    return found


def _parse_sample(line: str) -> tuple[str, float] | None:
    """`name{labels} value [timestamp]` -> (name, value); None for anything else."""
    match = re.match(r"[A-Za-z_:][A-Za-z0-9_:]*", line)
    if match is None:
        return None
    name, rest = match.group(0), line[match.end() :]
    if rest.startswith("{"):
        in_quotes = escaped = False
        for index, char in enumerate(rest):
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == '"':
                in_quotes = not in_quotes
            elif char == "}" and not in_quotes:
                rest = rest[index + 1 :]
                break
        else:
            return None
    parts = rest.split()
    if not parts:
        return None
    try:
        return name, float(parts[0])
    except ValueError:
        return None


# Resolved server arguments the policy reads as token counts (KV102, KV103).
ARG_COUNT_KEYS = ("context_length", "max_total_tokens")


def _count(value: Any) -> int | None:
    """A token count from JSON: an integer from 0 to MAX_TOKEN_FIGURE (bools are not counts), else None.

    A figure no server can hold (2**62, 10**4000, 1e400) is not a count: judging it would pass a pool
    that does not exist.
    """
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_TOKEN_FIGURE:
        return None
    return value


def _rank_capacities(states: list[Any], where: str) -> tuple[list[int], list[int]]:
    """Each DP rank's token_capacity (and SWA token capacity) from internal_states[].memory_usage."""
    capacities: list[int] = []
    swa: list[int] = []
    for rank, state in enumerate(states):
        usage = state.get("memory_usage") if isinstance(state, dict) else None
        if not isinstance(usage, dict):
            continue
        capacity = _count(usage.get("token_capacity"))
        if capacity is not None:
            capacities.append(capacity)
        elif usage.get("token_capacity") is not None:
            raise EndpointError(
                f"{where}: internal_states[{rank}].memory_usage.token_capacity is "
                f"{usage['token_capacity']!r}, not a token count"
            )
        swa_capacity = _count(usage.get("token_capacity_swa"))
        if swa_capacity:
            swa.append(swa_capacity)
    return capacities, swa


def parse_server_info(payload: Any, *, url: str, endpoint: str) -> ServerInfo:
    """Turn a server-info JSON payload into a ServerInfo; raise EndpointError when it is not SGLang's."""
    if not isinstance(payload, dict) or (
        "max_total_num_tokens" not in payload and "internal_states" not in payload
    ):
        raise EndpointError(
            f"{url}{endpoint}: the answer is JSON but not SGLang's server info "
            "(neither max_total_num_tokens nor internal_states)",
            hint="check that the URL points at an SGLang server (not a router, gateway or another engine)",
        )
    max_total = _count(payload.get("max_total_num_tokens"))
    if payload.get("max_total_num_tokens") is not None and max_total is None:
        raise EndpointError(
            f"{url}{endpoint}: max_total_num_tokens is {payload['max_total_num_tokens']!r}, not a token count"
        )
    for key in ARG_COUNT_KEYS:  # the policy compares these to the window: garbage must not be judged
        if payload.get(key) is not None and _count(payload[key]) is None:
            raise EndpointError(f"{url}{endpoint}: {key} is {payload[key]!r}, not a token count")
    notes: list[str] = []
    states = payload.get("internal_states")
    if states is not None and not isinstance(states, list):
        raise EndpointError(f"{url}{endpoint}: internal_states is {type(states).__name__}, not a list")
    capacities, swa = _rank_capacities(states or [], f"{url}{endpoint}")
    if states and capacities and len(capacities) != len(states):
        notes.append(f"only {len(capacities)} of {len(states)} DP ranks state their token_capacity")
    if max_total is None and not capacities:
        raise EndpointError(
            f"{url}{endpoint}: SGLang answered without a pool figure "
            "(no max_total_num_tokens, no internal_states[].memory_usage.token_capacity)",
            hint="the server may still be starting; retry once /health answers 200",
        )
    args = {k: v for k, v in payload.items() if k not in NON_ARG_KEYS}
    launch = payload.get("launch_command")
    version = payload.get("version")
    return ServerInfo(
        url=url,
        version=str(version) if version not in (None, "") else None,
        max_total_num_tokens=max_total,
        max_req_input_len=_count(payload.get("max_req_input_len")),
        dp_token_capacities=tuple(capacities),
        swa_token_capacities=tuple(swa),
        context_length_arg=_count(payload.get("context_length")),
        served_context_len=None,
        resolved_args=redact_args(args),
        launch_command=redact_command(launch) if isinstance(launch, str) else None,
        endpoint=endpoint,
        notes=tuple(notes),
    )


class SglangClient:
    """A small, strict HTTP client for one SGLang server (thread-confined; one per endpoint)."""

    def __init__(
        self,
        base_url: str,
        *,
        timeout_s: float = 10.0,
        verify: bool | str | ssl.SSLContext = True,
        token: str | None = None,
        retries: int = 2,
        backoff_s: float = 0.5,
        transport: httpx.BaseTransport | None = None,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        if timeout_s <= 0:
            raise InputError(f"timeout must be positive, got {timeout_s:g} s")
        if retries < 0:
            raise InputError(f"retries must be 0 or more, got {retries}")
        self._base = validate_base_url(base_url)
        self.url = display_url(self._base)
        self._timeout_s = float(timeout_s)
        self._retries = int(retries)
        self._backoff_s = float(backoff_s)
        self._token = token or None
        self._sleep = sleep
        self._client = make_client(  # redirects, deadline and body caps: kvcheck.http.request
            timeout_s=timeout_s,
            verify=verify,
            transport=transport,
            headers={"User-Agent": f"kvcheck/{__version__}", "Accept": "application/json, text/plain;q=0.9"},
        )

    def __repr__(self) -> str:
        return f"SglangClient({self.url!r}, token={'<set>' if self._token else None})"

    def __enter__(self) -> SglangClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._client.close()

    # -- public calls -------------------------------------------------------------------------

    def server_info(self) -> ServerInfo:
        """Pool, limits and resolved args from /server_info (/get_server_info on older releases),
        completed with the served context (/v1/models) and the constant metrics (/metrics)."""
        answer, endpoint = None, INFO_PATHS[0]
        for endpoint in INFO_PATHS:
            answer = self._get(endpoint)
            if answer.status != 404:
                break
        assert answer is not None
        if answer.status == 404:
            raise EndpointError(
                f"{self.url}: neither /server_info nor /get_server_info exists (HTTP 404)",
                hint="check that the URL points at an SGLang server, not a router or another engine",
            )
        self._raise_for_status(answer, endpoint)
        info = parse_server_info(self._json(answer, endpoint), url=self.url, endpoint=endpoint)
        notes = list(info.notes)
        try:
            served = self.served_context()
        except EndpointError as exc:
            served = None
            notes.append(f"{MODELS_PATH}: {exc.message}")
        try:
            metrics = self.metrics()
        except EndpointError as exc:
            metrics = {}
            notes.append(f"{METRICS_PATH}: {exc.message}")
        served_source = MODELS_PATH if served is not None else None
        if served is None and "sglang:context_len" in metrics:
            served, served_source = int(metrics["sglang:context_len"]), "sglang:context_len"
        return dataclasses.replace(
            info,
            served_context_len=served,
            served_context_source=served_source,
            metrics=metrics,
            redirected_to=display_url(answer.url) if answer.redirected else None,
            notes=tuple(notes),
        )

    def served_context(self) -> int | None:
        """The context window the server serves (/v1/models `max_model_len`); None if it has no such endpoint."""
        answer = self._get(MODELS_PATH)
        if answer.status == 404:
            return None
        self._raise_for_status(answer, MODELS_PATH)
        payload = self._json(answer, MODELS_PATH)
        data = payload.get("data") if isinstance(payload, dict) else None
        if not isinstance(data, list):
            raise EndpointError(f"{self.url}{MODELS_PATH}: the answer has no model list ('data')")
        for card in data:  # LoRA adapters are listed with max_model_len null; the base model has it
            length = _count(card.get("max_model_len")) if isinstance(card, dict) else None
            if length:
                return length
        return None

    def metrics(self) -> dict[str, float]:
        """SGLang's constant gauges (min over ranks); {} when the server runs without --enable-metrics."""
        answer = self._get(METRICS_PATH)
        if answer.status == 404:
            return {}
        self._raise_for_status(answer, METRICS_PATH)
        return parse_prometheus(answer.body.decode("utf-8", errors="replace"))

    # -- transport --------------------------------------------------------------------------------

    def _get(self, path: str) -> Answer:
        """GET with bounded retries (connect errors, timeouts, 5xx) and exponential backoff."""
        url = self._base.copy_with(path=self._base.path.rstrip("/") + path)
        attempts = self._retries + 1
        for attempt in range(1, attempts + 1):
            try:
                answer = self._send(url)
            except httpx.TransportError as exc:
                tls = tls_reason(exc)
                if tls is not None:
                    raise self._tls_error(url, tls) from exc
                if attempt < attempts:
                    self._sleep(self._backoff_s * 2 ** (attempt - 1))
                    continue
                raise self._transport_error(url, exc, attempts) from exc
            if answer.status in RETRY_STATUSES and attempt < attempts:
                self._sleep(self._backoff_s * 2 ** (attempt - 1))
                continue
            return answer
        raise AssertionError("unreachable: the loop returns or raises")

    def _send(self, url: httpx.URL) -> Answer:
        """One GET under kvcheck.http's rules (the token stays with its origin, one deadline, bounded body)."""
        try:
            answer = http_request(self._client, "GET", url, timeout_s=self._timeout_s, token=self._token)
        except HttpLimitError as exc:
            raise EndpointError(f"{display_url(url)}: {self._redact(exc.message)}") from exc
        return answer

    # -- errors -----------------------------------------------------------------------------------

    def _redact(self, text: str) -> str:
        return text.replace(self._token, REDACTED) if self._token else text

    def _snippet(self, answer: Answer) -> str:
        text = answer.body[:160].decode("utf-8", errors="replace")
        text = " ".join(text.split())
        return self._redact(text)

    def _raise_for_status(self, answer: Answer, path: str) -> None:
        if 200 <= answer.status < 300:
            return
        where = f"{self.url}{path}"
        if answer.status in (401, 403):
            if self._token:
                hint = "the server refused the token: check the variable --token-env names"
            else:
                hint = "the server wants a token: put it in an environment variable and pass --token-env NAME"
            raise EndpointError(f"{where}: HTTP {answer.status} {answer.reason}", hint=hint)
        detail = self._snippet(answer)
        attempts = (
            f" after {self._retries + 1} attempts"
            if answer.status in RETRY_STATUSES and self._retries
            else ""
        )
        raise EndpointError(
            f"{where}: HTTP {answer.status} {answer.reason}{attempts}" + (f": {detail}" if detail else "")
        )

    def _json(self, answer: Answer, path: str) -> Any:
        try:
            payload = parse_json(answer.body)
            return _without(self._token, payload) if self._token else payload  # a server echoing the token
        except JsonRejected as exc:
            if str(exc).startswith("not JSON"):
                kind = answer.content_type.split(";")[0].strip() or "no content type"
                raise EndpointError(
                    f"{self.url}{path}: the answer is not JSON ({kind}: {self._snippet(answer)!r})",
                    hint="check that the URL points at an SGLang server",
                ) from exc
            raise EndpointError(
                f"{self.url}{path}: the answer cannot be read safely: {self._redact(str(exc))}",
                hint="the server's answer is malformed or hostile; it is not judged",
            ) from exc

    def _tls_error(self, url: httpx.URL, reason: str) -> EndpointError:
        if "mismatch" in reason.lower():
            return EndpointError(
                f"{display_url(url)}: TLS certificate verification failed ({reason})",
                hint="the certificate does not name this host: use the host name it was issued for",
            )
        if "CERTIFICATE_VERIFY_FAILED" in reason or "certificate verify failed" in reason:
            return EndpointError(
                f"{display_url(url)}: TLS certificate verification failed ({reason})",
                hint="pass --ca-bundle FILE with the CA that signed the server's certificate "
                "(--insecure skips verification; not for production)",
            )
        return EndpointError(
            f"{display_url(url)}: TLS handshake failed ({reason})",
            hint="check that the server speaks HTTPS on this port (else use http://)",
        )

    def _transport_error(self, url: httpx.URL, exc: httpx.TransportError, attempts: int) -> EndpointError:
        tries = f" ({attempts} attempts)" if attempts > 1 else ""
        if isinstance(exc, httpx.TimeoutException):
            return EndpointError(
                f"{display_url(url)}: no complete answer within {self._timeout_s:g} s{tries}",
                hint="raise --timeout if the server is known to be slow",
            )
        if isinstance(exc, httpx.ConnectError):
            return EndpointError(
                f"{display_url(url)}: cannot connect{tries}: {self._redact(str(exc)) or type(exc).__name__}",
                hint="check that the server is running and reachable from here (host, port, proxy settings)",
            )
        return EndpointError(
            f"{display_url(url)}: the connection failed{tries}: {self._redact(str(exc)) or type(exc).__name__}"
        )


def _without(token: str, value: Any) -> Any:
    """A parsed JSON value with `token` replaced in every string value (keys name fields and stay);
    depth is bounded by parse_json, so the recursion is too."""
    if isinstance(value, str):
        return value.replace(token, REDACTED)
    if isinstance(value, dict):
        return {key: _without(token, item) for key, item in value.items()}
    if isinstance(value, list):
        return [_without(token, item) for item in value]
    return value
