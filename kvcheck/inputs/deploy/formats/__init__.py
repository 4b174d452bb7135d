"""Every deployment format kvcheck reads, one module each, in one registry: `FORMATS`.

Each format's module gives a `Format` (base.py): `detect(doc)` says whether it reads a document,
`read(doc, inputs)` finds its server roles, `reads` is its part of the "kvcheck reads:" hint, and
`marks` says which documents are meant as the format even when it cannot read them. The registry
answers the two questions the input stage asks of a file, in one place: which format reads each
document (`FORMATS.detect`), and whether a file is a kvcheck manifest instead (`FORMATS.is_manifest`).
Adding a format is a module here and one entry below (CONTRIBUTING.md, "Adding an input format").
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import yaml

from kvcheck.inputs.deploy.formats import (
    aibrix,
    command_line,
    compose,
    disaggregated_set,
    dynamo,
    kserve,
    kuberay,
    llmd_modelservice,
    lws,
    ome,
    production_stack,
    rbg,
    slurm_script,
    srt_slurm,
    workload,
)
from kvcheck.inputs.deploy.formats.base import Format, Inputs, RoleSource, get, text_doc
from kvcheck.inputs.deploy.source import Doc, SourceFile
from kvcheck.io.yamlpos import safe_load_all


class Formats(Mapping[str, Format]):
    """The formats by name, in the order the hint lists them (and detection tries them)."""

    def __init__(self, *formats: Format) -> None:
        self._formats = {f.name: f for f in formats}

    def __getitem__(self, name: str) -> Format:
        return self._formats[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._formats)

    def __len__(self) -> int:
        return len(self._formats)

    @property
    def hint(self) -> str:
        """What kvcheck reads, for the hint when an input holds no server."""
        return "; ".join(f.reads for f in self.values())

    def detect(self, doc: Doc) -> Format | None:
        """The format that reads one YAML document, else None (a ConfigMap, a Service, a router)."""
        return next((f for f in self.values() if not f.whole_file and f.detect(doc)), None)

    def detect_file(self, source: SourceFile) -> Format | None:
        """The format that reads a whole file as text, not as YAML (a Slurm batch script), else None."""
        doc = text_doc(source)
        return next((f for f in self.values() if f.whole_file and f.detect(doc)), None)

    def is_manifest(self, text: str, filename: str) -> bool:
        """Whether a file is read as a kvcheck manifest: anything no format claims.

        A file one format reads whole or marks as its kind (a shell script), one document that some format
        marks as its own, or several
        documents (a manifest is one) are deployment files; a file whose YAML does not parse is one
        when it has a line that marks a format; anything else, an empty file included, goes to the
        manifest loader, whose messages for broken manifests stay as they are.
        """
        if self.detect_file(SourceFile(filename, text)) is not None:
            return False
        if any(f.whole_file and f.marks_text(text) for f in self.values()):
            return False  # a shell script (`#!`) that no format reads is still no manifest
        try:
            documents = [d for d in safe_load_all(text, filename) if d is not None]
        except yaml.YAMLError:
            return not any(f.marks_text(text) for f in self.values())
        if len(documents) != 1:
            return not documents
        return not any(f.marks(documents[0]) for f in self.values())

    def gather(self, docs: list[Doc]) -> Inputs:
        """The objects documents refer to by name (ConfigMaps, OME runtimes, base models, accelerator classes)."""
        inputs = Inputs()
        for doc in docs:
            data = doc.data
            if not isinstance(data, Mapping) or not isinstance(data.get("kind"), str):
                continue
            if not isinstance(get(data, "metadata", "name"), str):
                continue
            _gather_config_map(doc, inputs)
            for fmt in self.values():
                if fmt.gather is not None:
                    fmt.gather(doc, inputs)
        return inputs

    def explain(self, doc: Doc) -> str:
        """Why a document gives no role, when its format can say ('' when none can)."""
        for fmt in self.values():
            text = fmt.explain(doc) if fmt.explain is not None else ""
            if text:
                return text
        return ""


def _gather_config_map(doc: Doc, inputs: Inputs) -> None:
    """A ConfigMap's data: pods read variables (envFrom, configMapKeyRef) and --config files from it."""
    data: Any = doc.data
    if data["kind"] == "ConfigMap" and isinstance(data.get("data"), Mapping):
        inputs.config_maps[data["metadata"]["name"]] = (doc, ("data",), data["data"])


FORMATS = Formats(
    workload.FORMAT,
    lws.FORMAT,
    disaggregated_set.FORMAT,
    rbg.FORMAT,
    dynamo.FORMAT,
    ome.FORMAT,
    kserve.FORMAT,
    aibrix.FORMAT,
    kuberay.FORMAT,
    compose.FORMAT,
    production_stack.FORMAT,
    llmd_modelservice.FORMAT,
    llmd_modelservice.MODEL_SERVICE,
    srt_slurm.FORMAT,
    slurm_script.FORMAT,
    command_line.FORMAT,
)
COMMAND_LINE = command_line.FORMAT  # `kvcheck import --cmd`: a format no file is in

__all__ = ["COMMAND_LINE", "FORMATS", "Format", "Formats", "Inputs", "RoleSource"]
