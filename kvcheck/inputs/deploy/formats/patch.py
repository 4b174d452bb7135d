"""A part of a document as a document of its own: a pod template patched as RBG patches it, a List's item.

Every value keeps its position in the original file, so findings in a merged template still point at
the line the user wrote.
"""

from __future__ import annotations

import copy as copy_module
from collections.abc import Mapping
from typing import Any, TypeVar

from kvcheck.inputs.deploy.formats.base import get
from kvcheck.inputs.deploy.source import Doc
from kvcheck.io.yamlpos import Path_, Positions, YamlDocument

_P = TypeVar("_P")  # a position table's entry: (line, column) or a scalar style


def merged_doc(doc: Doc, base_path: Path_ | None, *patch_paths: Path_ | None) -> Doc | None:
    """A pod template patched as RBG patches it (maps merge, containers merge by name, lists replace),
    each patch over the result of the ones before, as a document of its own whose every value keeps
    its position in the original file."""
    layers = [(p, get(doc.data, *p)) for p in (base_path, *patch_paths) if p is not None]
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


def list_items(doc: Doc) -> list[Doc]:
    """`kind: List` (kubectl get -o yaml, some kustomize pipelines): each item as a document of its own."""
    data = doc.data
    if not (isinstance(data, Mapping) and data.get("kind") == "List" and isinstance(data.get("items"), list)):
        return [doc]
    out = []
    for i in range(len(data["items"])):
        item = merged_doc(doc, ("items", i), None)
        if item is not None:
            out.append(item)
    return out
