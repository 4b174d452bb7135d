"""The manifest's `launcher.slurm` block: how `--launcher slurm` asks for each role's allocation.

Resolved into `SlurmSettings` (slurm.py) when the launcher is built; docs/measure.md lists every key.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from kvcheck.backends.measure.launchers.spec import LauncherSettings


class SlurmContainerSpec(LauncherSettings):
    """Container options for sites whose srun runs tasks in images (the pyxis plugin's flags)."""

    image: str = Field(min_length=1, description="--container-image: the engine's image.")
    mounts: list[str] = Field(default_factory=list, description="--container-mounts, e.g. /models:/models.")
    workdir: str | None = Field(default=None, description="--container-workdir.")
    options: list[str] = Field(
        default_factory=list, description="Further srun options for the container, e.g. --container-env=HF_TOKEN."
    )


class SlurmSpec(LauncherSettings):
    """How `--launcher slurm` asks for each role's allocation (one per role; see docs/measure.md)."""

    partition: str | None = Field(default=None, description="--partition; default: the cluster's default.")
    account: str | None = Field(default=None, description="--account.")
    qos: str | None = Field(default=None, description="--qos.")
    reservation: str | None = Field(default=None, description="--reservation.")
    constraint: str | None = Field(default=None, description="--constraint (node features), e.g. h100.")
    gres_type: str | None = Field(
        default=None, description="GPU type in the request: h100 gives --gres=gpu:h100:N (or --gpus-per-node=h100:N)."
    )
    gpus_flag: Literal["gres", "gpus-per-node"] = Field(
        default="gres", description="How GPUs are requested: --gres=gpu:N or --gpus-per-node=N."
    )
    gpus_per_node: int | None = Field(
        default=None, ge=1, description="GPUs per node; default: the role's gpus list, else TP x PP (x DP) / nnodes."
    )
    salloc_options: list[str] = Field(
        default_factory=list, description="Extra allocation options, e.g. [--exclusive, --mem=0]."
    )
    srun_options: list[str] = Field(default_factory=list, description="Extra srun options, e.g. [--mpi=none].")
    container: SlurmContainerSpec | None = Field(default=None, description="Run the engine in a container image.")
