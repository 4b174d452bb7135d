"""OME (ome.io): an InferenceService runs its runtime's roles with the base model's path and the accelerator
class's GPU; a ClusterServingRuntime or ServingRuntime no InferenceService names is read on its own."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kvcheck.errors import InputIssue
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
from kvcheck.inputs.deploy.formats.lws import lws_vars
from kvcheck.inputs.deploy.formats.pods import (
    PodServer,
    config_source,
    container_image,
    container_server,
    gpu_limit,
    gpu_type,
    image_version,
    pod_role,
)
from kvcheck.inputs.deploy.server import ScriptError, ServerCommand, Sourced
from kvcheck.inputs.deploy.source import Doc
from kvcheck.io.yamlpos import Path_

KINDS = {kind: ("ome.io/",) for kind in ("InferenceService", "ClusterServingRuntime", "ServingRuntime")}


def _ome_runtime_roles(
    doc: Doc, runtime: Mapping[str, Any], group: str, inputs: Inputs, *, extra_env: Mapping[str, Sourced],
    model_path: Sourced | None, gpu: Sourced | None,
) -> list[RoleSource]:
    spec = runtime.get("spec") or {}
    configs = [(key, spec[key]) for key in ("engineConfig", "decoderConfig") if isinstance(spec.get(key), Mapping)]
    both = len(configs) == 2
    out = []
    for key, config in configs:
        path: Path_ = ("spec", key)
        role_name = ("prefill" if key == "engineConfig" else "decode") if both else group
        leader = get(config, "leader")
        worker = get(config, "worker")
        size = None
        workers: list[tuple[str, ServerCommand]] = []
        pod = None
        if isinstance(leader, Mapping):
            wsize = int_at(doc, worker or {}, "size", (*path, "worker"), "worker.size")
            pods = 1 + (wsize.value if wsize else 0)
            size = Sourced(pods, wsize.location if wsize else doc.at((*path, "leader")), "1 leader + worker.size")
            pod = _ome_pod(doc, leader, (*path, "leader"), inputs, extra_env, size, group, worker=False)
            if isinstance(worker, Mapping):
                wpod = _ome_pod(doc, worker, (*path, "worker"), inputs, extra_env, size, group, worker=True)
                if wpod is not None:
                    workers.append(("worker", wpod.server))
        else:
            pod = _ome_pod(doc, config, path, inputs, extra_env, Sourced(1, doc.at(path), "one pod"), group, worker=False)
        if pod is None:
            continue
        out.append(
            pod_role(role_name, doc.data.get("kind", "ServingRuntime"), group, doc, pod, nodes=size, workers=workers,
                  model_path=model_path, standalone=True)
        )
        if gpu is not None:
            out[-1].gpu = gpu
    return out


def _ome_pod(
    doc: Doc, part: Mapping[str, Any], path: Path_, inputs: Inputs, extra_env: Mapping[str, Sourced],
    pods: Sourced, group: str, *, worker: bool,
) -> PodServer | None:
    """An OME runner: `runner` is the main container, the rest of the block is the pod spec."""
    runner = part.get("runner")
    if not isinstance(runner, Mapping):
        return None
    rpath: Path_ = (*path, "runner")
    gpus = gpu_limit(doc, runner.get("resources"), (*rpath, "resources"))
    env = dict(extra_env)
    env.update(lws_vars(doc, pods, group, worker=worker))
    if gpus is not None:
        # OME sets PARALLELISM_SIZE to the GPUs of the whole instance: GPUs per pod x pods
        env["PARALLELISM_SIZE"] = Sourced(gpus.value * pods.value, gpus.location, "OME: GPUs per pod x pods")
    found = container_server(doc, runner, rpath, inputs, injected=env)
    if found is None:
        return None
    server, cenv = found
    return PodServer(
        server, cenv, doc.at(rpath), gpus, gpu_type(doc, part, path), image_version(doc, runner, rpath, server.engine),
        config_source(doc, runner, part, rpath, path, inputs), image=container_image(doc, runner, rpath),
    )


def read_ome_runtime(doc: Doc, inputs: Inputs) -> list[RoleSource]:
    """A ClusterServingRuntime/ServingRuntime read on its own (no InferenceService among the inputs names it)."""
    name = object_name(doc)
    if name in inputs.used_runtimes:
        return []
    return _ome_runtime_roles(doc, doc.data, name, inputs, extra_env={}, model_path=None, gpu=None)


def read_ome_service(doc: Doc, inputs: Inputs) -> list[RoleSource]:
    """An OME InferenceService: its runtime's roles, with the base model's path and the accelerator class's GPU."""
    name = object_name(doc)
    spec = doc.data.get("spec") or {}
    runtime_name = get(spec, "runtime", "name")
    model_name = get(spec, "model", "name")
    if runtime_name not in inputs.runtimes:
        where = doc.at(("spec", "runtime", "name")) if runtime_name else doc.at(("spec",), key=True)
        text = (f"InferenceService {name} names runtime {runtime_name!r}, which is not among the files read; "
                "pass its ClusterServingRuntime or ServingRuntime too" if runtime_name else
                f"InferenceService {name} names no runtime (OME would pick one): name it in spec.runtime.name, "
                "and pass that runtime too")
        raise ScriptError(InputIssue(where.file, where.line, where.column, "", text))
    rdoc, runtime = inputs.runtimes[runtime_name]
    extra: dict[str, Sourced] = {}
    model_path = None
    if model_name in inputs.base_models:
        mdoc, model = inputs.base_models[model_name]
        path = get(model, "spec", "storage", "path")
        if isinstance(path, str):
            model_path = Sourced(path, mdoc.at(("spec", "storage", "path")), f"ClusterBaseModel {model_name}")
            extra["MODEL_PATH"] = model_path
    gpu = None
    accel = get(spec, "acceleratorSelector", "acceleratorClass") or get(spec, "engine", "acceleratorOverride", "acceleratorClass")
    if accel in inputs.accelerators:
        adoc, cls = inputs.accelerators[accel]
        product = get(cls, "spec", "discovery", "nodeSelector", "nvidia.com/gpu.product")
        if isinstance(product, str):
            gpu = Sourced(product, adoc.at(("spec", "discovery", "nodeSelector", "nvidia.com/gpu.product")),
                          f"AcceleratorClass {accel}")
        elif isinstance(get(cls, "spec", "capabilities", "gpuModel"), str):
            gpu = Sourced(cls["spec"]["capabilities"]["gpuModel"], adoc.at(("spec", "capabilities", "gpuModel")),
                          f"AcceleratorClass {accel}")
    roles = _ome_runtime_roles(rdoc, runtime, name, inputs, extra_env=extra, model_path=model_path, gpu=gpu)
    return roles


