"""`kvcheck schema` accepts every manifest and overlay the docs show, and still refuses a typo'd key."""

from __future__ import annotations

import json
import re
from typing import Any

import jsonschema
import pytest
import yaml

from tests.conftest import run_kvcheck
from tests.datapaths import REPO_ROOT

_YAML_BLOCK = re.compile(r"^```ya?ml\n(.*?)^```", re.M | re.S)


def _schema() -> dict[str, Any]:
    result = run_kvcheck("schema")
    assert result.exit_code == 0, result.stderr
    schema: dict[str, Any] = json.loads(result.stdout)
    jsonschema.Draft202012Validator.check_schema(schema)
    return schema


def _documented() -> list[Any]:
    """Every whole manifest (roles) or overlay (deployment) in a YAML block of the docs or README, and
    the example manifests under docs/examples."""
    out = []
    for page in [*sorted((REPO_ROOT / "docs").glob("*.md")), REPO_ROOT / "README.md"]:
        text = page.read_text()
        for block in _YAML_BLOCK.finditer(text):
            data = yaml.safe_load(block.group(1))
            if isinstance(data, dict) and ("roles" in data or "deployment" in data):
                line = text[: block.start()].count("\n") + 1
                out.append(pytest.param(data, id=f"{page.name}:{line}"))
    for path in sorted((REPO_ROOT / "docs" / "examples").glob("*/manifest.yaml")):
        out.append(pytest.param(yaml.safe_load(path.read_text()), id=str(path.relative_to(REPO_ROOT))))
    return out


DOCUMENTED = _documented()


def test_the_docs_show_manifests_and_overlays() -> None:
    """The list below is not empty by accident: both shapes are documented."""
    shapes = {"overlay" if "deployment" in p.values[0] else "manifest" for p in DOCUMENTED}
    assert shapes == {"manifest", "overlay"}
    assert len(DOCUMENTED) >= 5


@pytest.mark.parametrize("document", DOCUMENTED)
def test_every_documented_manifest_validates(document: Any) -> None:
    jsonschema.Draft202012Validator(_schema()).validate(document)


OVERLAY = {"deployment": ["deploy/prefill.yaml"], "context_length": 131072, "gpu": "H200",
           "engine": {"version": "0.5.23"}}
MANIFEST = {"context_length": 131072, "model": {"path": "org/m"}, "engine": {"version": "0.5.23"},
            "roles": {"server": {"gpus": [0]}}}


@pytest.mark.parametrize(
    "document",
    [
        pytest.param({**OVERLAY, "contxt_length": 1}, id="overlay-typo"),
        pytest.param({**MANIFEST, "contxt_length": 1}, id="manifest-typo"),
        pytest.param({**OVERLAY, "engine": {"version": "0.5.23", "comand": ["x"]}}, id="overlay-nested-typo"),
        pytest.param({**MANIFEST, "deployment": "a.yaml"}, id="both-shapes"),
        pytest.param({**OVERLAY, "roles": {"s": {}}}, id="overlay-with-roles"),
        pytest.param({"context_length": 131072, "gpu": "H200"}, id="neither"),
    ],
)
def test_a_typo_or_a_mixed_shape_is_refused(document: dict[str, Any]) -> None:
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.Draft202012Validator(_schema()).validate(document)


def test_both_shapes_are_strict_and_required_keys_differ() -> None:
    schema = _schema()
    assert schema["$defs"]["Overlay"]["required"] == ["deployment"]
    assert schema["$defs"]["Overlay"]["additionalProperties"] is False
    assert schema["$defs"]["Manifest"]["required"] == ["context_length", "model", "engine", "roles"]
    jsonschema.Draft202012Validator(schema).validate(OVERLAY)
    jsonschema.Draft202012Validator(schema).validate(MANIFEST)
