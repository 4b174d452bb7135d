"""One reader per deployment format: each finds the SGLang server roles a document deploys.

A reader sees one YAML document (detected by its content: `kind` and `apiVersion`, compose's
`services`, an srt-slurm recipe's `backend`/`resources`) and the objects it may refer to among all
inputs (ConfigMaps, OME runtimes, base models, accelerator classes). It returns `RoleSource`s: where
each server's command is, and what the format states about GPUs, nodes and the GPU type. Routers,
gateways and frontends have no SGLang server command and so give no role.
"""

from __future__ import annotations

import copy as copy_module
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from kvcheck.errors import InputIssue
from kvcheck.inputs.deploy.server import (
    Arg,
    Env,
    ScriptError,
    ServerCommand,
    Sourced,
    Token,
    container_env,
    exec_tokens,
    find_server,
)
from kvcheck.inputs.deploy.source import Doc
from kvcheck.io.yamlpos import Path_, Positions, YamlDocument
from kvcheck.model import Location

_P = TypeVar("_P")  # a position table's entry: (line, column) or a scalar style

GPU_RESOURCES = ("nvidia.com/gpu", "amd.com/gpu", "gpu")
GPU_TYPE_LABELS = ("nvidia.com/gpu.product", "cloud.google.com/gke-accelerator", "amd.com/gpu.product-name")
# lmsysorg/sglang:v0.5.23-cu129 names the SGLang release; other images (Dynamo's sglang-runtime) do not
_IMAGE_VERSION_RE = re.compile(r"(?:^|/)sglang:v?(\d+\.\d+\.\d+(?:\.post\d+|rc\d+)?)(?:$|[-_])")


@dataclass
class RoleSource:
    """One SGLang server role as a format declares it, before its arguments are checked."""

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
    config_map: tuple[Doc, Path_] | None = None  # srt-slurm: the role's SGLang flags as a YAML mapping
    standalone: bool = False  # a format whose object is a whole deployment (DGD, RBG, compose...)


@dataclass
class Inputs:
    """Objects that other objects refer to by name, gathered from every document read."""

    config_maps: dict[str, tuple[Doc, Path_, Mapping[str, Any]]] = field(default_factory=dict)
    runtimes: dict[str, tuple[Doc, Mapping[str, Any]]] = field(default_factory=dict)
    base_models: dict[str, tuple[Doc, Mapping[str, Any]]] = field(default_factory=dict)
    accelerators: dict[str, tuple[Doc, Mapping[str, Any]]] = field(default_factory=dict)
    services: list[Doc] = field(default_factory=list)  # OME InferenceServices
    used_runtimes: set[str] = field(default_factory=set)


class NotAServer(Exception):
    """A document that is fine but starts no SGLang server (a router, a Service)."""


# -- helpers -------------------------------------------------------------------------------------------


def _get(data: Any, *keys: str | int) -> Any:
    for key in keys:
        if isinstance(data, Mapping):
            data = data.get(key)
        elif isinstance(data, list) and isinstance(key, int) and 0 <= key < len(data):
            data = data[key]
        else:
            return None
    return data


def image_version(doc: Doc, container: Mapping[str, Any], path: Path_) -> Sourced | None:
    """The SGLang release an image tag names (lmsysorg/sglang:v0.5.23-cu129 -> 0.5.23)."""
    image = container.get("image")
    if not isinstance(image, str):
        return None
    match = _IMAGE_VERSION_RE.search(image)
    if not match:
        return None
    return Sourced(match.group(1), doc.at((*path, "image")), f"image {image}")


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
    terms = _get(pod_spec, "affinity", "nodeAffinity", "requiredDuringSchedulingIgnoredDuringExecution", "nodeSelectorTerms")
    for t, term in enumerate(terms or []):
        for e, expression in enumerate(_get(term, "matchExpressions") or []):
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


def _int(doc: Doc, data: Mapping[str, Any], key: str, path: Path_, origin: str) -> Sourced | None:
    value = data.get(key) if isinstance(data, Mapping) else None
    if isinstance(value, bool) or not isinstance(value, int):
        return None
    return Sourced(value, doc.at((*path, key)), origin)


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


