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
from typing import Any

from kvcheck.engines.base import RouterAnswer as BaseRouterAnswer
from kvcheck.engines.base import ServerInfo
from kvcheck.engines.sglang.serving import MAX_TOKEN_FIGURE
from kvcheck.engines.transport import ServerTransport
from kvcheck.errors import EndpointError, ServerUnusable
from kvcheck.http import (
    MAX_BODY_BYTES,
    MAX_REDIRECTS,
    Answer,
    display_url,
    make_ssl_context,
    validate_base_url,
)
from kvcheck.io.jsontext import JsonRejected, parse_json
from kvcheck.redact import REDACTED, redact_args, redact_command

# The URL and TLS helpers moved to kvcheck.http; these names stay importable from here.
__all__ = ["MAX_BODY_BYTES", "MAX_REDIRECTS", "display_url", "make_ssl_context", "validate_base_url"]

INFO_PATHS = ("/server_info", "/get_server_info")  # 0.5.x name first; older releases only have the second
MODELS_PATH = "/v1/models"
METRICS_PATH = "/metrics"

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

# Bounds on what one server's answers may hold (issue 20, "wide answers"): far above any SGLang server,
# so that parsing and every later pass over an answer (redaction, the policy, the report) stay within
# a known time and memory whatever a server sends. An answer past one is not judged: KV306.
MAX_INFO_KEYS = 2048  # top-level keys of /server_info: 0.5.23 sends about 560 (its ServerArgs and envelope)
MAX_DP_RANKS = 4096  # internal_states entries: one per DP attention rank
MAX_LAUNCH_COMMAND_CHARS = 256 * 1024  # Linux caps one argument at 128 KiB; shlex reads it char by char
MAX_METRIC_LINES = 1 << 18  # /metrics lines: SGLang's run to a few hundred per scheduler rank
MAX_SAMPLE_CHARS = 64 * 1024  # one sample line of a wanted gauge (its labels are a few short names)

# The constant gauges that are token counts (integers, like every pool figure); the others are sizes
# in GB (finite and not negative).
COUNT_GAUGES = frozenset(
    {
        "sglang:max_total_num_tokens",
        "sglang:max_total_num_tokens_swa",
        "sglang:context_len",
        "sglang:page_size",
        "sglang:num_pages",
    }
)
MAX_GB = 1 << 20  # a GB figure above a petabyte is not a GPU's


ROUTER_WORKERS_PATH = "/workers"  # sglang-router (0.3.x): {"workers": [{"url": ..., "worker_type": ...}], "total": N}
MAX_ROUTER_WORKERS = 64  # workers audited behind one router; more are reported, not audited (KV306)


class RouterAnswer(EndpointError, BaseRouterAnswer):
    """The URL is an sglang-router, not a server: its /get_server_info answers {"router_manager": true,
    "workers_count": N, ...} and it holds no pool of its own. `workers_count` is what it says, if anything."""

    def __init__(self, message: str, *, hint: str | None = None, workers_count: int | None = None) -> None:
        super().__init__(message, hint=hint)
        self.workers_count = workers_count


class UnreadableAnswer(ServerUnusable):
    """An answer no SGLang server gives: an impossible figure (-5 tokens, 200000.5, 1e300) or wider than
    any server's. The server is not judged (KV306), whichever route the answer came by (a /metrics
    failure is otherwise only a note)."""


def _figure(value: Any, where: str, name: str) -> int | None:
    """A token count from JSON: None when absent (null), an integer from 0 to MAX_TOKEN_FIGURE, else
    UnreadableAnswer. Bools are not counts, and neither is a figure no server can hold (2**62, 1e400)."""
    if value is None:
        return None
    count = _count(value)
    if count is None:
        raise UnreadableAnswer(
            f"{where}: {name} is {_shown(value)}, not a token count (an integer from 0 to {MAX_TOKEN_FIGURE:,})",
            hint="the server's answer is impossible; it is not judged",
        )
    return count


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _gauge_value(name: str, value: float, where: str) -> float:
    """A constant gauge's value, checked as every figure is: a count gauge is an integer in range."""
    if name in COUNT_GAUGES:
        if not (math.isfinite(value) and value.is_integer() and 0 <= value <= MAX_TOKEN_FIGURE):
            raise UnreadableAnswer(
                f"{where}: the {name} gauge is {value!r}, not a token count "
                f"(an integer from 0 to {MAX_TOKEN_FIGURE:,})",
                hint="the server's answer is impossible; it is not judged",
            )
    elif not (math.isfinite(value) and 0 <= value <= MAX_GB):
        raise UnreadableAnswer(
            f"{where}: the {name} gauge is {value!r}, not a size in GB",
            hint="the server's answer is impossible; it is not judged",
        )
    return value


