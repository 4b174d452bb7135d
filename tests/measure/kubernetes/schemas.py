"""Validators for rendered objects: the vendored Kubernetes and LeaderWorkerSet schemas (README there)."""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping
from functools import cache
from pathlib import Path
from typing import Any

import jsonschema

SCHEMAS = Path(__file__).resolve().parents[2] / "data" / "k8s-schemas"
K8S_VERSIONS = ("1.30.0", "1.37.0")


@cache
def job_schema(version: str) -> dict[str, Any]:
    return json.loads((SCHEMAS / f"job-batch-v1-v{version}-strict.json").read_text())


def _closed(node: Any) -> Any:
    """A CRD schema where every declared object refuses undeclared fields (the API server prunes them)."""
    if isinstance(node, dict):
        out = {k: _closed(v) for k, v in node.items()}
        if (
            "properties" in out
            and "additionalProperties" not in out
            and not out.get("x-kubernetes-preserve-unknown-fields")
        ):
            out["additionalProperties"] = False
        return out
    if isinstance(node, list):
        return [_closed(v) for v in node]
    return node


@cache
def lws_schema() -> dict[str, Any]:
    return _closed(json.loads((SCHEMAS / "leaderworkerset-v1.json").read_text()))


def _errors(schema: Mapping[str, Any], instance: Any) -> list[str]:
    cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
    validator = cls(schema)
    return sorted(
        f"{'/'.join(map(str, error.absolute_path)) or '<root>'}: {error.message}"
        for error in validator.iter_errors(instance)
    )


def validation_errors(obj: Mapping[str, Any], version: str = K8S_VERSIONS[-1]) -> list[str]:
    """Every schema error of one rendered object; [] when the cluster would take it as written."""
    obj = copy.deepcopy(dict(obj))
    if obj.get("kind") == "Job" and obj.get("apiVersion") == "batch/v1":
        return _errors(job_schema(version), obj)
    if obj.get("kind") == "LeaderWorkerSet":
        errors = _errors(lws_schema(), obj)
        # The pod templates inside must also be valid pods for the cluster's own (strict) schema.
        pod_template = {"$ref": "#/$defs/io.k8s.api.core.v1.PodTemplateSpec", "$defs": job_schema(version)["$defs"]}
        template = obj.get("spec", {}).get("leaderWorkerTemplate", {})
        for key in ("leaderTemplate", "workerTemplate"):
            if key in template:
                errors += [f"spec/leaderWorkerTemplate/{key}/{e}" for e in _errors(pod_template, template[key])]
        return errors
    raise AssertionError(f"no schema for {obj.get('apiVersion')} {obj.get('kind')}")
