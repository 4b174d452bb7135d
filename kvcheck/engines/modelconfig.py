"""Read a model's config.json (+ quantization config) from a file, a checkpoint folder or the Hub: engine-neutral, shared by every engine's sizing model."""

from __future__ import annotations

import copy
import functools
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kvcheck.errors import EstimateError, InputError
from kvcheck.io.jsontext import JsonRejected, parse_json
from kvcheck.io.jsontext import loads as json_loads

HF_ENDPOINT = "https://huggingface.co"
HUB_TIMEOUT_S = 20.0  # the whole download of one file, redirects and headers included
MAX_HUB_CONFIG_BYTES = 4 * 1024 * 1024  # the largest config.json on the Hub is a few hundred KB

# Sub-configs that hold the language model inside multimodal configs, in SGLang's lookup order.
TEXT_CONFIG_KEYS = ("text_config", "llm_config", "language_config", "thinker_config", "language_model")

# Config fields the estimate reads as whole numbers. A garbage value (text, a fraction, a negative, a
# bool, NaN) must stop the estimate, never become a figure: 0 layers or 0 KV heads price KV at
# nothing and would pass any window.
POSITIVE_FIELDS = frozenset(
    {
        "num_hidden_layers", "n_layers", "num_layers", "hidden_size", "num_attention_heads",
        "num_key_value_heads", "num_kv_heads", "n_head_kv", "head_dim", "v_head_dim", "vocab_size",
        "kv_lora_rank", "index_head_dim", "index_kpool", "sliding_window", "sliding_window_size",
        "attention_chunk_size", "swa_head_dim", "swa_v_head_dim", "swa_num_key_value_heads",
        "global_head_dim", "num_global_key_value_heads", "mamba_num_heads", "mamba_head_dim", "n_groups",
        "ssm_state_size", "conv_kernel", "linear_num_value_heads", "linear_value_head_dim",
        "linear_num_key_heads", "linear_key_head_dim", "linear_conv_kernel_dim", "full_attention_interval",
        "max_sequence_length", "seq_length", "max_seq_len", "model_max_length", "max_position_embeddings",
    }
)  # fmt: skip
COUNT_FIELDS = POSITIVE_FIELDS | frozenset(
    {
        "num_attention_layers", "num_nextn_predict_layers", "qk_rope_head_dim", "qk_nope_head_dim",
        "q_lora_rank", "cli_factor", "index_topk_freq", "index_skip_topk_offset", "index_n_heads",
        "n_routed_experts", "num_experts", "num_local_experts", "moe_intermediate_size", "intermediate_size",
        "intermediate_size_mlp", "interleave_moe_layer_step", "n_shared_experts",
        "moe_shared_expert_intermediate_size", "first_k_dense_replace", "moe_layer_freq", "decoder_sparse_step",
        "shared_expert_intermediate_size", "share_expert_dim", "depth", "embed_dim", "out_hidden_size",
        "text_hidden_size", "vt_num_hidden_layers", "vt_hidden_size", "vt_intermediate_size",
    }
)  # fmt: skip
PER_LAYER_LIST_FIELDS = frozenset({"moe_layer_freq"})  # a count, or one entry per layer (MiniMax, MiMo)
LAYER_FIELDS = frozenset({"num_hidden_layers", "n_layers", "num_layers", "num_attention_layers", "depth"})
MAX_LAYERS = 10_000  # no released model comes near; a larger figure is a damaged config
MAX_COUNT = 1 << 40  # context lengths, vocabularies and widths all sit far below this


