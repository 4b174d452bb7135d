"""Estimate mode: predict each role's KV pool the way SGLang 0.5.23 sizes it, without a GPU."""

from kvcheck.estimate.gpus import GpuProfile, GpuProfiles, default_profiles
from kvcheck.estimate.model import RoleEstimate, estimate_role

__all__ = ["GpuProfile", "GpuProfiles", "RoleEstimate", "default_profiles", "estimate_role"]
