"""The only way the probe reaches the network: one origin, a request budget, a rate and a deadline.

Every request (the GETs that learn the limits included) passes through `GuardedTransport`, so the
bounds hold whatever code builds the request, and its log is the list of everything that was sent.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

import httpx

from kvcheck.http import guard_transport, origin_of

__all__ = ["BudgetExhausted", "GuardedTransport", "OriginRefused", "ProbeGuardError", "SentRequest", "origin_of"]


class ProbeGuardError(httpx.TransportError):
    """A request the probe refused to send (other origin, budget or deadline exhausted)."""


class OriginRefused(ProbeGuardError):
    """The request would leave the one origin the user named."""


class BudgetExhausted(ProbeGuardError):
    """--max-requests or --max-duration is used up; nothing more is sent."""


@dataclass
class SentRequest:
    """One request that left this machine; filled in as the answer arrives (mutable, lock-guarded)."""

    seq: int  # 1-based, in sending order
    method: str
    path: str
    body_bytes: int
    started_s: float  # monotonic
    status: int | None = None
    error: str | None = None


class GuardedTransport(httpx.BaseTransport):
    """Wraps a real transport: refuses other origins, enforces the budget, spaces starts by the rate."""

    def __init__(
        self,
        inner: httpx.BaseTransport,
        *,
        origin: tuple[str, str, int | None],
        max_requests: int,
        max_bytes: int | None = None,
        rate_per_s: float,
        deadline_s: float,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        guard_transport(inner)  # every socket operation also ends by the request's deadline (kvcheck.http)
        self._inner = inner
        self._origin = origin
        self._max_requests = max_requests
        self._max_bytes = max_bytes
        self._sent_bytes = 0
        self._interval_s = 1.0 / rate_per_s
        self._deadline_s = deadline_s
        self._clock = clock
        self._sleep = sleep
        self._lock = threading.Lock()
        self._next_start_s = clock()
        self.sent: list[SentRequest] = []

    @property
    def deadline_s(self) -> float:
        return self._deadline_s

    def remaining_s(self) -> float:
        return self._deadline_s - self._clock()

    def reserve(self, method: str, url: httpx.URL, body_bytes: int) -> SentRequest:
        """Claim a slot in the budget and wait for the rate; raise when the request must not go."""
        if origin_of(url) != self._origin:
            scheme, host, port = origin_of(url)
            raise OriginRefused(
                f"refused to send {method} to {scheme}://{host}:{port}: the probe only talks to the URL given"
            )
        with self._lock:
            now = self._clock()
            if len(self.sent) >= self._max_requests:
                raise BudgetExhausted(f"--max-requests ({self._max_requests}) reached")
            if self._max_bytes is not None and self._sent_bytes + body_bytes > self._max_bytes:
                raise BudgetExhausted(
                    f"--max-upload-mib ({self._max_bytes // 2**20}) reached: {self._sent_bytes:,} bytes sent, "
                    f"this request would add {body_bytes:,}"
                )
            self._sent_bytes += body_bytes
            start = max(now, self._next_start_s)
            if start >= self._deadline_s:
                raise BudgetExhausted("--max-duration reached")
            self._next_start_s = start + self._interval_s
            record = SentRequest(
                seq=len(self.sent) + 1, method=method, path=url.path, body_bytes=body_bytes, started_s=start
            )
            self.sent.append(record)
        wait = start - self._clock()
        if wait > 0:
            self._sleep(wait)
        return record

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        try:
            body_bytes = len(request.content)
        except httpx.RequestNotRead:  # a streamed upload; the probe sends none
            body_bytes = 0
        record = self.reserve(request.method, request.url, body_bytes)
        try:
            response = self._inner.handle_request(request)
        except httpx.TransportError as exc:
            with self._lock:
                record.error = str(exc) or type(exc).__name__
            raise
        with self._lock:
            record.status = response.status_code
        return response

    def close(self) -> None:
        self._inner.close()
