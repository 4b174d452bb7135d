"""The deployment manifest as pydantic models: strict (unknown keys are errors), typed, documented.

`kvcheck schema` prints the JSON Schema generated from these models.
"""

from __future__ import annotations

import difflib
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Discriminator, Field, Tag, WithJsonSchema, field_validator
from pydantic.json_schema import models_json_schema

from kvcheck.backends.measure.launchers import KubernetesSpec, SlurmSpec
from kvcheck.engines.flags import FlagError, parse_human_readable_int
from kvcheck.gpus import MAX_GPU_MEMORY_MIB

# Windows and pools are token counts SGLang keeps in 32-bit fields; anything larger is a typo.
MAX_TOKENS = 2**31 - 1
# A token count as SGLang's --context-length takes it (its human_readable_int): 131072, 128k (1000s)
# or 128Ki (1024s); the same spellings at the top level as in args.
TOKENS_SCHEMA = {
    "anyOf": [
        {"type": "integer", "exclusiveMinimum": 0, "maximum": MAX_TOKENS},
        {"type": "string", "pattern": r"^\s*\d+(\.\d+)?(Ki|Mi|Gi|Ti|k|M|G|T)?\s*$"},
    ]
}


def tokens_value(value: Any) -> Any:
    """A token count written as SGLang writes --context-length (128k, 1Mi): the integer it means."""
    if isinstance(value, bool):
        raise ValueError("must be a number of tokens")
    if isinstance(value, str):
        try:
            return parse_human_readable_int("context_length", value)
        except FlagError:
            raise ValueError(
                "must be a number of tokens such as 131072, 128k or 128Ki (SGLang's spellings; the suffixes "
                "are case-sensitive)"
            ) from None
    return value


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True, str_strip_whitespace=True)


class ModelSpec(_Strict):
    """What the engine loads."""

    path: str = Field(description="What the engine loads: a Hugging Face repo id or a local folder (--model-path).")
    config: str | None = Field(
        default=None,
        description="config.json for estimate mode (relative to the manifest); defaults to the one in a "
        "local `path`, else the Hugging Face Hub when online.",
    )
    draft_config: str | None = Field(
        default=None,
        description="config.json of the speculative draft model (--speculative-draft-model-path: EAGLE, "
        "EAGLE3 or STANDALONE), relative to the manifest; built-in MTP layers need none.",
    )


class EngineSpec(_Strict):
    """Which engine, which release, and how to start it."""

    name: str = Field(
        default="sglang",
        description="The serving engine: sglang, or an engine installed under the kvcheck.engines entry points.",
    )
    version: str = Field(description='The release you deploy, e.g. "0.5.23"; checked against what boots.')
    command: list[Annotated[str, Field(min_length=1)]] | None = Field(
        default=None,
        min_length=1,
        description="How to start the engine (argv prefix); kvcheck appends the model and the args. "
        "Default: the engine's own (python3 -m sglang.launch_server for sglang).",
    )
    env: dict[str, str] = Field(default_factory=dict, description="Extra environment for every role.")

    @field_validator("name")
    @classmethod
    def _known_engine(cls, value: str) -> str:
        from kvcheck.engines import engine_names

        known = engine_names()
        if value not in known:
            close = difflib.get_close_matches(value, known, n=1, cutoff=0.6)
            hint = f" (did you mean '{close[0]}'?)" if close else ""
            raise ValueError(f"unknown engine '{value}'{hint}; kvcheck knows: {', '.join(known)}")
        return value

    @field_validator("version", mode="before")
    @classmethod
    def _version_text(cls, value: Any) -> Any:
        if isinstance(value, float):
            raise ValueError('write the version as a quoted string, e.g. "0.5.23" (YAML reads 0.5 as a number)')
        return value


class EstimateSpec(_Strict):
    """Figures that only estimate mode uses; each one left out is derived (config, GPU profile)."""

    weights_gib_per_gpu: float | None = Field(default=None, gt=0, description="Weight memory per GPU rank, GiB.")
    gpu_memory_mib: int | None = Field(
        default=None, gt=0, le=MAX_GPU_MEMORY_MIB, description="nvidia-smi memory.total of the GPU, MiB (at most 2 TiB)."
    )
    pre_baseline_mib: float | None = Field(
        default=None, ge=0, description="Memory taken before SGLang's baseline (CUDA context, NCCL), MiB."
    )


