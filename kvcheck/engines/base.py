"""The Engine interface: everything kvcheck needs to know about one serving engine, behind one value.

Commands, inputs, backends, launchers and the planner ask the registry (`kvcheck.engines.get_engine`)
for a role's engine (`RoleTarget.engine`) and call these methods; they never import an engine's own
modules (`tools/import_graph.py` enforces it). Adding an engine (vLLM, say) means a new sub-package
implementing this class and one registry entry (or an entry point in the `kvcheck.engines` group),
never an edit to a command. The result types an engine returns are defined here, engine-neutral.
See CONTRIBUTING.md, "Adding an engine".

The class is laid out in sections, one per caller family (arguments, launch, boot log, server,
sizing, rules); each section's types sit just above it.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar

if TYPE_CHECKING:
    from kvcheck.engines.argv import ParsedArgv
    from kvcheck.engines.flags import Catalogue
    from kvcheck.model import RoleTarget


# -- arguments: types ----------------------------------------------------------------------------
# (ParsedArgv and Catalogue live in kvcheck.engines.argv and kvcheck.engines.flags: argparse's rules
# are the same for every engine built on it.)


# -- launch: types -------------------------------------------------------------------------------


# -- boot log: types -----------------------------------------------------------------------------


# -- server: types -------------------------------------------------------------------------------


# -- sizing: types -------------------------------------------------------------------------------


# -- rules: types --------------------------------------------------------------------------------


class Engine(ABC):
    """One serving engine's knowledge: its flags per release, launch, admission, logs, sizing."""

    name: ClassVar[str]  # the registry name (`engine.name` in a manifest)
    label: ClassVar[str]  # how messages name it ("SGLang")
    default_command: ClassVar[tuple[str, ...]]

    # -- arguments --------------------------------------------------------------------------------

    @abstractmethod
    def catalogue(self, version: str) -> tuple[Catalogue, str | None]:
        """The release's flag catalogue, plus a note when another release's catalogue stands in."""

    @abstractmethod
    def catalogue_versions(self) -> list[str]:
        """The releases that ship a flag catalogue, oldest first."""

    @abstractmethod
    def parse_argv(self, argv: Sequence[str], *, version: str | None, start: int = 0) -> ParsedArgv:
        """An engine command line's arguments (argv[start:]), canonicalised against the release's catalogue.

        `version` None reads it with the newest release's flags.
        """

    @abstractmethod
    def launch_index(self, argv: Sequence[str]) -> int | None:
        """Where the server arguments start on a command line that launches this engine, else None."""

    @abstractmethod
    def enumerated_fields(self, args: Mapping[str, Any], version: str | None) -> frozenset[str]:
        """The args whose value is one of the flag's declared choices: public words, never a secret."""

    @abstractmethod
    def role_mode(self, args: Mapping[str, Any]) -> str | None:
        """The disaggregated role the args give a server (prefill, decode), None for a unified one."""

    @abstractmethod
    def max_input_len(self, context_len: int, pool_tokens: int | None) -> int:
        """The longest prompt the engine admits, in tokens, for a context length and pool."""

    # -- launch -----------------------------------------------------------------------------------

    # -- boot log ---------------------------------------------------------------------------------

    @abstractmethod
    def log_reader(self) -> Any:
        """A fresh incremental reader of the engine's startup log (feed lines, read a summary)."""

    # -- server -----------------------------------------------------------------------------------

    # -- sizing -----------------------------------------------------------------------------------

    @abstractmethod
    def estimate(
        self,
        target: RoleTarget,
        *,
        profiles: Any = None,
        offline: bool | None = None,
    ) -> Any:
        """The role's predicted pool (the engine's own sizing, re-derived); EstimateError if it cannot.

        `profiles` is a GPU profile set (`kvcheck.gpus`); None reads the shipped profiles.
        """

    # -- rules ------------------------------------------------------------------------------------