def pod_server(
    doc: Doc,
    template: Any,
    path: Path_,
    inputs: Inputs,
    *,
    injected: Mapping[str, Sourced],
    spec_key: str | None = "spec",
) -> PodServer | None:
    """The container of a pod template (`template.spec.containers`) that starts an SGLang server."""
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
        return PodServer(
            server=server,
            env=env,
            location=doc.at(cpath),
            gpus_per_node=gpu_limit(doc, container.get("resources"), (*cpath, "resources")),
            gpu=gpu_type(doc, spec, spec_path),
            version=image_version(doc, container, cpath),
            config_source=_config_source(doc, container, spec, cpath, spec_path, inputs),
        )
    for i, container in enumerate(spec.get("containers") or []):
        args = container.get("args") if isinstance(container, Mapping) else None
        if (isinstance(container, Mapping) and not container.get("command") and isinstance(args, list) and args
                and str(args[0]).startswith("--") and _IMAGE_VERSION_RE.search(str(container.get("image") or ""))):
            # SGLang flags on the image's own entrypoint, which the file does not show: say so, assume nothing
            where = doc.at((*spec_path, "containers", i, "args"))
            raise ScriptError(InputIssue(
                where.file, where.line, where.column, "",
                "the container passes SGLang flags as args to its image's entrypoint, which the file does not "
                "state; add command: [python3, -m, sglang.launch_server] so kvcheck reads what runs",
            ))
    return None


def container_server(
    doc: Doc, container: Mapping[str, Any], path: Path_, inputs: Inputs, *, injected: Mapping[str, Sourced]
) -> tuple[ServerCommand, Env] | None:
    env = container_env(doc, container, path, injected=injected, config_maps=inputs.config_maps)
    tokens = exec_tokens(doc, container, path, env)
    if not tokens:
        return None
    command_len = len(container.get("command") or []) if isinstance(container.get("command"), list) else 0

    def script_path(index: int) -> Path_ | None:
        return (*path, "command", index) if index < command_len else (*path, "args", index - command_len)

    server = find_server(tokens, env, doc=doc, script_path=script_path)
    return (server, env) if server is not None else None


def _config_source(
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
            cm = _get(volume, "configMap")
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


# -- Kubernetes workloads ------------------------------------------------------------------------------


def _name(doc: Doc) -> str:
    return str(_get(doc.data, "metadata", "name") or f"{doc.data.get('kind')}#{doc.index + 1}")


def read_workload(doc: Doc, inputs: Inputs) -> list[RoleSource]:
    """Deployment, StatefulSet (apps/v1) and a bare Pod: one role per object."""
    data = doc.data
    kind = data["kind"]
    name = _name(doc)
    tpath: Path_
    if kind == "Pod":
        template, tpath = data, ()
    else:
        template, tpath = _get(data, "spec", "template"), ("spec", "template")
    pod = pod_server(doc, template, tpath, inputs, injected={})
    if pod is None:
        return []
    replicas = _int(doc, data.get("spec") or {}, "replicas", ("spec",), f"{kind} replicas")
    mode = None
    for where in (("metadata", "labels"), (*tpath, "metadata", "labels")):
        label = _get(data, *where, "llm-d.ai/role")
        if label in ("prefill", "decode"):  # llm-d marks its prefill and decode Deployments so
            mode = Sourced(label, doc.at((*where, "llm-d.ai/role")), "label llm-d.ai/role")
    return [_role(name, kind, name, doc, pod, replicas=replicas, mode=mode)]


def _role(name: str, kind: str, group: str, doc: Doc, pod: PodServer, **extra: Any) -> RoleSource:
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
        **extra,
    )


def lws_vars(doc: Doc, size: Sourced, name: str, *, worker: bool) -> dict[str, Sourced]:
    """What the LeaderWorkerSet controller puts in every pod's environment (leader: worker index 0)."""
    return {
        "LWS_GROUP_SIZE": Sourced(size.value, size.location, size.origin or "LeaderWorkerSet size"),
        "LWS_LEADER_ADDRESS": Sourced(f"{name}-0.{name}", size.location, "LeaderWorkerSet leader address"),
        "LWS_WORKER_INDEX": Sourced(1 if worker else 0, size.location, "LeaderWorkerSet worker index"),
        "LWS_NAME": Sourced(name, size.location, "LeaderWorkerSet name"),
    }


def _leader_worker(
    doc: Doc,
    lwt: Any,
    path: Path_,
    inputs: Inputs,
    *,
    name: str,
    leader_key: str,
    worker_key: str,
    extra_env: Mapping[str, Sourced],
    patch: Callable[[Any, str], Any] | None = None,
) -> tuple[PodServer | None, list[tuple[str, ServerCommand]], Sourced]:
    size = _int(doc, lwt, "size", path, "LeaderWorkerSet size") if isinstance(lwt, Mapping) else None
    size = size or Sourced(1, doc.at(path), "LeaderWorkerSet size (default 1)")
    leader_t = _get(lwt, leader_key)
    worker_t = _get(lwt, worker_key)
    if patch is not None:
        leader_t, worker_t = patch(leader_t, "leader"), patch(worker_t, "worker")
    leader = None
    if isinstance(leader_t, Mapping):
        leader = pod_server(doc, leader_t, (*path, leader_key), inputs, injected={**extra_env, **lws_vars(doc, size, name, worker=False)})
    worker = None
    if isinstance(worker_t, Mapping):
        worker = pod_server(doc, worker_t, (*path, worker_key), inputs, injected={**extra_env, **lws_vars(doc, size, name, worker=True)})
    workers = [("worker", worker.server)] if worker is not None and leader is not None else []
    return leader or worker, workers, size


