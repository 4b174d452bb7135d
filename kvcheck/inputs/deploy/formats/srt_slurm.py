"""srt-slurm recipes: each role's engine flags as a YAML mapping under backend.sglang_config, resources per role.

A sweep file (a `base` recipe and its `override_*` variants) is not a recipe until srtctl has merged
it; the format says so rather than reading `base` alone.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kvcheck.engines import get_engine
from kvcheck.inputs.deploy.formats.base import Format, Inputs, RoleSource, get, int_at, is_kubernetes_object
from kvcheck.inputs.deploy.server import Arg, Env, ServerCommand, Sourced
from kvcheck.inputs.deploy.source import Doc

# srt-slurm's SGLang backend: backend.sglang_config holds the flags of the engine registered as "sglang".
_ENGINE = "sglang"


def read_slurm_recipe(doc: Doc, inputs: Inputs) -> list[RoleSource]:
    """An srt-slurm recipe: per-role SGLang config maps under backend.sglang_config, resources per role."""
    data = doc.data
    resources = data.get("resources") or {}
    config = get(data, "backend", "sglang_config") or {}
    group = str(data.get("name") or doc.source.name)
    gpus = int_at(doc, resources, "gpus_per_node", ("resources",), "resources.gpus_per_node")
    gpu = None
    if isinstance(resources.get("gpu_type"), str):
        gpu = Sourced(resources["gpu_type"], doc.at(("resources", "gpu_type")), "resources.gpu_type")
    model_path = None
    if isinstance(get(data, "model", "path"), str):
        model_path = Sourced(data["model"]["path"], doc.at(("model", "path")), "model.path")
    version = None
    container = get(data, "model", "container")
    if isinstance(container, str):
        release = get_engine(_ENGINE).release_from_container(container)
        if release is not None:
            version = Sourced(release, doc.at(("model", "container")), "model.container")
    out = []
    for role in ("prefill", "decode", "aggregated", "agg"):
        block = config.get(role) if isinstance(config, Mapping) else None
        if not isinstance(block, Mapping):
            continue
        prefix = "agg" if role in ("aggregated", "agg") else role
        node_total = int_at(doc, resources, f"{prefix}_nodes", ("resources",), f"resources.{prefix}_nodes")
        workers = int_at(doc, resources, f"{prefix}_workers", ("resources",), f"resources.{prefix}_workers")
        nodes = None
        if node_total is not None:
            count = workers.value if workers and workers.value else 1
            per = max(1, node_total.value // count)
            nodes = Sourced(per, node_total.location, f"{prefix}_nodes / {prefix}_workers")
        where = doc.at(("backend", "sglang_config", role))
        server = ServerCommand([], 0, _ENGINE, where, _ENGINE)
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


def detect(doc: Doc) -> bool:
    data = doc.data
    if not isinstance(data, Mapping) or is_kubernetes_object(data) or isinstance(data.get("services"), Mapping):
        return False
    return isinstance(get(data, "backend", "sglang_config"), Mapping) or (
        isinstance(data.get("resources"), Mapping) and isinstance(data.get("backend"), Mapping)
    )


def marks(data: Any) -> bool:
    """A recipe (a `backend`) or a sweep file (a `base` recipe with `backend` or `resources`), readable or not."""
    if not isinstance(data, Mapping):
        return False
    base = data.get("base")
    return "backend" in data or (isinstance(base, Mapping) and bool({"backend", "resources"} & set(base)))


def explain(doc: Doc) -> str:
    """A sweep file gives no role until srtctl resolves its variants: say how ('' for any other document)."""
    sweep = _sweep_variants(doc)
    if not sweep:
        return ""
    return (
        f"{doc.source.name}:{doc.yaml.line}: an srt-slurm sweep file ({sweep}): each variant is a recipe "
        "only once srtctl has merged it over `base`; write them with `srtctl resolve-override -f "
        f"{doc.source.name}` and check the files it writes (<file>_<variant>.yaml)"
    )


def _sweep_variants(doc: Doc) -> str:
    """The variant keys of an srt-slurm sweep file (`base` recipe + `override_*` / `zip_override_*`), else ''."""
    data = doc.data
    if not (isinstance(data, Mapping) and isinstance(data.get("base"), Mapping)):
        return ""
    base = data["base"]
    if not (isinstance(base.get("backend"), Mapping) or isinstance(base.get("resources"), Mapping)):
        return ""
    variants = [str(k) for k in data if str(k).startswith(("override_", "zip_override_"))]
    return "`base` + " + (", ".join(f"`{v}`" for v in variants[:3]) + (", ..." if len(variants) > 3 else "")
                          if variants else "no variants")


# A broken recipe whose YAML does not parse goes to the manifest loader (no marks_text), as it always has.
FORMAT = Format(
    name="srt-slurm",
    reads="srt-slurm recipes",
    detect=detect,
    read=read_slurm_recipe,
    marks=marks,
    explain=explain,
)
