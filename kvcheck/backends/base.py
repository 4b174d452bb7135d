"""The Backend interface: obtain every role's pool; failures come back as findings, never a guess."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import ClassVar

from kvcheck.model import PoolMeasurement, RoleTarget


class Backend(ABC):
    """Obtains pools for a set of roles; failures come back as findings, never as a guessed value."""

    mode: ClassVar[str]
    # Whether KV101's fit hints must stay on local model configs (True) or may fetch them (None).
    offline_hints: ClassVar[bool | None] = None

    def check_targets(self, targets: Sequence[RoleTarget], source: str) -> None:
        """Refuse, before any work starts, targets this backend cannot handle (raise an InputError).

        Every target is acceptable unless a backend says otherwise.
        """
        return None

    @abstractmethod
    def measure(self, targets: Sequence[RoleTarget]) -> list[PoolMeasurement]:
        """One measurement per target, in the targets' order."""