def read_lws(doc: Doc, inputs: Inputs) -> list[RoleSource]:
    """LeaderWorkerSet: the leader template (else the worker template) is the role; size = nodes per instance."""
    name = _name(doc)
    lwt = _get(doc.data, "spec", "leaderWorkerTemplate")
    path: Path_ = ("spec", "leaderWorkerTemplate")
    pod, workers, size = _leader_worker(
        doc, lwt, path, inputs, name=name, leader_key="leaderTemplate", worker_key="workerTemplate", extra_env={}
    )
    if pod is None:
        return []
    replicas = _int(doc, doc.data.get("spec") or {}, "replicas", ("spec",), "LeaderWorkerSet replicas")
    return [_role(name, "LeaderWorkerSet", name, doc, pod, nodes=size, replicas=replicas, workers=workers)]


def read_disaggregated_set(doc: Doc, inputs: Inputs) -> list[RoleSource]:
    """DisaggregatedSet: one role per `roles[]` entry (an LWS-like template each)."""
    group = _name(doc)
    out = []
    for i, role in enumerate(_get(doc.data, "spec", "roles") or []):
        if not isinstance(role, Mapping):
            continue
        path: Path_ = ("spec", "roles", i)
        name = str(role.get("name") or f"role{i}")
        lwt = role.get("leaderWorkerTemplate")
        if isinstance(lwt, Mapping):
            pod, workers, size = _leader_worker(
                doc, lwt, (*path, "leaderWorkerTemplate"), inputs, name=f"{group}-{name}",
                leader_key="leaderTemplate", worker_key="workerTemplate", extra_env={},
            )
        else:
            pod = pod_server(doc, role.get("template"), (*path, "template"), inputs, injected={})
            workers, size = [], None
        if pod is None:
            continue
        replicas = _int(doc, role, "replicas", path, "role replicas") or Sourced(1, doc.at(path), "replicas unset: 1")
        out.append(_role(name, "DisaggregatedSet", group, doc, pod, nodes=size, replicas=replicas, workers=workers,
                         standalone=True))
    return out


def merged_doc(doc: Doc, base_path: Path_ | None, *patch_paths: Path_ | None) -> Doc | None:
    """A pod template patched as RBG patches it (maps merge, containers merge by name, lists replace),
    each patch over the result of the ones before, as a document of its own whose every value keeps
    its position in the original file."""
    layers = [(p, _get(doc.data, *p)) for p in (base_path, *patch_paths) if p is not None]
    layers = [(p, v) for p, v in layers if v is not None]
    if not layers:
        return None
    positions = doc.yaml.positions
    (at, data), rest = layers[0], layers[1:]
    for step, (patch_path, patch) in enumerate(rest):
        patcher = _TemplatePatch(positions)
        dst: Path_ = (_MERGED, step)  # where the result sits until the next layer goes over it
        data = patcher.merge(data, at, patch, patch_path, dst)
        positions = Positions(
            {**doc.yaml.positions.keys, **patcher.positions.keys},
            {**doc.yaml.positions.values, **patcher.positions.values},
            {**doc.yaml.positions.styles, **patcher.positions.styles},
        )
        at = dst
    patcher = _TemplatePatch(positions)
    data = patcher.merge(data, at, None, (), ())
    return Doc(doc.source, YamlDocument(data, patcher.positions, [], doc.yaml.line), doc.index)


_MERGED = "\0merged"  # a path root no YAML key can spell


