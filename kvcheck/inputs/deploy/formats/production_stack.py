"""The vLLM production-stack Helm chart's values (`servingEngineSpec.modelSpec`): each model spec is a vLLM role.

The chart (vllm-project/production-stack, helm/templates/deployment-vllm-multi.yaml at a6c01db) renders
each `modelSpec` entry into a Deployment running `vllm serve MODEL_URL` with flags it writes from the
entry: `vllmConfig`'s keys (`maxModelLen` -> `--max-model-len`, `tensorParallelSize`,
`gpuMemoryUtilization`, `enablePrefixCaching` -> `--enable-prefix-caching` or
`--no-enable-prefix-caching`, ...), `vllmConfig.extraArgs` verbatim, and `--kv-transfer-config` from
`lmcacheConfig` (`kvRole`, default kv_both). kvcheck writes the same command line from the values, each
word at the value it came from, and reads it with vLLM's parser; `requestGPU` gives the GPUs per pod,
`repository:tag` the release. A `vllmConfig` key the chart does not read is an input error: the chart
would ignore it silently (a `maxModelLength` that does nothing). Model specs whose `lmcacheConfig.kvRole`
is kv_producer or kv_consumer form one prefill/decode deployment; every other spec is its own.
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from kvcheck.errors import InputIssue
from kvcheck.inputs.deploy.formats.base import Format, Inputs, RoleSource, get, is_kubernetes_object
from kvcheck.inputs.deploy.formats.pods import image_version
from kvcheck.inputs.deploy.server import Env, ScriptError, ServerCommand, Sourced, Token
from kvcheck.inputs.deploy.source import Doc
from kvcheck.io.yamlpos import Path_

KIND = "production-stack values"

# vllmConfig key -> the flag the chart writes for it (deployment-vllm-multi.yaml), in the chart's order.
_VALUE_FLAGS = (
    ("maxModelLen", "--max-model-len"),
    ("dtype", "--dtype"),
    ("tensorParallelSize", "--tensor-parallel-size"),
    ("maxNumSeqs", "--max-num-seqs"),
    ("gpuMemoryUtilization", "--gpu_memory_utilization"),
    ("maxLoras", "--max_loras"),
    ("runner", "--runner"),
    ("convert", "--convert"),
)
# Keys the chart reads elsewhere (environment, switches): known, not flags of their own here.
_OTHER_KEYS = ("enableChunkedPrefill", "enablePrefixCaching", "extraArgs", "v0", "prometheusMultiprocDir")
VLLM_CONFIG_KEYS = tuple(key for key, _ in _VALUE_FLAGS) + _OTHER_KEYS
_PD_ROLES = ("kv_producer", "kv_consumer")


def is_values(data: Any) -> bool:
    return (isinstance(data, Mapping) and not is_kubernetes_object(data)
            and isinstance(get(data, "servingEngineSpec", "modelSpec"), list))


def marks(data: Any) -> bool:
    return isinstance(data, Mapping) and isinstance(data.get("servingEngineSpec"), Mapping)


def read_values(doc: Doc, inputs: Inputs) -> list[RoleSource]:
    out = []
    spec = doc.data["servingEngineSpec"]
    if spec.get("enableEngine") is False:
        return []
    shared_env = spec.get("env") if isinstance(spec.get("env"), list) else []
    for i, model in enumerate(spec["modelSpec"]):
        path: Path_ = ("servingEngineSpec", "modelSpec", i)
        if not isinstance(model, Mapping) or model.get("enabled") is False:
            continue
        out.append(_ray_role(doc, model, path) if get(model, "raySpec", "enabled") else
                   _role(doc, model, path, shared_env))
    return out


def _serve(doc: Doc, model: Mapping[str, Any], path: Path_) -> tuple[str, list[Token]]:
    """The spec's name and `vllm serve MODEL_URL`, which both templates start with."""
    name = str(model.get("name") or f"modelSpec[{path[-1]}]")
    where = doc.at(path)
    if "modelURL" not in model:
        raise ScriptError(InputIssue(where.file, where.line, where.column, "",
                                     f"modelSpec '{name}' has no modelURL (the chart requires one)"))
    return name, [Token("vllm", where), Token("serve", where), Token(str(model["modelURL"]), doc.at((*path, "modelURL")))]


