"""Synthetic owners of probe prompts: each carries a random text marker and a token-id pattern.

Every probe request belongs to one owner (a boundary check, or a tenant of the isolation check). An
answer that carries another owner's marker or pattern is content that crossed between clients.
Patterns are random ids drawn from those proven inside the model's vocabulary (vocab.py: ids the
deployment's tokenizer emits, or ids below a stated vocabulary size), long enough that a model
producing one by chance is out of the question (PATTERN_LEN distinct ids out of at least 32).
"""

from __future__ import annotations

import random
from collections.abc import Sequence

from kvcheck.model import ProbeOwner

PATTERN_LEN = 8  # ids per pattern; a foreign match needs all of them in a row


Owner = ProbeOwner  # one synthetic client of the isolation check


def make_owners(names: Sequence[str], *, candidates: Sequence[int], rng: random.Random) -> dict[str, Owner]:
    """Owners with distinct markers and patterns of PATTERN_LEN distinct candidate ids.

    No two patterns share their first id while the candidates allow it (as many candidates as owners);
    every pattern differs from every other in any case.
    """
    pool = sorted(set(candidates))
    if len(pool) < PATTERN_LEN:
        raise ValueError(f"{len(pool)} candidate ids cannot make patterns of {PATTERN_LEN} distinct ids")
    owners: dict[str, Owner] = {}
    used_markers: set[str] = set()
    heads = list(pool)
    rng.shuffle(heads)
    used_patterns: set[tuple[int, ...]] = set()
    for index, name in enumerate(names):
        marker = f"TENANT-{rng.getrandbits(32):08x}"
        while marker in used_markers:
            marker = f"TENANT-{rng.getrandbits(32):08x}"
        used_markers.add(marker)
        head = heads[index % len(heads)]
        rest = [c for c in pool if c != head]
        pattern = (head, *rng.sample(rest, PATTERN_LEN - 1))
        while pattern in used_patterns:  # 31 of 32+ ids: a repeat is next to impossible, and never endless
            pattern = (head, *rng.sample(rest, PATTERN_LEN - 1))
        used_patterns.add(pattern)
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


def counted_text_prompt(unit: str, units: int) -> str:
    """A text prompt of `units` repetitions of a word the tokenizer counts as one token each."""
    return unit * units


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