@dataclass(frozen=True)
class ModelSource:
    """A model's configuration as the estimate needs it; `text` is the language model's config."""

    config: Mapping[str, Any]  # the whole config.json, --json-model-override-args applied
    text: Mapping[str, Any]  # language-model config (== config unless multimodal)
    quant: Mapping[str, Any] | None  # normalised quantization description, None for unquantized
    origin: str  # where it came from (path or URL), for the report
    checkpoint_bytes: int | None = None  # model.safetensors.index.json metadata.total_size
    notes: tuple[str, ...] = field(default=())

    @property
    def architectures(self) -> tuple[str, ...]:
        archs = self.config.get("architectures") or self.text.get("architectures") or ()
        return (archs,) if isinstance(archs, str) else tuple(str(a) for a in archs)

    @property
    def architecture(self) -> str:
        archs = self.architectures
        return archs[0] if archs else "<none>"

    @property
    def vision(self) -> Mapping[str, Any] | None:
        for key in ("vision_config", "vit_config", "visual"):
            value = self.config.get(key)
            if isinstance(value, Mapping):
                return value
        return None


def text_config_of(config: Mapping[str, Any]) -> Mapping[str, Any]:
    """The language model's config: a known sub-config when present, else the config itself."""
    for key in TEXT_CONFIG_KEYS:
        sub = config.get(key)
        if isinstance(sub, Mapping) and ("num_hidden_layers" in sub or "hidden_size" in sub):
            return sub
    return config


def _quant_from(
    config: Mapping[str, Any], text: Mapping[str, Any], hf_quant: Mapping[str, Any] | None
) -> dict[str, Any] | None:
    """One quantization mapping: hf_quant_config.json's `quantization` wins over `quantization_config`."""
    if hf_quant:
        section = hf_quant.get("quantization", hf_quant)
        if isinstance(section, Mapping) and section:
            merged = dict(section)
            merged.setdefault("quant_method", "modelopt")
            return merged
    for holder in (config, text):
        qc = holder.get("quantization_config")
        if isinstance(qc, Mapping) and qc:
            return dict(qc)
    return None


def check_counts(config: Mapping[str, Any], origin: str) -> None:
    """Every whole-number field the estimate reads is a whole number in range; EstimateError if not.

    Checks the config and its sub-configs (text, vision), since the estimate reads both.
    """
    for key, value in config.items():
        if isinstance(value, Mapping):
            check_counts(value, origin)
            continue
        if key not in COUNT_FIELDS or value is None:
            continue
        if key in PER_LAYER_LIST_FIELDS and isinstance(value, list):
            continue
        integral = isinstance(value, int) or (isinstance(value, float) and value.is_integer())
        lowest = 1 if key in POSITIVE_FIELDS else 0
        highest = MAX_LAYERS if key in LAYER_FIELDS else MAX_COUNT
        if isinstance(value, bool) or not integral or not lowest <= value <= highest:
            raise EstimateError(
                f"model config {origin}: {key} is {value!r}, not a whole number from {lowest} to {highest:,}",
                hint="pass the model's own config.json (model.config in the manifest)",
            )


def _read_json(path: Path) -> dict[str, Any]:
    from kvcheck.errors import InputError
    from kvcheck.io.textfile import read_bounded

    try:  # a regular file, size checked before reading, JSON bounded in depth (a config is hostile input too)
        raw = read_bounded(path, str(path), kind="model config", max_bytes=MAX_HUB_CONFIG_BYTES)
    except InputError as exc:
        raise EstimateError(exc.message.replace(f"{path}: ", f"cannot read model config {path}: ", 1)) from exc
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise EstimateError(f"model config {path} is not UTF-8 text (byte {exc.start})") from exc
    try:
        data = parse_json(text)
    except JsonRejected as exc:
        if str(exc).startswith("not JSON"):
            try:
                json.loads(text)
            except json.JSONDecodeError as decode_error:  # the message the tests and users know
                raise EstimateError(f"model config {path} is not valid JSON: {decode_error}") from exc
        raise EstimateError(f"model config {path} cannot be read safely: {exc}") from exc
    if not isinstance(data, dict):
        raise EstimateError(f"model config {path} is not a JSON object")
    return data


