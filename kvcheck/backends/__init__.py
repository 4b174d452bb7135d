"""Ways to obtain a role's KV pool: measure (boot the engine), estimate, audit (live servers), logs."""
