#!/usr/bin/env python3
"""An engine double for measure-mode tests: behaves like `python -m sglang.launch_server` 0.5.23.

It follows docs/sglang-internals.md: argparse with the real flag names (abbreviations allowed,
unknown or ambiguous flags exit 2), one forked scheduler per (DP, PP, TP) rank plus a detokenizer in
the launcher's process group, rank-tagged log lines on stderr in the 0.5.23 format ("Log lines"), an
HTTP server with `/server_info`, `/get_server_info`, `/v1/models` and `/health` (sglang_http.py), and
the failure paths of "Processes, signals and failures" (OOM while sizing: "Scheduler hit an
exception", SIGQUIT to the launcher, exit 137). SIGTERM once ready is SGLang 0.5.23's too: no drain,
the scheduler reported as crashed, a 5 s sleep, then SIGKILL of the tree and itself.

Behaviour is chosen through the environment:
  FAKE_SGLANG_MODE             comma-separated: oom, oom_graph, hang, crash_before_pool,
                               crash_after_pool (warm-up fails after the final pool line),
                               no_tokenizer (the launcher's multi-line ValueError after server_args),
                               ignore_sigterm, old_release, no_http, no_ready
  FAKE_SGLANG_POOL_TOKENS      pool per (DP rank, PP stage) in that order, comma-separated; one value
                               applies to all (default 947824)
  FAKE_SGLANG_SERVER_POOL_TOKENS  what /server_info reports instead (log vs server disagreement)
  FAKE_SGLANG_TP_POOL_TOKENS   "TP:TOKENS": that TP rank's allocation line says TOKENS (a rank that sized a
                               smaller pool; the final line still comes from tp_rank 0 alone)
  FAKE_SGLANG_MODEL_CONTEXT    the model's derived context length (default 131072)
  FAKE_SGLANG_VERSION          the version /server_info reports (default 0.5.23)
  FAKE_SGLANG_PIDFILE          every process appends its pid here (no-survivor assertions)
  FAKE_SGLANG_STEP_S           pause between log lines (default 0.002 s)
  FAKE_SGLANG_LOAD_S           time "loading weights" takes (default 0 s; benchmarks set it)
  FAKE_SGLANG_ENVFILE          the launcher writes its argv and CUDA_* / KVTEST_* environment here (JSON)
  FAKE_SGLANG_EVENTS           the launcher appends "<label> start <pid> running=<labels>" (the labels
                               of engines listed there whose launcher still runs) and "<label> stop"
                               (SIGTERM received) lines here
  FAKE_SGLANG_CRASH_SLEEP_S    on SIGTERM the launcher sleeps this long before it SIGKILLs itself
                               (default 5 s, as SGLang 0.5.23 does)
  FAKE_SGLANG_LABEL            the label for those lines (default: the model path)
  FAKE_SGLANG_TOUCH            a file the launcher creates as it starts
  FAKE_SGLANG_WAIT_FOR         the launcher waits for this file before it reports ready (two roles
                               that must boot side by side: each waits for the other's TOUCH file)
  FAKE_SGLANG_MODE_NODE        FAKE_SGLANG_MODE applies only on this --node-rank (a failure on one node)
  FAKE_SGLANG_RENDEZVOUS_S     how long node 0 waits at --dist-init-addr for the others (default 60 s)

Several nodes (`--nnodes N --node-rank R --dist-init-addr HOST:PORT`), as SGLang does it: node 0
listens at the dist-init address and waits for nodes 1..N-1 to connect (torch.distributed's TCP
rendezvous) before its schedulers start; the TP/PP ranks are split evenly across the nodes, so only
the node holding tp_rank 0 (node 0 when TP spans the nodes) prints the final pool line. Node 0 serves
HTTP and says it is ready once every node's schedulers are; nodes >= 1 serve only a dummy /health on
--host:--port, ignore SIGTERM ("waiting for the rank-0 ShutdownReq broadcast") and exit when node 0
goes away.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import select
import signal
import socket
import sys
import threading
import time
from datetime import datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

try:
    from tests.doubles import sglang_http
except ImportError:  # run as a script without the repository on the path: the module sits beside it
    import sglang_http  # type: ignore[no-redef]

MODES = {m.strip() for m in os.environ.get("FAKE_SGLANG_MODE", "").split(",") if m.strip()}
STEP_S = float(os.environ.get("FAKE_SGLANG_STEP_S", "0.002"))
LOAD_S = float(os.environ.get("FAKE_SGLANG_LOAD_S", "0"))
CRASH_SLEEP_S = float(os.environ.get("FAKE_SGLANG_CRASH_SLEEP_S", "5"))
VERSION = os.environ.get("FAKE_SGLANG_VERSION", "0.4.1.post3" if "old_release" in MODES else "0.5.23")
PR_SET_PDEATHSIG = 1


def build_parser() -> argparse.ArgumentParser:
    """The flags that matter to measurement, spelled as SGLang 0.5.23 spells them."""
    parser = argparse.ArgumentParser(prog="launch_server.py", allow_abbrev=True)
    parser.add_argument("--model-path", "--model", required=True)
    parser.add_argument("--tokenizer-path")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=30000)
    parser.add_argument("--tp-size", "--tensor-parallel-size", type=int, default=1)
    parser.add_argument("--pp-size", "--pipeline-parallel-size", type=int, default=1)
    parser.add_argument("--dp-size", "--data-parallel-size", type=int, default=1)
    parser.add_argument("--attn-dp-size", type=int, default=1)
    parser.add_argument("--ep-size", type=int, default=1)
    parser.add_argument("--mem-fraction-static", type=float)
    parser.add_argument("--context-length", type=int)
    parser.add_argument("--max-total-tokens", type=int)
    parser.add_argument("--max-running-requests", type=int)
    parser.add_argument("--chunked-prefill-size", type=int)
    parser.add_argument("--page-size", type=int)
    parser.add_argument("--kv-cache-dtype", default="auto")
    parser.add_argument("--load-format", default="auto")
    parser.add_argument("--trust-remote-code", action="store_true")
    parser.add_argument("--skip-server-warmup", action="store_true")
    parser.add_argument("--log-level", default="info")
    parser.add_argument("--disaggregation-mode", default="null", choices=["null", "prefill", "decode"])
    parser.add_argument("--disaggregation-bootstrap-port", type=int, default=8998)
    parser.add_argument("--disaggregation-transfer-backend", default="mooncake")
    parser.add_argument("--disaggregation-enable-kv-checksum", action="store_true")
    parser.add_argument("--cuda-graph-max-bs-decode", type=int)
    parser.add_argument("--cuda-graph-max-bs-prefill", type=int)
    parser.add_argument("--allow-auto-truncate", action="store_true")
    parser.add_argument("--nnodes", type=int, default=1)
    parser.add_argument("--node-rank", type=int, default=0)
    parser.add_argument("--dist-init-addr")
    parser.add_argument("--enable-metrics", action="store_true")
    parser.add_argument("--device")  # real SGLang: None means CUDA; `cpu` serves from host memory
    parser.add_argument("--attention-backend")
    parser.add_argument("--served-model-name")
    return parser


class Log:
    """SGLang's logging: `[YYYY-MM-DD HH:MM:SS{tags}] message`, no level name (docs/sglang-internals.md)."""

    def __init__(self, level: str) -> None:
        self.quiet_info = level.lower() in ("warning", "error", "critical")

    def __call__(self, message: str, *, tags: str = "", warning: bool = False) -> None:
        if self.quiet_info and not warning:
            return
        stamp = datetime.now().strftime("%Y-%m-%d %H:%M:%S")
        sys.stderr.write(f"[{stamp}{tags}] {message}\n")
        sys.stderr.flush()


