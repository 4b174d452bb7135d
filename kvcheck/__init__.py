"""kvcheck: fail a rollout when an engine's KV-cache pool cannot hold the advertised context window."""

__version__ = "0.1.0"
