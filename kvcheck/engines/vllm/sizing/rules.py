"""Rules vLLM's sizing model raises (Engine.rules() hands them to the catalogue)."""

from __future__ import annotations

from kvcheck.policy.registry import define_rule

KV220 = define_rule(
    "KV220",
    "error",
    "vLLM would refuse to start: max_model_len exceeds the model's length, or one request of it does not fit the predicted KV cache",
    """vLLM checks at start that `--max-model-len` is not above the length it derives from the
    model's config (`User-specified max_model_len ... is greater than the derived max_model_len`,
    unless VLLM_ALLOW_LONG_MAX_MODEL_LEN=1), then that one request of it (the model's own length
    when unset) fits the KV cache it sized, and exits otherwise (`To serve at least one request
    with the model's max seq len ...`, or `No available memory for the cache blocks`). The estimate
    predicts either check fails, even when the advertised window is smaller than max_model_len:
    the role would not start. A cache vLLM allocates as it is told, not as the memory allows
    (`--kv-cache-memory-bytes`, `--num-gpu-blocks-override` blocks x bytes per block), that is larger
    than the GPU's memory less the weights runs out of GPU memory at start: the same verdict.
    Fix: set `--max-model-len` to at most the length the finding names,
    give the cache more memory (`--gpu-memory-utilization`, `--kv-cache-memory-bytes`, an fp8 KV
    cache, a larger `--tensor-parallel-size`), lower the cache the finding names, or measure the role.""",
)
