"""The HTTP rules every kvcheck request follows: audit, probe and the estimator's config download.

A server kvcheck talks to is not trusted. Whatever it sends, a request ends within its deadline and
its answer within its byte cap:

- TLS is verified by default (system or certifi CAs, a `--ca-bundle`, or `--insecure`).
- Redirects are followed here, not by httpx, so that a bearer token is only ever sent to the origin
  (scheme, host, port) it was given for, and so that a redirect to a non-HTTP URL is refused.
- One deadline covers the whole request: connecting, TLS, sending, the status line, every header and
  the body. httpx's timeouts are per socket operation, so a server that sends one header byte a second
  would keep a request alive forever; `DeadlineTransport` clamps every socket operation to what is
  left of the deadline instead.
- The body is decoded here, layer by layer (`Content-Encoding: gzip, gzip` is two layers), with a cap
  on the decoded size of every layer: a 10 KB answer cannot become gigabytes in memory.
- JSON is parsed with a nesting limit and refuses duplicate keys, since `{"a": 10, "a": 500000}`
  means whatever the reader chooses (`parse_json`).

Errors are `HttpLimitError` (over a cap, an unsupported encoding, a refused redirect) or httpx's own
transport errors; each caller turns them into its own error class (audit: EndpointError, exit 3).
"""

from __future__ import annotations

import contextlib
import contextvars
import ipaddress
import re
import ssl
import time
import zlib
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpcore
import httpx

from kvcheck.errors import InputError

MAX_REDIRECTS = 5
MAX_BODY_BYTES = 32 * 1024 * 1024  # a server_info for hundreds of DP ranks stays far below this
MAX_ENCODING_LAYERS = 3
MAX_DEADLINE_S = 7 * 24 * 3600.0  # beyond this a socket timeout no longer fits the C timeval
ACCEPT_ENCODING = "gzip, deflate"  # what _Layer decodes; a server may not send anything else
_DECODE_STEP = 256 * 1024  # at most this many decoded bytes per decompress call, so memory stays bounded

Origin = tuple[str, str, int | None]


