"""Speculative drafts: a separate draft model's config (model.draft_config) is sized as SGLang sizes its pool."""

from __future__ import annotations

import json
import textwrap
from dataclasses import replace
from pathlib import Path

from kvcheck.engines.sglang.sizing import estimate_role

from .helpers import role

EXAMPLE = Path(__file__).resolve().parents[2] / "docs" / "examples" / "single-server"
LLAMA = EXAMPLE / "llama-3.1-8b-instruct.config.json"
# the shape of lmsys/sglang-EAGLE3-LLaMA3.1-Instruct-8B's config.json
EAGLE3 = {
    "architectures": ["LlamaForCausalLMEagle3"], "model_type": "llama", "hidden_size": 4096,
    "num_attention_heads": 32, "num_key_value_heads": 8, "num_hidden_layers": 1, "intermediate_size": 14336,
    "vocab_size": 128256, "draft_vocab_size": 32000, "max_position_embeddings": 2048, "torch_dtype": "bfloat16",
    "tie_word_embeddings": False,
}
SPEC = {"speculative_algorithm": "EAGLE3", "speculative_draft_model_path": "lmsys/sglang-EAGLE3-LLaMA3.1-Instruct-8B",
        "speculative_num_steps": 3, "speculative_eagle_topk": 1, "speculative_num_draft_tokens": 4}


def _draft(tmp_path: Path, config: dict) -> Path:
    path = tmp_path / "draft" / "config.json"
    path.parent.mkdir(exist_ok=True)
    path.write_text(json.dumps(config))
    return path


LAYER = (4096 * 4096 * 2 + 4096 * 1024 * 2 + 3 * 4096 * 14336) * 2  # one Llama-8B decoder layer, bf16
EMBEDDING = 128256 * 4096 * 2  # the draft's own vocabulary-sized embedding (and an EAGLE draft's lm_head), bf16


def test_eagle3_draft_inflates_the_cell_by_its_layers_and_counts_its_own_weights(tmp_path):
    plain = estimate_role(role(LLAMA), offline=True)
    target = replace(role(LLAMA, **SPEC), draft_config=_draft(tmp_path, EAGLE3))
    est = estimate_role(target, offline=True)
    # SGLang: the draft pool has the target's token count; cell += cell x draft_layers / target_layers
    assert est.kv_bytes_per_token == plain.kv_bytes_per_token * (1 + 1 / 32)
    # one decoder layer + its own lm_head over the 32,000-token draft vocabulary + fc (3 x 4096 -> 4096), bf16;
    # + its own embedding, which set_embed frees only after the target's pool is sized (0.5.14 on)
    expected = LAYER + 32000 * 4096 * 2 + 3 * 4096 * 4096 * 2 + EMBEDDING
    assert abs(est.details["draft_weights_gib_per_gpu"] * 2**30 - expected) < 0.01 * 2**30
    assert est.details["max_running_requests"] == 48
    assert est.pool_tokens < plain.pool_tokens


def test_eagle_draft_shares_embedding_and_lm_head(tmp_path):
    eagle = dict(EAGLE3, architectures=["LlamaForCausalLMEagle"])
    eagle.pop("draft_vocab_size")
    spec = dict(SPEC, speculative_algorithm="EAGLE")
    target = replace(role(LLAMA, **spec), draft_config=_draft(tmp_path, eagle))
    # scheduler.py (0.5.14 on): the draft loads, the target's pool is sized, and only then does the draft's
    # alloc_memory_pool hand it the target's embedding and lm_head (init_lm_head -> set_embed_and_head): the
    # budget pays for the draft's own two
    est = estimate_role(target, offline=True)
    assert abs(est.details["draft_weights_gib_per_gpu"] * 2**30 - (LAYER + 2 * EMBEDDING)) < 0.01 * 2**30
    # 0.5.13 builds the draft with the target's pool config, sharing both in its constructor
    old = estimate_role(replace(target, engine_version="0.5.13"), offline=True)
    assert abs(old.details["draft_weights_gib_per_gpu"] * 2**30 - LAYER) < 0.01 * 2**30


