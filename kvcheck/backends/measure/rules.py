"""KV3xx rules: what measure mode reports when a role's pool cannot be read or must not be trusted.

Each rule's `doc` is its documentation (reason and fix); `kvcheck rules` and docs/rules.md print it.
Findings are built with `kvcheck.policy.registry.finding(code, ...)`, so the manifest's policy can
ignore or re-grade them like any other rule.
"""

from __future__ import annotations

from kvcheck.policy.registry import define_rule

KV301 = define_rule(
    "KV301",
    "error",
    "a role could not be measured",
    """A role's engine did not give a complete set of pool figures: it exited during startup (argument
error, out of memory while sizing the pool, crash), did not report its pool within the timeout, spans
several nodes, or printed nothing kvcheck could read. Without the engine's own figures there is no
verdict, so the role is an error (exit 3), never a pass.

Fix: read the engine's last lines quoted in the message (keep the whole log with `--logs-dir DIR`),
correct the arguments or free the GPUs, raise `--timeout` for models that load slowly, and run
`kvcheck verify` again. An engine that cannot boot here will not boot in production either.""",
)

KV302 = define_rule(
    "KV302",
    "error",
    "a role's GPUs are missing, of another type, or busy",
    """The GPUs a role lists do not exist on this host, are not the type the manifest names, or hold
memory of other processes. SGLang sizes the pool from the memory that is free when it starts, so a busy
GPU yields a smaller pool than production would get, and another GPU type a different one: a figure
measured there would not be the production figure.

Fix: run on a host with the manifest's GPU type, stop the processes the message names (or pick idle
GPU indices in `roles.<name>.gpus`), and verify again. When `engine.command` runs the engine somewhere
kvcheck's inventory cannot see (a container, a batch-scheduler wrapper), pass `--no-gpu-check`.""",
)

KV303 = define_rule(
    "KV303",
    "error",
    "the engine that booted is not the version the manifest declares",
    """The engine reported a different version (or none) than `engine.version`. Pool sizing, defaults and
the admission fixes change between SGLang releases, so a figure from another version says nothing
about the one you deploy, and the version-based rules (KV201) would judge the wrong release.

Fix: install the declared version on the measuring host (for example `pip install sglang==X.Y.Z`) or
correct `engine.version` to the release you really deploy.""",
)

KV304 = define_rule(
    "KV304",
    "warning",
    "the estimate and the measurement differ by more than 10%",
    """kvcheck's estimate model predicted a pool more than 10% away from the one the engine allocated.
The measurement decides the verdict; the gap means that `kvcheck verify --mode estimate` and
`kvcheck plan` are not reliable for this deployment (an unusual architecture, memory taken before the
pool is sized, a GPU profile that does not match this host).

Fix: trust the measured figure; calibrate the GPU profile or the estimate overrides
(`weights_gib_per_gpu`, `pre_baseline_mib`) before relying on estimates for this model.""",
)

KV310 = define_rule(
    "KV310",
    "warning",
    "the engine's log and its server-info endpoint disagree, or one of them is missing",
    """kvcheck reads each role's pool twice: from the startup log (`max_total_num_tokens=` of every
rank) and from `/server_info`. They normally agree. When they differ the smaller figure is used (fail
closed); when one source is missing (`--log-level` above info hides the log lines; a wrapper hides the
HTTP port) the figure rests on one source only.

Fix: keep `--log-level info` (the default) for the measurement and let the engine serve on loopback;
a real disagreement is worth an SGLang bug report with the log (`--logs-dir`).""",
)

KV314 = define_rule(
    "KV314",
    "warning",
    "the engine warned that its pool holds fewer tokens than its context length",
    """SGLang itself printed `KV pool holds N tokens, fewer than --context-length C`: one full-length
request cannot fit, and long requests will be refused (or truncated with `--allow-auto-truncate`). The
policy judges the pool against the manifest's window (KV101); this warning is the engine's own view
against its own context length.

Fix: lower `--context-length`, raise `--mem-fraction-static`, use more GPUs (TP) or a smaller KV dtype,
or free memory taken before the pool is sized.""",
)

KV315 = define_rule(
    "KV315",
    "warning",
    "the pool was measured with dummy weights (--dummy-weights)",
    """`--dummy-weights` boots the engine with `--load-format dummy`: the same memory layout without
reading the checkpoint. A real load can leave loader temporaries allocated when the pool is sized,
so production's pool can be smaller than the one measured here; a pass with dummy weights is weaker
evidence than a pass with the real checkpoint.

Fix: measure with the real weights (the default) before the rollout, or run with `--strict` so this
warning blocks it.""",
)

KV324 = define_rule(
    "KV324",
    "error",
    "the host cannot run a CPU role",
    """A role on the CPU (`device: cpu`) keeps its weights and KV cache in host RAM and binds its ranks
to NUMA nodes, so measure mode checks the host before it boots the role (in place of the GPU check):
its available memory must be readable (`/proc/meminfo`, within the cgroup's `memory.max`) and not
zero; an SGLang role's ranks (dp x tp x pp) must not outnumber the NUMA nodes with CPUs unless
`SGLANG_CPU_OMP_THREADS_BIND` names one CPU group per rank; a vLLM role's explicit KV space
(`VLLM_CPU_KVCACHE_SPACE` GiB, or `--kv-cache-memory-bytes`) must fit in the memory available. The
engine would stop at start on this host, so the role is not checked (exit 3), never a pass.

Fix: what the message says: lower tp-size or set `SGLANG_CPU_OMP_THREADS_BIND`, lower the KV space,
free memory or raise the container's limit, or measure on a host like the production one.""",
)
