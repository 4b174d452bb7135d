"""The manifest's `device` key: where each role runs (GPUs by default, or the host's CPUs)."""

from __future__ import annotations

from pathlib import Path

import pytest

from kvcheck.errors import ManifestError
from kvcheck.inputs.manifest.load import load_manifest

HEAD = 'context_length: 4096\nmodel: {path: m}\nengine: {version: "0.5.23"}\n'


def load(tmp_path: Path, body: str, head: str = HEAD) -> dict[str, str | None]:
    path = tmp_path / "m.yaml"
    path.write_text(head + body)
    return {target.name: target.device for target in load_manifest(path).targets}


def test_the_top_level_device_applies_to_every_role_and_a_role_may_override_it(tmp_path: Path) -> None:
    body = "device: cpu\nroles:\n  a: {}\n  b: {device: gpu, gpus: [0]}\n  c: {device: cuda, gpus: [1]}\n"
    assert load(tmp_path, body) == {"a": "cpu", "b": "cuda", "c": "cuda"}  # gpu and cuda are one device


def test_without_a_device_key_nothing_is_stated(tmp_path: Path) -> None:
    # Engine.device decides from the args (SGLang --device cpu), else GPUs
    assert load(tmp_path, "roles:\n  a: {gpus: [0]}\n  b: {args: {device: cpu}}\n") == {"a": None, "b": None}


def test_a_vllm_role_says_cpu_in_the_manifest(tmp_path: Path) -> None:
    # vLLM 0.32.0 has no --device flag: the manifest's key is the only way to say it
    head = 'context_length: 4096\nmodel: {path: m}\nengine: {name: vllm, version: "0.32.0"}\n'
    assert load(tmp_path, "device: cpu\nroles:\n  a: {}\n", head) == {"a": "cpu"}


def test_a_cpu_role_is_not_judged_by_its_gpu_count(tmp_path: Path) -> None:
    path = tmp_path / "m.yaml"
    path.write_text(HEAD + "device: cpu\nargs: {tp-size: 2}\nroles:\n  a: {gpus: [0]}\n")
    with pytest.raises(ManifestError) as caught:
        load_manifest(path)
    assert [(i.line, i.column, i.path, i.message) for i in caught.value.issues] == [
        (7, 13, "roles.a.gpus", "the role runs on the CPU (device: cpu): it takes no GPU list; remove gpus")]
