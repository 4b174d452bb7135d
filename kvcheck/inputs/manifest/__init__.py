"""The deployment manifest: pydantic models, positional YAML loading, expansion into RoleTargets."""
