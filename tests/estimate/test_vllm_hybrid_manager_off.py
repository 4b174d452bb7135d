"""`--disable-hybrid-kv-cache-manager`: vLLM turns every sliding-window layer into a full-attention one
(unify_hybrid_kv_cache_specs, vllm/v1/core/kv_cache_utils.py), so one block pays for every layer."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from packaging.version import Version

from kvcheck.engines.modelconfig import load_model_source
from kvcheck.engines.vllm.sizing.layout import FULL, kv_layout
from kvcheck.errors import EstimateError
from tests.estimate.helpers import verify_estimate

MODELS = Path(__file__).resolve().parents[1] / "data" / "models"
GPT_OSS = MODELS / "openai--gpt-oss-20b.json"


def _layout(**args: object):  # type: ignore[no-untyped-def]
    source = load_model_source(model_config=GPT_OSS, model_path=None, offline=True)
    return kv_layout(source.text, source.architecture, tp=1, pp=1, kv_dtype="bfloat16", block_size=None,
                     device="cuda", args=args)


def test_the_hybrid_manager_off_makes_every_layer_full_attention() -> None:
    hybrid = _layout()
    assert (hybrid.kind, hybrid.full_layers, hybrid.sliding_layers, hybrid.group_layers) == ("hybrid_swa", 12, 12, 12)
    off = _layout(disable_hybrid_kv_cache_manager=True)
    assert (off.kind, off.full_layers, off.sliding_layers, off.group_layers) == (FULL, 24, 0, 24)
    assert off.bytes_per_block == 2 * hybrid.bytes_per_block
    assert off.usable_tokens(1001) == 1000 * 16
    assert _layout(disable_hybrid_kv_cache_manager=False).kind == "hybrid_swa"


def test_cli_gpt_oss_with_the_hybrid_manager_off_holds_half_the_tokens(tmp_path: Path) -> None:
    """The flag was not read: gpt-oss-20b on one H100 was predicted at 2,430,656 tokens with it as without it."""
    def pool(args: str) -> int:
        code, report = verify_estimate(tmp_path, GPT_OSS, args, model="openai/gpt-oss-20b")
        assert code == 0, report
        [role] = report["roles"]
        return int(role["pool_tokens"])

    hybrid, off = pool(""), pool("disable-hybrid-kv-cache-manager: true")
    assert hybrid > 2_000_000
    assert 0.49 < off / hybrid < 0.51


def test_a_state_hybrid_with_the_hybrid_manager_off_is_not_priced() -> None:
    """Mamba/GDN state layers have no full-attention form to fall back to: refused (KV305), never the hybrid layout."""
    source = load_model_source(model_config=MODELS / "Qwen--Qwen3.5-27B.json", model_path=None, offline=True)
    with pytest.raises(EstimateError, match="disable-hybrid-kv-cache-manager"):
        kv_layout(source.text, source.architecture, tp=1, pp=1, kv_dtype="bfloat16", block_size=None,
                  device="cuda", args={"disable_hybrid_kv_cache_manager": True})


def _connector(name: str, **extra: object) -> dict[str, object]:
    return {"kv_transfer_config": json.dumps({"kv_connector": name, "kv_role": "kv_both", **extra})}


@pytest.mark.parametrize(("connector", "version", "kept"), [
    ("NixlConnector", "0.32.0", True),  # a SupportsHMA connector from 0.23.0
    ("MooncakeConnector", "0.25.0", True),
    ("ExampleConnector", "0.32.0", False),  # no SupportsHMA: vLLM turns the manager off
    ("LMCacheConnectorV1", "0.32.0", False),
    ("NixlConnector", "0.20.0", False),  # before 0.23.0 any connector turns it off
    ("MoRIIOConnector", "0.25.0", False),  # SupportsHMA from 0.31.0
    ("MoRIIOConnector", "0.31.0", True),
])
def test_a_connector_without_hybrid_manager_support_turns_it_off(connector: str, version: str, kept: bool) -> None:
    """vLLM's own rule (VllmConfig.__post_init__): with the flag unset, a KV connector that does not subclass
    SupportsHMA turns the manager off, and before 0.23.0 any connector does. gpt-oss's sliding-window layers
    then keep full-length caches: half the tokens. The estimate priced the hybrid layout whatever the connector."""
    source = load_model_source(model_config=GPT_OSS, model_path=None, offline=True)
    layout = kv_layout(source.text, source.architecture, tp=1, pp=1, kv_dtype="bfloat16", block_size=None,
                       device="cuda", version=Version(version), args=_connector(connector))
    assert layout.kind == ("hybrid_swa" if kept else FULL)
    # an explicit --no-disable-hybrid-kv-cache-manager keeps it on, as the user asked
    assert kv_layout(source.text, source.architecture, tp=1, pp=1, kv_dtype="bfloat16", block_size=None,
                     device="cuda", version=Version(version),
                     args={**_connector(connector), "disable_hybrid_kv_cache_manager": False}).kind == "hybrid_swa"


def test_a_multi_connector_keeps_the_manager_only_when_every_child_supports_it() -> None:
    source = load_model_source(model_config=GPT_OSS, model_path=None, offline=True)

    def kind(*children: str) -> str:
        extra = {"kv_connector_extra_config": {"connectors": [{"kv_connector": c} for c in children]}}
        return kv_layout(source.text, source.architecture, tp=1, pp=1, kv_dtype="bfloat16", block_size=None,
                         device="cuda", version=Version("0.32.0"), args=_connector("MultiConnector", **extra)).kind

    assert kind("NixlConnector", "OffloadingConnector") == "hybrid_swa"
    assert kind("NixlConnector", "LMCacheConnectorV1") == FULL


def test_a_state_hybrid_behind_a_connector_without_support_is_not_priced() -> None:
    source = load_model_source(model_config=MODELS / "Qwen--Qwen3.5-27B.json", model_path=None, offline=True)
    with pytest.raises(EstimateError, match=r"ExampleConnector.*state layers without the hybrid KV cache manager"):
        kv_layout(source.text, source.architecture, tp=1, pp=1, kv_dtype="bfloat16", block_size=None,
                  device="cuda", args=_connector("ExampleConnector"))
