"""Estimate mode: predict each role's KV pool the way SGLang 0.5.23 sizes it, without a GPU."""

from kvcheck.engines.sglang.sizing.gpus import GpuProfile, GpuProfiles, default_profiles
from kvcheck.engines.sglang.sizing.model import RoleEstimate, estimate_role

__all__ = ["GpuProfile", "GpuProfiles", "RoleEstimate", "default_profiles", "estimate_role"]
