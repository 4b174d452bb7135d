"""The SGLang release an image names: lmsysorg/sglang tags, and Dynamo's sglang-runtime through the table of
Dynamo releases (kvcheck/engines/sglang/dynamo_releases.py); a floating or unknown tag names none."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from packaging.version import Version

from kvcheck.engines.sglang.catalogue import catalogue_versions
from kvcheck.engines.sglang.dynamo_releases import RELEASES
from kvcheck.engines.sglang.images import release_from_image, unpinned_reason
from tests.conftest import run_kvcheck

NGC = "nvcr.io/nvidia/ai-dynamo/sglang-runtime"


@pytest.mark.parametrize(("image", "release"), [
    (f"{NGC}:0.8.1", "0.5.6.post2"),
    (f"{NGC}:0.8.1-cuda13", "0.5.6.post2"),
    (f"{NGC}:1.1.1-cuda13", "0.5.10.post1"),
    (f"{NGC}:0.7.0.post1", "0.5.4.post3"),
    (f"{NGC}:0.6.0", "0.5.3.post2"),
    (f"{NGC}:1.0.2", "0.5.9"),
    (f"{NGC}:1.3.0-efa", "0.5.14"),
    (f"{NGC}:1.4.0", "0.5.16"),
    (f"{NGC}:1.1.0-dev.1-cuda13", "0.5.9"),
    (f"{NGC}:0.4.1", "0.5.0rc2"),
    (f"{NGC}:0.4.0", "0.4.9.post6"),
    (f"{NGC}:0.3.2", "0.4.9.post1"),
    (f"{NGC}:0.9.0@sha256:{'0' * 64}", "0.5.8"),
    ("registry.local:5000/mirror/ai-dynamo/sglang-runtime:0.9.1", "0.5.8"),  # a mirror keeps the path
    ("lmsysorg/sglang:v0.5.23-cu129", "0.5.23"),
    ("docker.io/lmsysorg/sglang:v0.5.8.post1", "0.5.8.post1"),
])
def test_an_image_names_the_sglang_release(image: str, release: str) -> None:
    assert release_from_image(image) == release
    assert unpinned_reason(image) is None


@pytest.mark.parametrize(("image", "reason"), [
    (f"{NGC}:latest", f"image {NGC}:latest has the floating tag 'latest', which pins no SGLang release"),
    (NGC, f"image {NGC} has the floating tag 'latest', which pins no SGLang release"),
    ("lmsysorg/sglang:latest", "image lmsysorg/sglang:latest has the floating tag 'latest', which pins no SGLang "
                               "release"),
    (f"lmsysorg/sglang@sha256:{'a' * 64}", f"image lmsysorg/sglang@sha256:{'a' * 64} is pinned by digest, which "
                                           "names no SGLang release kvcheck can read"),
    ("lmsysorg/sglang:latest-cu129", "image lmsysorg/sglang:latest-cu129 has the floating tag 'latest-cu129', "
                                     "which pins no SGLang release"),
    ("lmsysorg/sglang:dev", "image lmsysorg/sglang:dev: the tag 'dev' names no SGLang release"),
    (f"{NGC}:9.9.9", f"image {NGC}:9.9.9: '9.9.9' is not a Dynamo release whose SGLang release kvcheck knows "
                     "(docs/import.md lists them)"),
    # a model early-access build carries an SGLang preview, not a release
    (f"{NGC}:1.2.0-deepseek-v4-cuda13-dev.2",
     f"image {NGC}:1.2.0-deepseek-v4-cuda13-dev.2: '1.2.0-deepseek-v4-cuda13-dev.2' is not a Dynamo release "
     "whose SGLang release kvcheck knows (docs/import.md lists them)"),
    (f"{NGC}:0.8.1-rocm", f"image {NGC}:0.8.1-rocm: '0.8.1-rocm' is not a Dynamo release whose SGLang release "
                          "kvcheck knows (docs/import.md lists them)"),
    (f"{NGC}:v0.8.1", f"image {NGC}:v0.8.1: 'v0.8.1' is not a Dynamo release whose SGLang release kvcheck knows "
                      "(docs/import.md lists them)"),
    (f"{NGC}:0.3.0", f"image {NGC}:0.3.0: Dynamo 0.3.0 builds SGLang from SGLang commit 6376b632eb4d, not a release"),
])
def test_an_image_that_pins_no_release_says_why(image: str, reason: str) -> None:
    assert release_from_image(image) is None
    assert unpinned_reason(image) == reason


def test_images_kvcheck_does_not_read_have_no_reason() -> None:
    # an image kvcheck knows nothing of is neither mapped nor explained (the note says no image tag names it)
    for image in ("my-registry/sglang-runtime:0.8.1", "nvcr.io/nvidia/ai-dynamo/vllm-runtime:0.8.1", "ubuntu:24.04"):
        assert release_from_image(image) is None
        assert unpinned_reason(image) is None


def test_every_row_is_a_sourced_sglang_release() -> None:
    tags = [row.dynamo for row in RELEASES]
    assert len(tags) == len(set(tags))
    assert len(RELEASES) == 35
    for row in RELEASES:
        assert row.source.startswith("ai-dynamo/dynamo@"), row
        if row.sglang is None:
            assert row.built_from, row
        else:
            assert Version(row.sglang) >= Version(catalogue_versions()[0]), row  # a release kvcheck can read
            assert release_from_image(f"{NGC}:{row.dynamo}") == row.sglang


DGD = """\
apiVersion: nvidia.com/v1alpha1
kind: DynamoGraphDeployment
metadata:
  name: qwen