class GpuSpec(_Strict):
    """A GPU without a profile in profiles/gpus/, described by its figures."""

    name: str = Field(min_length=1, description="The card's name (nvidia-smi's name is checked against it in measure mode).")
    memory_mib: int = Field(gt=0, le=MAX_GPU_MEMORY_MIB, description="nvidia-smi memory.total of the card, MiB (at most 2 TiB).")
    vendor: Literal["nvidia", "amd", "huawei"] = Field(default="nvidia", description="Who makes it.")
    compute_capability: str | None = Field(
        default=None,
        description='CUDA compute capability ("8.9", "9.0", "10.0"; default "8.0"), gfx target on AMD.',
    )
    pre_baseline_mib: float | None = Field(
        default=None, ge=0, description="Memory in use before SGLang's baseline at this role's TP size, MiB."
    )
    description: str | None = Field(default=None, description="Free text shown in reports.")


# A name or a mapping, told apart by the input's shape so an error names only the form that was
# meant; the tags are dropped from error locations by the loader (UNION_TAGS).
UNION_TAGS = frozenset({"gpu-name", "gpu-mapping"})
GpuField = Annotated[
    Annotated[
        Annotated[str, Tag("gpu-name")] | Annotated[GpuSpec, Tag("gpu-mapping")],
        Discriminator(lambda value: "gpu-mapping" if isinstance(value, dict | GpuSpec) else "gpu-name"),
    ]
    | None,
    Field(
        description="GPU type (H100, H200, B200, ... or the name nvidia-smi prints), or a mapping "
        "{name, memory_mib, ...} for a card without a profile.",
    ),
]


# Where a role runs: GPUs (the default; `cuda` is the same) or the host's CPUs. `device: cpu` is a CPU
# deployment (SGLang --device cpu, vLLM's CPU backend): no GPU list, no GPU check, host memory instead.
DEVICES = ("gpu", "cuda", "cpu")
DeviceField = Annotated[
    Literal["gpu", "cuda", "cpu"] | None,
    Field(
        description="Where the role runs: gpu (the default; cuda is the same) or cpu (a CPU deployment: "
        "no gpus list, host memory checked instead; SGLang gets --device cpu).",
    ),
]


def device_name(value: str | None) -> str | None:
    """The manifest's device as engines name it: "cuda" for gpu/cuda, "cpu"; None when not stated."""
    return None if value is None else ("cpu" if value == "cpu" else "cuda")


class RoleSpec(_Strict):
    """One server of the deployment (prefill, decode, or a single unified server)."""

    gpus: list[Annotated[int, Field(ge=0)]] = Field(
        default_factory=list, description="GPU indices on the measuring host (per host when nnodes > 1)."
    )
    nodes: int | None = Field(
        default=None, ge=1, le=1024,
        description="Hosts one instance spans when the engine takes no node-count flag (vLLM over Ray: the pods "
        "of its LeaderWorkerSet group); gpus is then per host. An engine with --nnodes states it there.",
    )
    gpu: GpuField = None  # this role's GPU type when it differs from the top-level gpu
    device: DeviceField = None  # this role's device when it differs from the top-level device
    args: dict[str, Any] = Field(default_factory=dict, description="Engine arguments; override the shared args.")
    env: dict[str, str] = Field(default_factory=dict, description="Extra environment; overrides engine.env.")
    estimate: EstimateSpec | None = Field(default=None, description="Estimate-mode overrides for this role.")
    side: Literal["prefill", "decode"] | None = Field(
        default=None,
        description="The side of a prefill/decode pair this role plays, where its engine's arguments do not say "
        "(NVIDIA Dynamo's vLLM workers: Dynamo's own --is-prefill-worker). The pair rules (KV104, KV110) then judge "
        "it with its partner. SGLang states it in args disaggregation-mode; an engine argument that says "
        "otherwise is an error.",
    )

    @field_validator("gpus")
    @classmethod
    def _unique_gpus(cls, value: list[int]) -> list[int]:
        if len(set(value)) != len(value):
            raise ValueError("a GPU index is listed twice")
        return value


