"""Engine-specific knowledge; one sub-package per engine."""
