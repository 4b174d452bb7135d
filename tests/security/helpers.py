"""Attack harness: run kvcheck as a user would, measure its time and peak memory; hostile loopback servers."""

from __future__ import annotations

import functools
import gzip
import json
import os
import resource
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
import zlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.audit.servers import models_payload, server_info_payload
from tests.conftest import REPO_ROOT

MEASURED = Path(__file__).with_name("measured.py")
# Python with click, pydantic, httpx and rich loaded: about 35-60 MiB. An attack that got through would
# cost hundreds of MiB to gigabytes; this bound leaves room for the interpreter, not for the attack.
PEAK_MIB_LIMIT = 150


@dataclass(frozen=True)
class Outcome:
    exit_code: int
    stdout: str
    stderr: str
    seconds: float
    peak_mib: float


def attack(*args: str, stdin: bytes | str | None = None, env: Mapping[str, str] | None = None,
           timeout: float = 60, cwd: Path | None = None, process: bool = False,
           address_space_mib: int | None = None) -> Outcome:
    """Run kvcheck ARGS; its exit code, output, wall time and (with `process`) peak resident memory.

    By default it runs inside this process (tests/inprocess.py) and `peak_mib` is nan; with `process`,
    in a subprocess of its own (for a peak the kernel measures, or runs side by side).
    `address_space_mib` (with `process`): RLIMIT_AS of that subprocess, so that an attack that does get
    through fails fast with MemoryError (exit 4) instead of taking the test machine's memory.
    """
    full_env = dict(os.environ)
    full_env["PYTHONPATH"] = str(REPO_ROOT) + os.pathsep + full_env.get("PYTHONPATH", "")
    full_env.pop("KVCHECK_DEBUG", None)
    full_env.update(env or {})
    if not process:
        from tests.inprocess import run_in_process

        started = time.monotonic()
        code, out, err = run_in_process(args, cwd or REPO_ROOT, full_env, stdin, timeout)
        return Outcome(code, out.decode(errors="replace"), err.decode(errors="replace"),
                       time.monotonic() - started, float("nan"))
    with tempfile.NamedTemporaryFile(prefix="kvcheck-peak-", delete=False) as peak_file:
        full_env["KVCHECK_PEAK_FILE"] = peak_file.name
    data = stdin.encode() if isinstance(stdin, str) else stdin
    started = time.monotonic()
    try:
        proc = subprocess.run([sys.executable, str(MEASURED), *args], cwd=cwd or REPO_ROOT, env=full_env,
                              input=data, stdin=None if data is not None else subprocess.DEVNULL,
                              capture_output=True, timeout=timeout,
                              preexec_fn=None if address_space_mib is None else _limit_address_space(address_space_mib))
        seconds = time.monotonic() - started
        text = Path(peak_file.name).read_text()
        peak_mib = int(text) / 1024 if text else float("nan")
    finally:
        os.unlink(peak_file.name)
    return Outcome(proc.returncode, proc.stdout.decode(errors="replace"), proc.stderr.decode(errors="replace"),
                   seconds, peak_mib)


def _limit_address_space(mib: int) -> Callable[[], None]:
    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (mib << 20, mib << 20))
    return limit


# -- raw loopback servers ------------------------------------------------------------------------------

Handler = Callable[[socket.socket, bytes], None]  # (connection, request head and body read so far) -> answer


class RawServer:
    """A loopback TCP server that reads one HTTP request per connection and lets a handler write any bytes."""

    def __init__(self, routes: Mapping[str, Handler]) -> None:
        self.routes = dict(routes)
        self._sock = socket.socket()
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._sock.bind(("127.0.0.1", 0))
        self._sock.listen(64)
        self.url = f"http://127.0.0.1:{self._sock.getsockname()[1]}"
        self.received_bytes = 0
        self._closed = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while not self._closed.is_set():
            try:
                conn, _ = self._sock.accept()
            except OSError:
                return
            threading.Thread(target=self._one, args=(conn,), daemon=True).start()

    def _one(self, conn: socket.socket) -> None:
        try:
            conn.settimeout(30)
            data = b""
            while b"\r\n\r\n" not in data:
                part = conn.recv(65536)
                if not part:
                    return
                data += part
            path = data.split(b" ", 2)[1].decode()
            head, _, body = data.partition(b"\r\n\r\n")
            length = next((int(line.split(b":", 1)[1]) for line in head.split(b"\r\n")
                           if line.lower().startswith(b"content-length:")), 0)
            while len(body) < length:  # the whole request body, so that an answer is not a reset
                part = conn.recv(1 << 20)
                if not part:
                    break
                body += part
            self.received_bytes += len(head) + len(body)
            handler = self.routes.get(path)
            if handler is None:
                conn.sendall(b"HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\nconnection: close\r\n\r\n")
            else:
                handler(conn, head + b"\r\n\r\n" + body)
        except OSError:
            pass
        finally:
            conn.close()

    def close(self) -> None:
        self._closed.set()
        self._sock.close()

    def __enter__(self) -> RawServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def send_body(body: bytes, *, content_type: str = "application/json", headers: Mapping[str, str] | None = None,
              status: str = "200 OK") -> Handler:
    def handler(conn: socket.socket, request: bytes) -> None:
        head = [f"HTTP/1.1 {status}", f"content-type: {content_type}", f"content-length: {len(body)}",
                "connection: close", *(f"{k}: {v}" for k, v in (headers or {}).items())]
        conn.sendall(("\r\n".join(head) + "\r\n\r\n").encode() + body)
    return handler


def trickle_headers(conn: socket.socket, request: bytes) -> None:
    """A status line, then one header byte every 0.1 s: 60 s if nothing cuts the request short."""
    conn.sendall(b"HTTP/1.1 200 OK\r\n")
    for _ in range(600):
        conn.sendall(b"x")
        time.sleep(0.1)


def send_json(payload: Any) -> Handler:
    return send_body(json.dumps(payload).encode())


def healthy_routes(**info: Any) -> dict[str, Handler]:
    """An SGLang server with a 681,280-token pool serving a 131,072-token window."""
    return {"/server_info": send_json(server_info_payload(**info)), "/v1/models": send_json(models_payload(131072))}


@functools.lru_cache(maxsize=4)
def gzip_bomb(decoded_mib: int, layers: int) -> bytes:
    """`decoded_mib` MiB of zeros, gzip-compressed `layers` times (`Content-Encoding: gzip, gzip` for 2).

    The innermost stream is one flushed deflate block of 1 MiB of zeros repeated (blocks after a full
    flush are independent), so a multi-GiB bomb is built in about a second; it is a valid gzip file.
    """
    mib = b"\0" * 2**20
    squeezer = zlib.compressobj(9, zlib.DEFLATED, -zlib.MAX_WBITS)
    block = squeezer.compress(mib) + squeezer.flush(zlib.Z_FULL_FLUSH)
    crc = 0
    for _ in range(decoded_mib):
        crc = zlib.crc32(mib, crc)
    header = b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x02\xff"
    data = header + block * decoded_mib + squeezer.flush() + struct.pack("<II", crc, (decoded_mib << 20) & 0xFFFFFFFF)
    for _ in range(layers - 1):
        data = gzip.compress(data, compresslevel=9)
    return data