def _role(doc: Doc, model: Mapping[str, Any], path: Path_, shared_env: list[Any]) -> RoleSource:
    name, tokens = _serve(doc, model, path)
    where = doc.at(path)
    tokens += _model_flags(doc, model, path, _vllm_config)
    config = model.get("vllmConfig")
    lmcache = model.get("lmcacheConfig")
    kv_role = "kv_both"
    if isinstance(lmcache, Mapping) and lmcache.get("kvRole"):
        kv_role = str(lmcache["kvRole"])
    if isinstance(lmcache, Mapping) and lmcache.get("enabled"):
        lpath = (*path, "lmcacheConfig")
        if "enablePD" in lmcache:
            value = {"kv_connector": "LMCacheConnectorV1", "kv_role": kv_role,
                     "kv_connector_extra_config": {"discard_partial_chunks": False,
                                                   "lmcache_rpc_port": str(lmcache.get("nixlRole", ""))}}
        elif isinstance(config, Mapping) and str(config.get("v0")) == "1":
            value = {"kv_connector": "LMCacheConnector", "kv_role": kv_role}
        else:
            value = {"kv_connector": "LMCacheConnectorV1", "kv_role": kv_role}
        at = doc.at((*lpath, "kvRole")) if "kvRole" in lmcache else doc.at((*lpath, "enabled"))
        tokens += [Token("--kv-transfer-config", at), Token(json.dumps(value), at)]
    own: list[Any] = model["env"] if isinstance(model.get("env"), list) else []
    items: list[tuple[Any, Path_]] = [(item, ("servingEngineSpec", "env", j)) for j, item in enumerate(shared_env)]
    items += [(item, (*path, "env", j)) for j, item in enumerate(own)]
    env = _env(doc, items)
    server = ServerCommand(tokens, 2, "vllm", where, "vllm")
    image, version = _image_release(doc, model, path)
    # the deployment's name: the values file's for a prefill/decode pair, else the model spec's own
    group = Path(doc.source.name).stem if kv_role in _PD_ROLES else name
    return RoleSource(name=name, kind=KIND, group=group, doc=doc, location=where, server=server, env=env,
                      gpus_per_node=_gpus(doc, model, path), version=version,
                      replicas=_int(doc, model, "replicaCount", path), standalone=True,
                      image=image)


# vllmConfig key -> the flag the RayCluster head's entrypoint script writes for it (ray-cluster.yaml), in its order.
_RAY_VALUE_FLAGS = (
    ("maxModelLen", "--max-model-len"),
    ("dtype", "--dtype"),
    ("tensorParallelSize", "--tensor-parallel-size"),
    ("pipelineParallelSize", "--pipeline-parallel-size"),
    ("maxNumSeqs", "--max-num-seqs"),
    ("gpuMemoryUtilization", "--gpu-memory-utilization"),
    ("maxLoras", "--max-loras"),
)
RAY_CONFIG_KEYS = tuple(key for key, _ in _RAY_VALUE_FLAGS) + (
    "enableChunkedPrefill", "enablePrefixCaching", "extraArgs", "v1")


def _ray_role(doc: Doc, model: Mapping[str, Any], path: Path_) -> RoleSource:
    """A modelSpec with raySpec: the chart renders a KubeRay RayCluster (helm/templates/ray-cluster.yaml) whose
    head runs `vllm serve ... --distributed-executor-backend ray` (its vllm-entrypoint.sh ConfigMap) once the
    head and `replicaCount` workers have joined: one vLLM instance over replicaCount + 1 pods."""
    name, tokens = _serve(doc, model, path)
    where = doc.at(path)
    tokens += _ray_flags(doc, model, path)
    own: list[Any] = model["env"] if isinstance(model.get("env"), list) else []
    env = _env(doc, [(item, (*path, "env", j)) for j, item in enumerate(own)])
    server = ServerCommand(tokens, 2, "vllm", where, "vllm")
    image, version = _image_release(doc, model, path)
    gpus, nodes = _ray_placement(doc, model, path, name)
    return RoleSource(name=name, kind=f"{KIND} (RayCluster)", group=name, doc=doc, location=where, server=server,
                      env=env, gpus_per_node=gpus, version=version, nodes=nodes, standalone=True,
                      image=image)


def _ray_flags(doc: Doc, model: Mapping[str, Any], path: Path_) -> list[Token]:
    """The flags the head's vllm-entrypoint.sh adds after the model, in its order."""
    rpath = (*path, "raySpec")
    tokens = [Token("--distributed-executor-backend", doc.at(rpath, key=True)), Token("ray", doc.at(rpath, key=True))]
    tokens += _model_flags(doc, model, path, _ray_config_flags)
    config = model.get("vllmConfig")
    lmcache = model.get("lmcacheConfig")
    if isinstance(lmcache, Mapping) and lmcache.get("enabled"):
        connector = ("LMCacheConnectorV1" if isinstance(config, Mapping) and str(config.get("v1")) == "1"
                     else "LMCacheConnector")
        at = doc.at((*path, "lmcacheConfig", "enabled"))
        tokens += [Token("--kv-transfer-config", at),
                   Token(json.dumps({"kv_connector": connector, "kv_role": "kv_both"}), at)]
    if model.get("chatTemplate"):
        tokens += _pair(doc, "--chat-template", model["chatTemplate"], (*path, "chatTemplate"))
    return tokens


