"""An overlay manifest's engine.version that the deployment files contradict, or that no catalogue holds, is
reported at the overlay's own file:line:col, as its other values are."""

from __future__ import annotations

import shutil
from pathlib import Path

from tests.conftest import REPO_ROOT, run_kvcheck

DEPLOYMENT = REPO_ROOT / "tests/inputs/deploy/fixtures/deployment.yaml"  # image lmsysorg/sglang:v0.5.23-cu129 at 26:18
CONFIG = str(REPO_ROOT / "tests/data/models/meta-llama--Meta-Llama-3.1-8B.json")


def _overlay(tmp_path: Path, version: str, image: str | None = None) -> Path:
    text = DEPLOYMENT.read_text(encoding="utf-8")
    if image is not None:
        text = text.replace("lmsysorg/sglang:v0.5.23-cu129", image)
    (tmp_path / "deployment.yaml").write_text(text, encoding="utf-8")
    overlay = tmp_path / "overlay.yaml"
    overlay.write_text(f'deployment: [deployment.yaml]\nengine:\n  version: "{version}"\n', encoding="utf-8")
    return overlay


def test_a_release_the_image_contradicts_names_the_overlays_line(tmp_path: Path) -> None:
    overlay = _overlay(tmp_path, "0.5.22")
    done = run_kvcheck("verify", str(overlay), "--mode", "estimate")
    assert (done.exit_code, done.stderr.splitlines()[:2]) == (2, [
        "kvcheck: error: 1 error in deployment files:",
        f"{tmp_path}/deployment.yaml:26:18: the deployment runs SGLang 0.5.23 (image lmsysorg/sglang:v0.5.23-cu129), "
        f"but 0.5.22 was given in {overlay}:3:12 (overlay); they must agree",
    ])
    done = run_kvcheck("verify", str(tmp_path / "deployment.yaml"), "--mode", "estimate", "--sglang-version", "0.5.22")
    assert done.exit_code == 2
    assert done.stderr.splitlines()[1].endswith("but 0.5.22 was given by --engine-version; they must agree")


def test_a_release_without_a_catalogue_is_a_kv204_at_the_overlays_line(tmp_path: Path) -> None:
    overlay = _overlay(tmp_path, "9.9", image="lmsysorg/sglang:dev")
    shutil.copy(CONFIG, tmp_path / "config.json")
    overlay.write_text(overlay.read_text(encoding="utf-8") + "model:\n  config: config.json\n", encoding="utf-8")
    done = run_kvcheck("verify", str(overlay), "--mode", "estimate", "--gpu", "H100", "--format", "github")
    lines = [line for line in done.stdout.splitlines() if "KV204" in line]
    assert lines == [
        f"::warning file={overlay},line=3,col=12,title=KV204::no flag catalogue for SGLang 9.9; arguments were "
        "checked against 0.5.23, the nearest older release%0Afix: state the release: --engine-version or the "
        "overlay's engine.version",
    ]


def test_an_engine_version_option_that_is_no_version_is_exit_2_naming_the_option() -> None:
    # `--engine-version latest` was blamed on a line of the deployment file, and an empty one was dropped
    # silently (the files' release unstated, the newest catalogue standing in)
    for value in ("latest", ""):
        done = run_kvcheck("verify", str(DEPLOYMENT), "--engine-version", value, "--mode", "estimate",
                           "--model-config", CONFIG)
        assert (done.exit_code, done.stdout) == (2, "")
        assert (f"Invalid value for '--engine-version' / '--sglang-version': '{value}' is not a version number "
                "(write it like \"0.5.23\")") in done.stderr
