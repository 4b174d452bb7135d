"""What every backend takes (RoleTarget) and gives (PoolMeasurement)."""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path
from typing import Any, ClassVar

from kvcheck.report.model import Finding, Location

DEFAULT_ENGINE_COMMAND = ("python3", "-m", "sglang.launch_server")


def disaggregation_mode(args: Mapping[str, Any]) -> str | None:
    """The PD role an engine's args give it (prefill, decode), None for a unified server."""
    mode = args.get("disaggregation_mode")
    return None if mode in (None, "null", "") else str(mode)


@dataclass(frozen=True)
class EstimateInputs:
    """Optional overrides for estimate mode; None means "derive it" (config, profile)."""

    weights_gib_per_gpu: float | None = None
    gpu_memory_mib: int | None = None
    pre_baseline_mib: float | None = None


@dataclass(frozen=True)
class RoleTarget:
    """One role to check, as the manifest declares it (args already merged and validated)."""

    name: str
    context_length: int  # the window promised to clients, tokens
    min_headroom: float
    engine_version: str | None
    args: Mapping[str, Any]  # merged engine args keyed by SGLang field name (underscores), typed
    argv_args: tuple[str, ...]  # the same args rendered as SGLang flags (no --model-path, host, port)
    gpus: tuple[int, ...] = ()
    gpu: str | None = None  # GPU type the manifest names for this role
    model_path: str | None = None
    model_config: Path | None = None  # config.json for estimate mode
    engine_command: tuple[str, ...] = DEFAULT_ENGINE_COMMAND
    env: Mapping[str, str] = field(default_factory=dict)
    estimate: EstimateInputs = field(default_factory=EstimateInputs)
    location: Location | None = None  # where the role is declared
    arg_locations: Mapping[str, Location] = field(default_factory=dict)  # field name -> where set

    @property
    def required_tokens(self) -> int:
        """ceil(min_headroom x context_length), in exact decimal arithmetic (1.1 x 100000 is 110000)."""
        return math.ceil(Fraction(str(self.min_headroom)) * self.context_length)

    @property
    def disaggregation_mode(self) -> str | None:
        return disaggregation_mode(self.args)

    def arg_location(self, *fields: str) -> Location | None:
        """Where the first of `fields` was set, else where the role is declared."""
        for name in fields:
            if name in self.arg_locations:
                return self.arg_locations[name]
        return self.location


@dataclass(frozen=True)
class PoolMeasurement:
    """A role's pool as one backend obtained it; pool_tokens None means it could not (see findings)."""

    role: str
    source: str  # measure, estimate, audit, log
    pool_tokens: int | None
    max_input_tokens: int | None = None
    context_len: int | None = None  # the engine's own context_len (derived or --context-length)
    engine_version: str | None = None
    resolved_args: Mapping[str, Any] = field(default_factory=dict)  # engine's resolved args, when known
    argv: tuple[str, ...] | None = None
    gpus: tuple[int, ...] | None = None
    pool_range: tuple[int, int] | None = None  # (low, high) for estimates with uncertain inputs
    details: Mapping[str, Any] = field(default_factory=dict)
    findings: tuple[Finding, ...] = ()


class Backend(ABC):
    """Obtains pools for a set of roles; failures come back as findings, never as a guessed value."""

    mode: ClassVar[str]

    @abstractmethod
    def measure(self, targets: Sequence[RoleTarget]) -> list[PoolMeasurement]:
        """One measurement per target, in the targets' order."""
