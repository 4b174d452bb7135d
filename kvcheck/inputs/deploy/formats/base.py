"""What every deployment format shares: the role a format finds, the objects documents refer to, the Format entry.

A format reads one YAML document (or, for a whole-file format, one file's text) and the objects it may
refer to among all inputs (ConfigMaps, OME runtimes, base models, accelerator classes). It returns
`RoleSource`s: where each server's command is, and what the format states about GPUs, nodes and the GPU
type. Routers, gateways and frontends have no server command and so give no role.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from kvcheck.inputs.deploy.server import Arg, Env, ServerCommand, Sourced, Token
from kvcheck.inputs.deploy.source import Doc, SourceFile
from kvcheck.io.yamlpos import Path_, Positions, YamlDocument
from kvcheck.model import Location


@dataclass
class RoleSource:
    """One server role as a format declares it, before its arguments are checked (against its engine)."""

    name: str
    kind: str  # the format, e.g. "LeaderWorkerSet"
    group: str  # deployments: roles with the same group form one deployment
    doc: Doc
    location: Location
    server: ServerCommand
    env: Env
    config_source: Callable[[Token], tuple[Doc, Path_, str] | None] | None = None
    gpus_per_node: Sourced | None = None
    nodes: Sourced | None = None  # pods (nodes) per instance
    replicas: Sourced | None = None
    gpu: Sourced | None = None
    version: Sourced | None = None
    injected: dict[str, Arg] = field(default_factory=dict)  # arguments the operator adds (Dynamo's --nnodes)
    mode: Sourced | None = None  # prefill/decode from the format itself (Dynamo's subComponentType)
    model_path: Sourced | None = None  # from the format (OME base model, srt-slurm model.path)
    workers: list[tuple[str, ServerCommand]] = field(default_factory=list)  # other nodes' commands
    config_map: tuple[Doc, Path_] | None = None  # srt-slurm: the role's engine flags as a YAML mapping
    standalone: bool = False  # a format whose object is a whole deployment (DGD, RBG, compose...)
    labels: Mapping[str, str] = field(default_factory=dict)  # the pods' labels (an InferencePool selects by them)
    image: str | None = None  # the container image the format names (a values file's repository:tag)


@dataclass
class Inputs:
    """Objects that other objects refer to by name, gathered from every document read."""

    config_maps: dict[str, tuple[Doc, Path_, Mapping[str, Any]]] = field(default_factory=dict)
    runtimes: dict[str, tuple[Doc, Mapping[str, Any]]] = field(default_factory=dict)
    base_models: dict[str, tuple[Doc, Mapping[str, Any]]] = field(default_factory=dict)
    accelerators: dict[str, tuple[Doc, Mapping[str, Any]]] = field(default_factory=dict)
    services: list[Doc] = field(default_factory=list)  # OME InferenceServices
    llmisvc_configs: dict[str, Doc] = field(default_factory=dict)  # KServe LLMInferenceServiceConfigs by name
    used_runtimes: set[str] = field(default_factory=set)



def _never(_: Any) -> bool:
    return False


@dataclass(frozen=True)
class Format:
    """One deployment format: how its documents are recognised, how their roles are read, what the hint calls it."""

    name: str
    reads: str  # its part of the "kvcheck reads: ..." hint
    detect: Callable[[Doc], bool]  # the format reads this document (whole-file formats: this file's text)
    read: Callable[[Doc, Inputs], list[RoleSource]]
    # Data meant as this format, readable or not, so never taken for a kvcheck manifest (the format's own
    # reader words what is wrong with it); `marks_text` answers the same for a file whose YAML does not parse.
    marks: Callable[[Any], bool] = _never
    marks_text: Callable[[str], bool] = _never
    whole_file: bool = False  # detected on the file's text before any YAML parse (a Slurm batch script)
    gather: Callable[[Doc, Inputs], None] | None = None  # the objects of this format others refer to, by name
    explain: Callable[[Doc], str] | None = None  # why a document gives no role, when the format can say ('' if not)


# -- helpers shared by the formats ---------------------------------------------------------------------


def get(data: Any, *keys: str | int) -> Any:
    for key in keys:
        if isinstance(data, Mapping):
            data = data.get(key)
        elif isinstance(data, list) and isinstance(key, int) and 0 <= key < len(data):
            data = data[key]
        else:
            return None
    return data


def int_at(doc: Doc, data: Mapping[str, Any], key: str, path: Path_, origin: str) -> Sourced | None:
    value = data.get(key) if isinstance(data, Mapping) else None
    if isinstance(value, bool) or not isinstance(value, int):
        return None
    return Sourced(value, doc.at((*path, key)), origin)



def object_name(doc: Doc) -> str:
    """A Kubernetes object's name, else its kind and place in the input (`Deployment#2`)."""
    return str(get(doc.data, "metadata", "name") or f"{doc.data.get('kind')}#{doc.index + 1}")


def text_doc(source: SourceFile) -> Doc:
    """A file that is not YAML (a batch script, a --cmd line) as a document with no data, for locations."""
    return Doc(source, YamlDocument(None, Positions(), [], 1), 0)


def is_kubernetes_object(data: Any) -> bool:
    """A document that names its kind and API version: only a Kubernetes format may read it."""
    return isinstance(data, Mapping) and isinstance(data.get("kind"), str) and isinstance(data.get("apiVersion"), str)


def kubernetes_kind(doc: Doc, kinds: Mapping[str, tuple[str, ...]]) -> bool:
    """The document is one of `kinds` (kind -> the API groups, or group prefixes, it may come from)."""
    data = doc.data
    if not is_kubernetes_object(data):
        return False
    groups = kinds.get(data["kind"])
    api = data["apiVersion"]
    return groups is not None and any(api == g or api.startswith(g) for g in groups)


def marks_kubernetes(data: Any) -> bool:
    """A `kind` or an `apiVersion` key: a Kubernetes object, however incomplete."""
    return isinstance(data, Mapping) and bool({"kind", "apiVersion"} & set(data))


_KUBERNETES_LINE_RE = re.compile(r"^(?:apiVersion|kind):", re.M)


def marks_kubernetes_text(text: str) -> bool:
    return _KUBERNETES_LINE_RE.search(text) is not None
