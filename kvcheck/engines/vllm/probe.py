"""How `kvcheck probe` talks to a vLLM deployment's front door, and what KV101 advises for a vLLM role.

vLLM's front door is its OpenAI API (`vllm serve`, and the routers in front of it that speak it: llm-d's
gateway, the production-stack router). Measured on real vLLM 0.32.0 (tests/probe/vllm_double.py holds
the answers): `/v1/completions` takes a prompt of token ids and answers `usage.prompt_tokens`;
a prompt of at most max_model_len - 1 tokens is served (max_tokens is clamped to what the window
leaves); one of max_model_len tokens is HTTP 400 ("max_tokens must be at least 1, got 0"), and a
longer one HTTP 400 "This model's maximum context length is N tokens. However, your prompt contains
at least M input tokens ..."; a streamed request is refused the same way before its stream starts.
`POST /tokenize` takes one prompt string; `/v1/models` names the model path (`root`); an id outside
the vocabulary is HTTP 400 "Token id N is out of vocabulary"; `request_id` names the request (the
answer's id becomes `cmpl-<request_id>`). There is no native /generate, /server_info or /model_info.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kvcheck.engines.base import ProbeFrontDoor
from kvcheck.engines.vllm.serving import explicit_kv_bytes

HINTS = {
    "KV401": "vLLM refuses prompts of max_model_len tokens or more with HTTP 400: make every router "
    "(llm-d, production-stack) relay that 400 and serve every backend with the same --max-model-len; never "
    "let a proxy truncate prompts (truncate_prompt_tokens)",
    "KV402": "something between the client and vLLM changed the prompt: a proxy or client setting "
    "truncate_prompt_tokens, or a router sending the request to a backend of another --max-model-len",
    "KV404": "vLLM serves only prompts below its max_model_len: serve --max-model-len of the advertised window with "
    "a pool that holds it (`--max-model-len auto` shrinks it to the pool silently), or advertise the max_model_len "
    "/v1/models states; lift proxy body-size limits",
    "KV405": "stop the rollout: one tenant received another's data; check the KV connector of prefill/decode "
    "pairs (kv_load_failure_policy=recompute has produced wrong output when requests share blocks) and "
    "prefix caching across tenants (cache_salt)",
    "KV320": "check the URL, network path and --token-env; give --context-length and --pool for a router that "
    "serves neither /metrics' vllm:cache_config_info nor /v1/models' max_model_len",
    "KV322": "give --vocab-size N (the model's vocab_size), or probe a front door that serves POST /tokenize "
    "(a vLLM server that loads its tokenizer)",
}

FRONT_DOOR = ProbeFrontDoor(
    label="vLLM",
    native_endpoint=None,  # the OpenAI API is the front door
    tokenize_path="/tokenize",
    tokenize_batch=False,
    model_info_paths=("/v1/models",),  # data[0].root: the model path vLLM serves
    bound_from_window=True,  # vLLM's admission check is the length alone (its boot check sized the pool)
    request_id_field="request_id",
    hints=HINTS,
)


def probe_bound(context_len: int) -> int:
    """The shortest prompt vLLM refuses: max_model_len tokens (at most max_model_len - 1 are served).

    The pool does not lower it: vLLM refuses at boot a pool that cannot hold one request of
    max_model_len, and its admission compares the prompt with max_model_len alone.
    """
    return context_len


CPU_KV_SPACE = "VLLM_CPU_KVCACHE_SPACE"  # GiB of KV cache on vLLM's CPU backend (it sets nothing on GPUs)


def fit_hint(args: Mapping[str, Any], device: str, env: Mapping[str, str]) -> str:
    """KV101's fix for a vLLM role: its own memory and window flags (CPU: VLLM_CPU_KVCACHE_SPACE).

    A role is taken for a CPU one when its args name the CPU device or its env sets VLLM_CPU_KVCACHE_SPACE
    (vLLM 0.32.0 has no --device flag: the build decides, docs/vllm.md).
    """
    space = env.get(CPU_KV_SPACE)
    if device == "cpu" or space:
        now = f" (now {space} GiB)" if space else ""
        return f"or give the pool more host memory: raise {CPU_KV_SPACE}{now} or --kv-cache-memory-bytes"
    if args.get("num_gpu_blocks_override") is not None:  # vLLM allocates its blocks whatever the memory
        return ("or set the pool's blocks: --num-gpu-blocks-override fixes them whatever the memory (set it to "
                "the blocks the window needs where the GPU holds them, or drop it so vLLM sizes the pool)")
    if explicit_kv_bytes(args, device, None) is not None:  # it replaces --gpu-memory-utilization's profiling
        parts = ["raise --kv-cache-memory-bytes (it is set, so --gpu-memory-utilization does not size the pool)"]
    else:
        parts = ["raise --gpu-memory-utilization"]
    parts.append("widen --tensor-parallel-size")
    if str(args.get("kv_cache_dtype") or "auto") == "auto":
        parts.append("use an FP8 KV cache (--kv-cache-dtype fp8)")
    return "or give the pool more memory: " + ", ".join(parts[:-1]) + f", or {parts[-1]}"
