"""SGLang behind the Engine interface: each method delegates to the one module that owns the rule."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from kvcheck.engines.base import Engine
from kvcheck.engines.sglang import serving

if TYPE_CHECKING:
    from kvcheck.engines.sglang.argv import ParsedArgv
    from kvcheck.engines.sglang.catalogue import Catalogue
    from kvcheck.engines.sglang.logs.reader import LogReader
    from kvcheck.engines.sglang.sizing.gpus import GpuProfile, GpuProfiles
    from kvcheck.engines.sglang.sizing.model import RoleEstimate
    from kvcheck.model import RoleTarget


class SglangEngine(Engine):
    """SGLang (sgl-project/sglang): flag catalogues per release, its log lines, its pool sizing."""

    name: ClassVar[str] = "sglang"
    default_command: ClassVar[tuple[str, ...]] = serving.DEFAULT_ENGINE_COMMAND

    def catalogue(self, version: str) -> tuple[Catalogue, str | None]:
        from kvcheck.engines.sglang.catalogue import load_catalogue

        return load_catalogue(version)

    def parse_argv(self, argv: Sequence[str], *, version: str | None) -> ParsedArgv:
        from kvcheck.engines.sglang.argv import parse_argv
        from kvcheck.engines.sglang.catalogue import catalogue_versions

        # Without a stated release, the newest catalogue reads the command line.
        catalogue, _ = self.catalogue(version if version is not None else catalogue_versions()[-1])
        return parse_argv(argv, catalogue)

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

    def log_reader(self) -> LogReader:
        from kvcheck.engines.sglang.logs.reader import LogReader

        return LogReader()

    def estimate(
        self,
        target: RoleTarget,
        *,
        profiles: GpuProfiles | Mapping[str, GpuProfile] | Path | None = None,
        offline: bool | None = None,
    ) -> RoleEstimate:
        from kvcheck.engines.sglang.sizing.model import estimate_role

        return estimate_role(target, profiles=profiles, offline=offline)
