"""RoleBasedGroup (workloads.x-k8s.io v1alpha1, v1alpha2): one role per `roles[]` entry, standalone or
leader-worker, each template inline or a `templateRef` to `spec.roleTemplates` with its patch."""

from __future__ import annotations

from collections.abc import Mapping

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
from kvcheck.inputs.deploy.formats.patch import merged_doc
from kvcheck.inputs.deploy.formats.pods import PodServer, pod_role, pod_server
from kvcheck.inputs.deploy.server import ScriptError, ServerCommand, Sourced
from kvcheck.inputs.deploy.source import Doc
from kvcheck.io.yamlpos import Path_

KINDS = {"RoleBasedGroup": ("workloads.x-k8s.io/",)}


_RBG_WORKLOAD_TYPE = "rbg.workloads.x-k8s.io/role-workload-type"


def read_rbg(doc: Doc, inputs: Inputs) -> list[RoleSource]:
    """RoleBasedGroup v1alpha1 (template + leader/worker patches) and v1alpha2 (standalone / leader-worker
    patterns), each template inline or a `templateRef` to `spec.roleTemplates` with its patch."""
    group = object_name(doc)
    v2 = str(doc.data.get("apiVersion") or "").endswith("/v1alpha2")
    templates = {
        str(t.get("name")): ("spec", "roleTemplates", i, "template")
        for i, t in enumerate(get(doc.data, "spec", "roleTemplates") or [])
        if isinstance(t, Mapping) and isinstance(t.get("template"), Mapping)
    }
    out = []
    for i, role in enumerate(get(doc.data, "spec", "roles") or []):
        if not isinstance(role, Mapping):
            continue
        path: Path_ = ("spec", "roles", i)
        name = str(role.get("name") or f"role{i}")
        rbg_env = _rbg_vars(doc, path, group, name, v2=v2)
        replicas = int_at(doc, role, "replicas", path, "role replicas")
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
            size = int_at(doc, lw, "size", lw_path, f"{'leaderWorkerPattern' if lw_v2 else 'leaderWorkerSet'} size")
            size = size or Sourced(1, doc.at(lw_path), "size unset: 1")
            keys = (("leaderTemplatePatch", "workerTemplatePatch") if lw_v2
                    else ("patchLeaderTemplate", "patchWorkerTemplate"))
            lws = not lw_v2 or "LeaderWorkerSet" in str(get(role, "annotations", _RBG_WORKLOAD_TYPE) or "")
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
        out.append(pod_role(name, "RoleBasedGroup", group, doc, pod, nodes=size, replicas=replicas, workers=workers,
                         standalone=True))
    return out


def _rbg_template(
    doc: Doc, source: Path_, role: Path_, templates: Mapping[str, Path_]
) -> tuple[Path_ | None, Path_ | None]:
    """The pod template at `source` (its `template`, or the roleTemplate its `templateRef` names) and the
    patch over it (v1alpha2 `templateRef.patch`; v1alpha1 the role's `templatePatch`)."""
    if get(doc.data, *source, "template") is not None:
        return (*source, "template"), None
    ref = get(doc.data, *source, "templateRef")
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
    return templates[name], (*role, "templatePatch") if get(doc.data, *role, "templatePatch") else None


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


FORMAT = Format(
    name="RoleBasedGroup",
    reads="RoleBasedGroup (v1alpha1, v1alpha2)",
    detect=lambda doc: kubernetes_kind(doc, KINDS),
    read=read_rbg,
    marks=marks_kubernetes,
    marks_text=marks_kubernetes_text,
)
