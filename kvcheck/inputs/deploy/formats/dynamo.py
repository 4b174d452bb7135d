"""NVIDIA Dynamo's DynamoGraphDeployment (v1alpha1, v1beta1): workers running `python -m dynamo.<engine>`.

The frontend starts no engine server and so gives no role; `multinode.nodeCount` is the operator's
`--nnodes`, and `subComponentType` the worker's prefill or decode mode.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kvcheck.inputs.deploy.formats.base import (
    Format,
    Inputs,
    RoleSource,
    get,
    int_at,
    kubernetes_kind,
    marks_kubernetes,
    marks_kubernetes_text,
    object_name,
)
from kvcheck.inputs.deploy.formats.pods import (
    PodServer,
    config_source,
    container_image,
    container_server,
    gpu_limit,
    gpu_type,
    image_version,
    pod_role,
    pod_server,
)
from kvcheck.inputs.deploy.server import Arg, Sourced
from kvcheck.inputs.deploy.source import Doc
from kvcheck.io.yamlpos import Path_

KINDS = {"DynamoGraphDeployment": ("nvidia.com/",)}


def _dynamo_pod(doc: Doc, service: Mapping[str, Any], path: Path_, inputs: Inputs) -> PodServer | None:
    """A Dynamo service's server: its extraPodSpec.mainContainer, else a pod template of its own."""
    pod = None
    main = get(service, "extraPodSpec", "mainContainer")
    if isinstance(main, Mapping):
        extra_path: Path_ = (*path, "extraPodSpec")
        pod_spec = service.get("extraPodSpec") or {}
        cpath: Path_ = (*extra_path, "mainContainer")
        found = container_server(doc, main, cpath, inputs, injected={})
        if found is not None:
            server, env = found
            pod = PodServer(
                server, env, doc.at(cpath),
                gpu_limit(doc, service.get("resources"), (*path, "resources"))
                or gpu_limit(doc, main.get("resources"), (*cpath, "resources")),
                gpu_type(doc, pod_spec, extra_path),
                image_version(doc, main, cpath, server.engine),
                config_source(doc, main, pod_spec, cpath, extra_path, inputs),
                image=container_image(doc, main, cpath),
            )
    else:
        for key in ("podTemplate", "template"):
            if isinstance(service.get(key), Mapping):
                pod = pod_server(doc, service[key], (*path, key), inputs, injected={})
                if pod is not None and pod.gpus_per_node is None:
                    pod.gpus_per_node = gpu_limit(doc, service.get("resources"), (*path, "resources"))
                break
    return pod


def read_dynamo(doc: Doc, inputs: Inputs) -> list[RoleSource]:
    """DynamoGraphDeployment: workers running `python -m dynamo.sglang`; the frontend gives no role."""
    group = object_name(doc)
    spec = doc.data.get("spec") or {}
    entries: list[tuple[str, Mapping[str, Any], Path_]] = []
    if isinstance(spec.get("services"), Mapping):  # v1alpha1 (and v1beta1 keeps the map)
        entries = [(str(k), v, ("spec", "services", k)) for k, v in spec["services"].items() if isinstance(v, Mapping)]
    elif isinstance(spec.get("components"), list):  # v1beta1 component list
        entries = [
            (str(c.get("name") or c.get("componentName") or f"component{i}"), c, ("spec", "components", i))
            for i, c in enumerate(spec["components"])
            if isinstance(c, Mapping)
        ]
    out = []
    for name, service, path in entries:
        pod = _dynamo_pod(doc, service, path, inputs)
        if pod is None:
            continue
        node_count = get(service, "multinode", "nodeCount")
        nodes = None
        injected: dict[str, Arg] = {}
        if isinstance(node_count, int) and not isinstance(node_count, bool):
            where = doc.at((*path, "multinode", "nodeCount"))
            nodes = Sourced(node_count, where, "multinode.nodeCount")
            if node_count > 1:
                injected["nnodes"] = Arg("nnodes", "nnodes", node_count, where, None, "injected by the Dynamo operator")
        mode = None
        for key in ("subComponentType", "type"):
            value = service.get(key)
            if value in ("prefill", "decode"):
                mode = Sourced(value, doc.at((*path, key)), key)
        replicas = int_at(doc, service, "replicas", path, "replicas")
        role = pod_role(name, "DynamoGraphDeployment", group, doc, pod, nodes=nodes, replicas=replicas, mode=mode,
                     standalone=True)
        role.injected = injected
        out.append(role)
    return out


FORMAT = Format(
    name="DynamoGraphDeployment",
    reads="DynamoGraphDeployment (v1alpha1, v1beta1)",
    detect=lambda doc: kubernetes_kind(doc, KINDS),
    read=read_dynamo,
    marks=marks_kubernetes,
    marks_text=marks_kubernetes_text,
)