def _beside(config_path: Path, name: str) -> Path | None:
    """`hf_quant_config.json` next to `config.json`, or `<stem>.hf_quant_config.json` next to `<stem>.json`."""
    candidates = [config_path.with_name(name)] if config_path.name == "config.json" else []
    candidates.append(config_path.with_name(f"{config_path.stem}.{name}"))
    return next((p for p in candidates if p.is_file()), None)


@functools.lru_cache(maxsize=256)
def _load_file(path: str, mtime_ns: int) -> tuple[dict, dict | None, int | None]:
    config_path = Path(path)
    config = _read_json(config_path)
    quant_path = _beside(config_path, "hf_quant_config.json")
    hf_quant = _read_json(quant_path) if quant_path else None
    index_path = config_path.with_name("model.safetensors.index.json")
    total = None
    if config_path.name == "config.json" and index_path.is_file():
        meta = _read_json(index_path).get("metadata") or {}
        if isinstance(meta.get("total_size"), int | float):
            total = int(meta["total_size"])
    return config, hf_quant, total


_HUB_CACHE: dict[str, tuple[dict, dict | None]] = {}


def _hub_offline() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in ("1", "true", "yes", "on")


def _fetch_hub(repo: str, offline: bool | None) -> tuple[dict, dict | None]:
    """config.json (+ hf_quant_config.json when the repo has one) from the Hugging Face Hub."""
    if repo in _HUB_CACHE:
        return _HUB_CACHE[repo]
    hint = "set model.config in the manifest to a local config.json (estimate mode needs the model's shape)"
    if offline or (offline is None and _hub_offline()):
        why = "HF_HUB_OFFLINE=1" if offline is None else "the Hub is not asked in this mode"
        raise EstimateError(f"model config for {repo!r} is not local and {why}", hint=hint)
    import httpx

    from kvcheck.http import HttpLimitError, make_client, validate_base_url
    from kvcheck.http import request as http_request

    headers = {"User-Agent": "kvcheck-estimate"}
    token = os.environ.get("HF_TOKEN") or os.environ.get("HUGGING_FACE_HUB_TOKEN")
    endpoint = os.environ.get("HF_ENDPOINT", HF_ENDPOINT).rstrip("/")
    try:  # the user's setting: a URL the network layer cannot use is bad input, named, not a crash
        validate_base_url(endpoint)
    except InputError as exc:
        raise InputError(f"HF_ENDPOINT: {exc.message}", hint="set HF_ENDPOINT to the Hub's base URL "
                         "(https://huggingface.co or a mirror), or unset it") from exc

    def get(name: str) -> Any:
        # the Hub redirects to its CDN: followed by kvcheck.http, the token stays with the Hub's origin
        return http_request(client, "GET", f"{endpoint}/{repo}/resolve/main/{name}", timeout_s=HUB_TIMEOUT_S,
                            token=token or None, max_bytes=MAX_HUB_CONFIG_BYTES)

    try:
        with make_client(timeout_s=HUB_TIMEOUT_S, headers=headers) as client:
            response = get("config.json")
            if response.status in (401, 403):
                raise EstimateError(
                    f"the Hugging Face Hub refused config.json of {repo!r} (HTTP {response.status})",
                    hint="set HF_TOKEN for gated models, or " + hint,
                )
            if response.status != 200:
                raise EstimateError(
                    f"the Hugging Face Hub answered HTTP {response.status} for config.json of {repo!r}",
                    hint=hint,
                )
            config = parse_json(response.body)
            quant_response = get("hf_quant_config.json")
            hf_quant = parse_json(quant_response.body) if quant_response.status == 200 else None
    except httpx.TimeoutException as exc:  # one deadline covers the whole request (kvcheck/http.py)
        raise EstimateError(f"the Hugging Face Hub gave no complete answer for {repo!r} within "
                            f"{HUB_TIMEOUT_S:g} s", hint=hint) from exc
    except httpx.HTTPError as exc:
        raise EstimateError(f"cannot reach the Hugging Face Hub for {repo!r}: {exc}", hint=hint) from exc
    except HttpLimitError as exc:
        raise EstimateError(f"the Hugging Face Hub's answer for {repo!r} was refused: {exc.message}",
                            hint=hint) from exc
    except JsonRejected as exc:
        raise EstimateError(f"the Hugging Face Hub sent a config for {repo!r} that cannot be read: {exc}",
                            hint=hint) from exc
    if not isinstance(config, dict):
        raise EstimateError(f"config.json of {repo!r} is not a JSON object", hint=hint)
    _HUB_CACHE[repo] = (config, hf_quant if isinstance(hf_quant, dict) else None)
    return _HUB_CACHE[repo]