_METRIC_NAME = re.compile(r"[A-Za-z_:][A-Za-z0-9_:]*")


def parse_prometheus(text: str, names: tuple[str, ...] = CONSTANT_GAUGES, *, where: str = METRICS_PATH) -> dict[str, float]:
    """The minimum over all series (ranks) of each wanted gauge in a Prometheus text exposition.

    Every series of a wanted gauge is checked (`_gauge_value`: UnreadableAnswer for an impossible one,
    whichever rank states it); the text is read in one pass, line by line, and refused past
    MAX_METRIC_LINES lines or a wanted sample past MAX_SAMPLE_CHARS.
    """
    lines = text.count("\n") + 1
    if lines > MAX_METRIC_LINES:
        raise UnreadableAnswer(
            f"{where}: the answer has {lines:,} lines, more than any SGLang server's (kvcheck reads at most "
            f"{MAX_METRIC_LINES:,})",
            hint="the server's answer is malformed or hostile; it is not judged",
        )
    wanted = set(names)
    found: dict[str, float] = {}
    start = 0
    while start < len(text):
        end = text.find("\n", start)
        end = len(text) if end < 0 else end
        begin, start = start, end + 1
        match = _METRIC_NAME.match(text, begin, end)  # the name first: other series are skipped unread
        if match is None or match.group(0) not in wanted:
            continue
        line = text[begin:end].strip()
        if len(line) > MAX_SAMPLE_CHARS:
            raise UnreadableAnswer(
                f"{where}: a {match.group(0)} sample is {len(line):,} characters long (at most "
                f"{MAX_SAMPLE_CHARS:,} are read)",
                hint="the server's answer is malformed or hostile; it is not judged",
            )
        parsed = _parse_sample(line)
        if parsed is None:
            continue
        name, value = parsed
        value = _gauge_value(name, value, where)
        found[name] = min(found.get(name, value), value)
    return found


def _parse_sample(line: str) -> tuple[str, float] | None:
    """`name{labels} value [timestamp]` -> (name, value); None for anything else."""
    match = _METRIC_NAME.match(line)
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
        field = f"internal_states[{rank}].memory_usage"
        capacity = _figure(usage.get("token_capacity"), where, f"{field}.token_capacity")
        if capacity is not None:
            capacities.append(capacity)
        swa_capacity = _figure(usage.get("token_capacity_swa"), where, f"{field}.token_capacity_swa")
        if swa_capacity:
            swa.append(swa_capacity)
    return capacities, swa


def _running_cap(states: list[Any], where: str) -> int | None:
    """The smallest DP rank's internal_states[].effective_max_running_requests_per_dp (None: none says)."""
    caps = [
        cap
        for rank, state in enumerate(states)
        if isinstance(state, dict)
        and (cap := _figure(state.get("effective_max_running_requests_per_dp"), where,
                            f"internal_states[{rank}].effective_max_running_requests_per_dp")) is not None
    ]
    return min(caps) if caps else None


def _check_width(payload: dict[str, Any], where: str) -> None:
    """UnreadableAnswer for a server info wider than any SGLang server's (MAX_INFO_KEYS and the rest)."""
    too_wide = "the server's answer is malformed or hostile; it is not judged"
    if len(payload) > MAX_INFO_KEYS:
        raise UnreadableAnswer(
            f"{where}: the answer has {len(payload):,} keys, more than any SGLang server's (kvcheck reads at "
            f"most {MAX_INFO_KEYS:,})",
            hint=too_wide,
        )
    states = payload.get("internal_states")
    if isinstance(states, list) and len(states) > MAX_DP_RANKS:
        raise UnreadableAnswer(
            f"{where}: internal_states lists {len(states):,} ranks (kvcheck reads at most {MAX_DP_RANKS:,})",
            hint=too_wide,
        )
    launch = payload.get("launch_command")
    if isinstance(launch, str) and len(launch) > MAX_LAUNCH_COMMAND_CHARS:
        raise UnreadableAnswer(
            f"{where}: launch_command is {len(launch):,} characters long, longer than a command line can be "
            f"(kvcheck reads at most {MAX_LAUNCH_COMMAND_CHARS:,})",
            hint=too_wide,
        )


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
    where = f"{url}{endpoint}"
    _check_width(payload, where)
    max_total = _figure(payload.get("max_total_num_tokens"), where, "max_total_num_tokens")
    max_req_input_len = _figure(payload.get("max_req_input_len"), where, "max_req_input_len")
    for key in ARG_COUNT_KEYS:  # the policy compares these to the window: garbage must not be judged
        _figure(payload.get(key), where, key)
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
        max_req_input_len=max_req_input_len,
        dp_token_capacities=tuple(capacities),
        swa_token_capacities=tuple(swa),
        context_length_arg=_count(payload.get("context_length")),
        served_context_len=None,
        resolved_args=redact_args(args),
        launch_command=redact_command(launch) if isinstance(launch, str) else None,
        endpoint=endpoint,
        notes=tuple(notes),
        max_running_requests=_running_cap(states or [], where),
    )


