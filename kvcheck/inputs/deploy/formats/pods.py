"""Kubernetes pod templates: the container that starts a server, its GPUs, its image's release, its --config.

Every Kubernetes format (workloads, LeaderWorkerSet, RBG, Dynamo, OME) finds its roles' servers here.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from kvcheck.errors import InputIssue
from kvcheck.inputs.deploy.formats.base import Inputs, RoleSource, get
from kvcheck.inputs.deploy.server import (
    Env,
    ScriptError,
    ServerCommand,
    Sourced,
    Token,
    container_env,
    exec_tokens,
    find_server,
    registered_engines,
)
from kvcheck.inputs.deploy.source import Doc
from kvcheck.io.yamlpos import Path_
from kvcheck.model import Location

if TYPE_CHECKING:
    from kvcheck.engines.base import Engine

GPU_RESOURCES = ("nvidia.com/gpu", "amd.com/gpu", "gpu")
GPU_TYPE_LABELS = (  # GPU feature discovery (OpenShift's too), GKE, EKS/Karpenter, AMD's device plugin
    "nvidia.com/gpu.product", "cloud.google.com/gke-accelerator", "karpenter.k8s.aws/instance-gpu-name",
    "amd.com/gpu.product-name",
)


def image_version(doc: Doc, container: Mapping[str, Any], path: Path_, engine: str) -> Sourced | None:
    """The release the container's image tag names, as the server's engine reads it (lmsysorg/sglang:v0.5.23-cu129
    -> 0.5.23); a value of None with the reason as its origin for an engine image that names none (a floating
    tag); None for any other image."""
    from kvcheck.engines import get_engine

    image = container.get("image")
    if not isinstance(image, str):
        return None
    release = get_engine(engine).release_from_image(image)
    if release is None:
        reason = get_engine(engine).unpinned_reason(image)
        return Sourced(None, doc.at((*path, "image")), reason) if reason else None
    return Sourced(release, doc.at((*path, "image")), f"image {image}")


def gpu_limit(doc: Doc, resources: Any, path: Path_) -> Sourced | None:
    """GPUs per pod from resource limits (requests when limits say nothing)."""
    if not isinstance(resources, Mapping):
        return None
    for section in ("limits", "requests"):
        block = resources.get(section)
        if not isinstance(block, Mapping):
            continue
        for name in GPU_RESOURCES:
            if name in block:
                try:
                    count = int(str(block[name]))
                except ValueError:
                    continue
                return Sourced(count, doc.at((*path, section, name)), f"{section}[{name}]")
    return None


def gpu_type(doc: Doc, pod_spec: Any, path: Path_) -> Sourced | None:
    """The GPU product a pod is pinned to: nodeSelector, else a required node-affinity term with one value."""
    if not isinstance(pod_spec, Mapping):
        return None
    selector = pod_spec.get("nodeSelector")
    if isinstance(selector, Mapping):
        for label in GPU_TYPE_LABELS:
            if isinstance(selector.get(label), str):
                return Sourced(selector[label], doc.at((*path, "nodeSelector", label)), f"nodeSelector {label}")
    terms = get(pod_spec, "affinity", "nodeAffinity", "requiredDuringSchedulingIgnoredDuringExecution", "nodeSelectorTerms")
    for t, term in enumerate(terms or []):
        for e, expression in enumerate(get(term, "matchExpressions") or []):
            if not isinstance(expression, Mapping) or expression.get("key") not in GPU_TYPE_LABELS:
                continue
            values = expression.get("values") or []
            if expression.get("operator") == "In" and len(values) == 1:
                where = doc.at(
                    (*path, "affinity", "nodeAffinity", "requiredDuringSchedulingIgnoredDuringExecution",
                     "nodeSelectorTerms", t, "matchExpressions", e, "values", 0)
                )
                return Sourced(str(values[0]), where, f"node affinity {expression['key']}")
    return None


@dataclass
class PodServer:
    """The server container of a pod template, with what the pod says about GPUs."""

    server: ServerCommand
    env: Env
    location: Location
    gpus_per_node: Sourced | None
    gpu: Sourced | None
    version: Sourced | None
    config_source: Callable[[Token], tuple[Doc, Path_, str] | None]
    labels: dict[str, str] = field(default_factory=dict)  # the pod template's metadata.labels
    no_gpus: Location | None = None  # the container, when the pod asks the scheduler for no GPU (no_gpu_request)
    image: Sourced | None = None  # the server container's image, as written


def no_gpu_request(doc: Doc, container: Mapping[str, Any], spec: Mapping[str, Any], cpath: Path_) -> Location | None:
    """The container's place when its pod gets no GPU from the scheduler: no accelerator in its resources, no
    dynamic resource claim (DRA), and no NVIDIA_VISIBLE_DEVICES handing the runtime's devices over without one.
    None when the container states GPUs, or may get them in one of those ways."""
    resources = container.get("resources")
    if gpu_limit(doc, resources, (*cpath, "resources")) is not None:
        return None
    if isinstance(resources, Mapping) and resources.get("claims") or spec.get("resourceClaims"):
        return None
    env = container.get("env")
    if any(isinstance(item, Mapping) and item.get("name") == "NVIDIA_VISIBLE_DEVICES"
           for item in (env if isinstance(env, list) else [])):
        return None
    return doc.at(cpath)


def container_image(doc: Doc, container: Mapping[str, Any], cpath: Path_) -> Sourced | None:
    image = container.get("image")
    return Sourced(image, doc.at((*cpath, "image")), "image") if isinstance(image, str) and image else None


def pod_labels(template: Any) -> dict[str, str]:
    labels = get(template, "metadata", "labels")
    return {str(k): str(v) for k, v in labels.items()} if isinstance(labels, Mapping) else {}


def pod_server(
    doc: Doc,
    template: Any,
    path: Path_,
    inputs: Inputs,
    *,
    injected: Mapping[str, Sourced],
    spec_key: str | None = "spec",
) -> PodServer | None:
    """The container of a pod template (`template.spec.containers`) that starts an engine's server."""
    spec = template.get(spec_key) if spec_key and isinstance(template, Mapping) else template
    spec_path: Path_ = (*path, spec_key) if spec_key else path
    if not isinstance(spec, Mapping):
        return None
    for i, container in enumerate(spec.get("containers") or []):
        if not isinstance(container, Mapping):
            continue
        cpath: Path_ = (*spec_path, "containers", i)
        found = container_server(doc, container, cpath, inputs, injected=injected)
        if found is None:
            continue
        server, env = found
        _one_server_per_pod(doc, spec, spec_path, i, inputs, injected)
        return PodServer(
            server=server,
            env=env,
            location=doc.at(cpath),
            gpus_per_node=gpu_limit(doc, container.get("resources"), (*cpath, "resources")),
            gpu=gpu_type(doc, spec, spec_path),
            version=image_version(doc, container, cpath, server.engine),
            config_source=config_source(doc, container, spec, cpath, spec_path, inputs),
            labels=pod_labels(template),
            no_gpus=no_gpu_request(doc, container, spec, cpath),
            image=container_image(doc, container, cpath),
        )
    for i, container in enumerate(spec.get("containers") or []):
        args = container.get("args") if isinstance(container, Mapping) else None
        if not (isinstance(container, Mapping) and not container.get("command") and isinstance(args, list) and args):
            continue
        image = str(container.get("image") or "")
        cpath = (*spec_path, "containers", i)
        starts = image_engine(image)
        if starts is None and not str(args[0]).startswith("--"):
            continue
        if starts is not None:  # the engine's own image starts its server: the args are appended to it
            found = entrypoint_server(doc, container, cpath, inputs, injected)
            if found is not None:
                server, env = found
                _one_server_per_pod(doc, spec, spec_path, i, inputs, injected)
                return PodServer(
                    server=server, env=env, location=doc.at(cpath),
                    gpus_per_node=gpu_limit(doc, container.get("resources"), (*cpath, "resources")),
                    gpu=gpu_type(doc, spec, spec_path), version=image_version(doc, container, cpath, server.engine),
                    config_source=config_source(doc, container, spec, cpath, spec_path, inputs),
                    labels=pod_labels(template),
                    no_gpus=no_gpu_request(doc, container, spec, cpath),
                    image=container_image(doc, container, cpath),
                )
        # the engine's own image (lmsysorg/sglang:v...), not a wrapper's that pins a release (Dynamo's sglang-runtime)
        engine = next((e for e in registered_engines() if e.image_repository and e.image_repository in image
                       and e.release_from_image(image) is not None), None)
        if engine is not None:
            # the engine's flags on the image's own entrypoint, which the file does not show: say so, assume nothing
            where = doc.at((*spec_path, "containers", i, "args"))
            raise ScriptError(InputIssue(
                where.file, where.line, where.column, "",
                f"the container passes {engine.label} flags as args to its image's entrypoint, which the file does "
                f"not state; add command: [{', '.join(engine.default_command)}] so kvcheck reads what runs",
            ))
    return None


