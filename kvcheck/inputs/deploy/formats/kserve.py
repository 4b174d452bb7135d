"""KServe's `LLMInferenceService` (serving.kserve.io v1alpha1, v1alpha2): the decode (main) pool and the prefill pool.

The KServe controller starts vLLM from its own `LLMInferenceServiceConfig` templates
(kserve/kserve@aaac4e2, config/llmisvcconfig/config-llm-template.yaml, -prefill-template, -decode-template,
-worker-data-parallel): a `bash -c` script whose Go template fields the controller fills in, ending in

    vllm serve /mnt/models --served-model-name NAME --port 8000 [--tensor-parallel-size T]
      [--enable-expert-parallel --data-parallel-size D --data-parallel-size-local DL]
      ${VLLM_ADDITIONAL_ARGS} "$@"

with `"$@"` the main container's own `args`. Those templates are the controller's, not the user's
files, so kvcheck writes that command line from the service: the model from `spec.model.uri`, the
parallelism from `spec.parallelism` (`spec.prefill.parallelism` for the prefill pool), the words of
the container's `VLLM_ADDITIONAL_ARGS` (split as the template's `eval` splits them) and its `args`,
each at its own place. The service's `baseRefs` name `LLMInferenceServiceConfig`s: those among the
inputs are layered under the service (each later one over the earlier, the service over all), for
the main container's env, args, resources and image. A container that states its own `command` is
read as written (as any pod's).
"""

from __future__ import annotations

import shlex
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
from kvcheck.inputs.deploy.formats.pods import (
    container_image,
    container_server,
    gpu_limit,
    gpu_type,
    image_version,
)
from kvcheck.inputs.deploy.server import Env, ScriptError, ServerCommand, Token, container_env
from kvcheck.inputs.deploy.source import Doc
from kvcheck.io.yamlpos import Path_
from kvcheck.model import Location

KINDS = {"LLMInferenceService": ("serving.kserve.io/",)}
CONFIG_KINDS = {"LLMInferenceServiceConfig": ("serving.kserve.io/",)}
_MAIN = "main"


def _gather(doc: Doc, inputs: Inputs) -> None:
    if kubernetes_kind(doc, CONFIG_KINDS):
        inputs.llmisvc_configs[str(get(doc.data, "metadata", "name"))] = doc


# The controller's own configs (config/llmisvcconfig/ at aaac4e2): the vLLM templates this module writes the
# command of, and the router's, scheduler's and tracing configs, which start no engine.
KSERVE_CONFIGS = frozenset({
    "kserve-config-llm-template", "kserve-config-llm-decode-template", "kserve-config-llm-prefill-template",
    "kserve-config-llm-worker-data-parallel", "kserve-config-llm-decode-worker-data-parallel",
    "kserve-config-llm-prefill-worker-data-parallel", "kserve-config-llm-router-route",
    "kserve-config-llm-scheduler", "kserve-config-llm-scheduler-latency-predictor", "kserve-config-llm-tokenizer",
    "kserve-config-llm-tracing",
})


def _layers(doc: Doc, inputs: Inputs) -> list[Doc]:
    """The configs the service's baseRefs name, in order, then the service; a baseRef that is neither among the
    inputs nor one of KServe's own configs is an input error (it may set the command, image or arguments)."""
    configs = inputs.llmisvc_configs
    found = []
    for i, ref in enumerate(get(doc.data, "spec", "baseRefs") or []):
        name = str(ref.get("name")) if isinstance(ref, Mapping) else ""
        if name in configs:
            found.append(configs[name])
        elif name not in KSERVE_CONFIGS:
            where = doc.at(("spec", "baseRefs", i))
            raise ScriptError(InputIssue(
                where.file, where.line, where.column, "",
                f"baseRefs names LLMInferenceServiceConfig '{name}', which is not among the inputs; it may set the "
                "container's command, image or arguments: pass its file in the same command"))
    return [*found, doc]


def _main_container(layer: Doc, pool: Path_) -> tuple[Mapping[str, Any], Path_] | None:
    for i, container in enumerate(get(layer.data, *pool, "template", "containers") or []):
        if isinstance(container, Mapping) and container.get("name") == _MAIN:
            return container, (*pool, "template", "containers", i)
    return None


def _last(layers: list[Doc], pool: Path_, key: str) -> tuple[Doc, Path_, Any] | None:
    """The main container's `key` from the last layer that states it (the service over its baseRefs)."""
    for layer in reversed(layers):
        found = _main_container(layer, pool)
        if found is not None and key in found[0]:
            return layer, (*found[1], key), found[0][key]
    return None


def _spec_value(layers: list[Doc], *path: str | int) -> tuple[Doc, Path_, Any] | None:
    for layer in reversed(layers):
        value = get(layer.data, *path)
        if value is not None:
            return layer, path, value
    return None


def read_llmisvc(doc: Doc, inputs: Inputs) -> list[RoleSource]:
    name = object_name(doc)
    layers = _layers(doc, inputs)
    pools: list[tuple[str, Path_]] = [("decode" if _spec_value(layers, "spec", "prefill") else name, ("spec",))]
    if _spec_value(layers, "spec", "prefill") is not None:
        pools.append(("prefill", ("spec", "prefill")))
    return [role for role_name, pool in pools if (role := _pool(doc, layers, inputs, name, role_name, pool))]


