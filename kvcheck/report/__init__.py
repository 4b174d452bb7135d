"""Report values and the renderers that turn them into text."""

from kvcheck.report.model import Finding, Location, Report, RoleResult

__all__ = ["Finding", "Location", "Report", "RoleResult"]
