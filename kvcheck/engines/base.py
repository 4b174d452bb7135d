"""The Engine interface: everything kvcheck needs to know about one serving engine, behind one value.

Commands, inputs, backends, launchers and the planner ask the registry (`kvcheck.engines.get_engine`)
for a role's engine (`RoleTarget.engine`) and call these methods; they never import an engine's own
modules (`tools/import_graph.py` enforces it). Adding an engine (vLLM, say) means a new sub-package
implementing this class and one registry entry (or an entry point in the `kvcheck.engines` group),
never an edit to a command. The result types an engine returns are defined here, engine-neutral.
See CONTRIBUTING.md, "Adding an engine".

The class is laid out in sections, one per caller family (arguments, device, launch, boot log,
server, sizing, rules); each section's types sit just above it.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

if TYPE_CHECKING:
    import ssl
    from pathlib import Path

    import httpx

    from kvcheck.engines.argv import ParsedArgv
    from kvcheck.engines.flags import Catalogue
    from kvcheck.gpus import GpuProfile, GpuProfiles
    from kvcheck.hostmem import HostMemory
    from kvcheck.io.streams import BinaryReadable
    from kvcheck.model import Finding, RolePlan, RoleTarget
    from kvcheck.policy.registry import Rule


# -- arguments: types ----------------------------------------------------------------------------
# (ParsedArgv and Catalogue live in kvcheck.engines.argv and kvcheck.engines.flags: argparse's rules
# are the same for every engine built on it.)


# -- launch: types -------------------------------------------------------------------------------


@dataclass(frozen=True)
class NodeLaunch:
    """One node's place in a role that spans several hosts, for the engine to write as its flags.

    A field left None is not written: the role's args already say it, or the launcher supplies it
    elsewhere (a task's shell that expands the rank). `node_rank` is text so a launcher can pass a
    variable the node expands itself ("$(LWS_WORKER_INDEX)").
    """

    nnodes: int | None = None  # hosts in the role
    dist_init_addr: str | None = None  # host:port where node 0 meets the others
    node_rank: str | None = None  # this node's index, 0 on the head


# -- boot log: types -----------------------------------------------------------------------------
# What callers read of an engine's startup log. An engine's reader parses its own line formats and fills
# these; the names of the phases and of the parallel ranks are the same for every engine.

PHASES = ("starting", "loading_weights", "sizing_pool", "capturing_graphs", "ready")
FAILED = "failed"
PHASE_ORDER = {name: i for i, name in enumerate(PHASES)}

# Rank tags in the order they render ("DP1 PP2 TP5"), with the word each renders as.
_TAG_ORDER = ("dp", "pp", "attn_cp", "moe_dp", "tp", "ep")
_TAG_NAMES = {"dp": "DP", "pp": "PP", "attn_cp": "ATTN_CP", "moe_dp": "MOE_DP", "tp": "TP", "ep": "EP"}


@dataclass(frozen=True)
class RankTag:
    """Which scheduler rank a log line comes from; None where the engine printed no such tag.

    Engines print a tag only when that parallel width is above 1, so a TP1 server's lines carry
    none (`str(tag) == ""`). Under attention DP the DP tag is the attention-DP rank and the TP tag the
    global TP rank (`DP3 TP3 EP3`). Tags with no field here are kept in `extra`, in log order (`GPU`,
    the CUDA device some releases name instead of a TP rank). Parsing a tag is the engine reader's.
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


@dataclass(frozen=True)
class LogEvent:
    """One recognised log line. `rank` is None for lines without the engine's prefix (launcher prints,
    bare quotes); `line_no` is 1-based; `values` holds the parsed figures (units in the key names)."""

    kind: str
    rank: RankTag | None
    line_no: int
    text: str
    values: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class RankFigures:
    """What the log says about one scheduler rank's KV pool (token counts are per rank).

    `final_tokens` is the figure of the line that states what the server serves (SGLang:
    `max_total_num_tokens=`); `allocated_tokens` that of the rank's first target allocation line,
    which post-capture sizing can still shrink (`upper_bound`) and which for hybrid sliding-window
    models of some releases counts the SWA pool, not the full-attention pool (`full_layer_tokens`).
    The longest prompt a rank admits is the engine's rule: `Engine.max_input_len(context_len,
    best_tokens, args, version)`.
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
    weights_note: str | None = None  # why weights_gib is not the figure as printed (a negative one, clamped)
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


# Why a pool figure printed by a boot that then failed is no serving pool: `logs` (KV316) and measure mode
# (KV301) judge such a boot alike and say so in these words.
FAILED_AFTER_SIZING = "the engine failed after sizing its pool"


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
    failed_after_ready: bool = False  # the failure came while serving, after the engine said it was ready
    damaged: tuple[str, ...] = ()  # pool figures no server can hold ("line N: ..."): the log is not judged

    @property
    def failed_before_ready(self) -> bool:
        """The engine failed during its boot (sizing, warm-up), not while serving: a pool figure it printed
        is not a serving pool (KV316 in `logs`, KV301 in measure mode, both in FAILED_AFTER_SIZING's words)."""
        return self.failure is not None and not self.failed_after_ready

    def reported_pool(self) -> tuple[int, int | None] | None:
        """The pool figure the log printed (the smallest rank's, tokens) and its line; None when none."""
        figured = [rank for rank in self.ranks if rank.best_tokens is not None]
        if not figured:
            return None
        rank = min(figured, key=lambda r: r.best_tokens or 0)
        return rank.best_tokens or 0, rank.figure_line

    @property
    def recognised(self) -> bool:
        """False when not one of the engine's startup lines was recognised (wrong file, another engine)."""
        return self.startup_lines > 0

    def pool_tokens(self) -> int | None:
        """The pool one request can use: the minimum over ranks (TP, PP stages, DP ranks) with a figure."""
        figures = [rank.best_tokens for rank in self.ranks if rank.best_tokens is not None]
        return min(figures) if figures else None

    @property
    def allocation_is_final(self) -> bool:
        """A rank printed both its allocation and its final line, and they agree (no post-capture resizing):
        the sizing lines of ranks that print no final line (attention-DP ranks other than DP0) are final too."""
        return any(r.final_tokens is not None and r.allocated_tokens == r.final_tokens and not r.upper_bound
                   for r in self.ranks)

    def is_final(self, rank: RankFigures) -> bool:
        """Whether `rank`'s figure is final: its own final line, or a sizing line where allocation_is_final."""
        if rank.final_tokens is not None:
            return True
        return (self.allocation_is_final and rank.best_tokens is not None and not rank.upper_bound
                and rank.post_capture_tokens is None)


class BootLogReader(Protocol):
    """An incremental reader of one engine's startup log, in constant memory (not thread-safe).

    `feed()` one line at a time while an engine boots, or `read_stream()` a whole log; `summary()`
    at any point.
    """

    @property
    def phase(self) -> str:
        """One of PHASES, or FAILED."""
        ...

    @property
    def lines(self) -> int:
        """Lines read so far."""
        ...

    @property
    def parsed_lines(self) -> int:
        """Lines that went through the line parser; read_stream() may skip the rest (request logs)."""
        ...

    def feed(self, line: str | bytes) -> list[LogEvent]:
        """Read one raw line (with or without its newline); return the events it produced."""
        ...

    def feed_many(self, lines: Iterable[str | bytes]) -> None:
        """Read many lines, discarding the events."""
        ...

    def read_stream(self, stream: BinaryReadable) -> None:
        """Read a whole binary stream (file, pipe, gzip) to its end."""
        ...

    def summary(self) -> LogSummary:
        """What the lines read so far establish."""
        ...



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
    # the most requests a DP rank runs at once (SGLang: internal_states[].effective_max_running_requests_per_dp,
    # the smallest over ranks); None when the server does not say
    max_running_requests: int | None = None

    @property
    def pool_tokens(self) -> int | None:
        """The pool one request can use: the smallest figure the server states (any DP rank's
        token_capacity or the server-wide max_total_num_tokens), so a disagreement fails closed."""
        figures = [*self.dp_token_capacities]
        if self.max_total_num_tokens is not None:
            figures.append(self.max_total_num_tokens)
        return min(figures) if figures else None


class RouterAnswer(Exception):
    """Mixed into a client's EndpointError when the URL is a router in front of servers, not a server
    (sglang-router's /get_server_info says router_manager): the audit follows its workers instead."""

    workers_count: int | None = None


@dataclass(frozen=True)
class ProbeFrontDoor:
    """How `kvcheck probe` talks to the client-facing API of an engine's deployment (engine-neutral).

    Each engine states its own: which native generation endpoint it serves beside the OpenAI API
    (None: the OpenAI API is the only front door), where its tokenizer is asked, where a model path
    is named, and the fixes its probe findings give (`hints`, by rule code, over the probe's own).
    """

    label: str  # how messages name the front door's engine ("SGLang")
    native_endpoint: str | None  # token-id generation beside /v1/completions (SGLang: /generate)
    tokenize_path: str  # POST: {"prompt": ..., "add_special_tokens": false} -> {"tokens": ...}
    tokenize_batch: bool  # the tokenizer takes a list of prompts in one POST (else one prompt)
    model_info_paths: tuple[str, ...]  # GETs naming the model path (`model_path`, or /v1/models `root`)
    bound_from_window: bool  # the admission bound follows from the window alone (no pool figure needed)
    request_id_field: str | None = None  # the /v1/completions field that names a request (grep-able ids)
    hints: Mapping[str, str] = field(default_factory=dict)


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

    def router_workers(self) -> tuple[list[tuple[str, str | None]], int]:
        """A router's workers as (URL, role or None), bounded, and how many it lists; EndpointError when
        the list cannot be read."""
        ...


# -- sizing: types -------------------------------------------------------------------------------


@dataclass(frozen=True)
class PoolEstimate:
    """What an engine's sizing model predicts for one role (tokens, bytes, fractions of GPU memory).

    Callers read the typed fields; `details` is the engine's arithmetic, step by step, rendered
    verbatim in reports and never read by key outside the engine.
    """

    role: str
    pool_tokens: int  # the logical pool one request can use (SGLang: max_total_num_tokens)
    pool_range: tuple[int, int]  # (low, high) from the uncertain inputs
    context_len: int  # the context length the engine would serve
    max_input_tokens: int  # prompts of this many tokens or more are refused
    max_running_requests: int
    kv_bytes_per_token: float  # per rank, all layers
    mem_fraction_static: float  # the effective static-memory fraction the pool was sized with
    mem_fraction_reserved_mib: float | None  # the engine's reserve when it picked the fraction itself
    kv_dtype: str  # the resolved KV-cache dtype
    page_size: int  # tokens per KV page (the pool is a whole number of pages)
    tp_size: int
    pp_size: int
    attn_dp_size: int
    ep_size: int
    details: Mapping[str, Any] = field(default_factory=dict)
    assumptions: tuple[str, ...] = ()
    findings: tuple[Finding, ...] = ()  # the engine's own warnings about this estimate (rules in Engine.rules())
    # the engine refuses to start whatever the pool (a load path that cannot run, KV120): the range decides
    # nothing, so no "might not fit" (KV105) beside the refusal
    refused_whatever_pool: bool = False


@dataclass(frozen=True)
class SafeFraction:
    """The static-memory fraction the engine would pick itself for a role: KV205's ceiling."""

    fraction: float  # as the flag value that gives it
    reserve_mib: float | None  # what the engine keeps back for activations and graphs, MiB


# -- rules: types --------------------------------------------------------------------------------


class Engine(ABC):
    """One serving engine's knowledge: its flags per release, launch, admission, logs, sizing."""

    name: ClassVar[str]  # the registry name (`engine.name` in a manifest)
    label: ClassVar[str]  # how messages name it ("SGLang")
    ready_line: ClassVar[str] = "its ready line"  # the log line that says the server serves (hints quote it)
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

    # The flag (catalogue spelling, no dashes) that sets the window the server serves: deployment readers
    # take the roles' common value of it as the window to check.
    window_flag: ClassVar[str] = "context-length"
    # The argument (field name) that caps the requests an engine runs at once (SGLang max_running_requests,
    # vLLM max_num_seqs): KV111 reads it from the role's args where no measurement states the cap.
    running_requests_field: ClassVar[str | None] = "max_running_requests"
    # Whether one instance may span its group's pods without a node-count flag (vLLM on the Ray cluster its
    # pods form): deployment readers then count the group's pods (LeaderWorkerSet `size`) as its nodes.
    nodes_from_group: ClassVar[bool] = False

    def running_cap(self, args: Mapping[str, Any]) -> int | None:
        """The requests one pool serves at once that the role's own argument caps (`running_requests_field`, args
        keyed by field name), or None: what KV111 reads where no measurement states the cap."""
        field = self.running_requests_field
        cap = args.get(field) if field else None
        if isinstance(cap, bool) or not isinstance(cap, int) or cap <= 0:
            return None
        return cap

    def gpus_needed(self, args: Mapping[str, Any]) -> int | None:
        """The GPUs the parallel settings use on all of one instance's nodes (args keyed by field name), or None
        to leave it to the shared count (tp_size x pp_size x dp_size outside attention DP)."""
        return None

    # The published image whose tag release_from_image reads (messages name it); None when there is none.
    image_repository: ClassVar[str | None] = None
    # The command that image starts (its ENTRYPOINT), to which a container's args are appended; None when the
    # image starts no server by itself (deployment files must then state the command).
    image_entrypoint: ClassVar[tuple[str, ...] | None] = None

    def release_from_image(self, image: str) -> str | None:
        """The release a container image's tag names (deployment files rarely state it elsewhere), else None."""
        return None

    def unpinned_reason(self, image: str) -> str | None:
        """Why an image of this engine names no release (a floating tag, an unknown tag), for the note saying
        which release kvcheck assumed; None when it names one or is no image the engine knows."""
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
    def max_input_len(
        self,
        context_len: int,
        pool_tokens: int | None,
        args: Mapping[str, Any] | None = None,
        version: str | None = None,
        env: Mapping[str, str] | None = None,
    ) -> int:
        """The role's admission bound, in tokens: prompts of this many tokens or more are not served.

        `pool_tokens` None means a pool too large to bind. `args` (keyed by field name), `version`
        and `env` give the role's own rules where they move the bound: an SGLang decode role reserves
        `--num-reserved-decode-tokens` on top of every prompt, so prompts its pool holds can still
        wait forever. Without them the bound is a plain server's.
        """

    # The flag (catalogue spelling, no dashes) of a per-request reservation that lowers a role's admission
    # bound below its pool (SGLang decode roles: --num-reserved-decode-tokens); None when the engine has
    # none. KV107's and KV104's fixes name it.
    reservation_flag: ClassVar[str | None] = None

    def admission_bound(
        self,
        stated: int | None,
        context_len: int | None,
        pool_tokens: int | None,
        args: Mapping[str, Any] | None = None,
        version: str | None = None,
        env: Mapping[str, str] | None = None,
    ) -> int | None:
        """A server's real admission bound (tokens) from what it states and what it holds: `stated` (the
        figure the server itself gives, SGLang's max_req_input_len; None when it gives none), lowered by
        the engine's role rule (`max_input_len`: an SGLang decode role's reservation) when the pool and
        the context length are both known. Measure and audit judge a booted or running server with it."""
        if pool_tokens is None or context_len is None:
            return stated
        bound = self.max_input_len(context_len, pool_tokens, args, version, env)
        return bound if stated is None else min(stated, bound)

    # -- device -----------------------------------------------------------------------------------

    def args_device(self, args: Mapping[str, Any]) -> str | None:
        """The device the engine's own arguments select (SGLang `--device cpu`), None when they select none.

        An engine whose release has no such flag (vLLM 0.32.0) returns None: the manifest's `device` decides.
        """
        return None

    def device(self, target: RoleTarget) -> str:
        """The device the role runs on: "cuda" (GPUs, the default), "cpu", or another the args name.

        The manifest's `device` (top level or per role, `RoleTarget.device`) wins; without it the args'
        (`args_device`); without either, GPUs. The loader refuses a manifest whose `device` and args
        disagree, so the two never conflict here. A "cpu" role is a CPU deployment: no GPU list, no NVML
        pre-flight, no CUDA_VISIBLE_DEVICES; its host's memory is checked instead (`check_host`).
        """
        return target.device or self.args_device(target.args) or "cuda"

    def cpu_memory_hint(self) -> str:
        """How to give a CPU role's pool more host memory, in the engine's own settings (KV101's hint)."""
        return "serve on a host with more RAM per NUMA node"

    def check_host(self, target: RoleTarget, host: HostMemory) -> tuple[str, str] | None:
        """(message, hint) when this host cannot hold the CPU role as the engine would run it; None: go ahead.

        Called before a CPU role boots on the local host (measure mode's pre-flight in place of NVML).
        The base check needs only the figures every CPU engine sizes from; engines add their own.
        """
        if host.mem_available_bytes is None:
            why = "; ".join(host.notes) or "no MemAvailable"
            return (f"role {target.name} runs on the CPU, and this host's available memory cannot be read ({why}): "
                    f"{self.label} sizes a CPU role's pool from it",
                    "measure CPU roles on a Linux host that shows /proc/meminfo (or pass --no-gpu-check when "
                    "engine.command runs the engine elsewhere)")
        if host.mem_available_bytes == 0:
            return (f"role {target.name} runs on the CPU, and this host has no memory available (MemAvailable, "
                    "within the cgroup's limit, is 0)",
                    "free memory on the host, or raise the container's memory limit")
        return None

    # -- launch -----------------------------------------------------------------------------------

    @abstractmethod
    def launch_argv(
        self,
        target: RoleTarget,
        *,
        host: str,
        port: int,
        node: NodeLaunch | None = None,
        dummy_weights: bool = False,
        bootstrap_port: int | None = None,
    ) -> list[str]:
        """The role's exact production command line plus where to listen, for every launcher.

        Where to listen comes after the role's args so it wins over theirs; `dummy_weights` keeps the
        memory layout without reading the checkpoint. InputError when the role names no model.
        """

    @abstractmethod
    def node_argv(self, node: NodeLaunch) -> list[str]:
        """The arguments placing one node in a multi-node role (what launch_argv appends for `node`)."""

    def worker_argv(self) -> list[str]:
        """What a node other than the head adds to the role's command line ([] when every node runs the same one;
        vLLM's `--headless`: the other nodes run its workers and no API server)."""
        return []

    @abstractmethod
    def launch_nodes(self, args: Mapping[str, Any]) -> int:
        """How many hosts a role with these args spans (1 when they do not say)."""

    @abstractmethod
    def needs_bootstrap_port(self, args: Mapping[str, Any]) -> bool:
        """Whether the role listens on a second port of its own that the launcher must pick (PD bootstrap)."""

    # -- boot log ---------------------------------------------------------------------------------

    def exit_hint(self, returncode: int | None, lines: Sequence[str]) -> str | None:
        """The fix for an engine that exited before its pool was known, from its status and its last
        log lines (boot's hint), or None when the engine's knowledge adds nothing."""
        return None

    # The flag that states a role's prefill/decode side among the engine's arguments (SGLang's
    # --disaggregation-mode), or None where no plain flag does (vLLM buries it in --kv-transfer-config's
    # kv_role, and NVIDIA Dynamo's vLLM workers take it from Dynamo's own flag): the manifest's roles.N.side
    # then states it.
    side_flag: ClassVar[str | None] = None

    def port_taken(self, line: str) -> int | None:
        """The port a line of the engine's log says its HTTP server could not bind, when that failure
        leaves the engine up without serving (it would otherwise be waited on until --timeout); None for
        every other line, and for an engine whose bind failure ends the process."""
        return None

    @abstractmethod
    def log_reader(self) -> BootLogReader:
        """A fresh incremental reader of the engine's startup log (feed lines, read a summary)."""

    @abstractmethod
    def data_parallel_ranks(self, args: Mapping[str, Any]) -> int:
        """How many data-parallel ranks (each with its own KV pool) the args give one server."""

    # -- server -----------------------------------------------------------------------------------

    # The largest token figure a server of this engine can hold; a larger one in an answer, a log or
    # an option is damage or a lie, never a pool.
    max_token_figure: ClassVar[int]
    # The metrics gauges that restate the pool (tokens) and the served context (tokens), named as the
    # server's metrics name them (ServerInfo.metrics keys); None when the engine exports no such gauge.
    pool_gauge: ClassVar[str | None]
    context_gauge: ClassVar[str | None]

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

    # KV307 (audit): a server's own figures that disagree, named as the engine names them. The defaults
    # are engine-neutral; an engine whose server states these figures words them in its own terms.
    def pool_below_ranks(self, pool_tokens: int, smallest_rank_tokens: int) -> str:
        """The server-wide pool figure is below every data-parallel rank's."""
        return (f"the server-wide pool figure {pool_tokens:,} is below every data-parallel rank's pool "
                f"(smallest {smallest_rank_tokens:,})")

    def bound_over_pool(self, bound_tokens: int, pool_tokens: int, info: ServerInfo) -> str | None:
        """Why the server admits prompts (or requests) longer than the pool it is judged by can hold (KV307);
        None when the longest it admits fits."""
        if bound_tokens < pool_tokens:
            return None
        return (f"the server's admission bound {bound_tokens:,} is not below its pool of {pool_tokens:,} tokens: "
                "the smallest rank cannot hold a request of that length")

    def probe_front_door(self) -> ProbeFrontDoor | None:
        """How `kvcheck probe` talks to this engine's deployments; None when it cannot probe them."""
        return None

    def probe_bound(
        self,
        context_len: int,
        pool_tokens: int | None,
        args: Mapping[str, Any] | None = None,
        version: str | None = None,
    ) -> int:
        """The shortest prompt the front door must refuse, tokens (prompts this long or longer).

        By default the engine's admission bound (`max_input_len`); an engine whose bound is stated
        as the longest prompt it admits overrides this.
        """
        return self.max_input_len(context_len, pool_tokens, args, version)

    def fit_hint(self, args: Mapping[str, Any], env: Mapping[str, str] | None = None) -> str:
        """KV101's generic fix when nothing more precise is known: the settings of this engine that give
        the pool more room (its flags, its CPU or GPU memory knobs, from the role's args and env), in words."""
        return "or give the pool more memory, or advertise a window the pool holds"

    # -- sizing -----------------------------------------------------------------------------------

    @abstractmethod
    def estimate(
        self,
        target: RoleTarget,
        *,
        profiles: GpuProfiles | Mapping[str, GpuProfile] | Path | None = None,
        offline: bool | None = None,
    ) -> PoolEstimate:
        """The role's predicted pool (the engine's own sizing, re-derived); EstimateError if it cannot.

        `profiles` is a GPU profile set (`kvcheck.gpus`); None reads the shipped profiles.
        `offline` True never asks a model hub for a config (None: follow the environment).
        """

    @abstractmethod
    def plan(
        self,
        target: RoleTarget,
        *,
        profiles: GpuProfiles | Mapping[str, GpuProfile] | Path | None = None,
        offline: bool | None = None,
    ) -> RolePlan:
        """What would fit the role: the engine's sizing swept over the settings an operator can change.

        EstimateError or InputError when the role itself cannot be estimated.
        """

    @abstractmethod
    def safe_fraction(
        self,
        target: RoleTarget,
        *,
        profiles: GpuProfiles | Mapping[str, GpuProfile] | Path | None = None,
        offline: bool | None = None,
    ) -> SafeFraction | None:
        """The fraction the engine would pick itself, to compare the manifest's with (KV205).

        None when the manifest leaves the fraction to the engine or the sizing model cannot tell.
        """

    # -- rules ------------------------------------------------------------------------------------

    @abstractmethod
    def rules(self) -> tuple[Rule, ...]:
        """The rules only this engine's knowledge raises (its sizing, its log lines), for the catalogue."""

    # The policy's disaggregation rules that name this engine's own releases and flags (KV201: SGLang's
    # admission fixes of 0.5.22; KV203: --disaggregation-enable-kv-checksum); an engine without them
    # lists none, and the policy does not apply them to its roles.
    disaggregation_rules: ClassVar[frozenset[str]] = frozenset()

    def role_findings(self, target: RoleTarget, args: Mapping[str, Any], mode: str | None) -> list[Finding]:
        """The engine's own findings on one role's settings (its rules in rules()); `args` are the role's
        effective args (the manifest's over what the engine resolved), `mode` its role_mode."""
        return []

    def concurrency(self, pool_tokens: int, window: int, args: Mapping[str, Any], device: str = "cuda") -> float:
        """How many requests of `window` tokens the pool holds at once, as the engine allocates them on
        `device` (tokens one at a time unless the engine says otherwise)."""
        return pool_tokens / window