def _merge(base: dict[str, Any], override: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in override.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), Mapping):
            out[key] = _merge(dict(out[key]), value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def parse_override_args(value: Any) -> dict[str, Any]:
    """`--json-model-override-args` as a dict ("{}" or a mapping); EstimateError when not JSON."""
    if value in (None, "", "{}"):
        return {}
    if isinstance(value, Mapping):
        return dict(value)
    try:
        parsed = json_loads(str(value))
    except json.JSONDecodeError as exc:
        raise EstimateError(f"--json-model-override-args is not valid JSON: {exc}") from exc
    except JsonRejected as exc:
        raise EstimateError(f"--json-model-override-args cannot be read safely: {exc}") from exc
    if not isinstance(parsed, dict):
        raise EstimateError("--json-model-override-args must be a JSON object")
    return parsed


def build_source(
    config: dict[str, Any],
    hf_quant: Mapping[str, Any] | None,
    origin: str,
    *,
    override_args: Mapping[str, Any] | None = None,
    checkpoint_bytes: int | None = None,
) -> ModelSource:
    """A ModelSource from parsed JSON, with SGLang's `--json-model-override-args` merged in."""
    notes: list[str] = []
    if override_args:
        config = _merge(config, override_args)
        notes.append(f"--json-model-override-args applied: {sorted(override_args)}")
    check_counts(config, origin)
    text = text_config_of(config)
    return ModelSource(
        config=config,
        text=text,
        quant=_quant_from(config, text, hf_quant),
        origin=origin,
        checkpoint_bytes=checkpoint_bytes,
        notes=tuple(notes),
    )


def load_model_source(
    *,
    model_config: Path | None,
    model_path: str | None,
    override_args: Mapping[str, Any] | None = None,
    offline: bool | None = None,
) -> ModelSource:
    """The role's model config: `model.config`, else a local checkpoint folder, else the Hub."""
    if model_config is not None:
        path = Path(model_config)
        if path.is_dir():
            path = path / "config.json"
        if not path.is_file():
            raise EstimateError(f"model config {path} does not exist")
        config, hf_quant, total = _load_file(str(path.resolve()), path.stat().st_mtime_ns)
        return build_source(config, hf_quant, str(path), override_args=override_args, checkpoint_bytes=total)
    if model_path:
        local = Path(model_path).expanduser()
        if (local / "config.json").is_file():
            cfg_path = local / "config.json"
            config, hf_quant, total = _load_file(str(cfg_path.resolve()), cfg_path.stat().st_mtime_ns)
            return build_source(config, hf_quant, str(cfg_path), override_args=override_args, checkpoint_bytes=total)
        if local.is_absolute() or model_path.startswith((".", "~")) or model_path.count("/") != 1:
            raise EstimateError(
                f"model path {model_path!r} is neither a local checkpoint folder with config.json "
                "nor a Hugging Face repo id",
                hint="set model.config in the manifest to the model's config.json",
            )
        config, hf_quant = _fetch_hub(model_path, offline)
        return build_source(
            config, hf_quant, f"{HF_ENDPOINT}/{model_path}/resolve/main/config.json", override_args=override_args
        )
    raise EstimateError(
        "the role names neither model.config nor model.path", hint="set model.config to the model's config.json"
    )
