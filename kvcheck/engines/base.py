"""The Engine interface: everything kvcheck needs to know about one serving engine, behind one value.

Commands and backends ask the registry (`kvcheck.engines.get_engine`) for the manifest's engine and
call these methods; adding an engine (vLLM, say) means a new sub-package implementing this class and
one registry entry, never an edit to a command. See CONTRIBUTING.md, "Adding an engine".
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar

if TYPE_CHECKING:
    from kvcheck.model import RoleTarget


class Engine(ABC):
    """One serving engine's knowledge: its flags per release, launch, admission, logs, sizing."""

    name: ClassVar[str]
    default_command: ClassVar[tuple[str, ...]]

    @abstractmethod
    def catalogue(self, version: str) -> tuple[Any, str | None]:
        """The release's flag catalogue, plus a note when another release's catalogue stands in."""

    @abstractmethod
    def parse_argv(self, argv: Sequence[str], *, version: str | None) -> Any:
        """An engine command line's arguments, canonicalised against the release's catalogue.

        `version` None reads it with the newest release's flags.
        """

    @abstractmethod
    def enumerated_fields(self, args: Mapping[str, Any], version: str | None) -> frozenset[str]:
        """The args whose value is one of the flag's declared choices: public words, never a secret."""

    @abstractmethod
    def role_mode(self, args: Mapping[str, Any]) -> str | None:
        """The disaggregated role the args give a server (prefill, decode), None for a unified one."""

    @abstractmethod
    def max_input_len(self, context_len: int, pool_tokens: int | None) -> int:
        """The longest prompt the engine admits, in tokens, for a context length and pool."""

    @abstractmethod
    def log_reader(self) -> Any:
        """A fresh incremental reader of the engine's startup log (feed lines, read a summary)."""

    @abstractmethod
    def estimate(
        self,
        target: RoleTarget,
        *,
        profiles: Any = None,
        offline: bool | None = None,
    ) -> Any:
        """The role's predicted pool (the engine's own sizing, re-derived); EstimateError if it cannot.

        `profiles` is the engine's own GPU profile set (its type belongs to the engine, so the
        interface leaves it open); None reads the shipped profiles.
        """