class _TemplatePatch:
    """Merges a patch over a base the way RBG does, carrying each value's position to its new path."""

    def __init__(self, source: Positions) -> None:
        self.source = source
        self.positions = Positions()

    def copy(self, value: Any, src: Path_, dst: Path_) -> Any:
        """`value` (at `src`) placed at `dst`, with every position under `src` moved along."""
        _move_positions(self.source.values, self.positions.values, src, dst)
        _move_positions(self.source.keys, self.positions.keys, src, dst)
        _move_positions(self.source.styles, self.positions.styles, src, dst)
        return copy_module.deepcopy(value)

    def merge(self, b: Any, bp: Path_, p: Any, pp: Path_, dst: Path_) -> Any:
        """Base `b` (at `bp`) patched by `p` (at `pp`), placed at `dst`."""
        if not (isinstance(b, Mapping) and isinstance(p, Mapping)):
            return self.copy(p, pp, dst) if p is not None else self.copy(b, bp, dst)
        source = self.source
        if pp in source.values:
            self.positions.values[dst] = source.values[pp]
        out: dict[str, Any] = {}
        for key, value in b.items():
            if key not in p:
                out[key] = self.copy(value, (*bp, key), (*dst, key))
        for key, value in p.items():
            base_value = b.get(key)
            if key in ("containers", "initContainers") and isinstance(value, list) and isinstance(base_value, list):
                out[key] = self._merge_containers(base_value, (*bp, key), value, (*pp, key), (*dst, key))
            elif key in b:
                out[key] = self.merge(base_value, (*bp, key), value, (*pp, key), (*dst, key))
            else:
                out[key] = self.copy(value, (*pp, key), (*dst, key))
            if (*pp, key) in source.keys:
                self.positions.keys[(*dst, key)] = source.keys[(*pp, key)]
        return out

    def _merge_containers(self, base: list[Any], bp: Path_, patch: list[Any], pp: Path_, dst: Path_) -> list[Any]:
        """Containers merge by name: patched ones in the patch's order, then the base's others."""
        merged: list[Any] = []
        used: set[int] = set()
        for j, container in enumerate(patch):
            match = next((i for i, c in enumerate(base) if isinstance(c, Mapping)
                          and isinstance(container, Mapping) and c.get("name") == container.get("name")), None)
            at: Path_ = (*dst, len(merged))
            if match is None:
                merged.append(self.copy(container, (*pp, j), at))
            else:
                used.add(match)
                merged.append(self.merge(base[match], (*bp, match), container, (*pp, j), at))
        for i, container in enumerate(base):
            if i not in used:
                merged.append(self.copy(container, (*bp, i), (*dst, len(merged))))
        return merged


def _move_positions(table: Mapping[Path_, _P], new: dict[Path_, _P], src: Path_, dst: Path_) -> None:
    n = len(src)
    for path, where in table.items():
        if path[:n] == src:
            new[dst + path[n:]] = where


_RBG_WORKLOAD_TYPE = "rbg.workloads.x-k8s.io/role-workload-type"


def read_rbg(doc: Doc, inputs: Inputs) -> list[RoleSource]:
    """RoleBasedGroup v1alpha1 (template + leader/worker patches) and v1alpha2 (standalone / leader-worker
    patterns), each template inline or a `templateRef` to `spec.roleTemplates` with its patch."""
    group = _name(doc)
    v2 = str(doc.data.get("apiVersion") or "").endswith("/v1alpha2")
    templates = {
        str(t.get("name")): ("spec", "roleTemplates", i, "template")
        for i, t in enumerate(_get(doc.data, "spec", "roleTemplates") or [])
        if isinstance(t, Mapping) and isinstance(t.get("template"), Mapping)
    }
    out = []
    for i, role in enumerate(_get(doc.data, "spec", "roles") or []):
        if not isinstance(role, Mapping):
            continue
        path: Path_ = ("spec", "roles", i)
        name = str(role.get("name") or f"role{i}")
        rbg_env = _rbg_vars(doc, path, group, name, v2=v2)
        replicas = _int(doc, role, "replicas", path, "role replicas")
        workers: list[tuple[str, ServerCommand]] = []
        size = None
        pod = None
        if isinstance(role.get("standalonePattern"), Mapping):  # v1alpha2
            sp_path: Path_ = (*path, "standalonePattern")
            template = merged_doc(doc, *_rbg_template(doc, sp_path, sp_path, templates))
            if template is not None:
                pod = pod_server(template, template.data, (), inputs, injected=rbg_env)
        elif isinstance(role.get("leaderWorkerPattern"), Mapping) or isinstance(role.get("leaderWorkerSet"), Mapping):
            # v1alpha2 leaderWorkerPattern {size, template | templateRef, leaderTemplatePatch, workerTemplatePatch};
            # v1alpha1 leaderWorkerSet {size, patchLeaderTemplate, patchWorkerTemplate} over the role's template
            lw_v2 = isinstance(role.get("leaderWorkerPattern"), Mapping)
            lw_path: Path_ = (*path, "leaderWorkerPattern" if lw_v2 else "leaderWorkerSet")
            lw = role["leaderWorkerPattern" if lw_v2 else "leaderWorkerSet"]
            layers = _rbg_template(doc, lw_path if lw_v2 else path, path, templates)
            size = _int(doc, lw, "size", lw_path, f"{'leaderWorkerPattern' if lw_v2 else 'leaderWorkerSet'} size")
            size = size or Sourced(1, doc.at(lw_path), "size unset: 1")
            keys = (("leaderTemplatePatch", "workerTemplatePatch") if lw_v2
                    else ("patchLeaderTemplate", "patchWorkerTemplate"))
            lws = not lw_v2 or "LeaderWorkerSet" in str(_get(role, "annotations", _RBG_WORKLOAD_TYPE) or "")
            pods: dict[str, PodServer | None] = {}
            for which, key in zip(("leader", "worker"), keys, strict=True):
                patch_path: Path_ | None = (*lw_path, key) if key in lw else None
                template = merged_doc(doc, *layers, patch_path)
                env = {**rbg_env, **rbg_lw_vars(doc, size, f"{group}-{name}", worker=which == "worker")}
                if lws:  # a LeaderWorkerSet runs the pods (v1alpha1 always; v1alpha2 when annotated so)
                    env.update(lws_vars(doc, size, f"{group}-{name}", worker=which == "worker"))
                pods[which] = (
                    pod_server(template, template.data, (), inputs, injected=env) if template is not None else None
                )
            pod = pods["leader"] or pods["worker"]
            worker_pod = pods["worker"]
            if pods["leader"] is not None and worker_pod is not None:
                workers = [("worker", worker_pod.server)]
        elif isinstance(role.get("template"), Mapping) or isinstance(role.get("templateRef"), Mapping):
            template = merged_doc(doc, *_rbg_template(doc, path, path, templates))  # v1alpha1 single-pod role
            if template is not None:
                pod = pod_server(template, template.data, (), inputs, injected=rbg_env)
        if pod is None:
            continue
        out.append(_role(name, "RoleBasedGroup", group, doc, pod, nodes=size, replicas=replicas, workers=workers,
                         standalone=True))
    return out


