"""llm-d's model server Helm chart (llm-d-incubation/llm-d-modelservice) values: `decode` and `prefill` are roles.

The chart (charts/llm-d-modelservice/templates/_helpers.tpl at 3051935) renders each section's container with
the command its `modelCommand` names:

- `vllmServe`: `vllm serve MODEL --port P [--tensor-parallel-size T] [--data-parallel-size D]
  [--data-parallel-size-local L] --served-model-name NAME [tracing flags] ARGS...`;
- `imageDefault`: the same flags (`--model MODEL` first) appended to the image's own entrypoint;
- `custom` (the default): the container's own `command` and `args`.

MODEL comes from `modelArtifacts.uri` (`hf://ID` -> ID, `pvc://CLAIM/PATH` -> `mountPath/PATH`,
`pvc+hf://.../NS/MODEL` -> NS/MODEL; `oci://` makes the chart fail), after the chart renders its
`{{ .Values... }}` references. T, D and L come from `parallelism` (`tensor`, `data`, `dataLocal`,
`workers`, with the chart's defaults), and the GPUs per pod are `dataLocal x tensor` unless the
container's limits name the accelerator. kvcheck writes that command line from the values, each word at
the value it came from, and reads it with vLLM's parser. The chart's defaults (values.yaml) fill what
the file leaves out; a section the file does not have is not read (its default runs the simulator).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from kvcheck.engines import get_engine
from kvcheck.errors import InputIssue
from kvcheck.inputs.deploy.formats.base import (
    Format,
    Inputs,
    RoleSource,
    get,
    is_kubernetes_object,
    kubernetes_kind,
    marks_kubernetes,
    marks_kubernetes_text,
    object_name,
)
from kvcheck.inputs.deploy.formats.pods import (
    container_image,
    container_server,
    gpu_limit,
    image_engine,
    image_version,
)
from kvcheck.inputs.deploy.server import ScriptError, ServerCommand, Sourced, Token, container_env
from kvcheck.inputs.deploy.source import Doc
from kvcheck.io.yamlpos import Path_
from kvcheck.model import Location

KIND = "llm-d-modelservice values"
ROLES = ("decode", "prefill")
COMMANDS = ("vllmServe", "imageDefault", "custom")
# The chart's values.yaml defaults that change the command line or the pod's GPUs.
DEFAULT_NAME = "random/model"
DEFAULT_URI = "hf://{{ .Values.modelArtifacts.name }}"
DEFAULT_MOUNT = "/model-cache"
DEFAULT_SERVICE_PORT = 8000
DEFAULT_TARGET_PORT = 8200
DEFAULT_OTLP = "http://otel-collector:4317"
DEFAULT_TRACES = "all"
ACCELERATOR_RESOURCES = {
    "nvidia": "nvidia.com/gpu", "intel-i915": "gpu.intel.com/i915", "intel-xe": "gpu.intel.com/xe",
    "intel-gaudi": "habana.ai/gaudi", "amd": "amd.com/gpu", "google": "google.com/tpu",
    "rebellions-atom": "rebellions.ai/ATOM",
}
ACCELERATOR_ENV = {
    "intel-i915": (("VLLM_USE_V1", "1"), ("TORCH_LLM_ALLREDUCE", "1"), ("VLLM_WORKER_MULTIPROC_METHOD", "spawn")),
    "intel-xe": (("VLLM_WORKER_MULTIPROC_METHOD", "spawn"),),
}
_VALUES_REF = re.compile(r"\{\{-?\s*\.Values\.([A-Za-z0-9_.]+)\s*-?\}\}")


def is_values(data: Any) -> bool:
    return (isinstance(data, Mapping) and not is_kubernetes_object(data)
            and isinstance(data.get("modelArtifacts"), Mapping)
            and any(isinstance(get(data, role, "containers"), list) for role in ROLES))


def marks(data: Any) -> bool:
    return isinstance(data, Mapping) and not is_kubernetes_object(data) and "modelArtifacts" in data


def _fail(where: Location, message: str) -> ScriptError:
    return ScriptError(InputIssue(where.file, where.line, where.column, "", message))


def _at(doc: Doc, path: Path_, fallback: Path_) -> Location:
    """The place of `path` when the file states it, else of `fallback` (a chart default has no line)."""
    return doc.at(path) if get(doc.data, *path) is not None else doc.at(fallback)


def read_values(doc: Doc, inputs: Inputs) -> list[RoleSource]:
    data = doc.data
    out = []
    for role in ROLES:
        section = data.get(role)
        if not isinstance(section, Mapping) or section.get("create") is False:
            continue
        containers = section.get("containers")
        if not isinstance(containers, list):
            continue
        for i, container in enumerate(containers):
            if isinstance(container, Mapping):
                found = _role(doc, inputs, role, section, container, (role, "containers", i))
                if found is not None:
                    out.append(found)
                    break
    return out


def _parallelism(section: Mapping[str, Any]) -> tuple[int, int, int]:
    """(tensor, data, dataLocal) as the chart's helpers compute them (an unset or zero value is unset)."""
    given = section.get("parallelism")
    p = given if isinstance(given, Mapping) else {}

    def num(key: str) -> int:
        value = p.get(key)
        return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0

    tensor, data, local, workers = num("tensor") or 1, num("data"), num("dataLocal"), num("workers")
    dp = data or (local * workers if local and workers else local) or 1
    if local:
        dpl = local
    elif data and workers:
        if data % workers:
            raise ValueError("parallelism.data must be a multiple of parallelism.workers")
        dpl = data // workers
    else:
        dpl = data or 1
    return tensor, dp, dpl


