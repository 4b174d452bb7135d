"""The planner: for one role, what fits (estimate model); `fit_hints` names it in KV101's hint."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path

from kvcheck.errors import EstimateError, InputError
from kvcheck.model import PoolMeasurement, RoleTarget


def fit_hints(
    target: RoleTarget,
    *,
    profiles: Mapping | Path | None = None,
    offline: bool | None = None,
) -> list[str]:
    """Short sentences naming settings that would hold the window (estimate); [] when it cannot estimate.

    `verify` adds them to KV101's hint in any mode: "mem-fraction-static 0.912 would hold 1,052,672
    tokens (estimate)". `offline` True never asks the Hugging Face Hub for a config.
    """
    from kvcheck.plan.advice import hint_sentences
    from kvcheck.plan.planner import plan_role

    try:
        plan = plan_role(target, profiles=profiles, offline=offline)
    except (EstimateError, InputError):
        return []
    return hint_sentences(plan)


def with_safe_fraction(
    target: RoleTarget,
    measurement: PoolMeasurement,
    *,
    profiles: Mapping | Path | None = None,
    offline: bool | None = None,
) -> PoolMeasurement:
    """The measurement with SGLang's own mem_fraction_static for the role (KV205 compares the
    manifest's value with it); unchanged when the manifest leaves the fraction to SGLang or the
    estimate model cannot tell (no config offline, an unknown GPU)."""
    if target.args.get("mem_fraction_static") is None:
        return measurement
    from kvcheck.plan.planner import safe_ceiling

    ceiling = safe_ceiling(target, profiles=profiles, offline=offline)
    if ceiling is None:
        return measurement
    return replace(measurement, safe_fraction=ceiling[0], safe_reserve_mib=ceiling[1])


__all__ = ["fit_hints", "with_safe_fraction"]
