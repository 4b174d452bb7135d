"""Rebuild the vendored schemas in this folder (see README.md); not run by the tests.

    python tests/data/k8s-schemas/vendor.py KUBERNETES_VALIDATE_WHEEL LWS_CRD_YAML

KUBERNETES_VALIDATE_WHEEL: `pip download kubernetes-validate==1.37.0 --no-deps`.
LWS_CRD_YAML: kubernetes-sigs/lws config/crd/bases/leaderworkerset.x-k8s.io_leaderworkersets.yaml.
Each output is one self-contained JSON Schema: the kind's schema with the definitions it reaches
(and only those) under `$defs`, descriptions dropped to keep the files small.
"""

from __future__ import annotations

import json
import sys
import zipfile
from pathlib import Path
from typing import Any

import yaml

HERE = Path(__file__).resolve().parent
VERSIONS = ("1.30.0", "1.37.0")  # the oldest Kubernetes still widely run, and the newest in the wheel
KINDS = ("job-batch-v1",)
DEFS_PREFIX = "/api/_definitions.json#/$defs/"  # how a kind's file points into _definitions.json
LOCAL_PREFIX = "#/$defs/"  # how _definitions.json points into itself


def _strip(node: Any) -> Any:
    if isinstance(node, dict):
        return {k: _strip(v) for k, v in node.items() if k != "description"}
    if isinstance(node, list):
        return [_strip(v) for v in node]
    return node


def _refs(node: Any, out: set[str]) -> None:
    if isinstance(node, dict):
        ref = node.get("$ref")
        for prefix in (DEFS_PREFIX, LOCAL_PREFIX):
            if isinstance(ref, str) and ref.startswith(prefix):
                out.add(ref[len(prefix) :])
        for value in node.values():
            _refs(value, out)
    elif isinstance(node, list):
        for value in node:
            _refs(value, out)


def _local(node: Any) -> Any:
    if isinstance(node, dict):
        return {
            k: (
                LOCAL_PREFIX + v[len(DEFS_PREFIX) :]
                if k == "$ref" and isinstance(v, str) and v.startswith(DEFS_PREFIX)
                else _local(v)
            )
            for k, v in node.items()
        }
    if isinstance(node, list):
        return [_local(v) for v in node]
    return node


def vendor_builtin(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as zf:
        for version in VERSIONS:
            folder = f"kubernetes_validate/kubernetes-json-schema/v{version}-local-strict"
            definitions = json.loads(zf.read(f"{folder}/_definitions.json"))["$defs"]
            for kind in KINDS:
                schema = json.loads(zf.read(f"{folder}/{kind}.json"))
                wanted: set[str] = set()
                _refs(schema, wanted)
                done: set[str] = set()
                while wanted - done:
                    name = sorted(wanted - done)[0]
                    done.add(name)
                    _refs(definitions[name], wanted)
                schema = _local(_strip(schema))
                schema["$defs"] = {name: _local(_strip(definitions[name])) for name in sorted(done)}
                out = HERE / f"{kind}-v{version}-strict.json"
                out.write_text(json.dumps(schema, indent=1, sort_keys=True) + "\n")
                print(f"{out.name}: {len(done)} definitions, {out.stat().st_size} bytes")


def vendor_lws(crd_path: Path) -> None:
    crd = yaml.safe_load(crd_path.read_text())
    for version in crd["spec"]["versions"]:
        schema = _strip(version["schema"]["openAPIV3Schema"])
        out = HERE / f"leaderworkerset-{version['name']}.json"
        out.write_text(json.dumps(schema, indent=1, sort_keys=True) + "\n")
        print(f"{out.name}: {out.stat().st_size} bytes")


if __name__ == "__main__":
    vendor_builtin(Path(sys.argv[1]))
    vendor_lws(Path(sys.argv[2]))
