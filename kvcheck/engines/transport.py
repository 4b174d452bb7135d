"""What every engine's server client shares: one validated base URL, one httpx client under
kvcheck.http's rules (redirects, deadline, body caps, the token kept to its origin), GETs with bounded
retries and a backoff that never outlives the whole server's deadline, and errors that never show
the token. An engine's client (SGLang's, vLLM's) subclasses it and reads its own endpoints.
"""

from __future__ import annotations

import ssl
import time
from collections.abc import Callable, Mapping
from typing import ClassVar, Self

import httpx

from kvcheck import __version__
from kvcheck.errors import EndpointError, InputError, ServerUnusable
from kvcheck.http import (
    Answer,
    HttpLimitError,
    display_url,
    make_client,
    time_left,
    tls_reason,
    validate_base_url,
)
from kvcheck.http import request as http_request
from kvcheck.redact import REDACTED

RETRY_STATUSES = frozenset({500, 502, 503, 504})  # 503 also while a server is still starting


class ServerTransport:
    """The transport of one engine server's client (thread-confined; one per endpoint)."""

    # The fix named when the server wants a token and none was given; extra hints by HTTP status.
    token_hint: ClassVar[str] = "the server wants a token: put it in an environment variable and pass --token-env NAME"
    status_hints: ClassVar[Mapping[int, str]] = {}

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
        return f"{type(self).__name__}({self.url!r}, token={'<set>' if self._token else None})"

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._client.close()

    def _check_deadline(self, path: str) -> None:
        """EndpointError once the whole server's deadline (`kvcheck.http.deadline`) has passed: reading
        an answer counts against `--timeout` too, not only its request."""
        left = time_left()
        if left is not None and left <= 0:
            raise ServerUnusable(
                f"{self.url}{path}: the server's answers were not read within {self._timeout_s:g} s",
                hint="raise --timeout if the server is known to be slow",
            )

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
                if attempt < attempts and self._backoff(attempt):
                    continue
                raise self._transport_error(url, exc, attempt) from exc
            if answer.status in RETRY_STATUSES and attempt < attempts and self._backoff(attempt):
                continue
            return answer
        raise AssertionError("unreachable: the loop returns or raises")

    def _backoff(self, attempt: int) -> bool:
        """Wait before the next attempt; False (no retry) when the whole server's deadline leaves no time."""
        wait = self._backoff_s * 2 ** (attempt - 1)
        left = time_left()
        if left is not None and left <= wait:
            return False
        self._sleep(wait)
        return True

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
                hint = self.token_hint
            raise ServerUnusable(f"{where}: HTTP {answer.status} {answer.reason}", hint=hint)
        detail = self._snippet(answer)
        attempts = (
            f" after {self._retries + 1} attempts"
            if answer.status in RETRY_STATUSES and self._retries
            else ""
        )
        raise EndpointError(
            f"{where}: HTTP {answer.status} {answer.reason}{attempts}" + (f": {detail}" if detail else ""),
            hint=self.status_hints.get(answer.status),
        )

    def _tls_error(self, url: httpx.URL, reason: str) -> ServerUnusable:
        if "mismatch" in reason.lower():
            return ServerUnusable(
                f"{display_url(url)}: TLS certificate verification failed ({reason})",
                hint="the certificate does not name this host: use the host name it was issued for",
            )
        if "CERTIFICATE_VERIFY_FAILED" in reason or "certificate verify failed" in reason:
            return ServerUnusable(
                f"{display_url(url)}: TLS certificate verification failed ({reason})",
                hint="pass --ca-bundle FILE with the CA that signed the server's certificate "
                "(--insecure skips verification; not for production)",
            )
        return ServerUnusable(
            f"{display_url(url)}: TLS handshake failed ({reason})",
            hint="check that the server speaks HTTPS on this port (else use http://)",
        )

    def _transport_error(self, url: httpx.URL, exc: httpx.TransportError, attempts: int) -> ServerUnusable:
        tries = f" ({attempts} attempts)" if attempts > 1 else ""
        if isinstance(exc, httpx.TimeoutException):
            return ServerUnusable(
                f"{display_url(url)}: no complete answer within {self._timeout_s:g} s{tries}",
                hint="raise --timeout if the server is known to be slow",
            )
        if isinstance(exc, httpx.ConnectError):
            return ServerUnusable(
                f"{display_url(url)}: cannot connect{tries}: {self._redact(str(exc)) or type(exc).__name__}",
                hint="check that the server is running and reachable from here (host, port, proxy settings)",
            )
        return ServerUnusable(
            f"{display_url(url)}: the connection failed{tries}: {self._redact(str(exc)) or type(exc).__name__}"
        )