def _ray_config_flags(doc: Doc, config: Mapping[str, Any], cpath: Path_) -> list[Token]:
    """vllmConfig as the head's vllm-entrypoint.sh writes it (--enable-prefix-caching only when true)."""
    _known_keys(doc, config, cpath, RAY_CONFIG_KEYS, "the production-stack chart's RayCluster")
    tokens: list[Token] = []
    if "enableChunkedPrefill" in config:
        on = bool(config["enableChunkedPrefill"])
        tokens.append(Token("--enable-chunked-prefill" if on else "--no-enable-chunked-prefill",
                            doc.at((*cpath, "enableChunkedPrefill"))))
    if config.get("enablePrefixCaching"):
        tokens.append(Token("--enable-prefix-caching", doc.at((*cpath, "enablePrefixCaching"))))
    for key, flag in _RAY_VALUE_FLAGS:
        if key in config:
            tokens += _pair(doc, flag, config[key], (*cpath, key))
    extra = config.get("extraArgs")
    if isinstance(extra, list):
        for j, item in enumerate(extra):
            tokens.append(Token(_helm_text(item), doc.at((*cpath, "extraArgs", j))))
    return tokens


def _ray_placement(doc: Doc, model: Mapping[str, Any], path: Path_, name: str) -> tuple[Sourced | None, Sourced]:
    """GPUs per pod (the head's, which each worker must match) and the pods of the instance."""
    where = doc.at(path)
    rpath = (*path, "raySpec")
    head = get(model, "raySpec", "headNode")
    head_gpus = _gpus(doc, head, (*rpath, "headNode"), "raySpec.headNode") if isinstance(head, Mapping) else None
    worker_gpus = _gpus(doc, model, path)
    workers = model.get("replicaCount", 1)
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 0:
        raise ScriptError(InputIssue(where.file, where.line, where.column, "",
                                     f"modelSpec '{name}': replicaCount {workers!r} is not a count of Ray workers"))
    if head_gpus is not None and worker_gpus is not None and head_gpus.value != worker_gpus.value and workers:
        at = head_gpus.location or where
        raise ScriptError(InputIssue(
            at.file, at.line, at.column, "",
            f"modelSpec '{name}': the Ray head asks for {head_gpus.value} GPU(s) and each worker for "
            f"{worker_gpus.value}: kvcheck counts one GPU count per node of the instance; give both the same"))
    nodes_at = doc.at((*path, "replicaCount")) if "replicaCount" in model else doc.at(rpath)
    return head_gpus or worker_gpus, Sourced(workers + 1, nodes_at, "Ray head + replicaCount workers (EXPECTED_NODES)")


def _known_keys(doc: Doc, config: Mapping[str, Any], path: Path_, keys: tuple[str, ...], reader: str) -> None:
    unknown = [key for key in config if key not in keys]
    if unknown:
        key = unknown[0]
        where = doc.at((*path, key), key=True)
        close = difflib.get_close_matches(str(key), keys, n=1)
        raise ScriptError(InputIssue(
            where.file, where.line, where.column, str(key),
            f"vllmConfig.{key} is not a key {reader} reads, so it would be ignored"
            + (f" (did you mean '{close[0]}'?)" if close else "")
            + f"; it reads {', '.join(keys)} (pass other flags in extraArgs)"))


def _pair(doc: Doc, flag: str, value: Any, path: Path_) -> list[Token]:
    at = doc.at(path)
    return [Token(flag, doc.at(path, key=True)), Token(_helm_text(value), at)]