def _pool(doc: Doc, layers: list[Doc], inputs: Inputs, service: str, role: str, pool: Path_) -> RoleSource | None:
    command = _last(layers, pool, "command")
    if command is not None:  # a command of its own: read as written, like any pod's container
        layer, cpath, _ = command
        container = get(layer.data, *cpath[:-1])
        started = container_server(layer, container, cpath[:-1], inputs, injected={})
        if started is None:
            return None
        server, env = started
        at = cpath[:-1]
        return _role(doc, layers, role, service, pool, server, env, layer.at(at))
    env = _env(layers, pool, inputs)
    model = _spec_value(layers, "spec", "model", "uri")
    if model is None:
        where = doc.at(("spec", "model"))
        raise ScriptError(InputIssue(where.file, where.line, where.column, "",
                                     f"LLMInferenceService '{service}' has no spec.model.uri (KServe requires one)"))
    mdoc, mpath, uri = model
    where = doc.at(pool)
    tokens = [Token("vllm", where), Token("serve", where), Token(_model_path(str(uri)), mdoc.at(mpath))]
    parallelism = (*pool, "parallelism")
    tensor = _spec_value(layers, *parallelism, "tensor")
    data = _spec_value(layers, *parallelism, "data")
    worker = _spec_value(layers, *pool, "worker")
    if data is not None or worker is not None:  # the data-parallel templates
        expert = _spec_value(layers, *parallelism, "expert")
        if expert is not None and expert[2]:
            tokens.append(Token("--enable-expert-parallel", expert[0].at(expert[1])))
    if tensor is not None:
        tokens += [Token("--tensor-parallel-size", tensor[0].at(tensor[1], key=True)),
                   Token(str(tensor[2]), tensor[0].at(tensor[1]))]
    if data is not None or worker is not None:
        local = _spec_value(layers, *parallelism, "dataLocal")
        for flag, stated in (("--data-parallel-size", data), ("--data-parallel-size-local", local)):
            place = stated[0].at(stated[1]) if stated is not None else where
            tokens += [Token(flag, place), Token(str(stated[2]) if stated is not None else "1", place)]
    tokens += _additional_args(env, where)
    args = _last(layers, pool, "args")
    if isinstance(args, tuple) and isinstance(args[2], list):
        layer, apath, items = args
        for i, item in enumerate(items):
            tokens.append(Token(str(item), layer.at((*apath, i))))
    server = ServerCommand(tokens, 2, "vllm", where, "vllm")
    return _role(doc, layers, role, service, pool, server, env, where)


def _model_path(uri: str) -> str:
    """The model as vLLM and kvcheck name it: `hf://Qwen/Qwen3-8B` is the Hub's Qwen/Qwen3-8B; any other
    storage URI (pvc://, s3://, oci://) is mounted at /mnt/models, named here by its URI."""
    return uri.removeprefix("hf://")


def _env(layers: list[Doc], pool: Path_, inputs: Inputs) -> Env:
    """The main container's variables, every layer's env merged by name (the later layer wins)."""
    env = Env()
    for layer in layers:
        found = _main_container(layer, pool)
        if found is None:
            continue
        container, cpath = found
        own = container_env(layer, container, cpath, injected={}, config_maps=inputs.config_maps)
        for name, value in own.values.items():
            env.values[name] = value
            env.unknown.pop(name, None)
        for name, why in own.unknown.items():
            env.values.pop(name, None)
            env.unknown[name] = why
    return env


def _additional_args(env: Env, where: Location) -> list[Token]:
    """`${VLLM_ADDITIONAL_ARGS}` inside the template's `eval "exec vllm serve ..."`: its words as the shell
    splits them, each at the variable's value."""
    found = env.values.get("VLLM_ADDITIONAL_ARGS")
    if found is None:
        if "VLLM_ADDITIONAL_ARGS" in env.unknown:
            return [Token("$VLLM_ADDITIONAL_ARGS", where, ["VLLM_ADDITIONAL_ARGS"],
                          why={"VLLM_ADDITIONAL_ARGS": env.unknown["VLLM_ADDITIONAL_ARGS"]})]
        return []
    location = found.location or where
    try:
        words = shlex.split(str(found.value))
    except ValueError as exc:
        raise ScriptError(InputIssue(location.file, location.line, location.column, "",
                                     f"VLLM_ADDITIONAL_ARGS: {exc} (the template's eval would fail)")) from exc
    return [Token(word, location) for word in words]


def _role(doc: Doc, layers: list[Doc], role: str, service: str, pool: Path_, server: ServerCommand, env: Env,
          where: Location) -> RoleSource:
    resources = _last(layers, pool, "resources")
    gpus = gpu_limit(resources[0], resources[2], resources[1]) if resources is not None else None
    image = _last(layers, pool, "image")
    version = image_version(image[0], {"image": image[2]}, image[1][:-1], "vllm") if image is not None else None
    written = container_image(image[0], {"image": image[2]}, image[1][:-1]) if image is not None else None
    template = _spec_value(layers, *pool, "template")
    gpu = gpu_type(template[0], template[2], template[1]) if template is not None else None
    replicas = int_at(doc, get(doc.data, *pool) or {}, "replicas", pool, "LLMInferenceService replicas")
    return RoleSource(name=role, kind="LLMInferenceService", group=service, doc=doc, location=where, server=server,
                      env=env, gpus_per_node=gpus, gpu=gpu, version=version, replicas=replicas, standalone=True,
                      image=written)


FORMAT = Format(
    name="LLMInferenceService",
    reads="KServe LLMInferenceService (+ its LLMInferenceServiceConfig baseRefs)",
    detect=lambda doc: kubernetes_kind(doc, KINDS),
    read=read_llmisvc,
    marks=marks_kubernetes,
    marks_text=marks_kubernetes_text,
    gather=_gather,
)
