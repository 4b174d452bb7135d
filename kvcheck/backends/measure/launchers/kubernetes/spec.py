"""The manifest's `launcher.kubernetes` block: how `--launcher kubernetes` creates each role.

Resolved into `KubernetesSettings` (settings.py) when the launcher is built; docs/measure.md lists
every key.
"""

from __future__ import annotations

from typing import Any

from pydantic import Field

from kvcheck.backends.measure.launchers.spec import LauncherSettings

# A Kubernetes object name or namespace (DNS-1123 label).
_DNS_LABEL = r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$"


class KubernetesSpec(LauncherSettings):
    """How `--launcher kubernetes` creates each role (a Job, or a LeaderWorkerSet; docs/measure.md)."""

    namespace: str | None = Field(default=None, pattern=_DNS_LABEL, description="Where the objects go; default: default.")
    context: str | None = Field(default=None, description="The kubeconfig context; default: the current one.")
    kubeconfig: str | None = Field(default=None, description="The kubeconfig file; default: $KUBECONFIG, ~/.kube/config.")
    image: str | None = Field(
        default=None, min_length=1, description="The engine's image, e.g. lmsysorg/sglang:v0.5.23 (over a pod template's)."
    )
    service_account: str | None = Field(default=None, pattern=_DNS_LABEL, description="The pods' service account.")
    node_selector: dict[str, str] = Field(default_factory=dict, description="Added to the pods' nodeSelector.")
    tolerations: list[dict[str, Any]] = Field(default_factory=list, description="Added to the pods' tolerations.")
    image_pull_secrets: list[str] = Field(default_factory=list, description="Names of the pull Secrets.")
    pod_spec: dict[str, Any] = Field(
        default_factory=dict, description="Other pod spec fields, merged over the rendered pod spec last."
    )
    gpus_per_node: int | None = Field(
        default=None, ge=1, description="GPUs per pod; default: the role's gpus list, else TP x PP (x DP) / nnodes."
    )
    gpu_resource: str | None = Field(default=None, description="The GPU resource name; default: nvidia.com/gpu.")
    http_port: int | None = Field(default=None, ge=1, le=65535, description="The engine's port in its pod (30000).")
    dist_init_port: int | None = Field(
        default=None, ge=1, le=65535, description="The multi-node rendezvous port on the leader (20000)."
    )
    ttl_seconds: int | None = Field(default=None, ge=0, description="ttlSecondsAfterFinished of every Job (300).")
    unschedulable_wait: float | None = Field(
        default=None, ge=0, description="Seconds a pod may stay Unschedulable before the role fails (0)."
    )
    shm: bool | None = Field(default=None, description="Mount a memory-backed /dev/shm (true).")
    anchor_image: str | None = Field(
        default=None, min_length=1, description="The deadline Job's image (registry.k8s.io/pause:3.10)."
    )
