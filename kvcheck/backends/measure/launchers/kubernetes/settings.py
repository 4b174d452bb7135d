"""What the Kubernetes launcher needs to know: where to create objects and how to shape their pods.

Filled from the manifest's `launcher.kubernetes` block and the command line (which wins). Times in
seconds. Values that Kubernetes takes as-is (tolerations, extra pod spec) stay plain mappings: they
are checked by the API server, which knows the cluster's version.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

DEFAULT_NAMESPACE = "default"
DEFAULT_HTTP_PORT = 30000  # SGLang's own default; the pod has its own network namespace
DEFAULT_DIST_INIT_PORT = 20000  # torch.distributed rendezvous on the leader (multi-node roles)
DEFAULT_TTL_S = 300
# registry.k8s.io's pause image: every node already holds it (the kubelet's sandbox image), it never
# exits and needs no GPU; it keeps a multi-node role's deadline Job alive until its deadline.
DEFAULT_ANCHOR_IMAGE = "registry.k8s.io/pause:3.10"
DEADLINE_MARGIN_S = 60  # the cluster's own deadline runs this long past kvcheck's timeout and grace


@dataclass(frozen=True)
class PodTemplates:
    """A role's pod templates as the deployment file writes them (Kubernetes or operator files).

    `leader` is the pod template (`metadata` and `spec`) of the pod that runs node 0; `worker` that of
    nodes 1.. (None: the leader's). `container` and `worker_container` name the engine's container in
    each (None: the one that asks for GPUs, else the first).
    """

    leader: Mapping[str, Any]
    worker: Mapping[str, Any] | None = None
    container: str | None = None
    worker_container: str | None = None
    source: str | None = None  # the file it came from, for messages


@dataclass(frozen=True)
class KubernetesSettings:
    """The launcher block's Kubernetes keys, resolved."""

    namespace: str = DEFAULT_NAMESPACE
    context: str | None = None  # kubeconfig context; None: the current one
    kubeconfig: str | None = None  # None: $KUBECONFIG, ~/.kube/config, or the in-cluster account
    image: str | None = None  # the engine's image; required unless a pod template names one
    service_account: str | None = None
    node_selector: Mapping[str, str] = field(default_factory=dict)
    tolerations: Sequence[Mapping[str, Any]] = ()
    image_pull_secrets: Sequence[str] = ()
    pod_spec: Mapping[str, Any] = field(default_factory=dict)  # merged over the rendered pod spec
    gpus_per_node: int | None = None  # None: the role's gpus list, else tp x pp (x dp) / nnodes
    gpu_resource: str = "nvidia.com/gpu"
    http_port: int = DEFAULT_HTTP_PORT
    dist_init_port: int = DEFAULT_DIST_INIT_PORT
    ttl_s: int = DEFAULT_TTL_S
    anchor_image: str = DEFAULT_ANCHOR_IMAGE
    unschedulable_wait_s: float = 0.0  # how long an Unschedulable pod may wait (cluster autoscaler)
    shm: bool = True  # mount a memory-backed /dev/shm (NCCL needs more than the runtime's 64 MiB)
    deadline_margin_s: int = DEADLINE_MARGIN_S  # past kvcheck's timeout and grace (tests shorten it)


def settings_from(spec: Any | None, **overrides: Any) -> KubernetesSettings:
    """Settings from the manifest's `launcher.kubernetes` block (any object with its attributes, None
    when absent), then the command line's values that are not None (they win)."""
    values: dict[str, Any] = {}
    if spec is not None:
        for name in (
            "namespace",
            "context",
            "kubeconfig",
            "image",
            "service_account",
            "gpus_per_node",
            "gpu_resource",
            "http_port",
            "dist_init_port",
            "anchor_image",
            "shm",
        ):
            value = getattr(spec, name, None)
            if value is not None:
                values[name] = value
        for name in ("node_selector", "pod_spec"):
            value = getattr(spec, name, None)
            if value:
                values[name] = dict(value)
        for name in ("tolerations", "image_pull_secrets"):
            value = getattr(spec, name, None)
            if value:
                values[name] = tuple(dict(v) if isinstance(v, Mapping) else v for v in value)
        if getattr(spec, "ttl_seconds", None) is not None:
            values["ttl_s"] = int(spec.ttl_seconds)
        if getattr(spec, "unschedulable_wait", None) is not None:
            values["unschedulable_wait_s"] = float(spec.unschedulable_wait)
    values.update({k: v for k, v in overrides.items() if v is not None})
    return KubernetesSettings(**values)
