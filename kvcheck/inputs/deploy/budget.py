"""A budget on what expanding the deployment files may produce, proportional to the files' size.

A shell variable that doubles itself (`A=$A$A` thirty times), an array that triples itself, a chain of
Kubernetes `$(VAR)` references and a ConfigMap referenced by thousands of containers all turn a few
hundred bytes into gigabytes. Every expansion kvcheck performs on deployment files (shell variables and
arrays, `"$@"`, `$(VAR)`, compose's string commands, `envFrom` / `configMapKeyRef` entries, a script's
exported variables handed to each command) spends from one budget per read: the characters it produces
plus the entries it copies. The budget is `FACTOR` times the characters of every input read together,
plus `FLOOR`; past it, reading stops with an input error at the line being expanded (exit 2). Memory and
time are then linear in the input's size, whatever the files do.
"""

from __future__ import annotations

import contextvars
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

# A launch script expands to about its own size (a variable or an array named once or twice); a
# ConfigMap of flags is copied into each container that reads it. 16 times the input is far above
# what real files reach and keeps the worst case linear: 1 MiB of files, at most 17 Mi characters.
FACTOR = 16
FLOOR = 1 << 20  # characters: what any small file may expand to (a 1 KB file: 1 Mi characters)
# What a copy costs beside its text: a word copied from an array or "$@" (an object with two lists), a
# variable copied into an environment (a dict slot; the ConfigMap's values themselves are built once per
# read and shared). A platform's Helm stream of 200 containers each reading a 500-key ConfigMap costs
# 0.8 Mi of its 2.1 Mi; 300 containers reading a 20,000-key one would cost 48 Mi.
ENTRY_COST = 64
VARIABLE_COST = 8


class ExpansionBudgetExceeded(Exception):
    """The expansions produced more than the budget allows; the caller knows the place and reports it."""


@dataclass
class ExpansionBudget:
    """Characters the expansions of one read may still produce."""

    input_chars: int
    spent: int = 0
    # what the read builds once and every container shares (a ConfigMap's variables): copying a dict slot
    # per container is what VARIABLE_COST counts, not building the same values again
    shared: dict[Any, Any] = field(default_factory=dict)

    @property
    def limit(self) -> int:
        return FACTOR * self.input_chars + FLOOR

    def spend(self, chars: int) -> None:
        self.spent += chars
        if self.spent > self.limit:
            raise ExpansionBudgetExceeded(
                f"expanding the variables here produces more than {self.limit:,} characters ({FACTOR} times "
                f"the input's {self.input_chars:,}, plus {FLOOR:,}): a variable, array or $(VAR) chain that "
                "multiplies itself is not a launch line kvcheck reads"
            )


_CURRENT: contextvars.ContextVar[ExpansionBudget | None] = contextvars.ContextVar("kvcheck_expansion_budget",
                                                                                     default=None)


@contextmanager
def expansion_budget(input_chars: int) -> Iterator[ExpansionBudget]:
    """One budget for every expansion made inside the block (a whole read of deployment files)."""
    budget = ExpansionBudget(input_chars)
    token = _CURRENT.set(budget)
    try:
        yield budget
    finally:
        _CURRENT.reset(token)


@contextmanager
def ensure_budget(input_chars: int) -> Iterator[ExpansionBudget]:
    """The budget in force, else one for `input_chars` for this block: no expansion is ever unbounded."""
    current = _CURRENT.get()
    if current is not None:
        yield current
        return
    with expansion_budget(input_chars) as budget:
        yield budget


def current() -> ExpansionBudget | None:
    """The budget in force, if any."""
    return _CURRENT.get()


def spend(chars: int) -> None:
    """Spend from the budget in force; ExpansionBudgetExceeded past it. Without one (a caller that did
    not open a budget), nothing is counted: every entry point below opens one with `ensure_budget`."""
    budget = _CURRENT.get()
    if budget is not None:
        budget.spend(chars)
