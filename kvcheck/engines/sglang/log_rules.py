"""Rules `kvcheck logs` raises about the logs themselves: missing figures, provisional figures."""

from __future__ import annotations

from kvcheck.policy.registry import define_rule

KV309 = define_rule(
    "KV309",
    "error",
    "the log holds no KV pool figure for a rank",
    """The log shows SGLang starting, but not one line that states this rank's pool: no
    `KV Cache is allocated ... #tokens: N`, no sliding-window pool line, no
    `max_total_num_tokens=N`. Usually the engine failed before sizing its pool (the report quotes
    its last error lines), or the log was cut, or it comes from a release that printed only the
    K/V sizes. kvcheck never guesses a pool, so the rank counts as not checked (exit 3). Fix: pass
    the whole startup log (`kubectl logs POD` from the container's start, not `--tail`), or audit
    the running server with `kvcheck audit URL`.""",
)

KV312 = define_rule(
    "KV312",
    "warning",
    "the log's pool figure is provisional, or the log is incomplete",
    """The figure kvcheck judged comes from the first allocation line (`KV Cache is allocated`)
    without the final `max_total_num_tokens=` line that states what the server serves, or the log
    ends before the server said it was ready. With post-capture sizing off (SGLang's default) the
    first allocation is the pool, so the verdict holds for what the log shows. Also when `kvcheck
    logs -` stopped reading a pipe still open at `--timeout` (`kubectl logs -f`): the message says
    whether the stream was cut after the server's ready line (the pool figure was read and the
    startup is whole, but a restart after the cut, with another pool, would not be seen) or before
    it. Fix: pass the complete startup log, up to the ready line (`The server is fired up and ready
    to roll!`; vLLM: `Application startup complete.`), from a stream that ends (`kubectl logs POD`
    without `-f`), or raise `--timeout`.""",
)

KV313 = define_rule(
    "KV313",
    "error",
    "neither the log nor the command line gives the context length to check against",
    """Without `--context-length N`, `kvcheck logs` checks each pool against the `context_len` the
    log states (in the final `max_total_num_tokens=` line, the engine's own
    `fewer than --context-length` warning, or the `context_length` in `server_args`). This log
    states none, so there is nothing to check the pool against (exit 3). Fix: pass the window you
    advertise: `kvcheck logs FILE --context-length 131072`.""",
)

KV316 = define_rule(
    "KV316",
    "error",
    "the log's pool figure does not stand for a serving pool",
    """The only pool figure in the log is the `KV Cache VA upper bound` of post-capture sizing,
    which the resize after CUDA-graph capture only shrinks, with no line stating the resized pool;
    or the engine failed after sizing its pool (`Scheduler hit an exception`, out of memory while
    capturing graphs), so no server ever served that pool. kvcheck cannot judge a pool that was
    never final, so the rank counts as not checked (exit 3), as measure mode counts a crashed
    engine. Fix: pass the log of a boot that reached `The server is fired up and ready to roll!`,
    or audit the running server with `kvcheck audit URL`.""",
)