def _render(doc: Doc, text: str, where: Location) -> str:
    """The chart's `tpl` of a value: `{{ .Values.a.b }}` references, the only template kvcheck renders."""
    def value(match: re.Match[str]) -> str:
        keys = match.group(1).split(".")
        found = get(doc.data, *keys)
        if found is None and keys == ["modelArtifacts", "name"]:
            found = DEFAULT_NAME
        if found is None or isinstance(found, Mapping | list):
            raise _fail(where, f"{match.group(0)}: .Values.{match.group(1)} is not a value the file sets")
        return str(found)

    rendered = _VALUES_REF.sub(value, text)
    if "{{" in rendered:
        raise _fail(where, f"{text!r}: a Helm template kvcheck does not render (it renders {{{{ .Values.KEY }}}})")
    return rendered


def _model(doc: Doc) -> tuple[str, str, Location, str]:
    """(the model word of the command line, the uri's protocol, where the uri is, what follows the protocol)."""
    artifacts = doc.data["modelArtifacts"]
    where = _at(doc, ("modelArtifacts", "uri"), ("modelArtifacts",))
    uri = _render(doc, str(artifacts.get("uri", DEFAULT_URI)), where)
    protocol, sep, rest = uri.partition("://")
    if not sep:
        raise _fail(where, f"modelArtifacts.uri {uri!r} names no protocol (hf://, pvc://, pvc+hf://)")
    if protocol == "hf":
        word = rest
    elif protocol == "pvc":
        word = f"{artifacts.get('mountPath', DEFAULT_MOUNT)}/{rest.split('/', 1)[-1]}"
    elif protocol == "pvc+hf":
        parts = rest.split("/")
        word = "/".join(parts[-2:])
    elif protocol == "oci":
        raise _fail(where, "modelArtifacts.uri oci://: the chart fails on it (\"arguments for oci:// not "
                    "implemented\")")
    else:
        raise _fail(where, f"modelArtifacts.uri protocol {protocol!r} is not one the chart renders a model for "
                    "(hf, pvc, pvc+hf)")
    # the word is written into the rendered YAML as is: `hf://"org/m"` gives the string org/m
    loaded = yaml.safe_load(word) if word.strip() else word
    return (loaded if isinstance(loaded, str) else word), protocol, where, rest