def _one_server_per_pod(
    doc: Doc, spec: Mapping[str, Any], spec_path: Path_, first: int, inputs: Inputs, injected: Mapping[str, Sourced],
) -> None:
    """A second container of the pod that starts a server too: exit 2 at it. kvcheck reads one server a pod
    template, and checking the first alone would pass a pod whose other server holds a smaller pool."""
    containers = spec.get("containers") or []
    for j in range(len(containers)):
        container = containers[j]
        if j == first or not isinstance(container, Mapping):
            continue
        cpath: Path_ = (*spec_path, "containers", j)
        try:
            # an engine image started on its own entrypoint (args only) is a server too
            other = container_server(doc, container, cpath, inputs, injected=injected) if j > first else None
            other = other or entrypoint_server(doc, container, cpath, inputs, injected)
        except ScriptError:
            continue  # a sidecar whose script kvcheck cannot read: not taken for a server
        if other is not None:
            where = doc.at(cpath)
            names = [str(c.get("name") or f"#{k}") for k, c in ((first, containers[first]), (j, container))
                     if isinstance(c, Mapping)]
            raise ScriptError(InputIssue(
                where.file, where.line, where.column, "",
                f"the pod starts a server in two containers ({' and '.join(names)}): kvcheck checks one server a "
                "pod, and reading the first alone could pass the other; put each server in its own workload",
            ))


