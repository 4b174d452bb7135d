"""The base of every launcher's settings block (the manifest's `launcher.<kind>`): as strict as the manifest.

Each launcher keeps its block's model beside its code (`slurm_spec.py`, `kubernetes/spec.py`); the
registry (`launchers/__init__.py`) hands them to the manifest model, keyed by the launcher's kind.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class LauncherSettings(BaseModel):
    """Unknown keys are errors, values are not coerced, as everywhere in the manifest (inputs/manifest/model.py)."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True, str_strip_whitespace=True)
