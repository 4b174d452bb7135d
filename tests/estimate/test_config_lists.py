"""Config keys that are lists (Nemotron-H's layers_block_type, moe_layer_freq, mlp_layer_types) reach the
SGLang weights reader as lists.

The weights are cached per config; the cache key used to turn every list into a tuple, so each
`isinstance(..., list)` check in the layer readers failed and those layers' weights were dropped: the
Nemotron-3-Ultra-550B BF16 checkpoint was priced 5.64 GiB a GPU at TP8 (its routed experts alone are 120 GiB), a
13.2-million-token pool on B200 where 1.70 million fit, and MiMo-V2-Flash's dense first layer was priced as
MoE.
"""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from kvcheck.engines.sglang.sizing import estimate_role

from .helpers import model_config, role

GIB = 2**30
ULTRA = "nvidia--NVIDIA-Nemotron-3-Ultra-550B-A55B-BF16"


def _est(name: str, version: str = "0.5.23", **args):
    return estimate_role(replace(role(name, gpu="B200", **args), engine_version=version), offline=True)


def test_nemotron_ultras_moe_layers_are_counted_from_layers_block_type():
    c = json.loads(model_config(ULTRA).read_text())
    assert "num_hidden_layers" not in c and "hybrid_override_pattern" not in c
    moe_layers = c["layers_block_type"].count("moe")
    # routed experts (up/down through the latent width, squared ReLU: two matrices), bf16, split over TP8
    experts = moe_layers * c["n_routed_experts"] * 2 * c["moe_latent_size"] * c["moe_intermediate_size"] * 2 / 8
    est = _est(ULTRA, tp_size=8)
    weights = est.details["weights_gib_per_gpu"] * GIB
    assert experts / GIB == pytest.approx(120.0, abs=0.1)
    assert experts < weights < experts * 1.1  # plus Mamba mixers, attention, shared experts, embeddings
    assert (round(est.details["weights_gib_per_gpu"], 3), est.pool_tokens) == (130.958, 1_694_912)


def test_nemotron_lightnings_experts_are_counted():
    est = _est("nvidia--NVIDIA-Nemotron-3.5-Lightning-30B-A3B-NVFP4", tp_size=8)
    assert round(est.details["weights_gib_per_gpu"], 3) == 2.304  # 0.248 with its MoE layers dropped


def test_mimo_v2_flashs_dense_first_layer_is_read_from_moe_layer_freq():
    c = json.loads(model_config("XiaomiMiMo--MiMo-V2-Flash").read_text())
    assert c["moe_layer_freq"][0] == 0 and all(c["moe_layer_freq"][1:])
    assert round(_est("XiaomiMiMo--MiMo-V2-Flash", "0.5.6", tp_size=4).details["weights_gib_per_gpu"], 3) == 72.346