def entrypoint_server(
    doc: Doc, container: Mapping[str, Any], cpath: Path_, inputs: Inputs, injected: Mapping[str, Sourced],
) -> tuple[ServerCommand, Env] | None:
    """The server a container without `command` starts on its engine image's own entrypoint, else None."""
    args = container.get("args")
    starts = image_engine(str(container.get("image") or ""))
    if container.get("command") or not isinstance(args, list) or not args or starts is None:
        return None
    return container_server(doc, container, cpath, inputs, injected=injected,
                            entrypoint=(starts.image_entrypoint or (), doc.at((*cpath, "image"))))


def image_engine(image: str) -> Engine | None:
    """The engine whose published image this is, when that image starts the engine's server by itself
    (`Engine.image_entrypoint`: vllm/vllm-openai runs `vllm serve`), any tag."""
    name = image.rsplit("@", 1)[0]
    repository = name.rsplit(":", 1)[0] if ":" in name.rsplit("/", 1)[-1] else name
    return next((e for e in registered_engines() if e.image_entrypoint and e.image_repository
                 and (repository == e.image_repository or repository.endswith("/" + e.image_repository))), None)


def container_server(
    doc: Doc, container: Mapping[str, Any], path: Path_, inputs: Inputs, *, injected: Mapping[str, Sourced],
    entrypoint: tuple[Sequence[str], Location] | None = None,
) -> tuple[ServerCommand, Env] | None:
    """The server a container starts (exec form or a shell script) and the variables it sees, else None.

    `entrypoint`: the words the image starts (its ENTRYPOINT, placed at the image), before the container's args."""
    env = container_env(doc, container, path, injected=injected, config_maps=inputs.config_maps)
    tokens = exec_tokens(doc, container, path, env)
    if not tokens:
        return None
    command_len = len(container.get("command") or []) if isinstance(container.get("command"), list) else 0
    if entrypoint is not None:
        words, at = entrypoint
        tokens = [Token(word, at) for word in words] + tokens
        command_len = -len(words)  # every word the file holds is an args word

    def script_path(index: int) -> Path_ | None:
        if command_len < 0:
            return None if index < -command_len else (*path, "args", index + command_len)
        return (*path, "command", index) if index < command_len else (*path, "args", index - command_len)

    server = find_server(tokens, env, doc=doc, script_path=script_path)
    return (server, env) if server is not None else None


def config_source(
    doc: Doc, container: Mapping[str, Any], spec: Mapping[str, Any], cpath: Path_, spec_path: Path_, inputs: Inputs
) -> Callable[[Token], tuple[Doc, Path_, str] | None]:
    """Resolve `--config PATH` to the ConfigMap entry mounted at PATH, when that ConfigMap is among the inputs."""

    def resolve(token: Token) -> tuple[Doc, Path_, str] | None:
        target = token.text
        for mount in container.get("volumeMounts") or []:
            if not isinstance(mount, Mapping) or not isinstance(mount.get("mountPath"), str):
                continue
            mount_path = mount["mountPath"].rstrip("/")
            sub = mount.get("subPath")
            if sub and target == mount_path:
                relative = str(sub)
            elif target.startswith(mount_path + "/"):
                relative = target[len(mount_path) + 1 :]
            else:
                continue
            volume = next(
                (v for v in spec.get("volumes") or [] if isinstance(v, Mapping) and v.get("name") == mount.get("name")),
                None,
            )
            cm = get(volume, "configMap")
            if not isinstance(cm, Mapping) or cm.get("name") not in inputs.config_maps:
                return None
            key = relative
            for item in cm.get("items") or []:
                if isinstance(item, Mapping) and item.get("path") == relative:
                    key = item.get("key", relative)
            cm_doc, cm_path, data = inputs.config_maps[cm["name"]]
            if isinstance(data.get(key), str):
                return cm_doc, (*cm_path, key), data[key]
        return None

    return resolve


def pod_role(name: str, kind: str, group: str, doc: Doc, pod: PodServer, **extra: Any) -> RoleSource:
    """A role whose server is a pod template's container, with what the pod states."""
    return RoleSource(
        name=name,
        kind=kind,
        group=group,
        doc=doc,
        location=pod.location,
        server=pod.server,
        env=pod.env,
        config_source=pod.config_source,
        gpus_per_node=pod.gpus_per_node,
        gpu=pod.gpu,
        version=pod.version,
        labels=pod.labels,
        no_gpus=pod.no_gpus,
        image=pod.image,
        **extra,
    )
