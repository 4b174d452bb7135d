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
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

if TYPE_CHECKING:
    import ssl

    import httpx

    from kvcheck.engines.argv import ParsedArgv
    from kvcheck.engines.flags import Catalogue
    from kvcheck.model import RoleTarget


# -- arguments: types ----------------------------------------------------------------------------
# (ParsedArgv and Catalogue live in kvcheck.engines.argv and kvcheck.engines.flags: argparse's rules
# are the same for every engine built on it.)


# -- launch: types -------------------------------------------------------------------------------


# -- boot log: types -----------------------------------------------------------------------------


# -- server: types -------------------------------------------------------------------------------


@dataclass(frozen=True)
class ServerInfo:
    """What one server says about its pool, its limits and its resolved arguments (tokens).

    Engine-neutral: each engine's client fills it from its own endpoints (SGLang: /server_info).
    """

    url: str  # base URL as displayed (no credentials)
    version: str | None
    max_total_num_tokens: int | None  # first scheduler's logical pool, tokens
    max_req_input_len: int | None  # prompts of this many tokens or more are refused
    dp_token_capacities: tuple[int, ...]  # internal_states[i].memory_usage.token_capacity, one per DP rank
    swa_token_capacities: tuple[int, ...]  # sliding-window pools (hybrid SWA models), one per DP rank
    context_length_arg: int | None  # the user's --context-length (None when unset), not what is served
    served_context_len: int | None  # /v1/models max_model_len, else the sglang:context_len gauge
    resolved_args: Mapping[str, Any]  # every ServerArgs field in the payload, secrets redacted
    launch_command: str | None  # secrets redacted
    endpoint: str  # which info endpoint answered: /server_info or /get_server_info
    metrics: Mapping[str, float] = field(
        default_factory=dict
    )  # constant gauges (min over ranks); {} without --enable-metrics
    redirected_to: str | None = None  # final URL when the info request was redirected
    served_context_source: str | None = (
        None  # "/v1/models" or "sglang:context_len": where served_context_len is from
    )
    notes: tuple[str, ...] = ()  # optional figures that could not be read, and why

    @property
    def pool_tokens(self) -> int | None:
        """The pool one request can use: the smallest figure the server states (any DP rank's
        token_capacity or the server-wide max_total_num_tokens), so a disagreement fails closed."""
        figures = [*self.dp_token_capacities]
        if self.max_total_num_tokens is not None:
            figures.append(self.max_total_num_tokens)
        return min(figures) if figures else None


class ServerClient(Protocol):
    """A strict, bounded HTTP client for one running server of the engine (thread-confined)."""

    url: str  # the base URL as displayed (no credentials)

    def __enter__(self) -> ServerClient: ...

    def __exit__(self, *exc: object) -> None: ...

    def close(self) -> None: ...

    def server_info(self) -> ServerInfo:
        """The server's pool, limits and resolved arguments; EndpointError when it cannot say."""
        ...

    def served_context(self) -> int | None:
        """The context length the server enforces, tokens, when it states one."""
        ...

    def metrics(self) -> dict[str, float]:
        """The server's constant gauges ({} when it exposes none)."""
        ...


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

    # The published image whose tag release_from_image reads (messages name it); None when there is none.
    image_repository: ClassVar[str | None] = None

    def release_from_image(self, image: str) -> str | None:
        """The release a container image's tag names (deployment files rarely state it elsewhere), else None."""
        return None

    def release_from_container(self, name: str) -> str | None:
        """The release a Slurm container name states (srt-slurm's model.container), else None."""
        return None

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

    @abstractmethod
    def server_client(
        self,
        base_url: str,
        *,
        timeout_s: float = 10.0,
        verify: bool | str | ssl.SSLContext = True,
        token: str | None = None,
        retries: int = 2,
        backoff_s: float = 0.5,
        transport: httpx.BaseTransport | None = None,
        sleep: Callable[[float], None] | None = None,
    ) -> ServerClient:
        """A client for one running server of this engine (`sleep` None: time.sleep, for backoff)."""

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