class HttpLimitError(Exception):
    """An answer kvcheck refuses to read further: over a size cap, an unknown encoding, a bad redirect."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


# -- URLs and TLS ------------------------------------------------------------------------------------


MAX_HOST_CHARS = 253  # DNS: a name of at most 253 characters, in labels of 1 to 63
MAX_LABEL_CHARS = 63
_HOST_NAME_RE = re.compile(rb"[A-Za-z0-9_-]+")  # one label of the host as sent (IDNA's xn-- form)
_CONTROL_RE = re.compile(r"[\x00-\x1f\x7f]")


def url_problem(url: httpx.URL) -> str | None:
    """Why the network layer cannot use `url` (None: it can), checked before it raises inside the
    HTTP or IDNA libraries: an empty or over-long host label, a host that is not valid punycode or not
    a host name at all (`%0d%0a`), a control character (an encoded CR LF) in the path."""
    try:
        host = url.host
    except UnicodeError:  # idna.IDNAError: an xn-- label that does not decode
        return "its host is not valid punycode (an xn-- label that does not decode)"
    raw = url.raw_host
    if host and not _is_ip_address(host):
        name = raw.removesuffix(b".")  # a trailing dot names the DNS root
        if len(name) > MAX_HOST_CHARS:
            return f"its host is longer than {MAX_HOST_CHARS} characters"
        labels = name.split(b".")
        if any(not 1 <= len(label) <= MAX_LABEL_CHARS for label in labels):
            return f"its host has an empty or over-long label (each part between dots is 1-{MAX_LABEL_CHARS} characters)"
        if not all(_HOST_NAME_RE.fullmatch(label) for label in labels):
            return "its host holds characters a host name cannot hold (letters, digits, '-' and '_' only)"
        try:
            host.encode("idna")  # what the socket layer does with it before resolving it
        except UnicodeError:
            return "its host cannot be encoded for DNS (IDNA)"
    if _CONTROL_RE.search(url.path):
        return "its path holds a control character (an encoded CR or LF, say)"
    return None


def _is_ip_address(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


def validate_base_url(url: str) -> httpx.URL:
    """The server's base URL, checked: http(s), a host the network layer can use, no credentials,
    query or fragment."""
    text = url.strip()
    shown = repr(shown_input(url))  # a rejected URL's password never reaches stderr
    try:
        parsed = httpx.URL(text)
    except (httpx.InvalidURL, TypeError, UnicodeError) as exc:
        raise InputError(f"{shown} is not a valid URL: {no_secrets(str(exc), text)}") from exc
    problem = url_problem(parsed)
    if problem is not None:
        raise InputError(f"{shown} is not a usable URL: {problem}")
    if parsed.userinfo:  # first, so that no other message echoes the credentials
        raise InputError(
            f"{display_url(parsed)}: credentials in the URL are not accepted",
            hint="put the bearer token in an environment variable and pass --token-env NAME",
        )
    if parsed.scheme not in ("http", "https") or not parsed.host:
        raise InputError(
            f"{shown} is not an http(s) URL of a server",
            hint="write the scheme and host, e.g. http://10.0.0.5:30000",
        )
    if parsed.port is not None and not 1 <= parsed.port <= 65535:
        raise InputError(f"{shown}: port {parsed.port} is not a TCP port (1-65535)")
    if parsed.query or parsed.fragment:
        raise InputError(f"{display_url(parsed)}: the server URL must not carry a query or fragment")
    return parsed.copy_with(raw_path=parsed.raw_path.rstrip(b"/") or b"/")


def display_url(url: httpx.URL | str) -> str:
    """A URL fit for messages and reports: scheme, host, port and path only (never userinfo or query)."""
    try:
        parsed = url if isinstance(url, httpx.URL) else httpx.URL(url)
        host = parsed.host
    except (httpx.InvalidURL, TypeError, UnicodeError):
        return "<invalid URL>"
    port = f":{parsed.port}" if parsed.port is not None else ""
    host = f"[{host}]" if ":" in host else host
    path = _CONTROL_RE.sub(lambda m: f"\\x{ord(m.group(0)):02x}", parsed.path.rstrip("/"))
    return f"{parsed.scheme}://{host}{port}{path}"


_USERINFO_RE = re.compile(r"(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*://)(?P<userinfo>[^/?#@\s]*)@")


def without_userinfo(text: str) -> str:
    """`text` with the user:password part of every URL in it replaced by `***` (even unparseable URLs)."""
    return _USERINFO_RE.sub(lambda m: f"{m.group('scheme')}***@", text)


_SCHEME_LIKE = re.compile(r"[A-Za-z][A-Za-z0-9+.\-]*:[/\\]+")


def shown_input(text: str) -> str:
    """A URL as the user gave it, for an error message, with anything that may be credentials hidden: the
    userinfo of a URL, and, in one with no `://` (`u:pw@host:30000`, `http:/u:pw@host`), all before the `@`."""
    text = without_userinfo(text)
    if "://" in text or "@" not in text:
        return text
    head, _, tail = text.rpartition("@")
    scheme = _SCHEME_LIKE.match(head)
    return f"{scheme.group(0) if scheme else ''}***@{tail}"


def no_secrets(text: str, url: str) -> str:
    """An httpx message about `url` with the URL's userinfo (if any) cut out."""
    for match in _USERINFO_RE.finditer(url):
        if match.group("userinfo"):
            text = text.replace(match.group("userinfo"), "***")
    return without_userinfo(text)


def origin_of(url: httpx.URL) -> Origin:
    """(scheme, host, port) with the scheme's default port filled in."""
    default = {"http": 80, "https": 443}.get(url.scheme)
    return (url.scheme, url.host.lower(), url.port or default)


def make_ssl_context(verify: bool | str | ssl.SSLContext = True) -> ssl.SSLContext:
    """One TLS context for many clients: True = system/certifi CAs, a path = that CA bundle, False = insecure.

    Building a context loads the whole CA store (tens of ms), so an audit of hundreds of endpoints
    builds it once and hands it to every client.
    """
    if isinstance(verify, ssl.SSLContext):
        return verify
    if isinstance(verify, str):
        path = Path(verify)
        if not path.exists():
            raise InputError(
                f"CA bundle {verify} does not exist", hint="--ca-bundle takes a PEM file or a folder"
            )
        try:
            if path.is_dir():
                return ssl.create_default_context(capath=str(path))
            return ssl.create_default_context(cafile=str(path))
        except (ssl.SSLError, OSError) as exc:
            raise InputError(f"CA bundle {verify} could not be loaded: {exc}") from exc
    return httpx.create_ssl_context(verify=bool(verify), trust_env=True)


