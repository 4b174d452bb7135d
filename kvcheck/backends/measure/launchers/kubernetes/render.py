"""The Kubernetes objects one role becomes: a Job on one node, a LeaderWorkerSet across several.

Every object carries the run's labels (`kvcheck.io/run-id`, `app.kubernetes.io/managed-by: kvcheck`),
so `kvcheck cleanup` finds what a killed run left. The engine runs the role's exact production
arguments; kvcheck only appends where it listens (all interfaces, the pod's port; last so they win)
and, on several nodes, each pod's place in the group (the leader's address and the pod's rank from
the LeaderWorkerSet's own variables, expanded by the kubelet per pod), as the role's engine writes them
(`Engine.launch_argv`); the workers' pods add what the engine runs on nodes other than the head
(`Engine.worker_argv`: vLLM's `--headless`).

The cluster bounds every object's life on its own, so that even a kvcheck killed with SIGKILL cannot
leave engines holding GPUs: a Job has `activeDeadlineSeconds` (kvcheck's timeout plus its grace and a
margin) and `ttlSecondsAfterFinished`. A LeaderWorkerSet has neither, so it is owned by a small
"deadline" Job (the pause image, no GPU) with that deadline and TTL: when the Job is deleted, the
garbage collector deletes the LeaderWorkerSet and its pods.
"""

from __future__ import annotations

import copy
import math
import re
import secrets
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import yaml

from kvcheck.backends.measure.launchers.command import build_argv, role_nnodes
from kvcheck.backends.measure.launchers.kubernetes.settings import (
    DEADLINE_MARGIN_S,
    KubernetesSettings,
    PodTemplates,
)
from kvcheck.engines import get_engine
from kvcheck.engines.base import NodeLaunch
from kvcheck.errors import InputError
from kvcheck.model import RoleTarget

GROUP = "kvcheck.io"
RUN_LABEL = f"{GROUP}/run-id"
ROLE_LABEL = f"{GROUP}/role"
PART_LABEL = f"{GROUP}/part"  # engine: the role's pods; deadline: a LeaderWorkerSet's deadline Job
MANAGED_LABEL = "app.kubernetes.io/managed-by"
MANAGED_BY = "kvcheck"
ROLE_NAME_ANNOTATION = f"{GROUP}/role-name"
LWS_API = "leaderworkerset.x-k8s.io/v1"
UID_PLACEHOLDER = "<set when the deadline Job is created>"
ENGINE_CONTAINER = "engine"
# Probes would restart or hide an engine that loads weights for half an hour; the measurement reads
# the log and /server_info itself.
_PROBES = ("livenessProbe", "readinessProbe", "startupProbe")
_ROLE_SLUG_CHARS = 20  # "kvcheck-" + run id + "-" + slug stays far below 63 (pod and StatefulSet names)


def new_run_id() -> str:
    """A per-run id: 8 lowercase hex characters, valid in names and label values."""
    return secrets.token_hex(4)


def role_slug(name: str) -> str:
    """A role name as a DNS-1123 label fragment: lowercase letters, digits and '-'."""
    slug = re.sub(r"[^a-z0-9-]+", "-", name.lower()).strip("-")[:_ROLE_SLUG_CHARS].strip("-")
    return slug or "role"


def object_name(run_id: str, role: str) -> str:
    return f"kvcheck-{run_id}-{role_slug(role)}"


def run_selector(run_id: str | None = None) -> str:
    """The label selector for everything kvcheck created (one run, or every run)."""
    selector = f"{MANAGED_LABEL}={MANAGED_BY}"
    return f"{selector},{RUN_LABEL}={run_id}" if run_id else f"{selector},{RUN_LABEL}"


def engine_pod_selector(run_id: str, role: str) -> str:
    return f"{RUN_LABEL}={run_id},{ROLE_LABEL}={role_slug(role)},{PART_LABEL}=engine"


def deadline_s(timeout_s: float, grace_s: float, margin_s: int = DEADLINE_MARGIN_S) -> int:
    """The cluster's own limit on a role's objects: kvcheck's timeout, its grace and a margin."""
    return int(math.ceil(timeout_s + grace_s)) + margin_s


def _int_arg(target: RoleTarget, name: str, default: int = 1) -> int:
    value = target.args.get(name)
    try:
        return int(value) if value is not None else default
    except (TypeError, ValueError):
        return default


