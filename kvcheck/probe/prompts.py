"""Synthetic owners of probe prompts: each carries a random text marker and a token-id pattern.

Every probe request belongs to one owner (a boundary check, or a tenant of the isolation check). An
answer that carries another owner's marker or pattern is content that crossed between clients.
Patterns are random ids well inside every common vocabulary (from --token-id upwards), long enough
that a model producing one by chance is out of the question (PATTERN_LEN ids out of PATTERN_SPAN).
"""

from __future__ import annotations

import random
from collections.abc import Sequence

from kvcheck.model import ProbeOwner
from kvcheck.probe.options import PATTERN_SPAN

PATTERN_LEN = 8  # ids per pattern; a foreign match needs all of them in a row


Owner = ProbeOwner  # one synthetic client of the isolation check


def make_owners(names: Sequence[str], *, token_id: int, rng: random.Random) -> dict[str, Owner]:
    """Owners with distinct markers and patterns (no pattern shares its first id with another)."""
    owners: dict[str, Owner] = {}
    used_markers: set[str] = set()
    used_heads: set[int] = set()
    for name in names:
        marker = f"TENANT-{rng.getrandbits(32):08x}"
        while marker in used_markers:
            marker = f"TENANT-{rng.getrandbits(32):08x}"
        used_markers.add(marker)
        while True:
            pattern = tuple(token_id + 1 + rng.randrange(PATTERN_SPAN) for _ in range(PATTERN_LEN))
            if pattern[0] not in used_heads and len(set(pattern)) == PATTERN_LEN:
                break
        used_heads.add(pattern[0])
        owners[name] = Owner(name=name, marker=marker, pattern=pattern)
    return owners


def token_prompt(owner: Owner, length_tokens: int, *, token_id: int) -> list[int]:
    """Exactly `length_tokens` ids: the owner's pattern at both ends (as room allows), filler between."""
    pattern = list(owner.pattern)
    if length_tokens <= len(pattern):
        return pattern[:length_tokens]
    if length_tokens < 2 * len(pattern):
        return pattern + [token_id] * (length_tokens - len(pattern))
    return pattern + [token_id] * (length_tokens - 2 * len(pattern)) + pattern


def text_prompt(owner: Owner) -> str:
    """A prompt a real model answers by repeating the owner's marker, and a double can echo."""
    return f"Repeat exactly, and nothing else: {owner.marker}\n"


def contains_run(haystack: Sequence[int], needle: Sequence[int]) -> bool:
    """True when `needle` occurs in `haystack` as consecutive items."""
    n = len(needle)
    if n == 0 or len(haystack) < n:
        return False
    first = needle[0]
    needle_t = tuple(needle)
    for index in range(len(haystack) - n + 1):
        if haystack[index] == first and tuple(haystack[index : index + n]) == needle_t:
            return True
    return False