def _rbg_template(
    doc: Doc, source: Path_, role: Path_, templates: Mapping[str, Path_]
) -> tuple[Path_ | None, Path_ | None]:
    """The pod template at `source` (its `template`, or the roleTemplate its `templateRef` names) and the
    patch over it (v1alpha2 `templateRef.patch`; v1alpha1 the role's `templatePatch`)."""
    if _get(doc.data, *source, "template") is not None:
        return (*source, "template"), None
    ref = _get(doc.data, *source, "templateRef")
    if not isinstance(ref, Mapping):
        return None, None
    name = ref.get("name")
    if not isinstance(name, str) or name not in templates:
        where = doc.at((*source, "templateRef", "name"))
        known = ", ".join(sorted(templates)) or "none"
        raise ScriptError(InputIssue(
            where.file, where.line, where.column, "",
            f"templateRef names roleTemplate {name!r}, which spec.roleTemplates does not define (it defines: {known})",
        ))
    if "patch" in ref:
        return templates[name], (*source, "templateRef", "patch")
    return templates[name], (*role, "templatePatch") if _get(doc.data, *role, "templatePatch") else None


def _rbg_vars(doc: Doc, path: Path_, group: str, name: str, *, v2: bool) -> dict[str, Sourced]:
    """What the RBG controller puts in every pod of a role: RBG_GROUP_NAME, RBG_ROLE_NAME, RBG_ROLE_INDEX
    (and, for v1alpha1 objects, the names older controllers set: GROUP_NAME, ROLE_NAME, ROLE_INDEX)."""
    names: tuple[tuple[str, str, str], ...] = (("RBG_GROUP_NAME", "RBG_ROLE_NAME", "RBG_ROLE_INDEX"),)
    if not v2:
        names += (("GROUP_NAME", "ROLE_NAME", "ROLE_INDEX"),)
    out: dict[str, Sourced] = {}
    for group_var, role_var, index_var in names:
        out[group_var] = Sourced(group, doc.at(("metadata", "name")), "RBG group name")
        out[role_var] = Sourced(name, doc.at((*path, "name")), "RBG role name")
        out[index_var] = Sourced(0, doc.at(path), "RBG role index")
    return out


def rbg_lw_vars(doc: Doc, size: Sourced, name: str, *, worker: bool) -> dict[str, Sourced]:
    """What the RBG controller puts in the pods of a leader-worker role (leader: worker index 0)."""
    return {
        "RBG_LWP_GROUP_SIZE": Sourced(size.value, size.location, size.origin or "RBG leader-worker size"),
        "RBG_LWP_LEADER_ADDRESS": Sourced(f"{name}-0.{name}", size.location, "RBG leader address"),
        "RBG_LWP_WORKER_INDEX": Sourced(1 if worker else 0, size.location, "RBG worker index"),
    }