def _helm_text(value: Any) -> str:
    """A value as Helm's `quote` writes it (Go's formatting: true, 0.9, 4096)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _vllm_config(doc: Doc, config: Mapping[str, Any], path: Path_) -> list[Token]:
    unknown = [key for key in config if key not in VLLM_CONFIG_KEYS]
    if unknown:
        key = unknown[0]
        where = doc.at((*path, key), key=True)
        close = difflib.get_close_matches(str(key), VLLM_CONFIG_KEYS, n=1)
        raise ScriptError(InputIssue(
            where.file, where.line, where.column, str(key),
            f"vllmConfig.{key} is not a key the production-stack chart reads, so it would be ignored"
            + (f" (did you mean '{close[0]}'?)" if close else "")
            + f"; it reads {', '.join(VLLM_CONFIG_KEYS)} (pass other flags in extraArgs)"))
    tokens: list[Token] = []
    if "enableChunkedPrefill" in config:
        on = bool(config["enableChunkedPrefill"])
        tokens.append(Token("--enable-chunked-prefill" if on else "--no-enable-chunked-prefill",
                            doc.at((*path, "enableChunkedPrefill"))))
    # the chart writes one of the two whenever vllmConfig is there
    prefix = bool(config.get("enablePrefixCaching"))
    tokens.append(Token("--enable-prefix-caching" if prefix else "--no-enable-prefix-caching",
                        doc.at((*path, "enablePrefixCaching")) if "enablePrefixCaching" in config else doc.at(path)))
    for key, flag in _VALUE_FLAGS:
        if key in config:
            tokens += _pair(doc, flag, config[key], (*path, key))
    extra = config.get("extraArgs")
    if isinstance(extra, list):
        for j, item in enumerate(extra):
            tokens.append(Token(_helm_text(item), doc.at((*path, "extraArgs", j))))
    return tokens


def _env(doc: Doc, items: list[tuple[Any, Path_]]) -> Env:
    """servingEngineSpec.env then the spec's own env (the chart writes them in that order; the later wins)."""
    env = Env()
    for item, path in items:
        if not isinstance(item, Mapping) or not isinstance(item.get("name"), str):
            continue
        if "value" in item:
            env.values[item["name"]] = Sourced(str(item["value"]), doc.at((*path, "value")))
            env.unknown.pop(item["name"], None)
        else:
            env.values.pop(item["name"], None)
            env.unknown[item["name"]] = "it comes from a valueFrom reference"
    return env


def _gpus(doc: Doc, model: Mapping[str, Any], path: Path_, what: str = "modelSpec") -> Sourced | None:
    resources = model.get("resources")
    if isinstance(resources, Mapping):
        from kvcheck.inputs.deploy.formats.pods import gpu_limit

        return gpu_limit(doc, resources, (*path, "resources"))
    if "requestGPU" not in model:
        return None
    value = model["requestGPU"]
    count = int(value) if isinstance(value, str) and value.strip().isdigit() else value  # the chart renders it bare
    if isinstance(count, bool) or not isinstance(count, int) or count <= 0:
        # the chart writes the value as the pod's nvidia.com/gpu limit: "two" is no quantity Kubernetes takes,
        # 0 (or a negative) asks for no GPU at all; either way no engine starts on the GPUs kvcheck would size
        where = doc.at((*path, "requestGPU"))
        raise ScriptError(InputIssue(
            where.file, where.line, where.column, "",
            f"{what} requestGPU {value!r} is not a positive whole number of GPUs (the chart writes it as the "
            "pod's nvidia.com/gpu limit); state the GPUs each pod gets, e.g. requestGPU: 1"))
    return Sourced(count, doc.at((*path, "requestGPU")), f"{what} requestGPU")


def _int(doc: Doc, data: Mapping[str, Any], key: str, path: Path_) -> Sourced | None:
    value = data.get(key)
    if isinstance(value, bool) or not isinstance(value, int):
        return None
    return Sourced(value, doc.at((*path, key)), f"modelSpec {key}")


FORMAT = Format(
    name=KIND,
    reads="vLLM production-stack Helm values (servingEngineSpec.modelSpec)",
    detect=lambda doc: is_values(doc.data),
    read=read_values,
    marks=marks,
)


def _image_release(doc: Doc, model: Mapping[str, Any], path: Path_) -> tuple[Sourced | None, Sourced | None]:
    """The model spec's `repository:tag` at its `repository` line (the Kubernetes launcher boots it; KV318),
    and the vLLM release its tag names, at the `tag` line."""
    if not model.get("repository"):
        return None, None
    name = f"{model.get('repository')}:{model.get('tag')}"
    version = image_version(doc, {"image": name}, path, "vllm")
    if version is not None:
        version = Sourced(version.value, doc.at((*path, "tag")) if "tag" in model else doc.at(path), version.origin)
    return Sourced(name, doc.at((*path, "repository")), "repository and tag"), version


def _model_flags(doc: Doc, model: Mapping[str, Any], path: Path_,
                 config_flags: Callable[[Doc, Mapping[str, Any], Path_], list[Token]]) -> list[Token]:
    """The flags both charts' entrypoints write after the model, in their order: LoRA, tool calling, the
    vllmConfig (each template its own way), the revision."""
    tokens: list[Token] = []
    for key, flag in (("enableLoRA", "--enable-lora"), ("enableTool", "--enable-auto-tool-choice")):
        if model.get(key):
            tokens.append(Token(flag, doc.at((*path, key))))
    if model.get("toolCallParser"):
        tokens += _pair(doc, "--tool-call-parser", model["toolCallParser"], (*path, "toolCallParser"))
    config = model.get("vllmConfig")
    if isinstance(config, Mapping):
        tokens += config_flags(doc, config, (*path, "vllmConfig"))
    if model.get("modelRevision"):
        tokens += _pair(doc, "--revision", model["modelRevision"], (*path, "modelRevision"))
    return tokens