def tls_reason(exc: BaseException) -> str | None:
    """The TLS failure behind a transport error, if there is one (never retried: it will not heal)."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, ssl.SSLCertVerificationError):
            return f"certificate verify failed: {current.verify_message}"
        if isinstance(current, ssl.SSLError):
            return str(current.reason or current)
        current = current.__cause__ or current.__context__
    text = str(exc)
    if "CERTIFICATE_VERIFY_FAILED" in text or "SSL" in text and "handshake" in text.lower():
        return text
    return None


def token_problem(name: str, value: str) -> str | None:
    """Why the bearer token in environment variable `name` cannot be sent, or None. Never quotes it.

    An HTTP header carries visible ASCII only; httpx would otherwise fail deep inside a request (a
    traceback), and a token with a newline would inject headers.
    """
    bad = next((i for i, char in enumerate(value) if not 0x21 <= ord(char) <= 0x7E), None)
    if bad is None:
        return None
    return (f"--token-env {name}: the token holds a character that cannot be sent in an HTTP header at "
            f"position {bad + 1} (only visible ASCII characters can)")


# -- the deadline --------------------------------------------------------------------------------------

# Monotonic time by which the current request must be over; set by `deadline()`, read by every socket
# operation of a DeadlineTransport in this thread (a context variable: probe threads have their own).
_DEADLINE: contextvars.ContextVar[float | None] = contextvars.ContextVar("kvcheck_http_deadline", default=None)


@contextlib.contextmanager
def deadline(seconds: float) -> Iterator[float]:
    """Every socket operation inside this block ends by `seconds` from now (nested blocks: the earlier)."""
    end = time.monotonic() + min(seconds, MAX_DEADLINE_S)
    outer = _DEADLINE.get()
    if outer is not None:
        end = min(end, outer)
    token = _DEADLINE.set(end)
    try:
        yield end
    finally:
        _DEADLINE.reset(token)


def time_left() -> float | None:
    """Seconds left of the current `deadline()` block (0 or less once passed); None outside one."""
    end = _DEADLINE.get()
    return None if end is None else end - time.monotonic()


def _left(timeout: float | None, error: type[Exception]) -> float | None:
    """The timeout for one socket operation: the smaller of its own and what is left of the deadline."""
    end = _DEADLINE.get()
    if end is None:
        return timeout
    left = end - time.monotonic()
    if left <= 0:
        raise error("the request's deadline has passed")
    return left if timeout is None else min(timeout, left)


class _DeadlineStream(httpcore.NetworkStream):
    """A socket whose reads, writes and TLS handshake stop at the request's deadline."""

    def __init__(self, inner: httpcore.NetworkStream) -> None:
        self._inner = inner

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return self._inner.read(max_bytes, _left(timeout, httpcore.ReadTimeout))

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        self._inner.write(buffer, _left(timeout, httpcore.WriteTimeout))

    def close(self) -> None:
        self._inner.close()

    def start_tls(
        self, ssl_context: ssl.SSLContext, server_hostname: str | None = None, timeout: float | None = None
    ) -> httpcore.NetworkStream:
        return _DeadlineStream(
            self._inner.start_tls(ssl_context, server_hostname, _left(timeout, httpcore.ConnectTimeout))
        )

    def get_extra_info(self, info: str) -> Any:
        return self._inner.get_extra_info(info)


class _DeadlineBackend(httpcore.NetworkBackend):
    """httpcore's socket backend, with every connection wrapped in a `_DeadlineStream`."""

    def __init__(self, inner: httpcore.NetworkBackend) -> None:
        self._inner = inner

    def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.NetworkStream:
        stream = self._inner.connect_tcp(
            host, port, _left(timeout, httpcore.ConnectTimeout), local_address, socket_options
        )
        return _DeadlineStream(stream)

    def connect_unix_socket(
        self, path: str, timeout: float | None = None, socket_options: Iterable[Any] | None = None
    ) -> httpcore.NetworkStream:
        stream = self._inner.connect_unix_socket(path, _left(timeout, httpcore.ConnectTimeout), socket_options)
        return _DeadlineStream(stream)

    def sleep(self, seconds: float) -> None:
        self._inner.sleep(seconds)