# -- NVIDIA Dynamo -------------------------------------------------------------------------------------


def _dynamo_pod(doc: Doc, service: Mapping[str, Any], path: Path_, inputs: Inputs) -> PodServer | None:
    """A Dynamo service's server: its extraPodSpec.mainContainer, else a pod template of its own."""
    pod = None
    main = _get(service, "extraPodSpec", "mainContainer")
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
                image_version(doc, main, cpath),
                _config_source(doc, main, pod_spec, cpath, extra_path, inputs),
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
    group = _name(doc)
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
        node_count = _get(service, "multinode", "nodeCount")
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
        replicas = _int(doc, service, "replicas", path, "replicas")
        role = _role(name, "DynamoGraphDeployment", group, doc, pod, nodes=nodes, replicas=replicas, mode=mode,
                     standalone=True)
        role.injected = injected
        out.append(role)
    return out


# -- OME -----------------------------------------------------------------------------------------------


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
        leader = _get(config, "leader")
        worker = _get(config, "worker")
        size = None
        workers: list[tuple[str, ServerCommand]] = []
        pod = None
        if isinstance(leader, Mapping):
            wsize = _int(doc, worker or {}, "size", (*path, "worker"), "worker.size")
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
            _role(role_name, doc.data.get("kind", "ServingRuntime"), group, doc, pod, nodes=size, workers=workers,
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
        server, cenv, doc.at(rpath), gpus, gpu_type(doc, part, path), image_version(doc, runner, rpath),
        _config_source(doc, runner, part, rpath, path, inputs),
    )


def read_ome_runtime(doc: Doc, inputs: Inputs) -> list[RoleSource]:
    """A ClusterServingRuntime/ServingRuntime read on its own (no InferenceService among the inputs names it)."""
    name = _name(doc)
    if name in inputs.used_runtimes:
        return []
    return _ome_runtime_roles(doc, doc.data, name, inputs, extra_env={}, model_path=None, gpu=None)


def read_ome_service(doc: Doc, inputs: Inputs) -> list[RoleSource]:
    """An OME InferenceService: its runtime's roles, with the base model's path and the accelerator class's GPU."""
    name = _name(doc)
    spec = doc.data.get("spec") or {}
    runtime_name = _get(spec, "runtime", "name")
    model_name = _get(spec, "model", "name")
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
        path = _get(model, "spec", "storage", "path")
        if isinstance(path, str):
            model_path = Sourced(path, mdoc.at(("spec", "storage", "path")), f"ClusterBaseModel {model_name}")
            extra["MODEL_PATH"] = model_path
    gpu = None
    accel = _get(spec, "acceleratorSelector", "acceleratorClass") or _get(spec, "engine", "acceleratorOverride", "acceleratorClass")
    if accel in inputs.accelerators:
        adoc, cls = inputs.accelerators[accel]
        product = _get(cls, "spec", "discovery", "nodeSelector", "nvidia.com/gpu.product")
        if isinstance(product, str):
            gpu = Sourced(product, adoc.at(("spec", "discovery", "nodeSelector", "nvidia.com/gpu.product")),
                          f"AcceleratorClass {accel}")
        elif isinstance(_get(cls, "spec", "capabilities", "gpuModel"), str):
            gpu = Sourced(cls["spec"]["capabilities"]["gpuModel"], adoc.at(("spec", "capabilities", "gpuModel")),
                          f"AcceleratorClass {accel}")
    roles = _ome_runtime_roles(rdoc, runtime, name, inputs, extra_env=extra, model_path=model_path, gpu=gpu)
    return roles


# -- docker compose, srt-slurm -------------------------------------------------------------------------


def read_compose(doc: Doc, inputs: Inputs) -> list[RoleSource]:
    """A compose file: each service whose entrypoint + command starts an SGLang server."""
    out = []
    group = str(doc.data.get("name") or Path(doc.source.name).stem)
    for name, service in (doc.data.get("services") or {}).items():
        if not isinstance(service, Mapping):
            continue
        path: Path_ = ("services", name)
        env = _compose_env(doc, service, path)
        tokens = _compose_tokens(doc, service, path, env)
        server = find_server(tokens, env, doc=None) if tokens else None
        if server is None:
            continue
        version = image_version(doc, service, path)
        out.append(
            RoleSource(name=str(name), kind="compose", group=group, doc=doc, location=doc.at(path, key=True),
                       server=server, env=env, gpus_per_node=_compose_gpus(doc, service, path), version=version,
                       standalone=True)
        )
    return out


