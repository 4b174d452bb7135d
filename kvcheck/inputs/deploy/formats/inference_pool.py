"""InferencePool (Gateway API Inference Extension; llm-d routes through it): the pool names its model servers by
pod label selector, never by command, so kvcheck ties it to the servers among the inputs whose pods carry
the labels, and says so plainly when none does.

`inference.networking.k8s.io/v1` states `spec.selector.matchLabels`; the older
`inference.networking.x-k8s.io/v1alpha2` a plain label map in `spec.selector`. A selector kvcheck cannot
evaluate (`matchExpressions`) is named as such: which pods it selects is not told.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from kvcheck.inputs.deploy.formats.base import RoleSource, get
from kvcheck.inputs.deploy.source import Doc
from kvcheck.model import Location

KIND = "InferencePool"
API_GROUPS = ("inference.networking.k8s.io", "inference.networking.x-k8s.io")


@dataclass(frozen=True)
class Pool:
    name: str
    location: Location
    labels: dict[str, str] | None  # None: a selector kvcheck cannot evaluate
    why: str | None = None  # why the selector cannot be evaluated

    def shown(self) -> str:
        return ", ".join(f"{key}={value}" for key, value in (self.labels or {}).items()) or "no labels"


def is_pool(data: object) -> bool:
    return (isinstance(data, Mapping) and data.get("kind") == KIND
            and str(data.get("apiVersion", "")).partition("/")[0] in API_GROUPS)


def read_pool(doc: Doc) -> Pool:
    data = doc.data
    name = str(get(data, "metadata", "name") or KIND)
    selector = get(data, "spec", "selector")
    where = doc.at(("spec", "selector")) if selector is not None else doc.at(())
    if isinstance(selector, Mapping) and ("matchLabels" in selector or "matchExpressions" in selector):
        if selector.get("matchExpressions"):
            return Pool(name, where, None, "its selector has matchExpressions, which kvcheck does not evaluate")
        selector = selector.get("matchLabels")
    if not isinstance(selector, Mapping) or not selector:
        return Pool(name, where, None, "it states no label selector")
    return Pool(name, where, {str(k): str(v) for k, v in selector.items()})


def pools_in(docs: Sequence[Doc]) -> list[Pool]:
    return [read_pool(doc) for doc in docs if is_pool(doc.data)]


def selected(pool: Pool, source: RoleSource) -> bool:
    labels = source.labels
    return pool.labels is not None and all(labels.get(key) == value for key, value in pool.labels.items())


_TEMPLATES = (("spec", "template"), ("spec", "leaderWorkerTemplate", "leaderTemplate"),
              ("spec", "leaderWorkerTemplate", "workerTemplate"))


def _workloads(pool: Pool, docs: Sequence[Doc]) -> list[str]:
    """The workloads among the inputs whose pod templates carry every label of the pool's selector."""
    assert pool.labels is not None
    hits = []
    for doc in docs:
        for path in _TEMPLATES:
            labels = get(doc.data, *path, "metadata", "labels")
            if isinstance(labels, Mapping) and all(str(labels.get(k)) == v for k, v in pool.labels.items()):
                hits.append(f"{doc.data.get('kind')} '{get(doc.data, 'metadata', 'name')}' ({doc.at(()).render()})")
                break
    return hits


def _no_engine(hits: Sequence[str]) -> str:
    return f"those of {', '.join(hits)}, which start{'s' if len(hits) == 1 else ''} no engine server"


def without_servers(pool: Pool, docs: Sequence[Doc]) -> str:
    """What a pool selects when no server was found in the inputs: the workloads whose pods carry its labels
    (they start no engine server kvcheck knows), or none."""
    if pool.labels is None:
        return f"InferencePool '{pool.name}' ({pool.location.render()}): {pool.why}"
    hits = _workloads(pool, docs)
    head = f"InferencePool '{pool.name}' ({pool.location.render()}) selects pods labelled {pool.shown()}"
    if hits:
        return f"{head}: {_no_engine(hits)}"
    return f"{head}: no workload among the inputs carries those labels (pass the servers' files)"


def pool_notes(pools: Sequence[Pool], sources: Sequence[RoleSource], names: Sequence[str],
               docs: Sequence[Doc]) -> tuple[dict[int, list[str]], list[str]]:
    """Per role source (by index; `names` the roles' names): the pools that route to it; and what each pool
    that selects none is: the workloads among `docs` it selects, which start no engine, when there are."""
    routed: dict[int, list[str]] = {}
    unmatched: list[str] = []
    for pool in pools:
        at = pool.location.render()
        if pool.labels is None:
            unmatched.append(f"InferencePool '{pool.name}' ({at}): {pool.why}, so kvcheck cannot tell which "
                             "servers it routes to")
            continue
        hits = [i for i, source in enumerate(sources) if selected(pool, source)]
        for i in hits:
            routed.setdefault(i, []).append(f"InferencePool '{pool.name}' ({at}) routes to role "
                                            f"'{names[i]}': its pods carry {pool.shown()}")
        workloads = _workloads(pool, docs) if not hits else []
        if workloads:  # its pods are among the inputs, but they run no engine (an echo server, a proxy)
            unmatched.append(f"InferencePool '{pool.name}' ({at}) selects pods labelled {pool.shown()}: "
                             f"{_no_engine(workloads)}, so no role among the inputs serves it")
        elif not hits:
            unmatched.append(f"InferencePool '{pool.name}' ({at}) selects pods labelled {pool.shown()}; no server "
                             "among the inputs carries those labels, so kvcheck cannot tell which servers it "
                             "routes to (pass their files in the same command)")
    return routed, unmatched