def record_pid() -> None:
    path = os.environ.get("FAKE_SGLANG_PIDFILE")
    if path:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        try:
            os.write(fd, f"{os.getpid()}\n".encode())
        finally:
            os.close(fd)


def die_with_parent() -> None:
    """prctl(PR_SET_PDEATHSIG, SIGKILL), as SGLang's children do (docs/sglang-internals.md)."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    except (OSError, AttributeError):
        pass


def pools(args: argparse.Namespace) -> dict[tuple[int, int], int]:
    """Pool tokens per (DP rank, PP stage)."""
    dp = max(args.attn_dp_size, args.dp_size)
    keys = [(d, p) for d in range(dp) for p in range(args.pp_size)]
    values = [int(v) for v in os.environ.get("FAKE_SGLANG_POOL_TOKENS", "947824").split(",")]
    if len(values) == 1:
        values = values * len(keys)
    if len(values) != len(keys):
        raise SystemExit(f"FAKE_SGLANG_POOL_TOKENS needs {len(keys)} values, got {len(values)}")
    if args.max_total_tokens:
        values = [min(v, args.max_total_tokens) for v in values]
    return dict(zip(keys, values, strict=True))


def derived_context_len(args: argparse.Namespace) -> int:
    """The model's own context length: FAKE_SGLANG_MODEL_CONTEXT, else a local model folder's
    config.json max_position_embeddings (as real SGLang derives it for a plain Llama), else 131072."""
    stated = os.environ.get("FAKE_SGLANG_MODEL_CONTEXT")
    if stated:
        return int(stated)
    try:
        with open(os.path.join(args.model_path, "config.json")) as handle:
            return int(json.load(handle)["max_position_embeddings"])
    except (OSError, ValueError, KeyError, TypeError):
        return 131072


def context_len(args: argparse.Namespace) -> int:
    return args.context_length or derived_context_len(args)


def refuse_longer_context(args: argparse.Namespace) -> None:
    """Real 0.5.23 refuses a --context-length above the derived one while its arguments resolve, before
    any server_args line (model_config.py `_derive_context_length`): a traceback on stderr, exit 1."""
    derived = derived_context_len(args)
    forced = "crash_before_pool" in MODES  # older tests name the refusal as a mode
    if not forced and (args.context_length is None or args.context_length <= derived
                       or os.environ.get("SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN") == "1"):
        return
    stamp = datetime.now().strftime("%Y-%m-%d %H:%M:%S")
    sys.stderr.write(
        f"[{stamp}] kill_process_tree called: parent_pid={os.getpid()}, include_parent=False, pid={os.getpid()}\n"
        "Traceback (most recent call last):\n"
        '  File "/usr/local/lib/python3.12/dist-packages/sglang/launch_server.py", line 84, in <module>\n'
        "    run_server(server_args)\n"
        '  File "/usr/local/lib/python3.12/dist-packages/sglang/srt/configs/model_config.py", line 1314, in '
        "_derive_context_length\n"
        "    raise ValueError(\n"
        f"ValueError: Warning: User-specified context_length ({context_len(args)}) is greater than the derived "
        f"context_length ({derived}). This may lead to incorrect model outputs or CUDA errors. Note that the "
        "derived context_length may differ from max_position_embeddings in the model's config. To allow "
        "overriding this maximum, set the env var SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1\n"
    )
    sys.exit(1)


def fail_tokenizer(log: Log) -> None:
    """Real 0.5.23 on a model whose tokenizer needs sentencepiece, which is not installed: the launcher's
    TokenizerManager raises transformers' multi-line ValueError at the top level, after server_args; exit 1."""
    log(f"kill_process_tree called: parent_pid={os.getpid()}, include_parent=False, pid={os.getpid()}")
    sys.stderr.write(
        "Traceback (most recent call last):\n"
        '  File "<frozen runpy>", line 198, in _run_module_as_main\n'
        '  File "/usr/local/lib/python3.12/dist-packages/sglang/launch_server.py", line 84, in <module>\n'
        "    run_server(server_args)\n"
        '  File "/usr/local/lib/python3.12/dist-packages/sglang/srt/managers/tokenizer_manager.py", line 642, in '
        "init_tokenizer_and_processor\n"
        "    self.tokenizer = get_tokenizer(\n"
        '  File "/usr/local/lib/python3.12/dist-packages/transformers/tokenization_utils_tokenizers.py", line 412, '
        "in __init__\n"
        "    raise ValueError(\n"
        "ValueError: Couldn't instantiate the backend tokenizer from one of: \n"
        "(1) a `tokenizers` library serialization file, \n"
        "(2) a slow tokenizer instance to convert or \n"
        "(3) an equivalent slow tokenizer class to instantiate and convert. \n"
        "You need to have sentencepiece or tiktoken installed to convert a slow tokenizer to a fast one.\n"
    )
    sys.exit(1)