class SglangClient(ServerTransport):
    """A small, strict HTTP client for one SGLang server (thread-confined; one per endpoint)."""

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
        payload = self._json(answer, endpoint)
        if isinstance(payload, dict) and payload.get("router_manager") is True:
            count = payload.get("workers_count")
            raise RouterAnswer(
                f"{self.url} is an sglang-router, not an SGLang server ({endpoint} says router_manager): "
                "it holds no KV pool of its own",
                hint="audit its workers: their URLs are in the router's /workers list",
                workers_count=count if isinstance(count, int) and not isinstance(count, bool) else None,
            )
        info = parse_server_info(payload, url=self.url, endpoint=endpoint)
        self._check_deadline(endpoint)
        notes = list(info.notes)
        try:  # a route that fails is a note; one that answers the impossible is not (UnreadableAnswer)
            served = self.served_context()
        except UnreadableAnswer:
            raise
        except EndpointError as exc:
            served = None
            notes.append(f"{MODELS_PATH}: {exc.message}")
        try:
            metrics = self.metrics()
        except UnreadableAnswer:
            raise
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

    def router_workers(self) -> tuple[list[tuple[str, str | None]], int]:
        """An sglang-router's workers from /workers: ([(url, worker_type)], how many it lists), at most
        MAX_ROUTER_WORKERS of them, each URL once; EndpointError when the list cannot be read."""
        answer = self._get(ROUTER_WORKERS_PATH)
        self._raise_for_status(answer, ROUTER_WORKERS_PATH)
        payload = self._json(answer, ROUTER_WORKERS_PATH)
        workers = payload.get("workers") if isinstance(payload, dict) else None
        if not isinstance(workers, list):
            raise EndpointError(f"{self.url}{ROUTER_WORKERS_PATH}: the answer has no worker list ('workers')")
        found: dict[str, str | None] = {}
        for index, worker in enumerate(workers):
            url = worker.get("url") if isinstance(worker, dict) else None
            if not isinstance(url, str) or not url:
                raise EndpointError(f"{self.url}{ROUTER_WORKERS_PATH}: workers[{index}] has no url")
            kind = worker.get("worker_type")
            if len(found) < MAX_ROUTER_WORKERS:
                found.setdefault(url, kind if isinstance(kind, str) and kind else None)
        listed = len({w.get("url") for w in workers if isinstance(w, dict)})
        self._check_deadline(ROUTER_WORKERS_PATH)
        return list(found.items()), listed

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
        if len(data) > MAX_INFO_KEYS:
            raise UnreadableAnswer(
                f"{self.url}{MODELS_PATH}: the answer lists {len(data):,} models (kvcheck reads at most "
                f"{MAX_INFO_KEYS:,})",
                hint="the server's answer is malformed or hostile; it is not judged",
            )
        lengths = [  # LoRA adapters are listed with max_model_len null; the base model has it
            _figure(card.get("max_model_len"), f"{self.url}{MODELS_PATH}", f"data[{index}].max_model_len")
            for index, card in enumerate(data)
            if isinstance(card, dict)
        ]
        self._check_deadline(MODELS_PATH)
        return next((length for length in lengths if length), None)

    def metrics(self) -> dict[str, float]:
        """SGLang's constant gauges (min over ranks); {} when the server runs without --enable-metrics."""
        answer = self._get(METRICS_PATH)
        if answer.status == 404:
            return {}
        self._raise_for_status(answer, METRICS_PATH)
        found = parse_prometheus(answer.body.decode("utf-8", errors="replace"), where=f"{self.url}{METRICS_PATH}")
        self._check_deadline(METRICS_PATH)
        return found

    # -- answers ---------------------------------------------------------------------------------

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
            raise ServerUnusable(
                f"{self.url}{path}: the answer cannot be read safely: {self._redact(str(exc))}",
                hint="the server's answer is malformed or hostile; it is not judged",
            ) from exc


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
