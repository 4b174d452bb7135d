"""Shared helpers: real model configs (tests/datapaths.py: MODELS; skip when absent) and RoleTargets."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvcheck.model import EstimateInputs, RoleTarget
from tests.conftest import run_kvcheck
from tests.datapaths import MODELS, MODELS_ABSENT


def model_config(name: str) -> Path:
    if not MODELS.is_dir():
        pytest.skip(MODELS_ABSENT)
    path = MODELS / f"{name}.json"
    if not path.is_file():
        pytest.skip(f"{path} not available")
    return path


def role(
    config: Path | str,
    *,
    gpu: str | None = "H100",
    name: str = "serve",
    window: int = 131072,
    estimate: EstimateInputs | None = None,
    env: dict[str, str] | None = None,
    model_path: str | None = None,
    **args,
) -> RoleTarget:
    """A RoleTarget as the manifest loader builds it (args keyed by SGLang field name)."""
    path = config if isinstance(config, Path) else model_config(config)
    return RoleTarget(
        name=name,
        context_length=window,
        min_headroom=1.0,
        engine_version="0.5.23",
        args=args,
        argv_args=(),
        gpu=gpu,
        model_path=model_path,
        model_config=path,
        env=env or {},
        estimate=estimate or EstimateInputs(),
    )


def one_role_manifest(
    tmp_path: Path, config: Path, args: str, *, name: str = "manifest", engine: str = "vllm",
    version: str = "0.32.0", gpu: str = "H100", gpus: str = "[0]", window: int = 131072, env: str = "",
    model: str = "some/model",
) -> Path:
    """A one-role manifest file, tmp_path/NAME.yaml, its engine arguments on line 5. `args` and `env` are the
    bodies of the flow mappings of engine arguments and engine environment."""
    path = tmp_path / f"{name}.yaml"
    path.write_text(
        f"context_length: {window}\n"
        f"model: {{path: {model}, config: {config}}}\n"
        f'engine: {{name: {engine}, version: "{version}"{f", env: {{{env}}}" if env else ""}}}\n'
        f"gpu: {gpu}\n"
        f"args: {{{args}}}\n"
        f"roles:\n  server: {{gpus: {gpus}}}\n", encoding="utf-8")
    return path


def verify_estimate(
    tmp_path: Path, config: Path, args: str, *, engine: str = "vllm", version: str = "0.32.0",
    window: int = 131072, model: str = "meta-llama/Llama-3.1-8B-Instruct",
) -> tuple[int, dict]:
    """`kvcheck verify --mode estimate --format json` on a one-role manifest on one H100: (exit code, report).
    `args` is the body of the manifest's flow mapping of engine arguments."""
    manifest = one_role_manifest(tmp_path, config, args, engine=engine, version=version, window=window, model=model)
    done = run_kvcheck("verify", str(manifest), "--mode", "estimate", "--format", "json")
    return done.exit_code, json.loads(done.stdout)