def read_ome(doc: Doc, inputs: Inputs) -> list[RoleSource]:
    if doc.data["kind"] == "InferenceService":
        return read_ome_service(doc, inputs)
    return read_ome_runtime(doc, inputs)


def gather_ome(doc: Doc, inputs: Inputs) -> None:
    """The runtimes, base models and accelerator classes an InferenceService names, and the runtimes named."""
    data = doc.data
    kind, name = data["kind"], data["metadata"]["name"]
    if kind in ("ClusterServingRuntime", "ServingRuntime"):
        inputs.runtimes[name] = (doc, data)
    elif kind in ("ClusterBaseModel", "BaseModel"):
        inputs.base_models[name] = (doc, data)
    elif kind == "AcceleratorClass":
        inputs.accelerators[name] = (doc, data)
    elif kind == "InferenceService" and str(data.get("apiVersion", "")).startswith("ome.io/"):
        runtime = get(data, "spec", "runtime", "name")
        if isinstance(runtime, str):
            inputs.used_runtimes.add(runtime)


FORMAT = Format(
    name="OME",
    reads="OME InferenceService, ClusterServingRuntime, ServingRuntime (with ClusterBaseModel, AcceleratorClass)",
    detect=lambda doc: kubernetes_kind(doc, KINDS),
    read=read_ome,
    marks=marks_kubernetes,
    marks_text=marks_kubernetes_text,
    gather=gather_ome,
)
