"""What the vLLM estimate model sizes at all: the architectures whose KV layout it reproduces, and the
speculative methods that leave the pool as the target model alone sizes it. Anything else is refused
(KV305), never priced as if it were a plain decoder."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kvcheck.engines.vllm.sizing.jsonargs import json_arg
from kvcheck.engines.vllm.sizing.layout import HYBRID_FAMILIES
from kvcheck.errors import EstimateError

# Architectures from vLLM 0.32.0's registry (vllm/model_executor/models/registry.py, _TEXT_GENERATION_MODELS
# and _MULTIMODAL_MODELS) whose KV cache layout.py computes as vLLM builds it: decoder-only models of
# standard attention (MHA/GQA, every layer one page; sliding-window layers where the config states which:
# layer_types or sliding_window_pattern), MLA (the DeepSeek family), multimodal wrappers of those (the
# vision tower counted from vision_config), and the hybrids of HYBRID_FAMILIES. Not here, and refused: encoders
# and embedding models (BertModel, no decoder KV cache), linear-attention and other state models outside
# HYBRID_FAMILIES (MiniMax-Text-01, Jamba, Mamba), layouts layout.py does not reproduce (Gemma 2's implicit
# alternation, Gemma 3n's shared KV, Llama 4's chunked layers, DeepSeek V3.2/V4 index caches), and any name
# vLLM does not serve.
DECODER_ARCHITECTURES = frozenset({
    "LlamaForCausalLM", "LLaMAForCausalLM", "MistralForCausalLM", "MixtralForCausalLM",
    "Qwen2ForCausalLM", "Qwen2MoeForCausalLM", "Qwen3ForCausalLM", "Qwen3MoeForCausalLM",
    "GemmaForCausalLM", "Gemma3ForCausalLM", "Phi3ForCausalLM", "GraniteForCausalLM", "GraniteMoeForCausalLM",
    "GptOssForCausalLM", "Glm4ForCausalLM", "Glm4MoeForCausalLM", "MiniMaxM2ForCausalLM", "MiMoForCausalLM",
})  # fmt: skip
MLA_ARCHITECTURES = frozenset({"DeepseekV2ForCausalLM", "DeepseekV3ForCausalLM", "Glm4MoeLiteForCausalLM"})
MULTIMODAL_ARCHITECTURES = frozenset({
    "LlavaForConditionalGeneration", "LlavaNextForConditionalGeneration", "Mistral3ForConditionalGeneration",
    "Qwen2VLForConditionalGeneration", "Qwen2_5_VLForConditionalGeneration", "Qwen3VLForConditionalGeneration",
    "Qwen3VLMoeForConditionalGeneration", "Gemma3ForConditionalGeneration", "KimiK25ForConditionalGeneration",
})  # fmt: skip
SIZED_ARCHITECTURES = DECODER_ARCHITECTURES | MLA_ARCHITECTURES | MULTIMODAL_ARCHITECTURES | frozenset(HYBRID_FAMILIES)

# --speculative-config methods with no draft model (vllm/config/speculative.py, 0.32.0): the proposer
# matches the request's own tokens on the CPU, so nothing is loaded beside the target and no KV layer is
# added. ngram_gpu is not one: it keeps a [max_num_seqs, max_model_len] token buffer on the GPU.
NO_DRAFT_METHODS = frozenset({"ngram", "[ngram]", "suffix"})


def check_architecture(architecture: str) -> None:
    """KV305 for an architecture the estimate does not model: a figure for it would be a guess."""
    if architecture in SIZED_ARCHITECTURES:
        return
    if architecture == "<none>":
        raise EstimateError("the model config names no architectures, so the vLLM estimate model cannot tell "
                            "which model class vLLM would build",
                            hint="give the checkpoint's own config.json (with its architectures list), or measure "
                            "the role")
    raise EstimateError(
        f"architecture {architecture} is not one the vLLM estimate model sizes (it models decoder-only "
        "attention, MLA and the Qwen3-Next/Qwen3.5/NemotronH/Granite-4.0-H/Falcon-H1 hybrids; encoders, "
        "linear-attention models and architectures vLLM does not serve are not)",
        hint="measure the role (kvcheck verify MANIFEST without --mode estimate)")


def check_speculative(args: Mapping[str, Any]) -> None:
    """KV305 for a speculative method that loads a draft: vLLM puts its weights on the same GPUs and gives
    its attention layers KV cache from the same pool, which the estimate does not price; a pool sized for
    the target alone would pass a deployment too big for it."""
    config = json_arg(args.get("speculative_config"), "--speculative-config")
    if not config:
        return
    model = config.get("model")
    method = config.get("method")
    if method is None:  # SpeculativeConfig.__post_init__: "ngram" by its model name, else a draft model
        method = "ngram" if model in ("ngram", "[ngram]") else "draft_model"
    method = str(method)
    if method in NO_DRAFT_METHODS:
        return
    if method == "ngram_gpu":
        raise EstimateError(
            "speculative decoding with --speculative-config method 'ngram_gpu' keeps the requests' tokens in GPU "
            "buffers beside the pool, which the vLLM estimate model does not price",
            hint="measure the role, or estimate with method ngram (matched on the CPU)")
    draft = f"the draft {model!r}" if model else "the target checkpoint's own MTP/draft layers"
    raise EstimateError(
        f"speculative decoding with --speculative-config method {method!r} loads {draft} on the same GPUs: its "
        "weights and its attention layers' KV cache come out of the pool, and the vLLM estimate model has no "
        "draft config or weights to price them from",
        hint="measure the role (kvcheck verify MANIFEST without --mode estimate), or estimate with an "
        "ngram/suffix method (no draft model)")
