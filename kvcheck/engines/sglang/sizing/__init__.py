"""Estimate mode: predict each role's KV pool the way SGLang 0.5.23 sizes it, without a GPU."""

from kvcheck.engines.sglang.sizing.model import estimate_role
from kvcheck.gpus import GpuProfile, GpuProfiles, default_profiles

__all__ = ["GpuProfile", "GpuProfiles", "default_profiles", "estimate_role"]