def guard_transport(transport: httpx.BaseTransport) -> None:
    """Make an httpx transport's connection pool open deadline-bound sockets.

    httpx builds its httpcore pool itself (with or without a proxy) and offers no parameter for the
    network backend, so the pool's backend is wrapped after construction; tests/security checks that it
    takes effect (a server trickling its headers is cut at the deadline).
    """
    pool = getattr(transport, "_pool", None)
    inner = getattr(pool, "_network_backend", None)
    if inner is None or isinstance(inner, _DeadlineBackend):
        return
    pool._network_backend = _DeadlineBackend(inner)  # type: ignore[union-attr]


class DeadlineTransport(httpx.HTTPTransport):
    """httpx's transport whose every socket operation ends by the deadline `deadline()` sets."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        guard_transport(self)


def make_client(
    *,
    verify: bool | str | ssl.SSLContext = True,
    timeout_s: float = 10.0,
    transport: httpx.BaseTransport | None = None,
    headers: Mapping[str, str] | None = None,
    base_url: httpx.URL | str = "",
) -> httpx.Client:
    """An httpx client under kvcheck's rules: no automatic redirects or decoding, deadline-bound sockets.

    Proxies come from the environment (HTTPS_PROXY, NO_PROXY); their transports are bound too.
    """
    client = httpx.Client(
        base_url=base_url,
        timeout=httpx.Timeout(timeout_s),
        transport=transport if transport is not None else DeadlineTransport(verify=make_ssl_context(verify)),
        verify=make_ssl_context(verify),
        follow_redirects=False,
        trust_env=True,
        headers={**(headers or {}), "Accept-Encoding": ACCEPT_ENCODING},
    )
    for mounted in client._mounts.values():  # proxy transports httpx built from the environment
        if mounted is not None:
            guard_transport(mounted)
    return client


# -- bodies -------------------------------------------------------------------------------------------


class _Layer:
    """One Content-Encoding layer, decoded in steps of at most _DECODE_STEP bytes."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._first = True
        if name in ("gzip", "x-gzip"):
            self._z = zlib.decompressobj(zlib.MAX_WBITS | 16)
        elif name == "deflate":
            self._z = zlib.decompressobj()
        else:
            raise HttpLimitError(f"the answer is encoded with {name!r}, which kvcheck does not decode")

    def decode(self, chunks: Iterable[bytes]) -> Iterator[bytes]:
        for chunk in chunks:
            data = chunk
            if self._first and self.name == "deflate" and data:
                self._first = False
                if data[0] & 0x0F != 8:  # servers send raw deflate as "deflate" too (as httpx accepts)
                    self._z = zlib.decompressobj(-zlib.MAX_WBITS)
            while data and not self._z.eof:
                try:
                    out = self._z.decompress(data, _DECODE_STEP)
                except zlib.error as exc:
                    raise HttpLimitError(f"the answer's {self.name} encoding is damaged ({exc})") from exc
                data = self._z.unconsumed_tail
                if out:
                    yield out
        if not self._z.eof:
            tail = self._z.flush()
            if tail:
                yield tail


def encoding_layers(header: str | None) -> list[str]:
    """The Content-Encoding layers in the order to undo them (the last one applied first)."""
    names = [part.strip().lower() for part in (header or "").split(",")]
    names = [name for name in names if name and name != "identity"]
    if len(names) > MAX_ENCODING_LAYERS:
        raise HttpLimitError(f"the answer is encoded {len(names)} times over; kvcheck decodes at most "
                             f"{MAX_ENCODING_LAYERS} layers")
    return list(reversed(names))


def decode_body(raw: Iterable[bytes], content_encoding: str | None, *, max_bytes: int = MAX_BODY_BYTES) -> bytes:
    """The decoded body, refusing (HttpLimitError) once any layer's output passes `max_bytes`."""
    stream: Iterable[bytes] = _capped(raw, max_bytes, "on the wire")
    for name in encoding_layers(content_encoding):
        stream = _capped(_Layer(name).decode(stream), max_bytes, f"after {name} decoding")
    return b"".join(stream)


