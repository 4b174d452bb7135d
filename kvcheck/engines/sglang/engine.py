"""SGLang behind the Engine interface: each method delegates to the one module that owns the rule."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from kvcheck.engines.base import Engine
from kvcheck.engines.sglang import serving

if TYPE_CHECKING:
    import ssl

    import httpx

    from kvcheck.engines.argv import ParsedArgv
    from kvcheck.engines.base import NodeLaunch, PoolEstimate, ProbeFrontDoor, SafeFraction, ServerInfo
    from kvcheck.engines.flags import Catalogue
    from kvcheck.engines.sglang.client import SglangClient
    from kvcheck.engines.sglang.logs.reader import LogReader
    from kvcheck.gpus import GpuProfile, GpuProfiles
    from kvcheck.hostmem import HostMemory
    from kvcheck.model import RolePlan, RoleTarget
    from kvcheck.policy.registry import Rule


class SglangEngine(Engine):
    """SGLang (sgl-project/sglang): flag catalogues per release, its log lines, its pool sizing."""

    side_flag = "--disaggregation-mode"

    name: ClassVar[str] = "sglang"
    label: ClassVar[str] = "SGLang"
    ready_line: ClassVar[str] = "The server is fired up and ready to roll!"
    default_command: ClassVar[tuple[str, ...]] = serving.DEFAULT_ENGINE_COMMAND
    reservation_flag: ClassVar[str | None] = serving.RESERVED_DECODE_FLAG

    # -- arguments --------------------------------------------------------------------------------

    def catalogue(self, version: str) -> tuple[Catalogue, str | None]:
        from kvcheck.engines.sglang.catalogue import load_catalogue

        return load_catalogue(version)

    def catalogue_versions(self) -> list[str]:
        from kvcheck.engines.sglang.catalogue import catalogue_versions

        return catalogue_versions()

    def parse_argv(self, argv: Sequence[str], *, version: str | None, start: int = 0) -> ParsedArgv:
        from kvcheck.engines.argv import parse_argv

        # Without a stated release, the newest catalogue reads the command line.
        catalogue, _ = self.catalogue(version if version is not None else self.catalogue_versions()[-1])
        return parse_argv(argv, catalogue, start=start)

    def launch_index(self, argv: Sequence[str]) -> int | None:
        from kvcheck.engines.sglang.argv import launch_index

        return launch_index(argv)

    def running_cap(self, args: Mapping[str, Any]) -> int | None:
        """--max-running-requests is the whole server's under DP attention: each DP worker (one pool) runs its
        share, max_running_requests // dp_size (the scheduler's per-worker cap)."""
        cap = super().running_cap(args)
        dp = args.get("dp_size")
        if cap is not None and args.get("enable_dp_attention") and isinstance(dp, int) and dp > 1:
            return max(cap // dp, 1)
        return cap

    image_repository: ClassVar[str | None] = "lmsysorg/sglang"

    def release_from_image(self, image: str) -> str | None:
        from kvcheck.engines.sglang.images import release_from_image

        return release_from_image(image)

    def unpinned_reason(self, image: str) -> str | None:
        from kvcheck.engines.sglang.images import unpinned_reason

        return unpinned_reason(image)

    def release_from_container(self, name: str) -> str | None:
        from kvcheck.engines.sglang.images import release_from_container

        return release_from_container(name)

    def enumerated_fields(self, args: Mapping[str, Any], version: str | None) -> frozenset[str]:
        from kvcheck.engines.sglang.catalogue import catalogue_versions
        from kvcheck.errors import InputError

        try:
            catalogue, _ = self.catalogue(version if version is not None else catalogue_versions()[-1])
        except InputError:
            return frozenset()
        # By field name, exactly: args are keyed by field (a manifest's were resolved when it was loaded,
        # a server's are its ServerArgs fields), and an unknown key costs a dict lookup, not resolve()'s
        # abbreviation and did-you-mean search (~5 ms each: 200,000 keys a server sent took 47 s)
        by_field = {flag.key: flag for flag in catalogue.flags}
        found = set()
        for name, value in args.items():
            flag = by_field.get(str(name))
            if flag is None:
                continue
            choices = {str(choice) for choice in flag.choices or ()}
            values = value if isinstance(value, list | tuple) else [value]
            if choices and values and all(str(item) in choices for item in values):
                found.add(str(name))
        return frozenset(found)

    def role_mode(self, args: Mapping[str, Any]) -> str | None:
        return serving.disaggregation_mode(args)

    def max_input_len(
        self,
        context_len: int,
        pool_tokens: int | None,
        args: Mapping[str, Any] | None = None,
        version: str | None = None,
        env: Mapping[str, str] | None = None,
    ) -> int:
        return serving.admission_bound(context_len, pool_tokens, args, version, env)

    def args_device(self, args: Mapping[str, Any]) -> str | None:
        return serving.args_device(args)

    def cpu_memory_hint(self) -> str:
        return "raise --mem-fraction-static, or serve on a host with more RAM per NUMA node"

    def check_host(self, target: RoleTarget, host: HostMemory) -> tuple[str, str] | None:
        refused = super().check_host(target, host)
        if refused is not None:
            return refused
        from kvcheck.engines.sglang.cpu import check_host

        return check_host(target, host)

    # -- launch -----------------------------------------------------------------------------------

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
        from kvcheck.engines.sglang import launch

        return launch.launch_argv(
            target,
            default_command=self.default_command,
            host=host,
            port=port,
            node=node,
            dummy_weights=dummy_weights,
            bootstrap_port=bootstrap_port,
        )

    def node_argv(self, node: NodeLaunch) -> list[str]:
        from kvcheck.engines.sglang.launch import node_argv

        return node_argv(node)

    def launch_nodes(self, args: Mapping[str, Any]) -> int:
        from kvcheck.engines.sglang.launch import launch_nodes

        return launch_nodes(args)

    def needs_bootstrap_port(self, args: Mapping[str, Any]) -> bool:
        from kvcheck.engines.sglang.launch import needs_bootstrap_port

        return needs_bootstrap_port(args)

    # -- boot log ---------------------------------------------------------------------------------

    def exit_hint(self, returncode: int | None, lines: Sequence[str]) -> str | None:
        from kvcheck.engines.sglang.logs.patterns import exit_hint

        return exit_hint(returncode, lines)

    def port_taken(self, line: str) -> int | None:
        from kvcheck.engines.sglang.logs.patterns import port_taken

        return port_taken(line)

    def log_reader(self) -> LogReader:
        from kvcheck.engines.sglang.logs.reader import LogReader

        return LogReader()

    def data_parallel_ranks(self, args: Mapping[str, Any]) -> int:
        return serving.data_parallel_ranks(args)

    # -- server -----------------------------------------------------------------------------------

    max_token_figure: ClassVar[int] = serving.MAX_TOKEN_FIGURE
    # Two of the constant gauges the client reads (client.CONSTANT_GAUGES), spelt out here so that
    # naming them does not import the HTTP client.
    pool_gauge: ClassVar[str | None] = "sglang:max_total_num_tokens"
    context_gauge: ClassVar[str | None] = "sglang:context_len"

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
    ) -> SglangClient:
        from kvcheck.engines.sglang.client import SglangClient

        return SglangClient(
            base_url,
            timeout_s=timeout_s,
            verify=verify,
            token=token,
            retries=retries,
            backoff_s=backoff_s,
            transport=transport,
            sleep=sleep or time.sleep,
        )

    def pool_below_ranks(self, pool_tokens: int, smallest_rank_tokens: int) -> str:
        return (f"server info's max_total_num_tokens {pool_tokens:,} is below every DP rank's token_capacity "
                f"(smallest {smallest_rank_tokens:,})")

    def bound_over_pool(self, bound_tokens: int, pool_tokens: int, info: ServerInfo) -> str | None:
        if bound_tokens < pool_tokens:  # a prompt of max_req_input_len and its first output token
            return None
        return (f"server info's max_req_input_len {bound_tokens:,} is not below the pool of {pool_tokens:,} tokens: "
                "the smallest rank refuses prompts that figure admits")

    def probe_front_door(self) -> ProbeFrontDoor:
        from kvcheck.engines.base import ProbeFrontDoor

        # /generate takes token ids; /v1/tokenize takes a list of prompts (sglang-router's wants the model
        # name); /model_info names the model path (/get_model_info on older releases and the router).
        # The probe's own hints (probe/judge.py) are worded for SGLang: none to override.
        return ProbeFrontDoor(label=self.label, native_endpoint="/generate", tokenize_path="/v1/tokenize",
                              tokenize_batch=True, model_info_paths=("/model_info", "/get_model_info"),
                              bound_from_window=False)

    def fit_hint(self, args: Mapping[str, Any], env: Mapping[str, str] | None = None) -> str:
        if serving.args_device(args) == "cpu":
            return ("or give the pool more host memory: raise --mem-fraction-static, or serve on a host with more "
                    "RAM per NUMA node")
        return ("or give the pool more memory: raise --mem-fraction-static, widen TP, or use an FP8 KV cache "
                "(`kvcheck plan` computes the settings that fit)")

    # -- sizing -----------------------------------------------------------------------------------

    def estimate(
        self,
        target: RoleTarget,
        *,
        profiles: GpuProfiles | Mapping[str, GpuProfile] | Path | None = None,
        offline: bool | None = None,
    ) -> PoolEstimate:
        from kvcheck.engines.sglang.sizing.model import estimate_role

        return estimate_role(target, profiles=profiles, offline=offline)

    def plan(
        self,
        target: RoleTarget,
        *,
        profiles: GpuProfiles | Mapping[str, GpuProfile] | Path | None = None,
        offline: bool | None = None,
    ) -> RolePlan:
        from kvcheck.engines.sglang.plan import plan_role

        return plan_role(target, profiles=profiles, offline=offline)

    def safe_fraction(
        self,
        target: RoleTarget,
        *,
        profiles: GpuProfiles | Mapping[str, GpuProfile] | Path | None = None,
        offline: bool | None = None,
    ) -> SafeFraction | None:
        if target.args.get("mem_fraction_static") is None:
            return None  # SGLang picks its own fraction: nothing to compare it with
        from kvcheck.engines.sglang.plan import safe_ceiling

        return safe_ceiling(target, profiles=profiles, offline=offline)

    # -- rules ------------------------------------------------------------------------------------

    disaggregation_rules: ClassVar[frozenset[str]] = frozenset({"KV201", "KV203"})

    def rules(self) -> tuple[Rule, ...]:
        from kvcheck.engines.sglang import log_rules
        from kvcheck.engines.sglang.sizing import rules as sizing_rules

        return (sizing_rules.KV305, sizing_rules.KV105, sizing_rules.KV108, sizing_rules.KV113, sizing_rules.KV120,
                log_rules.KV309, log_rules.KV312, log_rules.KV313, log_rules.KV316)