def _role(doc: Doc, inputs: Inputs, role: str, section: Mapping[str, Any], container: Mapping[str, Any],
          cpath: Path_) -> RoleSource | None:
    command = container.get("modelCommand", "custom")
    where = doc.at(cpath)
    if command not in COMMANDS:
        raise _fail(doc.at((*cpath, "modelCommand")), f"modelCommand {command!r}: the chart accepts "
                    f"{', '.join(COMMANDS)}")
    env = container_env(doc, container, cpath, injected={}, config_maps=inputs.config_maps)
    if command == "custom":
        found = container_server(doc, container, cpath, inputs, injected={})
        if found is None:
            return None
        server, env = found
    else:
        server = _chart_command(doc, role, section, container, cpath, command)
    try:
        tensor, dp, dpl = _parallelism(section)
    except ValueError as exc:
        raise _fail(doc.at((role, "parallelism")), str(exc)) from None
    ppath: Path_ = (role, "parallelism")
    _, protocol, uri_at, rest = _model(doc)
    chart = "llm-d-modelservice"
    for name, size in (("DP_SIZE", dp), ("TP_SIZE", tensor), ("DP_SIZE_LOCAL", dpl)):
        env.values.setdefault(name, Sourced(str(size), _at(doc, ppath, cpath), f"{chart} parallelismEnv"))
    if container.get("mountModelVolume") and protocol in ("hf", "pvc+hf"):
        mount = doc.data["modelArtifacts"].get("mountPath", DEFAULT_MOUNT)
        name, value = ("HF_HOME", str(mount)) if protocol == "hf" else (
            "HF_HUB_CACHE", "/model-cache/" + "/".join(rest.split("/")[1:-2]))
        env.values.setdefault(name, Sourced(value, uri_at, f"{chart} hfEnv"))
    if get(doc.data, "modelArtifacts", "authSecretName"):
        env.unknown["HF_TOKEN"] = "it comes from a Secret (modelArtifacts.authSecretName)"
    accelerator = str(get(section, "accelerator", "type") or get(doc.data, "accelerator", "type") or "nvidia")
    own_dra = get(section, "accelerator")
    dra = bool(own_dra["dra"] if isinstance(own_dra, Mapping) and "dra" in own_dra
               else get(doc.data, "accelerator", "dra"))
    for name, value in ACCELERATOR_ENV.get(accelerator, ()):
        env.values.setdefault(name, Sourced(value, _at(doc, ("accelerator", "type"), cpath), f"{chart} acceleratorEnv"))
    group = str(doc.data.get("fullnameOverride") or Path(doc.source.name).stem)
    return RoleSource(
        name=role, kind=KIND, group=group, doc=doc, location=where, server=server, env=env,
        gpus_per_node=_gpus(doc, container, cpath, accelerator, dpl * tensor, ppath, dra),
        version=image_version(doc, container, cpath, server.engine),
        replicas=_replicas(doc, section, role), model_path=None, standalone=True,
        labels=_labels(doc, role), image=container_image(doc, container, cpath),
        # the chart labels each section's pods llm-d.ai/role; with both sections they are the two sides of a pair
        # (a lone decode section is the chart's name for a plain server). Only the side of an engine whose own
        # arguments cannot state it (vLLM's kv_both): the label passes SGLang no --disaggregation-mode
        mode=Sourced(role, doc.at((role,)), f"the {role} section (llm-d.ai/role)")
        if _paired(doc.data) and get_engine(server.engine).side_flag is None else None,
    )


def _paired(data: Mapping[str, Any]) -> bool:
    """Both the prefill and the decode section are created."""
    return all(isinstance(data.get(r), Mapping) and data[r].get("create") is not False
               and isinstance(data[r].get("containers"), list) for r in ROLES)


def _labels(doc: Doc, role: str) -> dict[str, str]:
    """The pods' labels as the chart writes them (pdlabels: modelArtifacts.labels, then llm-d.ai/role)."""
    labels = get(doc.data, "modelArtifacts", "labels")
    out = {str(k): str(v) for k, v in labels.items()} if isinstance(labels, Mapping) else {
        "llm-d.ai/inference-serving": "true"}
    return {**out, "llm-d.ai/role": role}


