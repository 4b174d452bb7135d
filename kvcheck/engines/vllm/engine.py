"""vLLM behind the Engine interface: each method delegates to the one module that owns the rule."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from kvcheck.engines.base import Engine
from kvcheck.engines.imageref import is_repository, split_image
from kvcheck.engines.vllm import serving

if TYPE_CHECKING:
    import ssl

    import httpx

    from kvcheck.engines.argv import ParsedArgv
    from kvcheck.engines.base import NodeLaunch, PoolEstimate, ProbeFrontDoor, SafeFraction, ServerInfo
    from kvcheck.engines.flags import Catalogue
    from kvcheck.engines.vllm.client import VllmClient
    from kvcheck.engines.vllm.logs import VllmLogReader
    from kvcheck.gpus import GpuProfile, GpuProfiles
    from kvcheck.hostmem import HostMemory
    from kvcheck.model import Finding, RolePlan, RoleTarget
    from kvcheck.policy.registry import Rule

VLLM_IMAGE = "vllm/vllm-openai"  # the image vLLM publishes its releases as (tags v0.32.0, latest, nightly)

class VllmEngine(Engine):
    """vLLM (vllm-project/vllm): its `vllm serve` flags per release, its log lines, its endpoints."""

    name: ClassVar[str] = "vllm"
    label: ClassVar[str] = "vLLM"
    ready_line: ClassVar[str] = "Application startup complete."
    default_command: ClassVar[tuple[str, ...]] = serving.DEFAULT_ENGINE_COMMAND
    image_repository: ClassVar[str | None] = VLLM_IMAGE
    # vllm-project/vllm docker/Dockerfile (dead20b), stage vllm-openai: ENTRYPOINT ["vllm", "serve"]; releases
    # before it started `python3 -m vllm.entrypoints.openai.api_server`, which takes the same flags (--model)
    image_entrypoint: ClassVar[tuple[str, ...] | None] = ("vllm", "serve")

    # -- arguments --------------------------------------------------------------------------------

    def catalogue(self, version: str) -> tuple[Catalogue, str | None]:
        from kvcheck.engines.vllm.catalogue import load_catalogue

        return load_catalogue(version)

    def catalogue_versions(self) -> list[str]:
        from kvcheck.engines.vllm.catalogue import catalogue_versions

        return catalogue_versions()

    def parse_argv(self, argv: Sequence[str], *, version: str | None, start: int = 0) -> ParsedArgv:
        from kvcheck.engines.vllm.argv import parse_vllm_argv

        catalogue, _ = self.catalogue(version if version is not None else self.catalogue_versions()[-1])
        return parse_vllm_argv(argv, catalogue, start=start)

    def launch_index(self, argv: Sequence[str]) -> int | None:
        from kvcheck.engines.vllm.argv import launch_index

        return launch_index(argv)

    window_flag: ClassVar[str] = "max-model-len"
    running_requests_field: ClassVar[str | None] = "max_num_seqs"
    nodes_from_group: ClassVar[bool] = True  # multi-node over Ray: the pods' cluster is the instance

    def gpus_needed(self, args: Mapping[str, Any]) -> int | None:
        """TP x PP x prefill-context-parallel GPUs per DP rank (decode context parallel reuses TP's GPUs), times
        the DP ranks: all of them, or the node's own with --data-parallel-size-local (a node of a multi-node DP
        deployment starts only those), times the nodes its --nnodes spans."""
        def size(key: str) -> int:
            value = args.get(key)
            return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 1

        per_rank = size("tensor_parallel_size") * size("pipeline_parallel_size") * size("prefill_context_parallel_size")
        if args.get("data_parallel_size_local") is not None:
            return per_rank * size("data_parallel_size_local") * size("nnodes")
        return per_rank * size("data_parallel_size")

    def release_from_image(self, image: str) -> str | None:
        """`vllm/vllm-openai:v0.32.0` -> 0.32.0 (the tags vLLM publishes, a digest after the tag allowed);
        other images name no release."""
        repository, tag, _ = split_image(image)
        if tag is None or not is_repository(repository, VLLM_IMAGE):
            return None
        version = tag.removeprefix("v")
        return version if version[:1].isdigit() and version.count(".") >= 1 else None

    def unpinned_reason(self, image: str) -> str | None:
        repository, tag, digest = split_image(image)
        if not is_repository(repository, VLLM_IMAGE) or self.release_from_image(image) is not None:
            return None
        if tag is None and digest is not None:
            return f"image {image} is pinned by digest, which names no vLLM release kvcheck can read"
        if tag is None or tag in {"latest", "nightly"} or tag.startswith(("latest-", "nightly-")):
            return f"image {image} has the floating tag '{tag or 'latest'}', which pins no vLLM release"
        return f"image {image}: the tag '{tag}' names no vLLM release"

    def enumerated_fields(self, args: Mapping[str, Any], version: str | None) -> frozenset[str]:
        from kvcheck.engines.flags import FlagError
        from kvcheck.errors import InputError

        try:
            catalogue, _ = self.catalogue(version if version is not None else self.catalogue_versions()[-1])
        except InputError:
            return frozenset()
        found = set()
        for name, value in args.items():
            try:
                flag = catalogue.resolve(str(name))
            except FlagError:
                continue
            choices = {str(choice) for choice in flag.choices or ()}
            values = value if isinstance(value, list | tuple) else [value]
            if choices and values and all(str(item) in choices for item in values):
                found.add(str(name))
        return frozenset(found)

    def role_mode(self, args: Mapping[str, Any]) -> str | None:
        return serving.role_mode(args)

    def max_input_len(
        self,
        context_len: int,
        pool_tokens: int | None,
        args: Mapping[str, Any] | None = None,
        version: str | None = None,
        env: Mapping[str, str] | None = None,
    ) -> int:
        # vLLM reserves nothing per request beyond the prompt at admission (its check is the length):
        # prompts of max_model_len tokens or more are refused
        return serving.max_input_len(context_len, pool_tokens)

    def args_device(self, args: Mapping[str, Any]) -> str | None:
        return serving.args_device(args)

    def cpu_memory_hint(self) -> str:
        return ("raise VLLM_CPU_KVCACHE_SPACE (GiB) or --kv-cache-memory-bytes, or serve on a host with more RAM "
                "per NUMA node")

    def check_host(self, target: RoleTarget, host: HostMemory) -> tuple[str, str] | None:
        refused = super().check_host(target, host)
        if refused is not None:
            return refused
        from kvcheck.engines.vllm.cpu import check_host

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
        from kvcheck.engines.vllm import launch

        del bootstrap_port  # vLLM's KV connectors pick their side-channel ports from their own settings
        return launch.launch_argv(target, default_command=self.default_command, host=host, port=port, node=node,
                                  dummy_weights=dummy_weights)

    def node_argv(self, node: NodeLaunch) -> list[str]:
        from kvcheck.engines.vllm.launch import node_argv

        return node_argv(node)

    def worker_argv(self) -> list[str]:
        from kvcheck.engines.vllm.launch import worker_argv

        return worker_argv()

    def launch_nodes(self, args: Mapping[str, Any]) -> int:
        from kvcheck.engines.vllm.launch import launch_nodes

        return launch_nodes(args)

    def needs_bootstrap_port(self, args: Mapping[str, Any]) -> bool:
        return False

    # -- boot log ---------------------------------------------------------------------------------

    oom_exit_hint: ClassVar[str | None] = (
        "status 137 is the kernel's out-of-memory kill: lower --gpu-memory-utilization (it also sizes the CPU "
        "backend's pool) or set the KV cache explicitly (--kv-cache-memory-bytes, VLLM_CPU_KVCACHE_SPACE)"
    )

    def log_reader(self) -> VllmLogReader:
        from kvcheck.engines.vllm.logs import VllmLogReader

        return VllmLogReader()

    def data_parallel_ranks(self, args: Mapping[str, Any]) -> int:
        return serving.data_parallel_ranks(args)

    # -- server -----------------------------------------------------------------------------------

    max_token_figure: ClassVar[int] = serving.MAX_TOKEN_FIGURE
    # The usable pool from /metrics' vllm:cache_config_info (client.POOL_GAUGE, spelt out so that naming
    # it does not import the HTTP client); vLLM exports no gauge of the served window.
    pool_gauge: ClassVar[str | None] = "vllm:cache_config_info:usable_tokens"
    context_gauge: ClassVar[str | None] = None

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
    ) -> VllmClient:
        from kvcheck.engines.vllm.client import VllmClient

        return VllmClient(base_url, timeout_s=timeout_s, verify=verify, token=token, retries=retries,
                          backoff_s=backoff_s, transport=transport, sleep=sleep or time.sleep)

    def bound_over_pool(self, bound_tokens: int, pool_tokens: int, info: ServerInfo) -> str | None:
        from kvcheck.engines.vllm.client import bound_over_pool

        return bound_over_pool(bound_tokens, pool_tokens, info.metrics)

    def probe_front_door(self) -> ProbeFrontDoor:
        from kvcheck.engines.vllm.probe import FRONT_DOOR

        return FRONT_DOOR

    def probe_bound(
        self,
        context_len: int,
        pool_tokens: int | None,
        args: Mapping[str, Any] | None = None,
        version: str | None = None,
    ) -> int:
        from kvcheck.engines.vllm.probe import probe_bound

        return probe_bound(context_len)

    def fit_hint(self, args: Mapping[str, Any], env: Mapping[str, str] | None = None) -> str:
        from kvcheck.engines.vllm.probe import fit_hint

        return fit_hint(args, serving.args_device(args) or "cuda", env or {})

    # -- sizing: vLLM's own per-release sizing, re-derived (sizing/, docs/estimate.md) -----------------

    def estimate(
        self,
        target: RoleTarget,
        *,
        profiles: GpuProfiles | Mapping[str, GpuProfile] | Path | None = None,
        offline: bool | None = None,
    ) -> PoolEstimate:
        from kvcheck.engines.vllm.sizing.model import estimate_role

        return estimate_role(target, profiles=profiles, offline=offline)

    def plan(
        self,
        target: RoleTarget,
        *,
        profiles: GpuProfiles | Mapping[str, GpuProfile] | Path | None = None,
        offline: bool | None = None,
    ) -> RolePlan:
        from kvcheck.engines.vllm.plan import plan_role

        return plan_role(target, profiles=profiles, offline=offline)

    def safe_fraction(
        self,
        target: RoleTarget,
        *,
        profiles: GpuProfiles | Mapping[str, GpuProfile] | Path | None = None,
        offline: bool | None = None,
    ) -> SafeFraction | None:
        # vLLM profiles its activations and CUDA graphs and takes them from the utilization itself, so
        # no fraction of its is unsafe in SGLang's sense (KV205): nothing to compare the flag with.
        return None

    # -- rules ------------------------------------------------------------------------------------

    def rules(self) -> tuple[Rule, ...]:
        from kvcheck.engines.vllm.rules import KV109, KV210, KV211, KV212, KV213, KV214
        from kvcheck.engines.vllm.sizing.rules import KV220

        return (KV109, KV220, KV210, KV211, KV212, KV213, KV214)

    def role_findings(self, target: RoleTarget, args: Mapping[str, Any], mode: str | None) -> list[Finding]:
        from kvcheck.engines.vllm.rules import version_findings

        return [*serving.role_findings(target, args, mode, device=self.device(target)),
                *version_findings(target, args, mode)]

    def concurrency(self, pool_tokens: int, window: int, args: Mapping[str, Any], device: str = "cuda") -> float:
        return serving.concurrency(pool_tokens, window, serving.block_size(args, device))