spec:
  services:
    worker:
      componentType: worker
      replicas: 1
      resources:
        limits:
          gpu: "2"
      extraPodSpec:
        mainContainer:
          image: {image}
          command: ["python3", "-m", "dynamo.sglang"]
          args: ["--model-path", "Qwen/Qwen3-8B", "--tp", "2", "--context-length", "32768"]
"""


def test_import_reads_the_release_from_a_dynamo_runtime_image(tmp_path: Path) -> None:
    path = tmp_path / "dgd.yaml"
    path.write_text(DGD.format(image=f"{NGC}:0.9.0"), encoding="utf-8")
    result = run_kvcheck("import", str(path))
    assert (result.exit_code, result.stderr) == (0, "")
    assert f'  version: "0.5.8"  # {path}:15:18 (image {NGC}:0.9.0)\n' in result.stdout
    assert "# note:" not in result.stdout
    result = run_kvcheck("import", str(path), "--format", "json")
    assert json.loads(result.stdout) == {
        "name": "qwen", "context_length": 32768, "model": {"path": "Qwen/Qwen3-8B"}, "engine": {"version": "0.5.8"},
        "roles": {"worker": {"gpus": [0, 1], "args": {"tensor-parallel-size": 2, "context-length": 32768}}},
    }


@pytest.mark.parametrize(("tag", "why"), [
    ("latest", "has the floating tag 'latest', which pins no SGLang release"),
    ("7.7.7", ": '7.7.7' is not a Dynamo release whose SGLang release kvcheck knows (docs/import.md lists them)"),
])
def test_import_of_an_unpinned_dynamo_image_names_the_image(tmp_path: Path, tag: str, why: str) -> None:
    path = tmp_path / "dgd.yaml"
    path.write_text(DGD.format(image=f"{NGC}:{tag}"), encoding="utf-8")
    result = run_kvcheck("import", str(path))
    assert (result.exit_code, result.stderr) == (0, "")
    newest = catalogue_versions()[-1]
    sep = " " if why.startswith("has") else ""
    assert (f"# note: the files do not name the SGLang release (image {NGC}:{tag}{sep}{why}; pass "
            f"--engine-version); role 'worker' was read with the flags of {newest}, the newest release kvcheck "
            "knows\n") in result.stdout
    given = run_kvcheck("import", str(path), "--sglang-version", "0.5.8", "--format", "json")
    assert given.exit_code == 0, given.stderr
    assert json.loads(given.stdout)["engine"] == {"version": "0.5.8"}


def test_verify_reports_the_unpinned_image(tmp_path: Path) -> None:
    path = tmp_path / "dgd.yaml"
    path.write_text(DGD.format(image=f"{NGC}:latest"), encoding="utf-8")
    result = run_kvcheck("verify", str(path), "--mode", "estimate", "--format", "json")
    notes = [f for f in json.loads(result.stdout)["findings"] if f["rule"] == "KV204"]
    assert [n["message"] for n in notes] == [
        f"the files do not name the SGLang release (image {NGC}:latest has the floating tag 'latest', which pins no "
        f"SGLang release; pass --engine-version); role 'worker' was read with the flags of {catalogue_versions()[-1]}, "
        "the newest release kvcheck knows",
    ]


def test_verify_checks_a_dynamo_role_with_the_release_its_image_pins(tmp_path: Path) -> None:
    path = tmp_path / "dgd.yaml"
    path.write_text(DGD.format(image=f"{NGC}:0.9.0"), encoding="utf-8")
    result = run_kvcheck("verify", str(path), "--mode", "estimate", "--gpu", "H200", "--model-config",
                         "tests/data/models/Qwen--Qwen3-8B.json", "--format", "json")
    report = json.loads(result.stdout)
    assert [f["rule"] for f in report["findings"] if f["rule"] == "KV204"] == []  # no release was assumed
    [role] = report["roles"]
    assert (role["name"], role["details"]["engine_version"]) == ("worker", "0.5.8")
    assert role["argv"] == ["--tensor-parallel-size", "2", "--context-length", "32768"]  # 0.5.8's flag names
    assert (result.exit_code, role["status"]) == (0, "pass")


def test_args_to_a_dynamo_image_entrypoint_are_not_taken_for_sglang_launch_server(tmp_path: Path) -> None:
    # only SGLang's own image is assumed to run its flags with the suggested `python3 -m sglang.launch_server`
    path = tmp_path / "deploy.yaml"
    pod = ("apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: q\nspec:\n  template:\n    spec:\n"
           "      containers:\n        - name: s\n          image: {image}\n"
           '          args: ["--model-path", "Qwen/Qwen3-8B"]\n')
    path.write_text(pod.format(image=f"{NGC}:0.9.0"), encoding="utf-8")
    result = run_kvcheck("import", str(path))
    assert result.exit_code == 2
    assert result.stderr.startswith(f"kvcheck: error: {path}: no engine server (SGLang, vLLM) in a supported kind")
    path.write_text(pod.format(image="lmsysorg/sglang:v0.5.8"), encoding="utf-8")
    result = run_kvcheck("import", str(path))
    assert result.exit_code == 2
    assert "add command: [python3, -m, sglang.launch_server] so kvcheck reads what runs" in result.stderr