class PolicySpec(_Strict):
    """How strict the gate is."""

    # at least 1: a pool below the window it advertises is what the gate fails (KV101); a headroom below 1
    # would pass it silently (policy.ignore or a suppression says so in the report instead)
    min_headroom: float = Field(
        default=1.0, ge=1, le=1_000_000,
        description="Each pool must hold min_headroom x context_length tokens (at least 1: the window).",
    )
    min_concurrency: float = Field(
        default=1.0, ge=1, le=1_000_000,
        description="Requests of the full window each pool must hold at once (KV111); 1: one, null block counted.",
    )
    ignore: list[str] = Field(
        default_factory=list, description="Rule codes to skip, e.g. [KV203]."
    )
    severity: dict[str, Literal["error", "warning", "info"]] = Field(
        default_factory=dict, description="Severity overrides per rule code, e.g. {KV104: error}."
    )


class LauncherSpec(_Strict):
    """Where measure mode runs each role's engine; `kvcheck verify --launcher` overrides `kind`."""

    kind: Literal["local", "slurm", "kubernetes"] = Field(
        default="local", description="local: this host; slurm: one allocation per role; kubernetes: see docs."
    )
    slurm: SlurmSpec | None = Field(default=None, description="Settings for --launcher slurm.")
    kubernetes: KubernetesSpec | None = Field(default=None, description="Settings for --launcher kubernetes.")


class Manifest(_Strict):
    """A deployment to gate: the window promised to clients, the model, the engine and its roles."""

    name: str | None = Field(default=None, description="Free text shown in reports.")
    context_length: Annotated[int, WithJsonSchema(TOKENS_SCHEMA)] = Field(
        gt=0,
        le=MAX_TOKENS,
        description="REQUIRED: the context window promised to clients, tokens (131072, 128k or 128Ki, as in args).",
    )
    model: ModelSpec
    engine: EngineSpec
    gpu: GpuField = None
    device: DeviceField = None
    args: dict[str, Any] = Field(default_factory=dict, description="Engine arguments shared by all roles.")
    roles: dict[str, RoleSpec] = Field(min_length=1, description="The servers of the deployment, by name.")
    policy: PolicySpec = Field(default_factory=PolicySpec)
    estimate: EstimateSpec | None = Field(default=None, description="Estimate-mode overrides for every role.")
    launcher: LauncherSpec | None = Field(default=None, description="Where measure mode boots the roles.")

    @field_validator("context_length", mode="before")
    @classmethod
    def _tokens(cls, value: Any) -> Any:
        return tokens_value(value)


class OverlayModel(_Strict):
    """What a manifest with `deployment:` may add to deployment files."""

    path: str | None = Field(default=None, description="What the engine loads, when the files do not say (--model-path).")
    config: str | None = Field(default=None, description="config.json for estimate mode (relative to the manifest).")


class OverlayEngine(_Strict):
    """The release, when no image tag in the files names it."""

    version: str | None = Field(default=None, description='The release you deploy, e.g. "0.5.23".')


class Overlay(_Strict):
    """A kvcheck manifest that names deployment files and adds only what they lack."""

    deployment: str | list[str] = Field(description="REQUIRED: deployment files (relative to this manifest).")
    name: str | None = Field(default=None, description="Free text shown in reports.")
    context_length: int | None = Field(
        default=None, gt=0, le=MAX_TOKENS, description="The context window promised to clients, tokens."
    )
    model: OverlayModel | None = None
    engine: OverlayEngine | None = None
    gpu: str | None = Field(default=None, description="GPU type, when the files do not name it.")
    policy: PolicySpec = Field(default_factory=PolicySpec)
    launcher: LauncherSpec | None = Field(
        default=None, description="Where measure mode boots the roles (as in a manifest; the files give no launcher)."
    )


def json_schema() -> dict[str, Any]:
    """The manifest's JSON Schema (draft 2020-12), for editors' YAML language servers and CI linters.

    A file is either a full manifest or an overlay (`deployment:` plus what the files lack), exactly
    one of the two: each shape stays strict (additionalProperties false), so a typo'd key matches
    neither and is still refused.
    """
    _, defs = models_json_schema([(Manifest, "validation"), (Overlay, "validation")],
                                 ref_template="#/$defs/{model}")
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": "urn:kvcheck:manifest:v1",
        "title": "kvcheck deployment manifest",
        "description": "A full manifest (context_length, model, engine, roles) or an overlay manifest "
        "(deployment: the deployment files, plus what they lack).",
        "oneOf": [{"$ref": "#/$defs/Manifest"}, {"$ref": "#/$defs/Overlay"}],
        "$defs": defs["$defs"],
    }
