"""`kvcheck import`'s printer: an ImportedManifest as YAML (each value commented with where it came from) or JSON.

The printer only renders: what the manifest holds is decided in manifest.py (`imported_manifest`), which
is also what verify and plan gate, so the printed manifest and the checked one cannot drift apart.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import yaml

from kvcheck.escape import one_line
from kvcheck.inputs.deploy.build import inputs_named
from kvcheck.inputs.deploy.manifest import ImportedManifest, Resolved, Stated, imported_manifest
from kvcheck.model import Finding

# The printer's tree: a key's value is a Stated (a scalar line) or a mapping, with the mapping's comment.
_Node = Stated | tuple[dict[str, Any], str | None]


def _tree(manifest: ImportedManifest) -> dict[str, _Node]:
    """The manifest as the YAML printer lays it out, key by key in the manifest's order."""
    out: dict[str, _Node] = {"name": manifest.name}
    if manifest.context_length is not None:
        out["context_length"] = manifest.context_length
    model: dict[str, Any] = {}
    if manifest.model_path is not None:
        model["path"] = manifest.model_path
    if manifest.model_config is not None:
        model["config"] = manifest.model_config
    out["model"] = (model, None)
    engine: dict[str, Any] = {"name": manifest.engine} if manifest.engine is not None else {}
    out["engine"] = ({**engine, "version": manifest.version}, None)
    if manifest.gpu is not None:
        out["gpu"] = manifest.gpu
    roles: dict[str, Any] = {}
    for role in manifest.roles:
        entry: dict[str, Any] = {}
        if role.gpus is not None:
            entry["gpus"] = role.gpus
        if role.nodes is not None:
            entry["nodes"] = role.nodes
        if role.gpu is not None:
            entry["gpu"] = role.gpu
        if role.side is not None:
            entry["side"] = role.side
        entry["args"] = (dict(role.args), None)
        if role.env:
            entry["env"] = (dict(role.env), None)
        roles[role.name] = (entry, role.where)
    out["roles"] = (roles, None)
    return out


def _scalar(value: Any) -> str:
    if isinstance(value, str):
        text = yaml.safe_dump(value, default_flow_style=True, width=1 << 20).strip()
        return text.removesuffix("\n...").removesuffix("...").strip()
    if isinstance(value, bool) or value is None or isinstance(value, int | float):
        return json.dumps(value)
    return json.dumps(value, separators=(", ", ": "))


def _render(tree: dict[str, Any], indent: int, lines: list[str]) -> None:
    pad = "  " * indent
    for key, node in tree.items():
        if isinstance(node, Stated):
            value = json.dumps(node.value) if key == "version" else _scalar(node.value)
            line = f"{pad}{_key(key)}: {value}"
            lines.append(line + (f"  # {one_line(node.where)}" if node.where else ""))
        else:
            mapping, comment = node
            lines.append(f"{pad}{_key(key)}:" + (f"  # {one_line(comment)}" if comment else "")
                         + (" {}" if not mapping else ""))
            _render(mapping, indent + 1, lines)


def _key(key: str) -> str:
    return key if _scalar(key) == key else json.dumps(key)


def render_yaml(resolved: list[Resolved], findings: Sequence[Finding]) -> str:
    """YAML manifests, one document per deployment, each value commented with its file:line:column."""
    docs = []
    for item in resolved:
        manifest = imported_manifest(item)
        lines = [f"# kvcheck manifest imported from {one_line(', '.join(manifest.sources))} (kvcheck import)"]
        for note in item.notes:
            lines.append(f"# note: {one_line(note)}")
        inputs = inputs_named(*manifest.sources)
        if manifest.context_length is None:
            lines.append(f"# context_length: not in {inputs}; add the window you advertise (required)")
        if manifest.model_path is None:
            lines.append(f"# model.path: not in {inputs}; add it (required)")
        own = [f for f in findings if f.role in {r.name for r in manifest.roles}]
        for told in item.deployment.pools:
            lines.append(f"# {one_line(told)}")
        for f in own:
            where = f.location.render() if f.location else ""
            lines.append(one_line(f"# {f.rule} {f.severity} ({f.role}) {where}: {f.message}"))
        _render(_tree(manifest), 0, lines)
        docs.append("\n".join(lines) + "\n")
    return "---\n".join(docs)


def render_json(resolved: list[Resolved]) -> str:
    """The manifests' plain values: one object, or a list when the files hold several deployments."""
    plain = [imported_manifest(item).plain() for item in resolved]
    return json.dumps(plain[0] if len(plain) == 1 else plain, indent=2) + "\n"
