"""KV4xx probe rules (and the probe's own KV32x "could not probe" codes), with their documentation.

Each rule's doc is its operator documentation (reason and fix); docs/rules.md and docs/probe.md quote
them. KV32x errors make the report an error (exit 3) because `Finding.is_measurement_failure` treats
every KV3xx error as "could not check".
"""

from __future__ import annotations

from kvcheck.policy.registry import define_rule

OVERLONG_ACCEPTED = define_rule(
    "KV401",
    "error",
    "an over-long prompt was answered with HTTP 200",
    """A prompt at or above the deployment's admission bound (max_req_input_len, or the advertised
    window) was answered as a success. SGLang refuses such prompts with HTTP 400, and so does vLLM
    (prompts of max_model_len tokens or more); a 200 means some layer (a router, a prefill/decode pair
    before the admission fixes, a patched engine, a proxy that truncates) accepted a prompt the KV pool
    cannot hold, and what came back was not generated from that prompt. This is how the incident
    looked from outside: long prompts got 200s and another customer's text. Fix: run an SGLang release
    with the admission fixes (0.5.22 or later) on every role, make the router relay the engine's 400,
    and keep --allow-auto-truncate off (vLLM: no truncate_prompt_tokens in a proxy, the same
    --max-model-len on every backend of a router).""",
)

PROMPT_ALTERED = define_rule(
    "KV402",
    "error",
    "the prompt token count in the answer differs from what was sent",
    """The usage figures (meta_info.prompt_tokens on /generate, usage.prompt_tokens on
    /v1/completions) state another prompt length than the probe sent. The engine generated from a
    different prompt: cut to max_req_input_len (--allow-auto-truncate), or swapped for a placeholder
    after a refused admission. Clients get an answer to a question they did not ask, with a 200.
    Fix: turn --allow-auto-truncate off so that over-long prompts are refused, and upgrade
    disaggregated roles to a release that retires refused prompts at intake.""",
)

EMPTY_LENGTH_FINISH = define_rule(
    "KV403",
    "error",
    "a request finished with 'length' having generated nothing",
    """The answer says the request stopped because it reached its length limit, yet it produced no
    token. SGLang clips max_new_tokens to what the pool leaves after the prompt; a 'length' finish
    with zero tokens means the prompt filled the request's budget (or was replaced by a stub), so a
    client receives an empty success. Fix: advertise a window the pool holds with room to generate
    (the pool must exceed the window), and refuse prompts that leave no room.""",
)

INBOUND_REFUSED = define_rule(
    "KV404",
    "error",
    "a prompt within the advertised limits was refused",
    """A prompt shorter than the admission bound the deployment states, or than the advertised
    window allows, was refused or failed. Clients promised that window get errors: the pool is
    smaller than advertised (the engine's own max_req_input_len falls short of the window), a proxy
    limits the request size, or the deployment cannot serve long prompts at all. Fix: compare the
    pool with the window (`kvcheck audit URL`), raise the pool or advertise the context that fits,
    and lift request-size limits at the proxy (a 1M-token prompt as JSON token ids is several MB).""",
)

CROSS_TENANT = define_rule(
    "KV405",
    "error",
    "CRITICAL: an answer contains another tenant's content",
    """An answer to one synthetic tenant contains the random marker (text) or token pattern of
    another tenant's prompt. The deployment hands one customer's data to another: KV pages of an
    earlier request are read by a later one (a placeholder prompt decoding from stale pages, a
    transfer into pages still owned by someone else, a cache keyed wrongly). Stop the rollout and
    treat it as a data-exposure incident. Fix: upgrade every disaggregated role to a release with the
    admission fixes, enable --disaggregation-enable-kv-checksum and the KV canary while you
    investigate, and re-run `kvcheck probe` until it passes.""",
)

SILENT_REFUSAL = define_rule(
    "KV406",
    "error",
    "a refusal came without an explicit error",
    """An over-long prompt was not served, but the answer did not say so: an empty 200, a streaming
    answer that ends without a finish reason, or an abort without a status code. Clients and their
    retry logic cannot tell such a refusal from a short success. Fix: let the engine's HTTP 400 (or
    the streaming abort with status_code 400) reach the client unchanged through every proxy and
    router.""",
)

