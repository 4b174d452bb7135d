"""Rules about deployment files themselves: values kvcheck cannot resolve, leader and worker that disagree."""

from __future__ import annotations

from kvcheck.escape import one_line
from kvcheck.model import Finding, Location, Severity
from kvcheck.policy.registry import define_rule, finding


def file_finding(
    code: str,
    role: str | None,
    message: str,
    *,
    hint: str | None = None,
    location: Location | None = None,
    severity: Severity | None = None,
) -> Finding:
    """A finding about deployment files, its message one escaped line: it quotes names and words of the
    files (a workload, a container, a command-line word), and one holding a newline or an escape sequence
    started a forged line of its own in the table, on stderr and in JUnit (docs/security.md, Output)."""
    return finding(code, role, one_line(message), hint=hint, location=location, severity=severity)

KV317 = define_rule(
    "KV317",
    "error",
    "a value the deployment passes to the engine is not in the files",
    """A flag's value (or a whole word of the command line) comes from a variable that the files
    read do not set: a `$(VAR)` the container's `env` does not define, a shell `$VAR` or `${VAR}`
    set nowhere kvcheck can see, a command substitution such as `$(hostname)`, or a `valueFrom`
    reference to a Secret. The operators' own variables (LeaderWorkerSet, RBG, OME, Dynamo) are
    resolved as the operator sets them; anything else stays unknown, and kvcheck never guesses a
    value, so the role counts as not checked (exit 3). For a flag that never sizes memory
    (`--api-key`, `--served-model-name`, TLS files, ports, parsers, log levels) the finding is a
    warning and the check goes on. Fix: pass the file that defines it (the ConfigMap, in the same
    command), or write the value into the container's `env` or the script (an overlay manifest states only the
    model path, the GPU, the release and the window, not engine flags).""",
)

KV501 = define_rule(
    "KV501",
    "error",
    "the leader and a worker of one instance run different engine arguments",
    """Every node of a multi-node instance must start with the same server arguments: the
    leader and the workers each size their own share of the pool from them, and a different
    `--mem-fraction-static`, `--dp-size` or `--context-length` on one node (SGLang's; vLLM's
    `--gpu-memory-utilization`, `--max-model-len`, `--data-parallel-size`) either
    fails the start or leaves one rank with a smaller pool than the others. kvcheck reports each
    disagreement once, at the leader's place, and names the worker's. A difference in a flag that does not size the pool (names, credentials,
    ports, parsers, log levels, `--enable-metrics`, the per-node `--disaggregation-ib-device`) is a
    warning. Fix: make the worker template's arguments equal to the leader's (only `--node-rank` may
    differ).""",
)

KV502 = define_rule(
    "KV502",
    "warning",
    "an argument of the launch command is not a flag of its engine",
    """A wrapper that takes the engine's flags plus its own (NVIDIA Dynamo's `python -m
    dynamo.sglang` and `python -m dynamo.vllm`) was given a flag that the engine release's
    catalogue does not know. kvcheck treats it as the wrapper's own and leaves it out of the
    check. Fix: if it is meant for the engine (SGLang, vLLM),
    check its spelling against `kvcheck rules`' flag catalogue for the release
    (docs/flag-catalogues.md).""",
)

KV318 = define_rule(
    "KV318",
    "warning",
    "the server's image is built for another accelerator than the GPU the role is sized for",
    """The container's image is clearly one for another kind of accelerator than the GPU type
    kvcheck sizes the role on (`--gpu`, a node selector, the overlay's `gpu`): an Intel Gaudi image
    (`vault.habana.ai/...gaudi...`, `-hpu`), a ROCm image (`rocm/...`, a `-rocm` tag) or an Intel
    XPU one on an NVIDIA GPU, or a CUDA image (`-cu129`, `cuda`) on an AMD or Ascend card. The
    engine in that image does not start on that card, or starts with another memory layout, so the
    predicted pool is for a deployment that does not exist. kvcheck reads the image's name only;
    an image that names no accelerator is not judged. Fix: state the GPU the role really runs on
    (a node selector, or --gpu for that file alone), or run the engine's image for the GPU.""",
)

KV319 = define_rule(
    "KV319",
    "warning",
    "a workload in the deployment files asks for GPUs but starts no engine server kvcheck reads; it is not checked",
    """A Deployment, StatefulSet, Pod or serving resource among the files asks the scheduler for GPUs
    (`nvidia.com/gpu`, `amd.com/gpu`), but none of its containers starts a server kvcheck knows (SGLang's
    `sglang.launch_server` / `sglang serve`, vLLM's `vllm serve`, or a wrapper it reads: Dynamo, an engine
    image's entrypoint): a wrapper script (`python serve.py`, `bash start.sh`), another engine, or a job that
    is not a model server at all. The other servers in the files are checked; this one is not, and if it does
    serve a model its pool is unknown. Fix: start the engine in the container's command so kvcheck reads its
    arguments (or pass its command line with `--cmd`); a GPU workload that serves no model (an embedding
    service, a training run) is told about and nothing more: list KV319 under `policy.ignore` in an overlay
    manifest that names the files (`deployment:`). Like every KV3xx code it cannot be suppressed inline, in an
    ignore file or in a baseline (exit 2). Kubernetes Jobs and CronJobs are not read, and not named.""",
)