def test_manifest_draft_config_end_to_end(tmp_path, kvcheck):
    (tmp_path / "config.json").write_text(LLAMA.read_text())
    _draft(tmp_path, EAGLE3)
    manifest = tmp_path / "manifest.yaml"
    manifest.write_text(textwrap.dedent("""\
        name: eagle3 draft
        context_length: 131072
        model:
          path: meta-llama/Llama-3.1-8B-Instruct
          config: config.json
          draft_config: draft/config.json
        engine:
          version: "0.5.23"
        gpu: H100
        args:
          speculative-algorithm: EAGLE3
          speculative-draft-model-path: lmsys/sglang-EAGLE3-LLaMA3.1-Instruct-8B
          speculative-num-steps: 3
          speculative-eagle-topk: 1
          speculative-num-draft-tokens: 4
        roles:
          server: {}
        """))
    result = kvcheck("verify", str(manifest), "--mode", "estimate", "--format", "json")
    assert result.exit_code == 0, result.stderr
    details = json.loads(result.stdout)["roles"][0]["details"]
    assert details["kv_bytes_per_token"] == 131072 * (1 + 1 / 32)
    assert details["draft_weights_gib_per_gpu"] > 0.7
    missing = manifest.read_text().replace("draft/config.json", "nowhere.json")
    manifest.write_text(missing)
    result = kvcheck("verify", str(manifest), "--mode", "estimate")
    assert result.exit_code == 2
    assert f"{manifest}:6:17: model.draft_config: no such file: {tmp_path / 'nowhere.json'}" in result.stderr


def test_deepseek_v4_mtp_draft_counts_its_own_embedding_and_lm_head_from_0_5_14():
    """models/deepseek_v4_nextn.py (0.5.13 to 0.5.23) builds its own embed_tokens and lm_head, placed as the
    target's; from 0.5.14 they are freed for the target's only after the target's pool is sized. V4-Pro at TP8:
    2 x 129,280 x 7,168 x 2 B / 8 = 0.432 GiB more draft weights, and a smaller pool."""
    spec = {"tp_size": 8, "speculative_algorithm": "EAGLE", "speculative_num_steps": 3, "speculative_eagle_topk": 1,
            "speculative_num_draft_tokens": 4}
    target = role("deepseek-ai--DeepSeek-V4-Pro", gpu="B200", **spec)
    new = estimate_role(replace(target, engine_version="0.5.14"), offline=True)
    old = estimate_role(replace(target, engine_version="0.5.13"), offline=True)
    own = 2 * 129280 * 7168 * 2 / 8 / 2**30
    assert round(own, 3) == 0.432
    assert round(new.details["draft_weights_gib_per_gpu"] - old.details["draft_weights_gib_per_gpu"], 3) == 0.432
    assert any("the draft's own embedding and lm_head are counted" in a for a in new.details["assumptions"])
    assert not any("the draft's own embedding and lm_head are counted" in a for a in old.details["assumptions"])


def test_builtin_mtp_draft_counts_its_own_embedding_and_lm_head_once_however_many_layers(tmp_path):
    """One draft model builds one embed_tokens and one lm_head (models/mimo_mtp.py, deepseek_nextn.py), so a
    checkpoint with two MTP layers pays for two layers but for one embedding and one lm_head; they were added
    once per layer. MiMo-7B at TP1: 151,680 x 4,096 x 2 B x 2 = 2.314 GiB for the pair."""
    config = json.loads((Path(__file__).resolve().parents[1] / "data" / "models"
                         / "XiaomiMiMo--MiMo-7B-Base.json").read_text())
    spec = {"speculative_algorithm": "EAGLE", "speculative_num_steps": 3, "speculative_eagle_topk": 1,
            "speculative_num_draft_tokens": 4}

    def draft(layers: int, version: str) -> float:
        path = tmp_path / f"mimo-{layers}.json"
        path.write_text(json.dumps(dict(config, num_nextn_predict_layers=layers)))
        est = estimate_role(replace(role(path, **spec), engine_version=version), offline=True)
        return est.details["draft_weights_gib_per_gpu"]

    vocab, hidden = config["vocab_size"], config["hidden_size"]
    own = 2 * vocab * hidden * 2 / 2**30
    assert round(own, 3) == 2.314
    # the allocator's rounding of the two tensors adds under 0.01 GiB
    assert abs(draft(1, "0.5.14") - draft(1, "0.5.13") - own) < 0.01
    assert abs(draft(2, "0.5.14") - draft(2, "0.5.13") - own) < 0.01
    one_layer = draft(2, "0.5.13") - draft(1, "0.5.13")
    assert one_layer > 0.3
    assert abs(draft(2, "0.5.14") - draft(1, "0.5.14") - one_layer) < 0.002