def gpus_per_node(target: RoleTarget, settings: KubernetesSettings, nnodes: int) -> int:
    """GPUs one pod asks for: the launcher's setting, the role's GPU list, else the engine's count over the nodes.

    An engine that counts its own GPUs (vLLM: TP x PP x DP, `Engine.gpus_needed`) gives the instance's
    total; otherwise SGLang's world: tp x pp GPUs, data-parallel replicas without attention DP add dp.
    """
    if settings.gpus_per_node is not None:
        return settings.gpus_per_node
    if target.gpus:
        return len(target.gpus)
    needed = get_engine(target.engine).gpus_needed(target.args)  # the engine's own count (vLLM's flag names)
    if needed is not None:
        return max(1, math.ceil(needed / max(1, nnodes)))
    world = _int_arg(target, "tp_size") * _int_arg(target, "pp_size")
    if not target.args.get("enable_dp_attention"):
        world *= _int_arg(target, "dp_size")
    return max(1, math.ceil(world / max(1, nnodes)))


def engine_argv(
    target: RoleTarget, settings: KubernetesSettings, *, nnodes: int, dummy_weights: bool
) -> tuple[str, ...]:
    """The container's command: the production command line, where to listen, and the node's rank.

    On several nodes `$(LWS_LEADER_ADDRESS)` and `$(LWS_WORKER_INDEX)` are Kubernetes variable
    references: the kubelet expands them per pod from the variables the LeaderWorkerSet sets, so
    each pod gets its own rank (0 on the leader) without a shell.
    """
    node = None
    if nnodes > 1:
        # no nnodes: it is among the role's own args (it is how kvcheck knows the role spans nodes)
        node = NodeLaunch(
            dist_init_addr=f"$(LWS_LEADER_ADDRESS):{settings.dist_init_port}", node_rank="$(LWS_WORKER_INDEX)"
        )
    return build_argv(
        target,
        port=settings.http_port,
        bootstrap_port=None,
        dummy_weights=dummy_weights,
        host="0.0.0.0",
        node=node,
    )


@dataclass(frozen=True)
class RenderedRole:
    """What one role becomes: the objects in creation order and what the run loop needs to watch."""

    role: str
    name: str  # the Job's or the LeaderWorkerSet's name
    kind: str  # Job or LeaderWorkerSet
    nnodes: int
    gpus_per_node: int
    argv: tuple[str, ...]
    objects: tuple[dict[str, Any], ...]
    pod_selector: str
    container: str  # the engine container's name in every pod


def _labels(run_id: str, role: str, part: str) -> dict[str, str]:
    return {MANAGED_LABEL: MANAGED_BY, RUN_LABEL: run_id, ROLE_LABEL: role_slug(role), PART_LABEL: part}


def _metadata(
    name: str, settings: KubernetesSettings, labels: Mapping[str, str], role: str
) -> dict[str, Any]:
    return {
        "name": name,
        "namespace": settings.namespace,
        "labels": dict(labels),
        "annotations": {ROLE_NAME_ANNOTATION: role},
    }


def _merge(base: dict[str, Any], extra: Mapping[str, Any]) -> dict[str, Any]:
    """`extra` over `base`: mappings merge key by key, anything else (lists too) is replaced."""
    for key, value in extra.items():
        if isinstance(value, Mapping) and isinstance(base.get(key), dict):
            _merge(base[key], value)
        else:
            base[key] = copy.deepcopy(value)
    return base


def _pick_container(containers: Sequence[Mapping[str, Any]], wanted: str | None, source: str) -> int:
    """The engine's container: the one named, else the one asking for GPUs, else the first."""
    if not containers:
        raise InputError(
            f"{source}: the pod template has no containers", hint="point kvcheck at the engine's pod"
        )
    if wanted is not None:
        for i, container in enumerate(containers):
            if container.get("name") == wanted:
                return i
        names = ", ".join(str(c.get("name")) for c in containers)
        raise InputError(f"{source}: the pod template has no container '{wanted}' (it has: {names})")
    for i, container in enumerate(containers):
        resources = container.get("resources") or {}
        for part in ("limits", "requests"):
            if any("gpu" in str(key) for key in (resources.get(part) or {})):
                return i
    return 0


def _env(existing: Sequence[Mapping[str, Any]], extra: Mapping[str, str]) -> list[dict[str, Any]]:
    """The container's env with the role's variables set over it (same name: the role's value)."""
    out = [dict(item) for item in existing if item.get("name") not in extra]
    out += [{"name": str(k), "value": str(v)} for k, v in extra.items()]
    return out


def _image_hint(target: RoleTarget) -> str:
    """Where the engine's image is set, with an image of the role's own engine and release as the example
    (vllm/vllm-openai:v0.32.0 for a vLLM 0.32.0 role, lmsysorg/sglang:v0.5.23 for SGLang 0.5.23)."""
    repository = get_engine(target.engine).image_repository
    if repository is None:
        return "set launcher.kubernetes.image in the manifest"
    tag = f":v{target.engine_version}" if target.engine_version else ""
    return f"set launcher.kubernetes.image in the manifest, e.g. {repository}{tag}"


