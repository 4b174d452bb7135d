"""The planner: for one role, what fits (the role's engine sweeps its sizing); `fit_hints` names it in KV101's hint."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from kvcheck.errors import EstimateError, InputError
from kvcheck.model import PoolMeasurement, RolePlan, RoleTarget

if TYPE_CHECKING:
    from kvcheck.gpus import GpuProfile, GpuProfiles


def plan_role(
    target: RoleTarget,
    *,
    profiles: GpuProfiles | Mapping[str, GpuProfile] | Path | None = None,
    offline: bool | None = None,
) -> RolePlan:
    """What fits the role, by its engine's sizing model; EstimateError or InputError when it cannot be estimated.

    `profiles` is a GPU profile set (`kvcheck.gpus`); None reads the shipped profiles.
    """
    from kvcheck.engines import get_engine

    return get_engine(target.engine).plan(target, profiles=profiles, offline=offline)


def fit_hints(
    target: RoleTarget,
    *,
    profiles: GpuProfiles | Mapping[str, GpuProfile] | Path | None = None,
    offline: bool | None = None,
) -> list[str]:
    """Short sentences naming settings that would hold the window (estimate); [] when it cannot estimate.

    `verify` adds them to KV101's hint in any mode: "mem-fraction-static 0.912 would hold 1,052,672
    tokens (estimate)". `offline` True never asks the Hugging Face Hub for a config.
    """
    from kvcheck.plan.advice import hint_sentences

    try:
        plan = plan_role(target, profiles=profiles, offline=offline)
    except (EstimateError, InputError):
        return []
    return hint_sentences(plan)


def with_safe_fraction(
    target: RoleTarget,
    measurement: PoolMeasurement,
    *,
    profiles: GpuProfiles | Mapping[str, GpuProfile] | Path | None = None,
    offline: bool | None = None,
) -> PoolMeasurement:
    """The measurement with the engine's own memory fraction for the role (KV205 compares the
    manifest's value with it); unchanged when the manifest leaves the fraction to the engine or the
    estimate model cannot tell (no config offline, an unknown GPU)."""
    from kvcheck.engines import get_engine

    ceiling = get_engine(target.engine).safe_fraction(target, profiles=profiles, offline=offline)
    if ceiling is None:
        return measurement
    return replace(measurement, safe_fraction=ceiling.fraction, safe_reserve_mib=ceiling.reserve_mib)


__all__ = ["fit_hints", "plan_role", "with_safe_fraction"]
