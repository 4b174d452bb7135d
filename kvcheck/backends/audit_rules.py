"""Rules that only `kvcheck audit` raises: live servers that cannot be audited or contradict themselves."""

from __future__ import annotations

from kvcheck.policy.registry import define_rule

KV306 = define_rule(
    "KV306",
    "error",
    "a live server could not be audited",
    """kvcheck asked the server for its pool and limits and got no usable answer: it was
    unreachable, timed out, answered with an HTTP error, refused the TLS certificate or the token,
    answered something that is not SGLang's server info, gave no context window to check
    against, or stated no bound on the prompts it admits (a vLLM server whose /v1/models lists no
    max_model_len): a window given with --context-length is not the server's own limit. The server
    is reported as not checked (exit 3), never as passing; a pool below the window still fails
    (KV101, exit 1). The message quotes the reason. Fix: check the URL, network path and proxy
    settings; pass --ca-bundle for a private CA and --token-env for a protected server; raise
    --timeout for a slow one; pass --context-length when the server does not state the window it
    serves; audit the server itself (not a proxy that rewrites /v1/models) or judge its startup log
    with kvcheck logs when it states no bound.""",
)
KV307 = define_rule(
    "KV307",
    "warning",
    "a server's own figures disagree",
    """A server states its pool, its window and the longest request it admits in several places,
    and the message names them as its engine does. SGLang: /server_info (the first scheduler's
    max_total_num_tokens, every data-parallel rank's token_capacity, max_req_input_len), the
    Prometheus gauges (sglang:max_total_num_tokens, sglang:context_len, with --enable-metrics) and
    /v1/models (max_model_len). vLLM: the KV cache's usable tokens from /metrics'
    vllm:cache_config_info ((num_gpu_blocks - 1) x block_size, one block being vLLM's null block;
    vLLM's own "GPU KV cache size" counts it) and /v1/models' max_model_len (--max-model-len): the
    longest request's KV, max_model_len - 1 tokens (its last sampled token is never fed back), must fit
    them. When they disagree, something between kvcheck and the engine is stale, the
    engine admits requests its KV cache cannot hold, or kvcheck misreads this release; kvcheck judges
    the pool with the smallest figure. Fix: look at the server's startup log (kvcheck logs) to see
    which figure is right (vLLM: lower --max-model-len below the usable tokens, or give the KV cache
    more memory), and report the release to the kvcheck maintainers if the engine is consistent.""",
)
KV308 = define_rule(
    "KV308",
    "warning",
    "a live server runs other settings than the manifest declares",
    """With --manifest, each audited server is judged as the manifest's role. A server whose
    resolved arguments or SGLang version differ from the manifest's is not the deployment the
    manifest describes, so a pass of the manifest (kvcheck verify) says little about it, and the
    reverse. Fix: redeploy the server from the manifest, or update the manifest to what runs.""",
)
KV311 = define_rule(
    "KV311",
    "error",
    "a live server serves another model or role than the manifest declares",
    """With --manifest, each audited server is judged as the manifest's role, and its pool was
    sized for the manifest's model. A server whose `model_path` (or `served_model_name`) names
    another model is another deployment: its pool says nothing about the manifest's model, and a
    pass would vouch for the wrong thing. Names match when they are equal or end in the same
    repository or folder name (`zai-org/GLM-5-FP8` and `/models/GLM-5-FP8`). A server that states
    no model name is not compared. The same holds for a prefill or decode role whose endpoint
    answers as another role or as a plain server (`disaggregation_mode: null`): its pool and limits
    are not the role's. Fix: point --endpoint at the role's real server, or update the manifest's
    model or role.""",
)
