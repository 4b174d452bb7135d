"""Ask a running vLLM server for its KV pool and window: /metrics, /v1/models and /version.

vLLM (0.32.0) has no server-info endpoint outside its dev mode (`/server_info` needs
VLLM_SERVER_DEV_MODE=1), so the pool comes from the `vllm:cache_config_info` gauge of /metrics, whose
labels carry the cache config of each engine (one series per data-parallel engine): `num_gpu_blocks`,
`block_size`, `kv_cache_size_tokens`. What one request can use is (num_gpu_blocks - 1) x block_size
(vLLM keeps one null block). The window is /v1/models' `max_model_len`, the version /version's.
Fail closed: an answer that cannot be had, or is not vLLM's, raises EndpointError (exit 3) with the
reason; never a default. Every read goes through kvcheck.http (one deadline, bounded body, redirects
checked, the token kept to its origin and out of every message).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Any

from kvcheck.engines.base import ServerInfo
from kvcheck.engines.transport import ServerTransport
from kvcheck.engines.vllm.serving import MAX_TOKEN_FIGURE, usable_tokens
from kvcheck.errors import EndpointError, ServerUnusable
from kvcheck.http import (
    Answer,
    display_url,
)
from kvcheck.io.jsontext import JsonRejected, parse_json

MODELS_PATH = "/v1/models"
METRICS_PATH = "/metrics"
VERSION_PATH = "/version"
CACHE_INFO = "vllm:cache_config_info"
# What ServerInfo.metrics holds (min over engines), named after the labels they come from.
POOL_GAUGE = "vllm:cache_config_info:usable_tokens"
BLOCKS_GAUGE = "vllm:cache_config_info:num_gpu_blocks"
BLOCK_SIZE_GAUGE = "vllm:cache_config_info:block_size"
SIZE_GAUGE = "vllm:cache_config_info:kv_cache_size_tokens"
_LABEL = re.compile(r'([A-Za-z_][A-Za-z0-9_]*)="((?:[^"\\]|\\.)*)"')


def _count(value: Any) -> int | None:
    """A token or block count: an integer 0..MAX_TOKEN_FIGURE (text of one from a label), else None."""
    if isinstance(value, str) and re.fullmatch(r"\d{1,12}", value):
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_TOKEN_FIGURE:
        return None
    return value


# Bounds on /metrics (issue 20, class 3): a vLLM server's exposition runs to a few hundred lines per
# engine; the text is counted before it is walked, and only the wanted series' lines are read.
MAX_METRIC_LINES = 1 << 18
MAX_SAMPLE_CHARS = 64 * 1024
MAX_ENGINES = 4096


def cache_configs(text: str, where: str = METRICS_PATH) -> list[dict[str, str]]:
    """The label sets of every `vllm:cache_config_info` series in a Prometheus exposition, read in one
    bounded pass (ServerUnusable past the bounds: a hostile answer is not judged)."""
    lines = text.count("\n") + 1
    if lines > MAX_METRIC_LINES:
        raise ServerUnusable(
            f"{where}: the answer has {lines:,} lines, more than any vLLM server's (kvcheck reads at most "
            f"{MAX_METRIC_LINES:,})",
            hint="the server's answer is malformed or hostile; it is not judged",
        )
    found: list[dict[str, str]] = []
    start = 0
    prefix = CACHE_INFO + "{"
    while start < len(text):
        end = text.find("\n", start)
        end = len(text) if end < 0 else end
        begin, start = start, end + 1
        while begin < end and text[begin] in " \t":
            begin += 1
        if not text.startswith(prefix, begin, end):
            continue  # another series: skipped unread
        if end - begin > MAX_SAMPLE_CHARS:
            raise ServerUnusable(f"{where}: a {CACHE_INFO} sample is {end - begin:,} characters long (at most "
                                 f"{MAX_SAMPLE_CHARS:,} are read)",
                                 hint="the server's answer is malformed or hostile; it is not judged")
        line = text[begin:end]
        close = line.rfind("}")
        if close < 0:
            continue
        found.append(dict(_LABEL.findall(line[len(prefix):close])))
        if len(found) > MAX_ENGINES:
            raise ServerUnusable(f"{where}: more than {MAX_ENGINES:,} {CACHE_INFO} series",
                                 hint="the server's answer is malformed or hostile; it is not judged")
    return found


def pools_from_metrics(text: str, where: str) -> tuple[list[int], dict[str, float]]:
    """Each engine's usable tokens (sorted by engine), and the smallest figures as metrics."""
    configs = cache_configs(text, where)
    if not configs:
        raise EndpointError(
            f"{where}: no {CACHE_INFO} series: not a vLLM server's metrics, or a release without it",
            hint="check that the URL points at a vLLM server (not a router or another engine)",
        )
    pools: list[tuple[str, int]] = []
    figures: dict[str, list[int]] = {BLOCKS_GAUGE: [], BLOCK_SIZE_GAUGE: [], SIZE_GAUGE: []}
    for labels in configs:
        blocks, block = _count(labels.get("num_gpu_blocks")), _count(labels.get("block_size"))
        if blocks is None or block is None or block == 0:
            raise EndpointError(
                f"{where}: {CACHE_INFO} has num_gpu_blocks={labels.get('num_gpu_blocks')!r} and "
                f"block_size={labels.get('block_size')!r}, not counts",
                hint="the server may still be starting (num_gpu_blocks is None until the pool is sized)",
            )
        usable = usable_tokens(blocks, block)
        if usable > MAX_TOKEN_FIGURE:
            raise EndpointError(f"{where}: {CACHE_INFO} states {blocks:,} blocks of {block:,}: no server holds that")
        pools.append((labels.get("engine", ""), usable))
        figures[BLOCKS_GAUGE].append(blocks)
        figures[BLOCK_SIZE_GAUGE].append(block)
        size = _count(labels.get("kv_cache_size_tokens"))
        if size is not None:
            figures[SIZE_GAUGE].append(size)
    pools.sort(key=lambda item: (int(item[0]) if item[0].isdigit() else math.inf, item[0]))
    metrics = {name: float(min(values)) for name, values in figures.items() if values}
    metrics[POOL_GAUGE] = float(min(p for _, p in pools))
    return [p for _, p in pools], metrics


