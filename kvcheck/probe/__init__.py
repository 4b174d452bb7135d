"""`kvcheck probe URL`: test a live deployment's rejection path and tenant isolation as clients see it."""

from kvcheck.probe.options import ProbeOptions
from kvcheck.probe.runner import plan_probe, run_probe

__all__ = ["ProbeOptions", "plan_probe", "run_probe"]