NON_400_REFUSAL = define_rule(
    "KV407",
    "warning",
    "an over-long prompt was refused with a status other than 400",
    """The prompt was refused explicitly, but with another status than the engine's 400: 413 or 431
    from a proxy's size limit (the engine's own admission check was not reached, so it was not
    tested), or one of SGLang's own 500 aborts in PD disaggregation (`KV checksum mismatch`, a
    `bootstrap_room` mismatch, `Decode transfer failed`: the decode side refused a bad transfer; clients
    may retry a request that can never succeed). Any other 5xx (a worker that crashed on the prompt, a
    router's failure) is no verdict (KV321), as is a 422, which refuses the request's format, not its
    length. Fix: for 413, raise the proxy's body limit above the largest admitted prompt and re-run the
    probe; for a PD abort, read the decode server's log for the request.""",
)

OPENAI_UNAVAILABLE = define_rule(
    "KV408",
    "info",
    "the OpenAI-compatible /v1/completions endpoint is not served",
    """The front door answered 404 to /v1/completions, so the boundary was checked through the
    native /generate only. Clients that use the OpenAI API elsewhere are not covered by this run.""",
)

FORMAT_REFUSED = define_rule(
    "KV409",
    "info",
    "/v1/completions refuses the probe's request format and was not probed",
    """The front door answered HTTP 422 (a request-format refusal) to a /v1/completions request with a
    token-id prompt: sglang-router's OpenAI API takes text prompts only. The probe then sends text
    prompts of a counted length (a word the deployment's tokenizer counts as one token, repeated); this
    finding says that was not possible either (no POST /v1/tokenize, or the text control was not served
    with a prompt token count), so /v1/completions was not covered by this run. It is no length
    verdict: never a reason to enlarge the pool. The native /generate was probed as usual.""",
)

UNREACHABLE = define_rule(
    "KV320",
    "error",
    "the deployment could not be probed",
    """The probe could not reach the URL, could not learn the deployment's limits (no SGLang
    /server_info, no vLLM /metrics cache_config_info, and no --context-length/--pool), or was refused
    for lack of credentials. There is no verdict without a probe, so the run is an error (exit 3),
    never a pass. Fix: check the URL and the network path, pass --token-env for a protected front
    door, and give --context-length and --pool when the front door states no limits (a router; for a
    router in front of vLLM whose /v1/models states max_model_len, --engine vllm is enough).""",
)

INCOMPLETE = define_rule(
    "KV321",
    "error",
    "some probe requests were not sent or not answered",
    """A planned request was not sent (the --max-duration or --max-requests budget ran out) or got no
    usable answer (timeout, connection reset, a redirect the probe does not follow, an answer that is
    not the engine's, a 5xx that is not one of SGLang's PD aborts). Those checks have no verdict, so the
    run is an error (exit 3) unless another check
    already failed. Fix: raise --max-duration or --request-timeout for slow long-context prefills,
    point the probe at the front door itself (not at a URL that redirects), and re-run.""",
)

UNSAFE_IDS = define_rule(
    "KV322",
    "error",
    "the probe cannot prove its token ids lie inside the model's vocabulary",
    """A token id at or above the model's vocabulary kills SGLang's scheduler (IndexError in the
    embedding) and the server with it (vLLM refuses it with HTTP 400, which is no verdict either), so
    the probe sends only ids it has proven in range: ids the deployment's own tokenizer emits (POST
    /v1/tokenize on SGLang, POST /tokenize on vLLM), ids below --vocab-size, or ids below the
    vocab_size of the model's config.json when the model path the server names (SGLang's /model_info,
    vLLM's /v1/models root) is a folder on this machine. Here none of these was available (or an
    explicit --token-id was not proven in range), and no generation request was sent: there is no
    verdict (exit 3). Fix: give --vocab-size N with the model's vocab_size, or probe a front door
    that serves the tokenizer (a server that loads its tokenizer, or sglang-router).""",
)

SERVER_CRASHED = define_rule(
    "KV323",
    "error",
    "a probe request crashed the server",
    """A probe request lost its connection and the server's /health stopped answering right after: the
    request killed or crashed the server (its scheduler died and took the server down). Nothing more
    was sent, and the checks left have no verdict (exit 3). The probe sends only prompts a client may
    send (ids proven inside the vocabulary, lengths around the advertised limits), so a client can do
    the same: read the server's log for the request (an exception in the scheduler, out of memory at a
    long prefill), fix the cause, restart the server and probe again.""",
)
