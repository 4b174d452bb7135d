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
    from kvcheck.engines.flags import Catalogue
    from kvcheck.engines.sglang.client import SglangClient
    from kvcheck.engines.sglang.logs.reader import LogReader
    from kvcheck.engines.sglang.sizing.model import RoleEstimate
    from kvcheck.gpus import GpuProfile, GpuProfiles
    from kvcheck.model import RoleTarget


class SglangEngine(Engine):
    """SGLang (sgl-project/sglang): flag catalogues per release, its log lines, its pool sizing."""

    name: ClassVar[str] = "sglang"
    label: ClassVar[str] = "SGLang"
    default_command: ClassVar[tuple[str, ...]] = serving.DEFAULT_ENGINE_COMMAND

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

    image_repository: ClassVar[str | None] = "lmsysorg/sglang"

    def release_from_image(self, image: str) -> str | None:
        from kvcheck.engines.sglang.images import release_from_image

        return release_from_image(image)

    def release_from_container(self, name: str) -> str | None:
        from kvcheck.engines.sglang.images import release_from_container

        return release_from_container(name)

    def enumerated_fields(self, args: Mapping[str, Any], version: str | None) -> frozenset[str]:
        from kvcheck.engines.sglang.catalogue import FlagError, catalogue_versions
        from kvcheck.errors import InputError

        try:
            catalogue, _ = self.catalogue(version if version is not None else catalogue_versions()[-1])
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
        return serving.disaggregation_mode(args)

    def max_input_len(self, context_len: int, pool_tokens: int | None) -> int:
        return serving.max_input_len(context_len, pool_tokens)

    # -- launch -----------------------------------------------------------------------------------

    # -- boot log ---------------------------------------------------------------------------------

    def log_reader(self) -> LogReader:
        from kvcheck.engines.sglang.logs.reader import LogReader

        return LogReader()

    # -- server -----------------------------------------------------------------------------------

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

    # -- sizing -----------------------------------------------------------------------------------

    def estimate(
        self,
        target: RoleTarget,
        *,
        profiles: GpuProfiles | Mapping[str, GpuProfile] | Path | None = None,
        offline: bool | None = None,
    ) -> RoleEstimate:
        from kvcheck.engines.sglang.sizing.model import estimate_role

        return estimate_role(target, profiles=profiles, offline=offline)

    # -- rules ------------------------------------------------------------------------------------
