"""Estimate backend: predicted pools from the model config, GPU profiles and SGLang's defaults."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import ClassVar

from kvcheck.backends.base import Backend
from kvcheck.engines import get_engine
from kvcheck.errors import EstimateError, InputError
from kvcheck.gpus import GpuProfile, GpuProfiles, as_profiles
from kvcheck.model import PoolMeasurement, RoleTarget
from kvcheck.policy.registry import finding

# The estimate backend's rules, by code: the engine's sizing package defines them and the registry
# loads them on first use, so this backend names no engine module.
NOT_ESTIMATED = "KV305"  # the pool could not be estimated: the role is not checked (exit 3)
INSIDE_RANGE = "KV105"  # the window lies inside the estimate's uncertainty range


class EstimateBackend(Backend):
    """Pools predicted without a GPU; a role the model cannot predict gets KV305, never a guess."""

    mode: ClassVar[str] = "estimate"

    def __init__(
        self,
        *,
        gpu_profiles: GpuProfiles | Mapping[str, GpuProfile] | Path | None = None,
        offline: bool | None = None,
    ) -> None:
        self._profiles = gpu_profiles
        self.offline = offline

    def _gpu_profiles(self) -> GpuProfiles:
        if not isinstance(self._profiles, GpuProfiles):
            self._profiles = as_profiles(self._profiles)
        return self._profiles

    def measure(self, targets: Sequence[RoleTarget]) -> list[PoolMeasurement]:
        return [self._one(target) for target in targets]

    def _one(self, target: RoleTarget) -> PoolMeasurement:
        try:
            est = get_engine(target.engine).estimate(target, profiles=self._gpu_profiles(), offline=self.offline)
        except (EstimateError, InputError) as exc:
            message = f"pool could not be estimated: {exc.message}"
            return PoolMeasurement(
                role=target.name,
                source="estimate",
                pool_tokens=None,
                engine_version=target.engine_version,
                argv=target.argv_args,
                details={"error": exc.message},
                findings=(finding(NOT_ESTIMATED, target.name, message, hint=exc.hint, location=target.location),),
            )
        findings = list(est.findings)
        low, high = est.pool_range
        required = target.required_tokens
        if low < required <= high and not est.refused_whatever_pool:
            findings.append(
                finding(
                    INSIDE_RANGE,
                    target.name,
                    f"the window ({required:,} tokens) lies inside the estimate's range "
                    f"{low:,}-{high:,} (predicted {est.pool_tokens:,}): it might not fit; measure",
                    hint="run kvcheck verify without --mode estimate on the role's GPUs",
                    location=target.location,
                )
            )
        return PoolMeasurement(
            role=target.name,
            source="estimate",
            pool_tokens=est.pool_tokens,
            max_input_tokens=est.max_input_tokens,
            context_len=est.context_len,
            engine_version=target.engine_version,
            max_running_requests=est.max_running_requests,
            argv=target.argv_args,
            pool_range=est.pool_range,
            details=dict(est.details),
            findings=tuple(findings),
        )
