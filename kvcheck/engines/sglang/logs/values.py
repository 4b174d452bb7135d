"""The values SGLang's log reader produces: the engine-neutral ones of kvcheck.engines.base, read SGLang's way.

The tags of SGLang's log prefix (`DP0 TP3`) and its admission rule (max_req_input_len) live here; the
phases, events, per-rank figures and the summary are the neutral types every engine's reader returns.
"""

from __future__ import annotations

from dataclasses import dataclass

from kvcheck.engines.base import LogSummary, RankFigures, RankTag
from kvcheck.engines.sglang.logs.patterns import TAG_RE
from kvcheck.engines.sglang.serving import max_input_len

# Traceback and error lines kept for quoting: enough for one traceback, constant memory.
MAX_ERROR_LINES = 40
# Warnings kept in the summary (one per rank is normal; a restart loop must not grow memory).
MAX_WARNINGS = 256
# Longest line the reader looks at; the rest of a longer line is dropped (binary junk, runaway prints).
MAX_LINE_CHARS = 1 << 20

# SGLang's tag words and the RankTag field each fills; other words go to RankTag.extra.
_TAG_FIELDS = {"DP": "dp", "PP": "pp", "ATTN_CP": "attn_cp", "MOE_DP": "moe_dp", "TP": "tp", "EP": "ep"}


def parse_rank_tag(text: str) -> RankTag:
    """`" DP0 TP3"` -> RankTag(dp=0, tp=3); unknown tag names go to `extra`."""
    values: dict[str, int] = {}
    extra: list[tuple[str, int]] = []
    for name, rank in TAG_RE.findall(text):
        attr = _TAG_FIELDS.get(name)
        if attr is None:
            extra.append((name, int(rank)))
        else:
            values[attr] = int(rank)
    return RankTag(**values, extra=tuple(extra))


UNTAGGED = RankTag()


@dataclass(frozen=True)
class SglangRankFigures(RankFigures):
    """One rank's figures, with the admission bound SGLang's scheduler derives from them."""

    @property
    def max_req_input_len(self) -> int | None:
        """The longest prompt the scheduler admits, derived as SGLang does (tp_worker.py:568-575)."""
        tokens = self.best_tokens
        if tokens is None or self.context_len is None:
            return None
        return max_input_len(self.context_len, tokens)


@dataclass(frozen=True)
class SglangLogSummary(LogSummary):
    """The summary of an SGLang log, in SGLang's words."""

    @property
    def is_sglang(self) -> bool:
        """False when not one SGLang startup line was recognised (wrong file, another engine)."""
        return self.recognised