def scheduler(args: argparse.Namespace, dp: int, pp: int, tp: int, ready_fd: int, log: Log) -> None:
    """One scheduler process: the startup lines in SGLang's order, then wait to be stopped."""
    record_pid()
    if "ignore_sigterm" in MODES:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    else:
        die_with_parent()
    dp_width = max(args.attn_dp_size, args.dp_size)
    tags = (f" DP{dp}" if dp_width > 1 else "") + (f" PP{pp}" if args.pp_size > 1 else "")
    tags += f" TP{tp}" if args.tp_size > 1 else ""
    pool = pools(args)[(dp, pp)]
    own = os.environ.get("FAKE_SGLANG_TP_POOL_TOKENS", "").split(":")
    allocated = int(own[1]) if len(own) == 2 and own[0] == str(tp) else pool
    ctx = context_len(args)
    old = "old_release" in MODES

    def step(message: str, **kw: bool) -> None:
        time.sleep(STEP_S)
        log(message, tags=tags, **kw)

    step("Init parallel begin.")
    step("Init parallel ends. elapsed=0.41 s")
    step("Memory baseline taken. mem usage=0.00 GB")
    step("Load weight begin. avail mem=139.31 GB")
    if "hang" in MODES:
        while True:
            time.sleep(3600)
    time.sleep(LOAD_S)
    step("Load weight end. elapsed=20.84 s, type=LlamaForCausalLM, avail mem=124.10 GB, mem usage=15.21 GB.")
    if "oom" in MODES:
        fail_scheduler(
            tags,
            log,
            "ValueError: Loaded weights leave no GPU memory for the KV cache under "
            f"--mem-fraction-static={args.mem_fraction_static}. Raise --mem-fraction-static above 0.912 "
            "(minimum viable = 1 - available/pre = 0.911). If using speculative decoding, draft weights "
            "are now counted.",
        )
    if old:
        step("KV Cache is allocated. K size: 27.02 GB, V size: 27.02 GB.")
    else:
        step(
            f"KV Cache is allocated. dtype: torch.bfloat16, #tokens: {allocated}, K size: 28.93 GB, V size: 28.93 GB"
        )
    step("Memory pool end. avail mem=13.55 GB")
    step("Capture target decode CUDA graph begin. backend=full, num_tokens_per_req=1, avail mem=13.04 GB")
    if "oom_graph" in MODES:
        fail_scheduler(
            tags,
            log,
            "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total "
            "capacity of 139.81 GiB of which 1.02 GiB is free.",
        )
    step(
        "Capture target decode CUDA graph end. bs=[1, 2, 4, 8], elapsed=12.40 s, mem usage=0.52 GB, avail mem=12.42 GB."
    )
    if pool < ctx and not old:
        step(
            f"KV pool holds {pool} tokens, fewer than --context-length {ctx}. One full-length request cannot "
            "fit, so long requests will be refused or truncated at serving time. Lower --context-length, "
            "raise --mem-fraction-static, or free memory taken before the pool is sized.",
            warning=True,
        )
    # The final line comes from tp_rank 0 only (one per PP stage; docs/sglang-internals.md), so under
    # attention DP only DP0's scheduler prints it; the other DP ranks show in /server_info.
    leader = tp == 0
    if old:
        step(
            f"max_total_num_tokens={pool}, max_prefill_tokens=16384, max_running_requests=2049, context_len={ctx}"
        )
    elif leader:
        # real 0.5.23 on CPU states the host memory left (available_cpu_mem), on a GPU the device's
        memory = "available_cpu_mem=21.01 GB" if args.device == "cpu" else "available_gpu_mem=12.37 GB"
        step(
            f"max_total_num_tokens={pool}, chunked_prefill_size=8192, max_prefill_tokens=16384, "
            f"max_running_requests={running_cap(args)}, context_len={ctx}, {memory}"
        )
    if "crash_after_pool" in MODES and leader:  # real 0.5.23 on a model whose warm-up request fails (an index past the vocabulary)
        fail_scheduler(tags, log, "IndexError: index out of range in self")
    os.write(ready_fd, b"r")
    while True:
        time.sleep(3600)


