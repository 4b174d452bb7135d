"""The values the log reader produces: rank tags, events, per-rank figures, the summary."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from kvcheck.engines.sglang.logs.patterns import TAG_RE
from kvcheck.engines.sglang.serving import max_input_len

PHASES = ("starting", "loading_weights", "sizing_pool", "capturing_graphs", "ready")
FAILED = "failed"
PHASE_ORDER = {name: i for i, name in enumerate(PHASES)}

# Traceback and error lines kept for quoting: enough for one traceback, constant memory.
MAX_ERROR_LINES = 40
# Warnings kept in the summary (one per rank is normal; a restart loop must not grow memory).
MAX_WARNINGS = 256
# Longest line the reader looks at; the rest of a longer line is dropped (binary junk, runaway prints).
MAX_LINE_CHARS = 1 << 20

_TAG_FIELDS = {"DP": "dp", "PP": "pp", "ATTN_CP": "attn_cp", "MOE_DP": "moe_dp", "TP": "tp", "EP": "ep"}
_TAG_ORDER = ("dp", "pp", "attn_cp", "moe_dp", "tp", "ep")
_TAG_NAMES = {v: k for k, v in _TAG_FIELDS.items()}


@dataclass(frozen=True)
class RankTag:
    """The rank tags of a scheduler's log prefix; None where SGLang printed no such tag.

    SGLang prints a tag only when that parallel width is above 1, so a TP1 server's lines carry
    none (`str(tag) == ""`). Under attention DP the DP tag is the attention-DP rank and the TP tag the
    global TP rank (`DP3 TP3 EP3`). Tags this reader does not know are kept in `extra`; so is
    `GPU`, the CUDA device that the 2024 releases' `[gpu=N]` prefix names instead of a TP rank.
    """

    dp: int | None = None
    pp: int | None = None
    attn_cp: int | None = None
    moe_dp: int | None = None
    tp: int | None = None
    ep: int | None = None
    extra: tuple[tuple[str, int], ...] = ()

    def __str__(self) -> str:
        parts = [
            f"{_TAG_NAMES[name]}{getattr(self, name)}"
            for name in _TAG_ORDER
            if getattr(self, name) is not None
        ]
        parts.extend(f"{name}{rank}" for name, rank in self.extra)
        return " ".join(parts)

    @property
    def sort_key(self) -> tuple[int, ...]:
        known = tuple(-1 if getattr(self, name) is None else getattr(self, name) for name in _TAG_ORDER)
        return known + tuple(rank for _, rank in self.extra)

    @classmethod
    def parse(cls, text: str) -> RankTag:
        """`" DP0 TP3"` -> RankTag(dp=0, tp=3); unknown tag names go to `extra`."""
        values: dict[str, int] = {}
        extra: list[tuple[str, int]] = []
        for name, rank in TAG_RE.findall(text):
            attr = _TAG_FIELDS.get(name)
            if attr is None:
                extra.append((name, int(rank)))
            else:
                values[attr] = int(rank)
        return cls(**values, extra=tuple(extra))


UNTAGGED = RankTag()


@dataclass(frozen=True)
class LogEvent:
    """One recognised log line. `rank` is None for lines without SGLang's prefix (launcher prints,
    bare quotes); `line_no` is 1-based; `values` holds the parsed figures (units in the key names)."""

    kind: str
    rank: RankTag | None
    line_no: int
    text: str
    values: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class RankFigures:
    """What the log says about one scheduler rank's KV pool (token counts are per rank).

    `final_tokens` is the `max_total_num_tokens=` of the final line (what the server serves);
    `allocated_tokens` the `#tokens` of the rank's first target allocation line, which post-capture
    sizing can still shrink (`upper_bound`) and which for hybrid sliding-window models of some
    releases counts the SWA pool, not the full-attention pool (`full_layer_tokens`).
    """

    rank: RankTag
    final_tokens: int | None = None
    allocated_tokens: int | None = None
    upper_bound: bool = False
    post_capture_tokens: int | None = None
    full_layer_tokens: int | None = None
    swa_tokens: int | None = None
    draft_tokens: int | None = None
    context_len: int | None = None
    max_running_requests: int | None = None
    chunked_prefill_size: int | None = None
    max_prefill_tokens: int | None = None
    available_gpu_mem_gib: float | None = None
    kv_dtype: str | None = None
    kv_gib: float | None = None
    k_gib: float | None = None
    v_gib: float | None = None
    weights_gib: float | None = None
    avail_after_weights_gib: float | None = None
    pool_end_avail_gib: float | None = None
    mamba_cache_size: int | None = None
    context_warning_tokens: int | None = None
    final_line: int | None = None
    allocation_line: int | None = None
    figure_line: int | None = None

    @property
    def first_allocation_only(self) -> bool:
        """True when the figure comes from a sizing line, not the final or post-capture line."""
        return self.final_tokens is None and self.post_capture_tokens is None and self.best_tokens is not None

    @property
    def figure_source(self) -> str | None:
        """Which line the pool figure comes from: final, post_capture, swa_pool, allocation, upper_bound."""
        if self.final_tokens is not None:
            return "final"
        if self.post_capture_tokens is not None:
            return "post_capture"
        if self.full_layer_tokens is not None:
            return "swa_pool"
        if self.allocated_tokens is not None:
            return "upper_bound" if self.upper_bound else "allocation"
        return None

    @property
    def best_tokens(self) -> int | None:
        """The rank's pool for one full-length request: final line, else the best sizing line."""
        for value in (
            self.final_tokens,
            self.post_capture_tokens,
            self.full_layer_tokens,
            self.allocated_tokens,
        ):
            if value is not None:
                return value
        return None

    @property
    def max_req_input_len(self) -> int | None:
        """The longest prompt the scheduler admits, derived as SGLang does (tp_worker.py:568-575)."""
        tokens = self.best_tokens
        if tokens is None or self.context_len is None:
            return None
        return max_input_len(self.context_len, tokens)


@dataclass(frozen=True)
class LogSummary:
    """Everything the log established, per rank, plus what it lacks (`missing`, in words)."""

    ranks: tuple[RankFigures, ...]
    server_args: Mapping[str, Any] | None
    server_args_line: int | None
    command_line: tuple[str, ...] | None
    version: str | None
    warnings: tuple[LogEvent, ...]
    errors: tuple[str, ...]
    ready: bool
    phase: str
    missing: tuple[str, ...]
    lines: int
    startup_lines: int
    boots: int = 1
    failure: str | None = None
    damaged: tuple[str, ...] = ()  # pool figures no server can hold ("line N: ..."): the log is not judged

    @property
    def is_sglang(self) -> bool:
        """False when not one SGLang startup line was recognised (wrong file, another engine)."""
        return self.startup_lines > 0

    def pool_tokens(self) -> int | None:
        """The pool one request can use: the minimum over ranks (TP, PP stages, DP ranks) with a figure."""
        figures = [rank.best_tokens for rank in self.ranks if rank.best_tokens is not None]
        return min(figures) if figures else None
