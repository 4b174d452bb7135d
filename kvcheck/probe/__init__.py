"""The probe's parts: limits, plan, prompts, transport, wire and the per-request judge (run by commands/probe.py)."""