def running_cap(args: argparse.Namespace) -> int:
    """The scheduler's max_running_requests: --max-running-requests when set (real SGLang takes the flag as
    given, per DP rank), else the figure it derives from the pool (3702 for the double's pools)."""
    return args.max_running_requests // max(1, args.attn_dp_size) if args.max_running_requests else 3702


def fail_scheduler(tags: str, log: Log, error: str) -> None:
    """SGLang's startup-OOM path: log the exception, SIGQUIT the launcher, wait for its SIGKILL."""
    log(
        "Scheduler hit an exception: Traceback (most recent call last):\n"
        '  File "/usr/local/lib/python3.12/dist-packages/sglang/srt/managers/scheduler.py", line 6360, in '
        "run_scheduler_process\n    scheduler = Scheduler(server_args, port_args, gpu_id, tp_rank, ...)\n"
        f"{error}",
        tags=tags,
        warning=True,
    )
    os.kill(os.getppid(), signal.SIGQUIT)
    while True:
        time.sleep(3600)


def _still_running(path: str) -> str:
    """The labels of the engines whose "start" line is in the events file and whose launcher runs."""
    labels = []
    try:
        lines = open(path).read().splitlines()
    except FileNotFoundError:
        return ""
    for line in lines:
        words = line.split()
        if len(words) >= 3 and words[1] == "start" and words[2].isdigit():
            try:
                with open(f"/proc/{words[2]}/stat") as stat:
                    alive = stat.read().rsplit(")", 1)[1].split()[0] != "Z"
            except (FileNotFoundError, ProcessLookupError, IndexError):
                alive = False
            if alive:
                labels.append(words[0])
    return ",".join(labels)