def bound_over_pool(max_model_len: int, pool_tokens: int, metrics: Mapping[str, float]) -> str | None:
    """KV307 in vLLM's words: a request of max_model_len tokens needs the KV of all but its last (sampled,
    never fed back), more than the KV cache's usable tokens hold; with the cache config the figure comes from
    and the KV cache size vLLM itself reports (its startup log's "GPU KV cache size: N tokens"), which counts
    the null block. None when that request fits."""
    if max_model_len - 1 <= pool_tokens:
        return None
    blocks, block = metrics.get(BLOCKS_GAUGE), metrics.get(BLOCK_SIZE_GAUGE)
    sources = []
    if blocks is not None and block is not None and usable_tokens(int(blocks), int(block)) == pool_tokens:
        sources.append(f"{CACHE_INFO}: {int(blocks):,} blocks of {int(block):,}, one of them vLLM's null block")
    if (size := metrics.get(SIZE_GAUGE)) is not None:
        sources.append(f"GPU KV cache size {int(size):,} tokens")
    shown = f" ({'; '.join(sources)})" if sources else ""
    return (f"max_model_len {max_model_len:,} ({MODELS_PATH}) admits a request whose KV ({max_model_len - 1:,} "
            f"tokens) exceeds the KV cache's {pool_tokens:,} usable tokens{shown}: the smallest engine's KV cache "
            "cannot hold a request of that length")


class VllmClient(ServerTransport):
    """A small, strict HTTP client for one vLLM server (thread-confined; one per endpoint)."""

    token_hint = "the server wants a token (vLLM's --api-key): put it in a variable and pass --token-env NAME"
    status_hints = {404: "check that the URL points at a vLLM server"}

    # -- public calls -------------------------------------------------------------------------

    def server_info(self) -> ServerInfo:
        """The pool (/metrics cache_config_info), the window (/v1/models) and the version (/version)."""
        answer = self._get(METRICS_PATH)
        self._raise_for_status(answer, METRICS_PATH)
        pools, metrics = pools_from_metrics(answer.body.decode("utf-8", "replace"), f"{self.url}{METRICS_PATH}")
        notes: list[str] = []
        served = self.served_context()
        if served is None:
            notes.append(f"{MODELS_PATH}: no model states max_model_len")
        version = None
        try:
            version = self._version()
        except EndpointError as exc:
            notes.append(f"{VERSION_PATH}: {exc.message}")
        return ServerInfo(
            url=self.url,
            version=version,
            max_total_num_tokens=min(pools),
            max_req_input_len=served,  # prompts of max_model_len tokens or more are refused (serving.py)
            dp_token_capacities=tuple(pools) if len(pools) > 1 else (),
            swa_token_capacities=(),
            context_length_arg=None,
            served_context_len=served,
            resolved_args={},
            launch_command=None,
            endpoint=f"{METRICS_PATH} ({CACHE_INFO})",
            metrics=metrics,
            redirected_to=display_url(answer.url) if answer.redirected else None,
            served_context_source=MODELS_PATH if served is not None else None,
            notes=tuple(notes),
        )

    def served_context(self) -> int | None:
        """/v1/models' max_model_len (the base model's; LoRA adapters list none)."""
        answer = self._get(MODELS_PATH)
        self._raise_for_status(answer, MODELS_PATH)
        payload = self._json(answer, MODELS_PATH)
        data = payload.get("data") if isinstance(payload, dict) else None
        if not isinstance(data, list):
            raise EndpointError(f"{self.url}{MODELS_PATH}: the answer has no model list ('data')")
        for card in data:
            raw = card.get("max_model_len") if isinstance(card, dict) else None
            length = _count(raw)
            if raw is not None and length is None:
                raise EndpointError(f"{self.url}{MODELS_PATH}: max_model_len is {raw!r}, not a token count")
            if length:
                return length
        return None

    def metrics(self) -> dict[str, float]:
        """The cache config's figures (smallest over engines); EndpointError when /metrics has none."""
        answer = self._get(METRICS_PATH)
        self._raise_for_status(answer, METRICS_PATH)
        return pools_from_metrics(answer.body.decode("utf-8", "replace"), f"{self.url}{METRICS_PATH}")[1]

    def router_workers(self) -> tuple[list[tuple[str, str | None]], int]:
        """vLLM's server is never a router (its answers raise no RouterAnswer): nothing to list."""
        raise EndpointError(f"{self.url}: a vLLM server is not a router; it has no workers to list")

    def _version(self) -> str | None:
        answer = self._get(VERSION_PATH)
        self._raise_for_status(answer, VERSION_PATH)
        payload = self._json(answer, VERSION_PATH)
        version = payload.get("version") if isinstance(payload, dict) else None
        return version[:64] if isinstance(version, str) and version else None

    # -- answers ---------------------------------------------------------------------------------

    def _json(self, answer: Answer, path: str) -> Any:
        try:
            return parse_json(answer.body)
        except JsonRejected as exc:
            raise EndpointError(f"{self.url}{path}: the answer is not readable JSON: {self._redact(str(exc))}",
                                hint="check that the URL points at a vLLM server") from exc
