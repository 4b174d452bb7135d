"""ToyServe behind kvcheck's Engine interface: everything kvcheck needs, from outside its package.

The flags (`--pool-tokens`, `--context-length`, `--role`), the log lines and the `/toyserve/info`
answer are ToyServe's own (server.py beside this file); kvcheck learns them only through this class.
"""

from __future__ import annotations

import re
import ssl
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar

import httpx

from kvcheck.engines.argv import ParsedArgv, parse_argv
from kvcheck.engines.base import (
    BootLogReader,
    Engine,
    LogEvent,
    LogSummary,
    NodeLaunch,
    PoolEstimate,
    RankFigures,
    RankTag,
    SafeFraction,
    ServerInfo,
)
from kvcheck.engines.flags import Catalogue, Flag
from kvcheck.errors import EndpointError, EstimateError, InputError
from kvcheck.io.streams import BinaryReadable
from kvcheck.model import RolePlan, RoleTarget
from kvcheck.policy.registry import Rule

SERVER = Path(__file__).with_name("server.py")
VERSION = "1.0"
_POOL = re.compile(r"^toyserve: pool_tokens=(\d+) context_len=(\d+)$")


def _flag(name: str, kind: str, *, choices: tuple[str, ...] | None = None, default: Any = None) -> Flag:
    return Flag(name=name, field=None, aliases=(), type=kind, nargs=None, store_true=False, action=None,
                default=default, choices=choices, deprecated=False)


CATALOGUE = Catalogue(
    version=VERSION,
    flags=(
        _flag("--pool-tokens", "int"),
        _flag("--context-length", "int", default=8192),
        _flag("--role", "str", choices=("prefill", "decode")),
    ),
    removed={},
    label="ToyServe",
    reserved={"model": "set model.path instead; kvcheck passes it as --model"},
)


class ToyLogReader:
    """ToyServe's three startup lines, read incrementally (a BootLogReader)."""

    def __init__(self) -> None:
        self._lines = 0
        self._startup = 0
        self._phase = "starting"
        self._pool: int | None = None
        self._context: int | None = None
        self._errors: list[str] = []

    @property
    def phase(self) -> str:
        return self._phase

    @property
    def lines(self) -> int:
        return self._lines

    @property
    def parsed_lines(self) -> int:
        return self._lines

    def feed(self, line: str | bytes) -> list[LogEvent]:
        text = (line.decode("utf-8", "replace") if isinstance(line, bytes) else line).strip()
        self._lines += 1
        if not text.startswith("toyserve: "):
            return []
        self._startup += 1
        if text.startswith("toyserve: loading "):
            self._phase = "loading_weights"
            return [LogEvent("loading", None, self._lines, text)]
        if text.startswith("toyserve: error: "):
            self._phase = "failed"
            self._errors.append(text)
            return [LogEvent("error", None, self._lines, text)]
        match = _POOL.match(text)
        if match:
            self._pool, self._context = int(match[1]), int(match[2])
            self._phase = "sizing_pool"
            return [LogEvent("pool", None, self._lines, text, {"pool_tokens": self._pool})]
        if text == "toyserve: ready":
            self._phase = "ready"
            return [LogEvent("ready", None, self._lines, text)]
        return []

    def feed_many(self, lines: Iterable[str | bytes]) -> None:
        for line in lines:
            self.feed(line)

    def read_stream(self, stream: BinaryReadable) -> None:
        buffered = b""
        while chunk := stream.read(1 << 16):
            buffered += chunk
            *complete, buffered = buffered.split(b"\n")
            self.feed_many(complete)
        if buffered:
            self.feed(buffered)

    def summary(self) -> LogSummary:
        ranks = () if self._pool is None else (
            RankFigures(rank=RankTag(), final_tokens=self._pool, context_len=self._context),)
        missing = () if self._pool is not None else ("the pool line (toyserve: pool_tokens=...)",)
        return LogSummary(ranks=ranks, server_args=None, server_args_line=None, command_line=None,
                          version=VERSION if self._startup else None, warnings=(), errors=tuple(self._errors),
                          ready=self._phase == "ready", phase=self._phase, missing=missing, lines=self._lines,
                          startup_lines=self._startup)


class ToyClient:
    """The `/toyserve/info` answer as kvcheck's ServerInfo (a ServerClient)."""

    def __init__(self, base_url: str, *, timeout_s: float, transport: httpx.BaseTransport | None) -> None:
        self.url = base_url.rstrip("/")
        self._client = httpx.Client(timeout=timeout_s, transport=transport)

    def __enter__(self) -> ToyClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._client.close()

    def server_info(self) -> ServerInfo:
        try:
            answer = self._client.get(self.url + "/toyserve/info")
            payload = answer.json()
        except (httpx.HTTPError, ValueError) as exc:
            raise EndpointError(f"{self.url}/toyserve/info: {type(exc).__name__}: {exc}") from exc
        if answer.status_code != 200 or payload.get("engine") != "toyserve":
            raise EndpointError(f"{self.url}/toyserve/info: not a ToyServe server (HTTP {answer.status_code})")
        return ServerInfo(
            url=self.url, version=str(payload["version"]), max_total_num_tokens=int(payload["pool_tokens"]),
            max_req_input_len=min(int(payload["pool_tokens"]), int(payload["context_len"])) - 1,
            dp_token_capacities=(), swa_token_capacities=(),
            context_length_arg=None, served_context_len=int(payload["context_len"]),
            resolved_args={"port": payload["port"], "model_path": payload["model"],
                           "role": payload["role"]},
            launch_command=None, endpoint="/toyserve/info", served_context_source="/toyserve/info",
        )

    def served_context(self) -> int | None:
        return self.server_info().served_context_len

    def metrics(self) -> dict[str, float]:
        return {}