def _pod_template(
    target: RoleTarget,
    settings: KubernetesSettings,
    *,
    base: Mapping[str, Any] | None,
    container_name: str | None,
    source: str,
    argv: tuple[str, ...],
    gpus: int,
    labels: Mapping[str, str],
    restart_policy: str,
) -> tuple[dict[str, Any], str]:
    """A pod template: the deployment's own (when given) or one built from the launcher settings.

    The deployment's labels are dropped (its Services select on them: production traffic must never
    reach a measurement), its annotations kept. Every launcher key that is set applies over it.
    """
    if base is not None:
        spec = copy.deepcopy(dict(base.get("spec") or {}))
        annotations = dict((base.get("metadata") or {}).get("annotations") or {})
        containers = spec.setdefault("containers", [])
        index = _pick_container(containers, container_name, source)
        container = containers[index]
        if settings.image is not None:
            container["image"] = settings.image
        elif not container.get("image"):
            raise InputError(
                f"{source}: the engine's container names no image", hint=_image_hint(target)
            )
    else:
        # the launcher's image, else the one the role's deployment file names (a Helm values file's
        # repository:tag, an operator's container: formats with no pod template kvcheck can reuse)
        image = settings.image or target.image
        if image is None:
            raise InputError(
                f"role {target.name}: the Kubernetes launcher needs the engine's image", hint=_image_hint(target)
            )
        spec = {}
        annotations = {}
        container = {"name": ENGINE_CONTAINER, "image": image}
        spec["containers"] = [container]
    container["command"] = list(argv)
    container.pop("args", None)
    for probe in _PROBES:
        container.pop(probe, None)
    container["env"] = _env(container.get("env") or [], target.env)
    # A host port would claim production's port on the node (and keep the pod off nodes that use it).
    ports = [
        {k: v for k, v in p.items() if k != "hostPort"}
        for p in container.get("ports") or []
        if p.get("containerPort") != settings.http_port
    ]
    container["ports"] = [{"name": "kvcheck-http", "containerPort": settings.http_port}, *ports]
    resources = container.setdefault("resources", {})
    limits = resources.setdefault("limits", {})
    if settings.gpu_resource not in limits:
        limits[settings.gpu_resource] = str(gpus)
    if base is None and settings.shm:
        spec["volumes"] = [{"name": "dshm", "emptyDir": {"medium": "Memory"}}]
        container["volumeMounts"] = [{"name": "dshm", "mountPath": "/dev/shm"}]
    spec["restartPolicy"] = restart_policy
    _apply_scheduling(spec, settings)
    metadata: dict[str, Any] = {"labels": dict(labels)}
    if annotations:
        metadata["annotations"] = annotations
    return {"metadata": metadata, "spec": spec}, str(container.get("name") or ENGINE_CONTAINER)


def _apply_scheduling(spec: dict[str, Any], settings: KubernetesSettings) -> None:
    """The launcher's service account, node selector, tolerations, pull secrets and pod_spec, over the pod's."""
    if settings.service_account is not None:
        spec["serviceAccountName"] = settings.service_account
    if settings.node_selector:
        spec["nodeSelector"] = {**(spec.get("nodeSelector") or {}), **settings.node_selector}
    if settings.tolerations:
        spec["tolerations"] = [*(spec.get("tolerations") or []), *map(dict, settings.tolerations)]
    if settings.image_pull_secrets:
        spec["imagePullSecrets"] = [{"name": name} for name in settings.image_pull_secrets]
    _merge(spec, settings.pod_spec)