def event(args: argparse.Namespace, what: str) -> None:
    path = os.environ.get("FAKE_SGLANG_EVENTS")
    if path:
        label = os.environ.get("FAKE_SGLANG_LABEL", args.model_path)
        if what == "start":  # a SIGKILLed engine writes no "stop": who still runs is read at the next start
            what = f"start {os.getpid()} running={_still_running(path)}"
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        try:
            os.write(fd, f"{label} {what}\n".encode())
        finally:
            os.close(fd)


def detokenizer() -> None:
    record_pid()
    if "ignore_sigterm" in MODES:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    else:
        die_with_parent()
    while True:
        time.sleep(3600)


def kill_children(children: list[int]) -> None:
    for pid in children:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def server_info(args: argparse.Namespace, pool_by_rank: dict[tuple[int, int], int]) -> dict:
    """/server_info as 0.5.23 builds it (sglang_http.py): resolved args, first scheduler's info, per-DP states."""
    ctx = context_len(args)
    dp = max(args.attn_dp_size, args.dp_size)
    override = os.environ.get("FAKE_SGLANG_SERVER_POOL_TOKENS")
    capacities = [min(pool_by_rank[(d, p)] for p in range(args.pp_size)) for d in range(dp)]
    if override:
        capacities = [int(override)] * dp
    first = capacities[0]
    states_shown = dp - 1 if "drop_dp_state" in MODES and dp > 1 else dp  # a DP rank missing from the answer
    resolved = {key: value for key, value in vars(args).items() if key not in ("disaggregation_mode",)}
    resolved.update(
        disaggregation_mode=args.disaggregation_mode,
        mem_fraction_static=args.mem_fraction_static if args.mem_fraction_static is not None else 0.903,
        chunked_prefill_size=args.chunked_prefill_size or 8192,
        page_size=args.page_size or 1,
        context_length=args.context_length,
        enable_dp_attention=args.attn_dp_size > 1,
    )
    old = "old_release" in MODES
    states = [
        {
            "dp_rank": d,
            "world_size": args.tp_size * args.pp_size,
            "effective_max_running_requests_per_dp": running_cap(args),
            "memory_usage": {
                "weight": 15.21,
                "kvcache": 57.86,
                "startup_available": 139.31,
                "token_capacity": cap,
                "token_capacity_swa": None,
            },
        }
        for d, cap in enumerate(capacities[:states_shown])
    ]
    return sglang_http.server_info_payload(
        resolved,
        launch_command=" ".join(sys.argv),
        max_total_num_tokens=first,
        max_req_input_len=sglang_http.admission_bound(ctx, first),
        startup_time=None if old else 1.5,
        internal_states=None if old else states,
        version=VERSION,
        scheduler_status=not old,
    )