def _capped(chunks: Iterable[bytes], max_bytes: int, where: str) -> Iterator[bytes]:
    size = 0
    for chunk in chunks:
        size += len(chunk)
        if size > max_bytes:
            raise HttpLimitError(f"the answer is larger than {_size(max_bytes)} {where}")
        yield chunk


def _size(n: int) -> str:
    return f"{n // 2**20} MiB" if n >= 2**20 and n % 2**20 == 0 else f"{n:,} bytes"


@dataclass(frozen=True)
class Answer:
    """One HTTP answer, body read in full (decoded, bounded)."""

    status: int
    reason: str
    url: httpx.URL  # the URL that answered (after redirects)
    headers: httpx.Headers
    body: bytes
    redirected: bool

    @property
    def content_type(self) -> str:
        return str(self.headers.get("content-type", ""))

    @property
    def is_redirect(self) -> bool:
        return 300 <= self.status < 400 and "location" in self.headers


def request(
    client: httpx.Client,
    method: str,
    url: httpx.URL | str,
    *,
    timeout_s: float,
    token: str | None = None,
    content: bytes | None = None,
    headers: Mapping[str, str] | None = None,
    max_redirects: int = MAX_REDIRECTS,
    max_bytes: int = MAX_BODY_BYTES,
) -> Answer:
    """One request under kvcheck's rules: whole-request deadline, bounded decoded body, own redirects.

    With `max_redirects=0` a redirect is returned as it is (the probe reports it). The token goes in an
    Authorization header to the first URL's origin only. Raises HttpLimitError or httpx.TransportError.
    """
    target = _absolute(client, url)
    problem = url_problem(target)
    if problem is not None:
        raise HttpLimitError(f"{display_url(target)}: not requested: {problem}")
    origin = origin_of(target)
    redirected = False
    with deadline(timeout_s):
        for hop in range(max_redirects + 1):
            sent_headers = dict(headers or {})
            if token is not None and origin_of(target) == origin:
                sent_headers["Authorization"] = f"Bearer {token}"
            built = client.build_request(method, target, headers=sent_headers, content=content,
                                         timeout=httpx.Timeout(timeout_s))
            try:
                response = client.send(built, stream=True, follow_redirects=False)
            except (UnicodeError, httpx.InvalidURL) as exc:
                # httpx builds the next request of every redirect, even one it does not follow: a Location
                # whose host is not valid punycode raises there, inside the library
                raise HttpLimitError(f"{display_url(target)}: redirect to an unusable URL refused: its "
                                     "Location cannot be parsed (a host that is not valid punycode, say)") from exc
            try:
                location = response.headers.get("location")
                if response.is_redirect and location and hop < max_redirects:
                    try:
                        next_url = target.join(location)
                    except (httpx.InvalidURL, UnicodeError) as exc:
                        raise HttpLimitError(f"{display_url(target)}: redirect to an invalid URL") from exc
                    if next_url.scheme not in ("http", "https"):
                        raise HttpLimitError(f"{display_url(target)}: redirect to a non-HTTP URL refused")
                    problem = url_problem(next_url)
                    if problem is not None:
                        raise HttpLimitError(f"{display_url(target)}: redirect to an unusable URL refused: {problem}")
                    if method != "GET":
                        raise HttpLimitError(f"{display_url(target)}: a {method} was redirected; not followed")
                    target, redirected = next_url, True
                    continue
                if response.is_redirect and location and max_redirects:
                    raise HttpLimitError(f"{display_url(target)}: more than {max_redirects} redirects")
                body = decode_body(response.iter_raw(), response.headers.get("content-encoding"),
                                   max_bytes=max_bytes)
                return Answer(status=response.status_code, reason=response.reason_phrase, url=target,
                              headers=response.headers, body=body, redirected=redirected)
            finally:
                response.close()
    raise AssertionError("unreachable: the loop returns or raises")


def _absolute(client: httpx.Client, url: httpx.URL | str) -> httpx.URL:
    """`url` as the client will send it (a relative path goes under the client's base URL)."""
    parsed = url if isinstance(url, httpx.URL) else httpx.URL(url)
    if parsed.is_absolute_url:
        return parsed
    base = client.base_url
    return base.copy_with(raw_path=base.raw_path.rstrip(b"/") + b"/" + parsed.raw_path.lstrip(b"/"))