def render_role(
    target: RoleTarget,
    settings: KubernetesSettings,
    *,
    run_id: str,
    timeout_s: float,
    grace_s: float = 15.0,
    dummy_weights: bool = False,
    templates: PodTemplates | None = None,
) -> RenderedRole:
    """The objects for one role, in creation order (a LeaderWorkerSet's deadline Job first)."""
    nnodes = role_nnodes(target)
    gpus = gpus_per_node(target, settings, nnodes)
    argv = engine_argv(target, settings, nnodes=nnodes, dummy_weights=dummy_weights)
    name = object_name(run_id, target.name)
    deadline = deadline_s(timeout_s, grace_s, settings.deadline_margin_s)
    engine_labels = _labels(run_id, target.name, "engine")
    source = templates.source if templates is not None and templates.source else f"role {target.name}"
    leader_base = templates.leader if templates is not None else None
    container_name = templates.container if templates is not None else None
    if nnodes <= 1:
        pod, container = _pod_template(
            target,
            settings,
            base=leader_base,
            container_name=container_name,
            source=source,
            argv=argv,
            gpus=gpus,
            labels=engine_labels,
            restart_policy="Never",
        )
        job = {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": _metadata(name, settings, engine_labels, target.name),
            "spec": {
                "backoffLimit": 0,
                "activeDeadlineSeconds": deadline,
                "ttlSecondsAfterFinished": settings.ttl_s,
                "template": pod,
            },
        }
        return RenderedRole(
            role=target.name,
            name=name,
            kind="Job",
            nnodes=1,
            gpus_per_node=gpus,
            argv=argv,
            objects=(job,),
            pod_selector=engine_pod_selector(run_id, target.name),
            container=container,
        )
    # StatefulSets (which a LeaderWorkerSet runs on) only take restartPolicy Always.
    leader, container = _pod_template(
        target,
        settings,
        base=leader_base,
        container_name=container_name,
        source=source,
        argv=argv,
        gpus=gpus,
        labels=engine_labels,
        restart_policy="Always",
    )
    worker_base = leader_base
    worker_container = container_name
    if templates is not None and templates.worker is not None:
        worker_base, worker_container = templates.worker, templates.worker_container
    worker, _ = _pod_template(
        target,
        settings,
        base=worker_base,
        container_name=worker_container,
        source=source,
        argv=(*argv, *get_engine(target.engine).worker_argv()),  # vLLM: --headless, no API server
        gpus=gpus,
        labels=engine_labels,
        restart_policy="Always",
    )
    anchor_name = f"{name}-deadline"
    anchor_labels = _labels(run_id, target.name, "deadline")
    anchor_container: dict[str, Any] = {
        "name": "deadline",
        "image": settings.anchor_image,
        "resources": {"requests": {"cpu": "1m", "memory": "8Mi"}, "limits": {"cpu": "10m", "memory": "16Mi"}},
    }
    anchor_pod: dict[str, Any] = {"restartPolicy": "Never", "containers": [anchor_container]}
    if settings.image_pull_secrets:
        anchor_pod["imagePullSecrets"] = [{"name": n} for n in settings.image_pull_secrets]
    anchor = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": _metadata(anchor_name, settings, anchor_labels, target.name),
        "spec": {
            "backoffLimit": 0,
            "activeDeadlineSeconds": deadline,
            "ttlSecondsAfterFinished": settings.ttl_s,
            "template": {"metadata": {"labels": anchor_labels}, "spec": anchor_pod},
        },
    }
    lws_metadata = _metadata(name, settings, engine_labels, target.name)
    lws_metadata["ownerReferences"] = [
        {"apiVersion": "batch/v1", "kind": "Job", "name": anchor_name, "uid": UID_PLACEHOLDER}
    ]
    lws = {
        "apiVersion": LWS_API,
        "kind": "LeaderWorkerSet",
        "metadata": lws_metadata,
        "spec": {
            "replicas": 1,
            "leaderWorkerTemplate": {
                "size": nnodes,
                # A failed pod must end the measurement, not be recreated with its group.
                "restartPolicy": "None",
                "leaderTemplate": leader,
                "workerTemplate": worker,
            },
        },
    }
    return RenderedRole(
        role=target.name,
        name=name,
        kind="LeaderWorkerSet",
        nnodes=nnodes,
        gpus_per_node=gpus,
        argv=argv,
        objects=(anchor, lws),
        pod_selector=engine_pod_selector(run_id, target.name),
        container=container,
    )


def render_run(
    targets: Sequence[RoleTarget],
    settings: KubernetesSettings,
    *,
    run_id: str,
    timeout_s: float,
    grace_s: float = 15.0,
    dummy_weights: bool = False,
    templates: Mapping[str, PodTemplates] | None = None,
) -> list[RenderedRole]:
    """Every role's objects; two roles whose names give one object name are an input error."""
    seen: dict[str, str] = {}
    for target in targets:
        slug = role_slug(target.name)
        if slug in seen:
            raise InputError(
                f"roles '{seen[slug]}' and '{target.name}' would both be named {object_name(run_id, target.name)} "
                "in Kubernetes",
                hint="rename one of the roles (lowercase letters, digits and '-' are kept as they are)",
            )
        seen[slug] = target.name
    return [
        render_role(
            target,
            settings,
            run_id=run_id,
            timeout_s=timeout_s,
            grace_s=grace_s,
            dummy_weights=dummy_weights,
            templates=(templates or {}).get(target.name),
        )
        for target in targets
    ]


def to_yaml(objects: Sequence[Mapping[str, Any]]) -> str:
    """Objects as one multi-document YAML stream, keys in the order Kubernetes users write them."""
    return yaml.safe_dump_all(
        [dict(o) for o in objects], sort_keys=False, default_flow_style=False, width=1000
    )
