"""Fixtures for audit tests: loopback SGLang doubles, TLS material, a port nobody listens on."""

from __future__ import annotations

import socket
from collections.abc import Callable, Iterator

import pytest

from .servers import FakeServer, TlsFiles, make_tls_files


@pytest.fixture
def serve() -> Iterator[Callable[..., FakeServer]]:
    """Start FakeServers that are all stopped when the test ends, whatever happens."""
    started: list[FakeServer] = []

    def start(routes, **kwargs) -> FakeServer:
        server = FakeServer(routes, **kwargs)
        started.append(server)
        return server

    yield start
    for server in started:
        server.close()


@pytest.fixture(scope="session")
def tls_files(tmp_path_factory: pytest.TempPathFactory) -> TlsFiles:
    files = make_tls_files(tmp_path_factory.mktemp("tls"))
    if files is None:
        pytest.skip("the openssl CLI is needed to make a test certificate")
    return files


@pytest.fixture
def closed_port() -> int:
    """A loopback port that was free a moment ago (connections to it are refused)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]
