"""vLLM's KV-pool sizing, re-derived from its source per release (docs/estimate.md, vLLM)."""