def _chart_command(doc: Doc, role: str, section: Mapping[str, Any], container: Mapping[str, Any], cpath: Path_,
                   command: str) -> ServerCommand:
    """The command line the chart writes for `vllmServe` / `imageDefault`, each word at the value it came from."""
    at_command = doc.at((*cpath, "modelCommand"))
    model, _, uri_at, _ = _model(doc)
    if command == "vllmServe":
        tokens = [Token("vllm", at_command), Token("serve", at_command), Token(model, uri_at)]
    else:
        image = str(container.get("image") or "")
        engine = image_engine(image)
        if "llm-d-inference-sim" in image:
            raise _fail(at_command, f"the {role} container runs llm-d's inference simulator ({image}), not an "
                        "engine: it has no KV cache to check")
        if engine is None or not engine.image_entrypoint:
            raise _fail(at_command, f"modelCommand imageDefault appends the flags to the entrypoint of image "
                        f"{image!r}, which the file does not state; use modelCommand: vllmServe (the chart then "
                        "runs vllm serve) so kvcheck reads what runs")
        at_image = doc.at((*cpath, "image"))
        tokens = [Token(word, at_image) for word in engine.image_entrypoint]
        tokens += [Token("--model", uri_at), Token(model, uri_at)]
    start = 2 if command == "vllmServe" else len(tokens) - 2
    proxy_on = get(doc.data, "routing", "proxy", "enabled") is not False
    port_at: Path_ = ("routing", "servicePort")
    port = get(doc.data, *port_at) or DEFAULT_SERVICE_PORT
    if role != "prefill" and proxy_on:
        port_at = ("routing", "proxy", "targetPort")
        port = get(doc.data, *port_at) or DEFAULT_TARGET_PORT
    tokens += [Token("--port", at_command), Token(str(port), _at(doc, port_at, cpath))]
    tensor, dp, dpl = _parallelism(section)
    ppath: Path_ = (role, "parallelism")
    for flag, value, key in (("--tensor-parallel-size", tensor, "tensor"), ("--data-parallel-size", dp, "data"),
                             ("--data-parallel-size-local", dpl, "dataLocal")):
        if value > 1:
            at = _at(doc, (*ppath, key), ppath)
            tokens += [Token(flag, at), Token(str(value), at)]
    name_at = _at(doc, ("modelArtifacts", "name"), ("modelArtifacts",))
    tokens += [Token("--served-model-name", name_at),
               Token(str(get(doc.data, "modelArtifacts", "name") or DEFAULT_NAME), name_at)]
    if get(doc.data, "tracing", "enabled"):
        at = doc.at(("tracing", "enabled"))
        tokens += [Token("--otlp-traces-endpoint", at),
                   Token(str(get(doc.data, "tracing", "otlpEndpoint") or DEFAULT_OTLP), at),
                   Token("--collect-detailed-traces", at),
                   Token(str(get(doc.data, "tracing", "vllm", "collectDetailedTraces") or DEFAULT_TRACES), at)]
    args = container.get("args")
    if isinstance(args, list):
        for j, word in enumerate(args):
            if isinstance(word, Mapping | list):
                raise _fail(doc.at((*cpath, "args", j)), "an args entry must be a word, not a mapping or list")
            tokens.append(Token(_yaml_word(word), doc.at((*cpath, "args", j))))
    return ServerCommand(tokens, start, "vllm", doc.at(cpath), "vllm")


def _yaml_word(value: Any) -> str:
    """An args entry as toYaml writes it and Kubernetes passes it (true, 0.9, 4096)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _gpus(doc: Doc, container: Mapping[str, Any], cpath: Path_, accelerator: str, count: int,
          ppath: Path_, dra: bool) -> Sourced | None:
    """GPUs per pod: the container's accelerator limit when it states one, else dataLocal x tensor (the chart's
    limit, or with DRA the `count` of the ResourceClaimTemplate it writes)."""
    stated = None if dra else gpu_limit(doc, container.get("resources"), (*cpath, "resources"))
    if stated is not None:
        return stated
    if accelerator == "cpu":
        return None
    resource = ACCELERATOR_RESOURCES.get(accelerator, "nvidia.com/gpu")
    how = "ResourceClaimTemplate count (DRA)" if dra else resource
    return Sourced(count, _at(doc, ppath, cpath), f"{how} = parallelism dataLocal x tensor")


def _replicas(doc: Doc, section: Mapping[str, Any], role: str) -> Sourced | None:
    value = section.get("replicas")
    if isinstance(value, bool) or not isinstance(value, int):
        return None
    return Sourced(value, doc.at((role, "replicas")), f"{role}.replicas")


FORMAT = Format(
    name=KIND,
    reads="llm-d-modelservice Helm values (decode/prefill containers, modelArtifacts)",
    detect=lambda doc: is_values(doc.data),
    read=read_values,
    marks=marks,
)


# llm-d's earlier operator (llm-d/llm-d-model-service, archived): a ModelService names a ConfigMap of Go templates
# (baseConfigMapRef: decodeDeployment, prefillDeployment, ...) that the operator renders and merges with the
# ModelService's own containers. kvcheck does not render those templates, so it refuses the object rather than
# leave its servers unchecked.
CRD_KINDS = {"ModelService": ("llm-d.ai/",)}


def read_model_service(doc: Doc, inputs: Inputs) -> list[RoleSource]:
    base = get(doc.data, "spec", "baseConfigMapRef", "name")
    where = doc.at(("spec", "baseConfigMapRef")) if base is not None else doc.at(())
    raise _fail(where, f"ModelService '{object_name(doc)}' (llm-d's model-service operator) has its pods rendered "
                f"from the Go templates of ConfigMap '{base or '?'}' (baseConfigMapRef), which kvcheck does not "
                "render: pass the Deployments the operator created (kubectl get deployment -o yaml), or move to "
                "the llm-d-modelservice Helm values, which kvcheck reads")


MODEL_SERVICE = Format(
    name="llm-d ModelService",
    reads="llm-d ModelService (refused: its templates are not rendered)",
    detect=lambda doc: kubernetes_kind(doc, CRD_KINDS),
    read=read_model_service,
    marks=marks_kubernetes,
    marks_text=marks_kubernetes_text,
)