def _compose_env(doc: Doc, service: Mapping[str, Any], path: Path_) -> Env:
    """A service's `environment`, as a mapping or as a list of NAME=value."""
    env = Env()
    environment = service.get("environment")
    if isinstance(environment, Mapping):
        for key, value in environment.items():
            if value is not None:
                env.values[str(key)] = Sourced(str(value), doc.at((*path, "environment", key)))
    elif isinstance(environment, list):
        for i, item in enumerate(environment):
            if isinstance(item, str) and "=" in item:
                key, _, value = item.partition("=")
                env.values[key] = Sourced(value, doc.at((*path, "environment", i)))
    return env


def _compose_tokens(doc: Doc, service: Mapping[str, Any], path: Path_, env: Env) -> list[Token]:
    """The service's entrypoint + command as words, each at its place in the file."""
    tokens: list[Token] = []
    for key in ("entrypoint", "command"):
        value = service.get(key)
        if isinstance(value, str):
            # compose splits a string command like a shell would, without running one
            from kvcheck.inputs.deploy.shell import ShellSyntaxError, parse_script

            try:
                commands = parse_script(value.replace("$$", "\x00"), env.lookup)
            except ShellSyntaxError:
                commands = []
            for command in commands[:1]:
                for word in command.words:
                    tokens.append(Token(word.text.replace("\x00", "$"), doc.inside((*path, key), word.offset),
                                        list(word.unresolved)))
        elif isinstance(value, list):
            for i, item in enumerate(value):
                tokens.append(Token(str(item), doc.at((*path, key, i))))
    return tokens


def _compose_gpus(doc: Doc, service: Mapping[str, Any], path: Path_) -> Sourced | None:
    """GPUs reserved under deploy.resources.reservations.devices (device_ids or count); the last wins."""
    devices = _get(service, "deploy", "resources", "reservations", "devices")
    gpus = None
    for d, device in enumerate(devices or []):
        if not isinstance(device, Mapping) or "gpu" not in (device.get("capabilities") or []):
            continue
        dpath: Path_ = (*path, "deploy", "resources", "reservations", "devices", d)
        if isinstance(device.get("device_ids"), list):
            gpus = Sourced(len(device["device_ids"]), doc.at((*dpath, "device_ids")), "device_ids")
        elif isinstance(device.get("count"), int):
            gpus = Sourced(device["count"], doc.at((*dpath, "count")), "devices count")
    return gpus