class ToyServeEngine(Engine):
    """ToyServe: one process, one pool, its size given on the command line."""

    name: ClassVar[str] = "toyserve"
    label: ClassVar[str] = "ToyServe"
    default_command: ClassVar[tuple[str, ...]] = (sys.executable, str(SERVER))
    max_token_figure: ClassVar[int] = 2**31 - 1
    pool_gauge: ClassVar[str | None] = None
    context_gauge: ClassVar[str | None] = None

    # -- arguments
    def catalogue(self, version: str) -> tuple[Catalogue, str | None]:
        note = None if version == VERSION else f"no flag catalogue for ToyServe {version}; checked against {VERSION}"
        return CATALOGUE, note

    def catalogue_versions(self) -> list[str]:
        return [VERSION]

    def parse_argv(self, argv: Sequence[str], *, version: str | None, start: int = 0) -> ParsedArgv:
        return parse_argv(argv, CATALOGUE, start=start)

    def launch_index(self, argv: Sequence[str]) -> int | None:
        for i, word in enumerate(argv):
            if word.endswith(("toyserve", "toyserve/server.py")):
                return i + 1
        return None

    def enumerated_fields(self, args: Mapping[str, Any], version: str | None) -> frozenset[str]:
        return frozenset(name for name in args if name == "role")

    def role_mode(self, args: Mapping[str, Any]) -> str | None:
        role = args.get("role")
        return None if role in (None, "") else str(role)

    def max_input_len(self, context_len: int, pool_tokens: int | None, args: Mapping[str, Any] | None = None,
                      version: str | None = None, env: Mapping[str, str] | None = None) -> int:
        return min(context_len, pool_tokens if pool_tokens is not None else context_len) - 1

    # -- launch
    def launch_argv(self, target: RoleTarget, *, host: str, port: int, node: NodeLaunch | None = None,
                    dummy_weights: bool = False, bootstrap_port: int | None = None) -> list[str]:
        if not target.model_path:
            raise InputError(f"role {target.name} names no model (model.path)")
        command = list(target.engine_command or self.default_command)
        return [*command, "--model", target.model_path, *target.argv_args, "--host", host, "--port", str(port)]

    def node_argv(self, node: NodeLaunch) -> list[str]:
        return []

    def launch_nodes(self, args: Mapping[str, Any]) -> int:
        return 1

    def needs_bootstrap_port(self, args: Mapping[str, Any]) -> bool:
        return False

    # -- boot log
    def log_reader(self) -> BootLogReader:
        return ToyLogReader()

    def data_parallel_ranks(self, args: Mapping[str, Any]) -> int:
        return 1

    # -- server
    def server_client(self, base_url: str, *, timeout_s: float = 10.0, verify: bool | str | ssl.SSLContext = True,
                      token: str | None = None, retries: int = 2, backoff_s: float = 0.5,
                      transport: httpx.BaseTransport | None = None,
                      sleep: Callable[[float], None] | None = None) -> ToyClient:
        del verify, token, retries, backoff_s, sleep  # ToyServe speaks plain HTTP, once
        return ToyClient(base_url, timeout_s=timeout_s, transport=transport)

    # -- sizing: the pool is what --pool-tokens says, capped by nothing
    def estimate(self, target: RoleTarget, *, profiles: Any = None, offline: bool | None = None) -> PoolEstimate:
        pool = target.args.get("pool_tokens")
        if not isinstance(pool, int):
            raise EstimateError(f"role {target.name}: ToyServe's pool is --pool-tokens, which the role does not set")
        context = int(target.args.get("context_length") or 8192)
        return PoolEstimate(
            role=target.name, pool_tokens=pool, pool_range=(pool, pool), context_len=context,
            max_input_tokens=self.max_input_len(context, pool), max_running_requests=1, kv_bytes_per_token=0.0,
            mem_fraction_static=1.0, mem_fraction_reserved_mib=None, kv_dtype="auto", page_size=1,
            tp_size=1, pp_size=1, attn_dp_size=1, ep_size=1, details={"pool_tokens_flag": pool},
        )

    def plan(self, target: RoleTarget, *, profiles: Any = None, offline: bool | None = None) -> RolePlan:
        raise EstimateError("ToyServe has no planner: set --pool-tokens to what the window needs")

    def safe_fraction(self, target: RoleTarget, *, profiles: Any = None,
                      offline: bool | None = None) -> SafeFraction | None:
        return None

    # -- rules
    def rules(self) -> tuple[Rule, ...]:
        return ()