def serve(
    args: argparse.Namespace, pool_by_rank: dict[tuple[int, int], int], log: Log
) -> ThreadingHTTPServer:
    endpoints = sglang_http.Endpoints(
        server_info=server_info(args, pool_by_rank),
        models=sglang_http.models_payload(
            args.served_model_name or args.model_path,
            context_len(args),
            created=0,
            owned_by="sglang",
            root=args.model_path,
        ),
        # Releases before 0.5 answer only /get_server_info; 0.5.23 keeps it as a deprecated alias.
        info_paths=(sglang_http.GET_SERVER_INFO,)
        if "old_release" in MODES
        else (sglang_http.SERVER_INFO, sglang_http.GET_SERVER_INFO),
        health=True,
        on_deprecated=lambda: log(sglang_http.DEPRECATED_WARNING, warning=True),
    )

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 (http.server's spelling)
            if not endpoints.answer(self):
                sglang_http.send_json(self, 404, {"detail": "Not Found"})

        def log_message(self, format: str, *fmt_args: object) -> None:  # noqa: A002
            pass

    server = ThreadingHTTPServer((args.host, args.port), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def node_ranks(args: argparse.Namespace, ranks: list[tuple[int, int, int]]) -> list[tuple[int, int, int]]:
    """The (DP, PP, TP) ranks this node runs: PP stages split across nodes first, then TP ranks."""
    nnodes = args.nnodes
    if nnodes <= 1:
        return ranks
    if args.pp_size >= nnodes:
        per_node = args.pp_size // nnodes
        stages = range(args.node_rank * per_node, (args.node_rank + 1) * per_node)
        return [r for r in ranks if r[1] in stages]
    nodes_per_stage = nnodes // args.pp_size
    stage = args.node_rank // nodes_per_stage
    tp_per_node = args.tp_size // nodes_per_stage
    first = (args.node_rank % nodes_per_stage) * tp_per_node
    return [r for r in ranks if r[1] == stage and first <= r[2] < first + tp_per_node]


def dist_init(args: argparse.Namespace) -> tuple[str, int]:
    if not args.dist_init_addr:
        raise SystemExit("--nnodes > 1 needs --dist-init-addr host:port in this double")
    host, _, port = args.dist_init_addr.rpartition(":")
    return host, int(port)


RENDEZVOUS_S = float(os.environ.get("FAKE_SGLANG_RENDEZVOUS_S", "60"))


def rendezvous_leader(args: argparse.Namespace, log: Log) -> list[socket.socket]:
    """Node 0: listen at the dist-init port, accept nodes 1..N-1 (each says its rank)."""
    _, port = dist_init(args)
    server = socket.create_server(("", port), reuse_port=False)
    server.settimeout(RENDEZVOUS_S)
    log(f"Init torch distributed begin. Waiting for {args.nnodes - 1} other node(s) at {args.dist_init_addr}")
    peers: dict[int, socket.socket] = {}
    deadline = time.monotonic() + RENDEZVOUS_S
    while len(peers) < args.nnodes - 1:
        server.settimeout(max(0.1, deadline - time.monotonic()))
        try:
            conn, _ = server.accept()
        except TimeoutError:
            sys.stderr.write(
                "torch.distributed.DistNetworkError: The client socket has timed out after "
                f"{RENDEZVOUS_S:g}s while trying to connect to ({args.dist_init_addr}); "
                f"{len(peers) + 1} of {args.nnodes} nodes joined.\n"
            )
            sys.exit(1)
        rank = int(conn.makefile("r").readline() or -1)
        peers[rank] = conn
    server.close()
    log(f"Init torch distributed ends. nodes={sorted([0, *peers])}")
    return [peers[r] for r in sorted(peers)]


def rendezvous_join(args: argparse.Namespace) -> socket.socket:
    """Nodes >= 1: connect to node 0's dist-init address (retrying while it starts), say our rank."""
    host, port = dist_init(args)
    deadline = time.monotonic() + RENDEZVOUS_S
    while True:
        try:
            conn = socket.create_connection((host, port), timeout=1.0)
            break
        except OSError as exc:
            if time.monotonic() > deadline:
                sys.stderr.write(f"torch.distributed.DistNetworkError: cannot reach {args.dist_init_addr}: {exc}\n")
                sys.exit(1)
            time.sleep(0.1)
    conn.settimeout(None)
    conn.sendall(f"{args.node_rank}\n".encode())
    return conn


def serve_health_only(args: argparse.Namespace) -> None:
    """Nodes >= 1 answer /health on --host:--port and nothing else (no HTTP API)."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 (http.server's spelling)
            sglang_http.send_json(self, 200 if self.path.split("?")[0] == "/health" else 404, {})

        def log_message(self, format: str, *fmt_args: object) -> None:  # noqa: A002
            pass

    try:
        server = ThreadingHTTPServer((args.host, args.port), Handler)
    except OSError:
        return  # nodes sharing one network namespace (a test setup): node 0 holds the port
    threading.Thread(target=server.serve_forever, daemon=True).start()


def follower_wait(args: argparse.Namespace, conn: socket.socket, children: list[int], log: Log) -> None:
    """Node >= 1 after its schedulers are up: ignore SIGTERM, exit when node 0 goes away."""

    def on_sigterm(signum: int, frame: object) -> None:
        log(
            f"SIGTERM received on node_rank {args.node_rank}; waiting for the rank-0 ShutdownReq broadcast "
            "before exiting"
        )

    signal.signal(signal.SIGTERM, on_sigterm)
    conn.sendall(b"ready\n")
    serve_health_only(args)
    while True:
        try:
            data = conn.recv(64)
        except InterruptedError:
            continue
        except OSError:
            data = b""
        if not data:
            break
    log(f"node_rank {args.node_rank}: rank 0 is gone; schedulers exit")
    event(args, "stop")
    kill_children(children)
    os._exit(0)


def main() -> None:
    global MODES
    record_pid()
    args = build_parser().parse_args()
    only_on = os.environ.get("FAKE_SGLANG_MODE_NODE")
    if only_on is not None and int(only_on) != args.node_rank:
        MODES = set()
    log = Log(args.log_level)
    envfile = os.environ.get("FAKE_SGLANG_ENVFILE")
    if envfile:
        with open(envfile, "w") as handle:
            json.dump(
                {
                    "argv": sys.argv[1:],
                    "CUDA_VISIBLE_DEVICES": os.environ.get("CUDA_VISIBLE_DEVICES"),
                    "env": {k: v for k, v in os.environ.items() if k.startswith(("KVTEST_", "CUDA_"))},
                },
                handle,
            )
    event(args, "start")
    if args.nnodes > 1 and (args.tp_size * args.pp_size) % args.nnodes:
        # ServerArgs' own check, before anything starts (arg_groups/validation_hook.py:180 in 0.5.23)
        sys.stderr.write(
            "Traceback (most recent call last):\n"
            '  File "/usr/local/lib/python3.12/dist-packages/sglang/launch_server.py", line 24, in <module>\n'
            "    server_args = prepare_server_args(sys.argv[1:])\n"
            "AssertionError: tp_size must be divisible by number of nodes\n"
        )
        sys.exit(1)
    touch = os.environ.get("FAKE_SGLANG_TOUCH")
    if touch:
        open(touch, "w").close()
    refuse_longer_context(args)
    log(f"server_args={vars(args)!r}")
    if "no_tokenizer" in MODES:
        fail_tokenizer(log)
    pool_by_rank = pools(args)
    children: list[int] = []
    peers: list[socket.socket] = []
    leader_conn: socket.socket | None = None
    if args.nnodes > 1 and args.node_rank == 0:
        peers = rendezvous_leader(args, log)
    elif args.nnodes > 1:
        leader_conn = rendezvous_join(args)

    def on_sigquit(signum: int, frame: object) -> None:
        log("Received sigquit from a child process. It usually means the child failed.")
        kill_children(children)
        os.kill(os.getpid(), signal.SIGKILL)

    signal.signal(signal.SIGQUIT, on_sigquit)
    ready_r, ready_w = os.pipe()
    dp_width = max(args.attn_dp_size, args.dp_size)
    ranks = [
        (d, p, t)
        for d in range(dp_width if args.attn_dp_size == 1 else 1)
        for p in range(args.pp_size)
        for t in range(args.tp_size)
    ]
    if args.attn_dp_size > 1:  # attention DP lives inside the TP group: DP tag = tp_rank // attn_tp
        attn_tp = args.tp_size // args.attn_dp_size
        ranks = [(t // attn_tp, p, t) for p in range(args.pp_size) for t in range(args.tp_size)]
    ranks = node_ranks(args, ranks)
    for dp, pp, tp in ranks:
        pid = os.fork()
        if pid == 0:
            os.close(ready_r)
            try:
                scheduler(args, dp, pp, tp, ready_w, log)
            finally:
                os._exit(1)
        children.append(pid)
    pid = os.fork()
    if pid == 0:
        try:
            detokenizer()
        finally:
            os._exit(1)
    children.append(pid)
    os.close(ready_w)

    ready = 0
    peers_ready = 0
    while ready < len(ranks) or peers_ready < len(peers):
        readable, _, _ = select.select([ready_r, *peers], [], [], 0.05)
        for source in readable:
            if source == ready_r:
                ready += len(os.read(ready_r, 64))
            elif source.recv(64):
                peers_ready += 1
            else:
                sys.stderr.write(
                    f"RuntimeError: node_rank {peers.index(source) + 1} left the process group during "
                    "initialization (connection closed)\n"
                )
                kill_children(children)
                sys.exit(1)
        for rank, child in enumerate(children[: len(ranks)]):
            done, status = os.waitpid(child, os.WNOHANG)
            if done:
                code = os.waitstatus_to_exitcode(status)
                sys.stderr.write(
                    f"RuntimeError: Rank {rank} scheduler died during initialization (exit code: {code}).\n"
                )
                kill_children(children)
                sys.exit(1)

    if leader_conn is not None:
        follower_wait(args, leader_conn, children, log)

    stopping: list[bool] = []

    def on_sigterm(signum: int, frame: object) -> None:
        """SGLang 0.5.23's SIGTERM path, as seen on the real engine (no drain): the schedulers die of the
        group's SIGTERM, the launcher reports that as a crash, sleeps FAKE_SGLANG_CRASH_SLEEP_S (5 s,
        SGLang's own) "to let GPU activity settle", then SIGKILLs its tree and itself (exit -9)."""
        if stopping:  # a second SIGTERM during the sleep changes nothing, as in SGLang
            return
        stopping.append(True)
        event(args, "stop")
        log("SIGTERM received. signum=None frame=None. Draining requests and shutting down...")
        log(f"Subprocess scheduler_0 (pid={children[0]}) crashed with exit code -15. Triggering SIGQUIT "
            "for cleanup...")
        log("SIGQUIT received. signum=None, frame=None. It usually means one child failed.")
        log("Sleeping 5 seconds before crash diagnostics to let GPU activity settle.")
        time.sleep(CRASH_SLEEP_S)
        log("No live scheduler processes found; skipping py-spy and CUDA coredump.")
        log(f"kill_process_tree called: parent_pid={os.getpid()}, include_parent=True, pid={os.getpid()}")
        if "ignore_sigterm" not in MODES:
            kill_children(children)
            os.kill(os.getpid(), signal.SIGKILL)
        os._exit(0)  # ignore_sigterm: the launcher goes, its children stay (they must be killed by kvcheck)

    signal.signal(signal.SIGTERM, on_sigterm)
    if "no_http" not in MODES:
        try:
            serve(args, pool_by_rank, log)
        except OSError as exc:
            # SGLang 0.5.23 (seen on CPU): uvicorn logs the bind failure, the app shuts down, and the
            # launcher and its schedulers stay up serving nobody
            log(f"INFO:     Started server process [{os.getpid()}]")
            log(f"ERROR:    [Errno {exc.errno}] error while attempting to bind on address "
                f"('{args.host}', {args.port}): address already in use", warning=True)
            log("INFO:     Waiting for application shutdown.")
            while True:
                time.sleep(3600)
    log(f"INFO:     Uvicorn running on http://{args.host}:{args.port} (Press CTRL+C to quit)")
    wait_for = os.environ.get("FAKE_SGLANG_WAIT_FOR")
    while wait_for and not os.path.exists(wait_for):
        time.sleep(0.01)
    if "no_ready" not in MODES:
        time.sleep(STEP_S)
        log("The server is fired up and ready to roll!")
    while True:
        time.sleep(3600)


if __name__ == "__main__":
    main()