def read_slurm_recipe(doc: Doc, inputs: Inputs) -> list[RoleSource]:
    """An srt-slurm recipe: per-role SGLang config maps under backend.sglang_config, resources per role."""
    data = doc.data
    resources = data.get("resources") or {}
    config = _get(data, "backend", "sglang_config") or {}
    group = str(data.get("name") or doc.source.name)
    gpus = _int(doc, resources, "gpus_per_node", ("resources",), "resources.gpus_per_node")
    gpu = None
    if isinstance(resources.get("gpu_type"), str):
        gpu = Sourced(resources["gpu_type"], doc.at(("resources", "gpu_type")), "resources.gpu_type")
    model_path = None
    if isinstance(_get(data, "model", "path"), str):
        model_path = Sourced(data["model"]["path"], doc.at(("model", "path")), "model.path")
    version = None
    container = _get(data, "model", "container")
    if isinstance(container, str):
        match = re.search(r"sglang[+:_-]v?(\d+\.\d+\.\d+(?:\.post\d+)?)", container)
        if match:
            version = Sourced(match.group(1), doc.at(("model", "container")), "model.container")
    out = []
    for role in ("prefill", "decode", "aggregated", "agg"):
        block = config.get(role) if isinstance(config, Mapping) else None
        if not isinstance(block, Mapping):
            continue
        prefix = "agg" if role in ("aggregated", "agg") else role
        node_total = _int(doc, resources, f"{prefix}_nodes", ("resources",), f"resources.{prefix}_nodes")
        workers = _int(doc, resources, f"{prefix}_workers", ("resources",), f"resources.{prefix}_workers")
        nodes = None
        if node_total is not None:
            count = workers.value if workers and workers.value else 1
            per = max(1, node_total.value // count)
            nodes = Sourced(per, node_total.location, f"{prefix}_nodes / {prefix}_workers")
        where = doc.at(("backend", "sglang_config", role))
        server = ServerCommand([], 0, "sglang", where)
        out.append(
            RoleSource(name=prefix if prefix != "agg" else "server", kind="srt-slurm", group=group, doc=doc,
                       location=doc.at(("backend", "sglang_config", role), key=True), server=server, env=Env(),
                       gpus_per_node=gpus, nodes=nodes, replicas=workers, gpu=gpu, version=version,
                       model_path=model_path, standalone=True)
        )
        out[-1].config_map = (doc, ("backend", "sglang_config", role))
        if nodes is not None and nodes.value > 1:
            # srtctl starts each worker with --nnodes = its nodes unless the config map says otherwise
            out[-1].injected["nnodes"] = Arg("nnodes", "nnodes", nodes.value, nodes.location or where, None,
                                             "srt-slurm: nodes per worker")
    return out


# -- detection -----------------------------------------------------------------------------------------

# kind -> (API groups it may come from, reader, what the docs call it)
KINDS: dict[str, tuple[tuple[str, ...], Callable[[Doc, Inputs], list[RoleSource]]]] = {
    "Deployment": (("apps/v1",), read_workload),
    "StatefulSet": (("apps/v1",), read_workload),
    "Pod": (("v1",), read_workload),
    "LeaderWorkerSet": (("leaderworkerset.x-k8s.io/",), read_lws),
    "DisaggregatedSet": (("disaggregatedset.x-k8s.io/", "leaderworkerset.x-k8s.io/"), read_disaggregated_set),
    "RoleBasedGroup": (("workloads.x-k8s.io/",), read_rbg),
    "DynamoGraphDeployment": (("nvidia.com/",), read_dynamo),
    "InferenceService": (("ome.io/",), read_ome_service),
    "ClusterServingRuntime": (("ome.io/",), read_ome_runtime),
    "ServingRuntime": (("ome.io/",), read_ome_runtime),
}
# Kinds read only for what others refer to.
REFERENCED_KINDS = ("ConfigMap", "ClusterBaseModel", "BaseModel", "AcceleratorClass")

SUPPORTED = (
    "Deployment, StatefulSet, Pod (apps/v1, v1); LeaderWorkerSet; DisaggregatedSet; RoleBasedGroup "
    "(v1alpha1, v1alpha2); DynamoGraphDeployment (v1alpha1, v1beta1); OME InferenceService, "
    "ClusterServingRuntime, ServingRuntime (with ClusterBaseModel, AcceleratorClass); docker compose files; "
    "srt-slurm recipes; Slurm batch scripts (#SBATCH + srun); an SGLang command line (--cmd)"
)


def doc_format(doc: Doc) -> str | None:
    """The format of one document: a Kubernetes kind we read, 'compose', 'srt-slurm', or None."""
    data = doc.data
    if not isinstance(data, Mapping):
        return None
    kind = data.get("kind")
    api = data.get("apiVersion")
    if isinstance(kind, str) and isinstance(api, str):
        entry = KINDS.get(kind)
        if entry is not None and any(api == g or api.startswith(g) for g in entry[0]):
            return kind
        return None
    if isinstance(data.get("services"), Mapping):
        return "compose"
    if isinstance(_get(data, "backend", "sglang_config"), Mapping) or (
        isinstance(data.get("resources"), Mapping) and isinstance(data.get("backend"), Mapping)
    ):
        return "srt-slurm"
    return None


def gather_references(docs: list[Doc]) -> Inputs:
    """ConfigMaps, OME runtimes, base models and accelerator classes by name, from every document."""
    inputs = Inputs()
    for doc in docs:
        data = doc.data
        if not isinstance(data, Mapping) or not isinstance(data.get("kind"), str):
            continue
        kind = data["kind"]
        name = _get(data, "metadata", "name")
        if not isinstance(name, str):
            continue
        if kind == "ConfigMap" and isinstance(data.get("data"), Mapping):
            inputs.config_maps[name] = (doc, ("data",), data["data"])
        elif kind in ("ClusterServingRuntime", "ServingRuntime"):
            inputs.runtimes[name] = (doc, data)
        elif kind in ("ClusterBaseModel", "BaseModel"):
            inputs.base_models[name] = (doc, data)
        elif kind == "AcceleratorClass":
            inputs.accelerators[name] = (doc, data)
        elif kind == "InferenceService" and str(data.get("apiVersion", "")).startswith("ome.io/"):
            runtime = _get(data, "spec", "runtime", "name")
            if isinstance(runtime, str):
                inputs.used_runtimes.add(runtime)
    return inputs


READERS: dict[str, Callable[[Doc, Inputs], list[RoleSource]]] = {
    **{kind: entry[1] for kind, entry in KINDS.items()},
    "compose": read_compose,
    "srt-slurm": read_slurm_recipe,
}
