"""The SGLang startup-log reader on real logs of every release since 2024 and on 0.5.23's format."""

from __future__ import annotations

import gzip
import io
import json
import random
from pathlib import Path

import pytest

from kvcheck.engines.base import RankTag
from kvcheck.engines.sglang.logs import read_log
from kvcheck.engines.sglang.logs.bulk import NEEDLES, READ_CHUNK_BYTES, find_needle
from kvcheck.engines.sglang.logs.lines import iter_log_lines
from kvcheck.engines.sglang.logs.patterns import HANDLER_KEYS, HANDLERS, LEVEL_STARTS
from kvcheck.engines.sglang.logs.reader import LogReader
from kvcheck.engines.sglang.logs.serverargs import parse_command_line, parse_server_args
from kvcheck.engines.sglang.logs.values import MAX_ERROR_LINES, MAX_LINE_CHARS
from tests.datapaths import DATAPOINTS, LOGS


def real_log(name: str) -> Path:
    return LOGS / name


def summarise(text: str):
    return read_log(io.BytesIO(text.encode()))


# A TP2 launch of 0.5.23 in the order docs/sglang-internals.md (Log lines) gives, request logs after it.
SGLANG_0_5_23_TP2 = """\
[2026-01-05 10:00:01] server_args={'model_path': 'meta-llama/Llama-3.1-8B-Instruct', 'tp_size': 2, 'mem_fraction_static': 0.828, 'chunked_prefill_size': 8192, 'page_size': 1, 'context_length': None, 'allow_auto_truncate': False, 'disaggregation_mode': 'null'}
[2026-01-05 10:00:09 TP0] Init parallel begin.
[2026-01-05 10:00:09 TP1] Init parallel begin.
[2026-01-05 10:00:09 TP0] Init parallel ends. elapsed=2.41 s
[2026-01-05 10:00:09 TP0] Memory baseline taken. mem usage=0.00 GB
[2026-01-05 10:00:10 TP0] Load weight begin. avail mem=78.95 GB
[2026-01-05 10:00:10 TP1] Load weight begin. avail mem=78.97 GB
[2026-01-05 10:00:31 TP0] Load weight end. elapsed=20.84 s, type=LlamaForCausalLM, avail mem=71.43 GB, mem usage=7.52 GB.
[2026-01-05 10:00:31 TP1] Load weight end. elapsed=20.91 s, type=LlamaForCausalLM, avail mem=71.45 GB, mem usage=7.52 GB.
[2026-01-05 10:00:33 TP0] KV Cache is allocated. dtype: torch.bfloat16, #tokens: 947824, K size: 28.93 GB, V size: 28.93 GB
[2026-01-05 10:00:33 TP1] KV Cache is allocated. dtype: torch.bfloat16, #tokens: 947824, K size: 28.93 GB, V size: 28.93 GB
[2026-01-05 10:00:33 TP0] Memory pool end. avail mem=13.55 GB
[2026-01-05 10:00:33 TP1] Memory pool end. avail mem=13.57 GB
[2026-01-05 10:00:34 TP0] Capture target prefill CUDA graph begin. backend=breakable, num_tokens=[4, 8, 8192], avail mem=13.55 GB
[2026-01-05 10:01:05 TP0] Capture target prefill CUDA graph end. elapsed=31.02 s, mem usage=0.61 GB, avail mem=12.94 GB.
[2026-01-05 10:01:05 TP0] Capture target decode CUDA graph begin. backend=full, num_tokens_per_req=1, avail mem=12.94 GB
[2026-01-05 10:01:17 TP0] Capture target decode CUDA graph end. bs=[1, 2, 4, 8, 12, 16, 256], elapsed=12.40 s, mem usage=0.52 GB, avail mem=12.42 GB.
[2026-01-05 10:01:20 TP0] max_total_num_tokens=947824, chunked_prefill_size=8192, max_prefill_tokens=16384, max_running_requests=3702, context_len=131072, available_gpu_mem=12.37 GB
[2026-01-05 10:01:22] INFO:     Uvicorn running on http://127.0.0.1:30000 (Press CTRL+C to quit)
[2026-01-05 10:01:24] INFO:     127.0.0.1:40522 - "POST /generate HTTP/1.1" 200 OK
[2026-01-05 10:01:25] The server is fired up and ready to roll!
[2026-01-05 10:02:00 TP0] Prefill batch. #new-seq: 1, #new-token: 6, #cached-token: 0, token usage: 0.00, #running-req: 0, #queue-req: 0
[2026-01-05 10:02:00 TP0] Decode batch. #running-req: 1, #token: 38, token usage: 0.00, gen throughput (token/s): 5.08, #queue-req: 0
"""


# -- real logs ---------------------------------------------------------------------------------------

# file -> (pool_tokens, figure source of every rank, rank tags, context_len, max_req_input_len)
REAL = {
    "sglang-deepseek-r1-2x8xH20-tp16-k8s-doc.log": (
        712400, "final", [f"TP{i}" for i in range(8)], 163840, 163834,
    ),
    "sglang-dsv32-exp-8xB200-dpattn-main-pr11309.log": (1462784, "allocation", ["DP0 TP0"], None, None),
    "sglang-dsv32-exp-8xB200-dpattn-pr11309.log": (975424, "allocation", ["DP0 TP0"], None, None),
    "sglang-glm5-fp8-mi35x-tp8-fp8kv.log": (3262823, "allocation", [f"TP{i}" for i in range(8)], None, None),
    "sglang-kimi-k25-mi35x-tp8.log": (2454421, "allocation", [f"TP{i}" for i in range(8)], None, None),
    "sglang-llama3-8b-mi300x-bench-latency.log": (1256440, "final", ["TP0"], None, None),
    "sglang-llama31-8b-docs-send-request-2025-01.log": (444500, "final", ["TP0"], 131072, 131066),
    "sglang-llama3-8b-4xA10G-tp4-issue565.log": (405784, "final", [f"GPU{i}" for i in range(4)], 8192, 8186),
    "sglang-llama31-8b-pr4760-fa3.log": (442750, "allocation", ["TP0"], None, None),
    "sglang-mimo-v2-flash-tp4-swa-pr18039-main.log": (375360, "swa_pool", ["TP0", "TP1", "TP2", "TP3"], None, None),
    "sglang-mixtral-8x7b-8xL4-tp8-issue1191.log": (463405, "final", [f"GPU{i}" for i in range(8)], 8192, 8186),
    "sglang-qwen3-235b-fp8-4xH100-vllm21348.log": (367404, "allocation", [""], None, None),
    "sglang-qwen3-32b-ascend-npu-tp2-issue16526.log": (143104, "allocation", ["TP0", "TP1"], None, None),
    "sglang-qwen3-36L-rtx32gb-issue7227.log": (132681, "allocation", [""], None, None),
    "sglang-qwen3-8b-tp1-blackwell288-clean-startup-doc.log": (1707904, "final", [""], 40960, 40954),
}


@pytest.mark.parametrize("name", sorted(REAL))
def test_real_sglang_logs_give_the_pool_of_every_rank(name):
    pool, source, tags, context_len, max_input = REAL[name]
    summary = read_log(real_log(name).open("rb"))
    assert summary.is_sglang
    assert summary.pool_tokens() == pool
    assert [str(rank.rank) for rank in summary.ranks] == tags
    assert {rank.figure_source for rank in summary.ranks} == {source}
    assert {rank.context_len for rank in summary.ranks} == {context_len}
    assert {rank.max_req_input_len for rank in summary.ranks} == {max_input}
    assert summary.ready is False  # every quoted log stops before the ready line
    assert "no 'The server is fired up and ready to roll!' line" in summary.missing


# Datapoints whose figures are not log lines, so the reader has nothing to match them with.
NOT_FROM_LOG_LINES = {
    "sglang-qwen3-32b-4x5090-tp4-summary": "the author's results table, quoted in the file as a table",
    "sglang-qwen3-32b-4x5090-tp4-cp2-summary": "a row of the same table",
    "sglang-glm52-nvfp4-8xRTXPRO6000-tp8-fp8kv-inferencex2335": "a recipe comment and a PR description, quoted as such",
    "sglang-dsv4-flash-fp8-8xL20-tp8-mtp-pr28620": "a PR author's comments, quoted as such",
    "sglang-dsv4-pro-8xMI355X-tp8-dp8-dpattn-pd-decode-mfs090-0515post1": (
        "a report's DSV4 sizing lines without their log prefix and its fraction-sweep table"
    ),
    "sglang-glm52-nvfp4-4xGB300-tp4-eagle-pr30531": "a PR comment's A/B table, quoted as such",
    "sglang-glm52-nvfp4-4xGB300-tp4-eagle-pr30531-branch": "the same table's other column",
    "sglang-glm52-fp8-8xRTXPRO6000-tp8-maxtok4096-hydralisk": "an author's summary of the log, quoted as such",
    "sglang-dsv4-pro-4x8xH800-tp8-pp4-marlin-mfs090-0512post1": "a report's results table, quoted as such",
    "sglang-dsv4-pro-4x8xH800-tp16-pp2-marlin-mfs090-0512post1": "a report's results table, quoted as such",
    "sglang-dsv4-pro-8xMI355X-tp8-dp8-dpattn-pd-rocm0513-mfs085-090": "a report's excerpts, without their log prefix",
    "sglang-kimi-k3-8xMI355X-tp8-mfs-sweep-k3branch-0515post1dev": "a report's tables, quoted as such",
    "sglang-glm46-fp8-2xB300-tp8-pd-preload-0510-aws": "run notes that quote the line's figure in a table",
    "sglang-kimi-k3-8xB300-tp8-ep8-deepepv2-patched-nightly20260901": "measurement notes and a launch argv, quoted as such",
    "sglang-kimi-k3-16xB200-tp16-2node-0516-gke": "a benchmark result's JSON fields, quoted as such",
}


def _datapoints() -> list[dict]:
    import yaml

    return [d for d in yaml.safe_load(DATAPOINTS.read_text()) if d["engine"] == "sglang"]


def test_every_sglang_datapoint_matches_what_the_reader_extracts():
    checked = without_tokens = 0
    for point in _datapoints():
        if point["id"] in NOT_FROM_LOG_LINES:
            continue
        summary = read_log((LOGS / point["log_file"]).open("rb"))
        assert summary.is_sglang, point["id"]
        if point.get("kv_tokens_allocated") is None and point.get("max_total_num_tokens") is None:
            # Releases before #tokens, cut before the final line, and the refused DeepSeek-V4-Pro start
            # (InferenceX #2128): sizes but no token count, no rank figure.
            assert summary.ranks == () and summary.pool_tokens() is None, point["id"]
            assert "no pool figure (no KV cache allocation or max_total_num_tokens line)" in summary.missing
            without_tokens += 1
            continue
        first_rank = summary.ranks[0]
        if point.get("kv_tokens_allocated") is not None:
            allocated = {r.allocated_tokens for r in summary.ranks if r.allocated_tokens is not None}
            assert allocated == {point["kv_tokens_allocated"]}, point["id"]
        if point.get("max_total_num_tokens") is not None:
            # Recent releases print the final line on TP rank 0 only, older ones on every rank.
            final = {r.final_tokens for r in summary.ranks if r.final_tokens is not None}
            assert final == {point["max_total_num_tokens"]}, point["id"]
        if point.get("context_len") is not None:
            assert first_rank.context_len == point["context_len"], point["id"]
        if point.get("swa_full_layer_tokens") is not None:
            assert summary.pool_tokens() == point["swa_full_layer_tokens"], point["id"]
            assert {r.swa_tokens for r in summary.ranks} == {point["swa_layer_tokens"]}, point["id"]
        if point.get("kv_size_gb_mla") is not None:
            assert first_rank.kv_gib == point["kv_size_gb_mla"], point["id"]
        if point.get("k_size_gb") is not None:
            # On some rank: an excerpt may lack a rank's first allocation line (pr15464's TP0).
            sizes = {(r.k_gib, r.v_gib) for r in summary.ranks}
            assert (point["k_size_gb"], point["v_size_gb"]) in sizes, point["id"]
        if point.get("memory_pool_end_avail_gb") is not None:
            tp0 = [r for r in summary.ranks if r.pool_end_avail_gib is not None][0]
            assert tp0.pool_end_avail_gib == point["memory_pool_end_avail_gb"], point["id"]
        if point.get("weight_mem_usage_gb") is not None:
            weights = {r.weights_gib for r in summary.ranks if r.weights_gib is not None}
            assert weights == {point["weight_mem_usage_gb"]}, point["id"]
        checked += 1
    assert (checked, without_tokens) == (42, 6)


@pytest.mark.parametrize(
    "name",
    [
        "vllm-gemma2-9b-8xL4-tp8-vllm7593.log",
        "vllm-llama31-8b-rtx3090-20k-vllm10517.log",
        "vllm-llama31-8b-rtx3090-29k-vllm10517.log",
        "vllm-qwen3-1.7b-24gb-vllm33263.log",
        "vllm-qwen3-235b-fp8-4xH100-vllm21348.log",
    ],
)
def test_vllm_logs_are_not_sglang(name):
    summary = read_log(real_log(name).open("rb"))
    assert summary.is_sglang is False
    assert summary.ranks == ()
    assert summary.pool_tokens() is None


def test_real_logs_state_their_command_line_and_rank_details():
    summary = read_log(real_log("sglang-mimo-v2-flash-tp4-swa-pr18039-main.log").open("rb"))
    assert summary.command_line == (
        "python3", "-m", "sglang.launch_server", "--model-path", "XiaomiMiMo/MiMo-V2-Flash",
        "--tp-size", "4", "--trust-remote-code", "--mem-fraction-static", "0.7",
        "--model-loader-extra-config", '{"enable_multithread_load": "true","num_threads": 64}',
        "--page-size", "64",
    )
    ranks = {str(r.rank): r for r in summary.ranks}
    assert (ranks["TP1"].allocated_tokens, ranks["TP1"].full_layer_tokens) == (300288, 375360)
    assert (ranks["TP1"].k_gib, ranks["TP1"].v_gib, ranks["TP1"].kv_gib) == (8.38, 5.59, 13.97)

    docs = read_log(real_log("sglang-llama31-8b-docs-send-request-2025-01.log").open("rb"))
    assert docs.command_line == (
        "python", "-m", "sglang.launch_server", "--model-path", "meta-llama/Meta-Llama-3.1-8B-Instruct",
        "--port", "30000", "--host", "0.0.0.0",
    )
    tp0 = docs.ranks[0]
    assert (tp0.allocated_tokens, tp0.k_gib, tp0.final_tokens, tp0.max_prefill_tokens) == (None, 27.13, 444500, 16384)
    assert tp0.max_running_requests == 2049 and tp0.chunked_prefill_size is None

    glm = read_log(real_log("sglang-glm5-fp8-mi35x-tp8-fp8kv.log").open("rb"))
    assert glm.ranks[0].kv_dtype == "torch.float8_e4m3fn"
    assert glm.ranks[0].avail_after_weights_gib == 193.92

    ascend = read_log(real_log("sglang-qwen3-32b-ascend-npu-tp2-issue16526.log").open("rb"))
    assert ascend.ranks[0].weights_gib == 31.01  # its first line lost the leading "["


# -- 0.5.23 format -------------------------------------------------------------------------------------


def test_streaming_a_0_5_23_boot_gives_every_event_in_order():
    reader = LogReader()
    kinds = []
    phases = []
    for line in SGLANG_0_5_23_TP2.splitlines(keepends=True):
        for event in reader.feed(line):
            kinds.append(event.kind)
            if event.kind == "phase":
                phases.append(event.values["to"])
    assert kinds == [
        "server_args",
        "weights_begin", "phase", "weights_begin",
        "weights_end", "phase", "weights_end",
        "kv_allocated", "kv_allocated",
        "pool_end", "pool_end",
        "graph_capture_begin", "phase", "graph_capture_end", "graph_capture_begin", "graph_capture_end",
        "final_pool",
        "uvicorn_running",
        "ready", "phase",
    ]
    assert phases == ["loading_weights", "sizing_pool", "capturing_graphs", "ready"]
    assert reader.phase == "ready"
    summary = reader.summary()
    assert summary.ready and summary.missing == ()
    assert summary.server_args["mem_fraction_static"] == 0.828
    assert summary.server_args["context_length"] is None
    assert summary.server_args_line == 1
    tp0, tp1 = summary.ranks
    assert (str(tp0.rank), str(tp1.rank)) == ("TP0", "TP1")
    assert (tp0.final_tokens, tp0.allocated_tokens, tp0.figure_source) == (947824, 947824, "final")
    assert (tp1.final_tokens, tp1.allocated_tokens, tp1.figure_source) == (None, 947824, "allocation")
    assert tp0.context_len == 131072 and tp0.max_req_input_len == 131066
    assert (tp0.chunked_prefill_size, tp0.max_prefill_tokens, tp0.max_running_requests) == (8192, 16384, 3702)
    assert tp0.available_gpu_mem_gib == 12.37
    assert (tp0.kv_dtype, tp0.k_gib, tp0.v_gib, tp0.kv_gib) == ("torch.bfloat16", 28.93, 28.93, 57.86)
    assert (tp0.weights_gib, tp0.avail_after_weights_gib, tp0.pool_end_avail_gib) == (7.52, 71.43, 13.55)
    assert (tp0.final_line, tp0.allocation_line, tp0.figure_line) == (18, 10, 18)
    assert summary.pool_tokens() == 947824
    assert summary.lines == 23


def test_event_values_carry_the_figures_with_units():
    reader = LogReader()
    events = {}
    for line in SGLANG_0_5_23_TP2.splitlines():
        for event in reader.feed(line):
            events.setdefault(event.kind, event)
    assert events["kv_allocated"].values == {
        "tokens": 947824, "k_gib": 28.93, "v_gib": 28.93, "kv_gib": 57.86, "dtype": "torch.bfloat16",
        "upper_bound": False, "draft": False, "label": None,
    }
    assert events["kv_allocated"].rank == RankTag(tp=0) and events["kv_allocated"].line_no == 10
    assert events["weights_end"].values == {
        "elapsed_s": 20.84, "model_class": "LlamaForCausalLM", "dtype": None, "quant": None,
        "avail_mem_gib": 71.43, "mem_usage_gib": 7.52,
    }
    assert events["graph_capture_end"].values == {
        "graph": "target prefill", "avail_mem_gib": 12.94, "mem_usage_gib": 0.61, "elapsed_s": 31.02,
    }
    assert events["final_pool"].values == {
        "max_total_num_tokens": 947824, "chunked_prefill_size": 8192, "max_prefill_tokens": 16384,
        "max_running_requests": 3702, "context_len": 131072, "available_gpu_mem_gib": 12.37,
    }
    assert events["uvicorn_running"].values == {"url": "http://127.0.0.1:30000"}
    assert events["uvicorn_running"].rank == RankTag()


@pytest.mark.parametrize(
    ("prefix", "tag", "rendered"),
    [
        ("", RankTag(), ""),
        (" TP3", RankTag(tp=3), "TP3"),
        (" DP3 TP3 EP3", RankTag(dp=3, tp=3, ep=3), "DP3 TP3 EP3"),
        (" DP1 PP2 ATTN_CP3 MOE_DP4 TP5 EP6", RankTag(1, 2, 3, 4, 5, 6), "DP1 PP2 ATTN_CP3 MOE_DP4 TP5 EP6"),
        (" PP1 TP0 DCP2", RankTag(pp=1, tp=0, extra=(("DCP", 2),)), "PP1 TP0 DCP2"),
    ],
)
def test_rank_tags_parse_and_render_like_sglang(prefix, tag, rendered):
    summary = summarise(f"[2026-01-05 10:00:33{prefix}] KV Cache is allocated. #tokens: 1000, KV size: 1.00 GB\n")
    assert summary.ranks[0].rank == tag
    assert str(summary.ranks[0].rank) == rendered


def test_the_2024_gpu_prefix_tags_each_rank_by_its_device():
    summary = summarise(
        "[gpu_id=1] Load weight end. type=LlamaForCausalLM, avail mem=17.76 GB\n"
        " 61%|######    | 179/292 [00:01<00:00, 130.83it/s][gpu_id=0] Load weight end. type=LlamaForCausalLM, avail mem=17.70 GB\n"
        "[gpu=1] max_total_num_tokens=405784, max_prefill_tokens=65536, context_len=8192,\n"
        "[gpu=0] max_total_num_tokens=405784, max_prefill_tokens=65536, context_len=8192,\n"
    )
    assert [(str(r.rank), r.avail_after_weights_gib) for r in summary.ranks] == [("GPU0", 17.70), ("GPU1", 17.76)]
    assert summary.ranks[0].rank == RankTag(extra=(("GPU", 0),))
    assert summary.pool_tokens() == 405784 and summary.phase == "sizing_pool"


def test_pool_is_the_minimum_over_dp_ranks_and_pp_stages():
    summary = summarise(
        "[2026-01-05 10:00:33 DP0 PP0 TP0] max_total_num_tokens=500000, context_len=131072\n"
        "[2026-01-05 10:00:33 DP0 PP1 TP0] max_total_num_tokens=480000, context_len=131072\n"
        "[2026-01-05 10:00:33 DP1 PP0 TP2] max_total_num_tokens=510000, context_len=131072\n"
        "[2026-01-05 10:00:33 DP1 PP1 TP2] max_total_num_tokens=505000, context_len=131072\n"
    )
    assert [str(r.rank) for r in summary.ranks] == ["DP0 PP0 TP0", "DP0 PP1 TP0", "DP1 PP0 TP2", "DP1 PP1 TP2"]
    assert summary.pool_tokens() == 480000


def test_post_capture_sizing_replaces_the_va_upper_bound():
    lines = [
        "[2026-01-05 10:00:33] KV Cache VA upper bound. dtype: torch.bfloat16, #tokens: 1048576, K size: 32.00 GB, V size: 32.00 GB",
        "[2026-01-05 10:00:33] Memory pool end. avail mem=70.10 GB",
        "[2026-01-05 10:00:45] Capture target decode CUDA graph end. bs=[1, 2], elapsed=12.40 s, mem usage=0.52 GB, avail mem=3.10 GB.",
        "[2026-01-05 10:00:46] Post-capture KV sizing: KV cache allocated. dtype: torch.bfloat16, #tokens: 1012736, KV size: 61.81 GB, avail mem=3.02 GB",
        "[2026-01-05 10:00:46] Post-capture KV sizing: max_running_requests 4096 -> 3956",
    ]
    reader = LogReader()
    events = [event for line in lines for event in reader.feed(line)]
    assert [e.kind for e in events if e.kind != "phase"] == [
        "kv_allocated", "pool_end", "graph_capture_end", "post_capture_kv", "max_running_requests_reduced",
    ]
    assert events[0].values["upper_bound"] is True
    upper = reader.summary()
    rank = upper.ranks[0]
    assert (rank.allocated_tokens, rank.upper_bound, rank.post_capture_tokens) == (1048576, True, 1012736)
    assert (rank.figure_source, rank.best_tokens, rank.first_allocation_only) == ("post_capture", 1012736, False)
    reader.feed("[2026-01-05 10:00:50] max_total_num_tokens=1012736, context_len=131072")
    assert reader.summary().ranks[0].figure_source == "final"


def test_a_va_upper_bound_alone_is_provisional_and_said_missing():
    summary = summarise(
        "[2026-01-05 10:00:33] KV Cache VA upper bound. dtype: torch.bfloat16, #tokens: 1048576, K size: 32.00 GB, V size: 32.00 GB\n"
    )
    rank = summary.ranks[0]
    assert (rank.figure_source, rank.first_allocation_only, rank.best_tokens) == ("upper_bound", True, 1048576)
    assert "no post-capture KV sizing line after the 'KV Cache VA upper bound' line" in summary.missing


def test_hybrid_swa_post_capture_gives_the_full_layer_pool():
    summary = summarise(
        "[2026-01-05 10:00:33 TP0] Use sliding window memory pool. full_layer_tokens=1843200, swa_layer_tokens=1474560\n"
        "[2026-01-05 10:00:33 TP0] SWAKVPool mem usage: 58.20 GB, swa size: 1474560, full size: 1843200\n"
        "[2026-01-05 10:00:50 TP0] Post-capture KV sizing: full_layer_tokens=1800000, swa_layer_tokens=1440000\n"
        "[2026-01-05 10:00:50 TP0] Post-capture KV sizing: KV cache allocated. dtype: torch.bfloat16, #tokens: 1440000, KV size: 56.00 GB, avail mem=3.02 GB\n"
    )
    rank = summary.ranks[0]
    assert (rank.full_layer_tokens, rank.post_capture_tokens, rank.swa_tokens) == (1843200, 1800000, 1440000)
    assert summary.pool_tokens() == 1800000


def test_mamba_and_draft_pools_are_told_apart_from_the_target_pool():
    reader = LogReader()
    events = []
    for line in (
        "[2026-01-05 10:00:33 TP0] Mamba Cache is allocated. max_mamba_cache_size: 1053, conv_state size: 1.21GB, ssm_state size: 28.35GB",
        "[2026-01-05 10:00:33 TP0] KV Cache is allocated. dtype: torch.bfloat16, #tokens: 500000, K size: 3.00 GB, V size: 3.00 GB",
        "[2026-01-05 10:00:34 TP0] KV Cache is allocated. dtype: torch.bfloat16, #tokens: 500000, K size: 0.10 GB, V size: 0.10 GB",
    ):
        events.extend(reader.feed(line))
    mamba, target, draft = [e for e in events if e.kind != "phase"]
    assert mamba.values == {"max_mamba_cache_size": 1053, "conv_state_gib": 1.21, "ssm_state_gib": 28.35}
    assert (target.values["draft"], draft.values["draft"]) == (False, True)
    rank = reader.summary().ranks[0]
    assert (rank.allocated_tokens, rank.draft_tokens, rank.k_gib, rank.mamba_cache_size) == (500000, 500000, 3.0, 1053)


def test_the_engines_own_context_warning_is_kept_on_every_rank():
    text = "".join(
        f"[2026-01-05 10:01:20 TP{i}] KV pool holds 98304 tokens, fewer than --context-length 131072. One "
        "full-length request cannot fit, so long requests will be refused or truncated at serving time. Lower "
        "--context-length, raise --mem-fraction-static, or free memory taken before the pool is sized.\n"
        for i in range(2)
    )
    text += "[2026-01-05 10:01:20 TP0] max_total_num_tokens=98304, chunked_prefill_size=8192, max_prefill_tokens=16384, max_running_requests=384, context_len=131072, available_gpu_mem=12.37 GB\n"
    summary = summarise(text)
    assert [(str(w.rank), w.values) for w in summary.warnings] == [
        ("TP0", {"pool_tokens": 98304, "context_length": 131072}),
        ("TP1", {"pool_tokens": 98304, "context_length": 131072}),
    ]
    tp0, tp1 = summary.ranks
    assert tp0.context_warning_tokens == 98304 and tp0.max_req_input_len == 98298
    assert tp1.context_len == 131072  # from the warning: TP1 prints no final line


def test_clamped_max_total_tokens_and_reduced_requests_are_reported():
    reader = LogReader()
    clamped = reader.feed("[2026-01-05 10:00:33] max_total_tokens=2000000 is larger than the profiled value 947824. Use the profiled value instead.")
    reduced = reader.feed("[2026-01-05 10:00:33] max_running_requests was reduced from the requested 8192 to 3702 (per dp worker) due to the available KV cache capacity.")
    assert clamped[0].kind == "max_total_tokens_clamped"
    assert clamped[0].values == {"max_total_tokens": 2000000, "profiled_tokens": 947824}
    assert reduced[0].values == {"requested": 8192, "max_running_requests": 3702}


# -- formats around the message ------------------------------------------------------------------------

KV_LINE = "[2026-01-05 10:00:33 TP0] KV Cache is allocated. dtype: torch.bfloat16, #tokens: 947824, K size: 28.93 GB, V size: 28.93 GB"


@pytest.mark.parametrize(
    "line",
    [
        KV_LINE,
        "2026-01-05T10:00:33.123456789Z " + KV_LINE,  # kubectl logs --timestamps
        "2026-01-05T10:00:33.123+02:00 " + KV_LINE,  # docker logs -t with an offset
        "2026-01-05T10:00:33.123456789Z stderr F " + KV_LINE,  # CRI file under /var/log/pods
        "[pod/sglang-prefill-0/server] " + KV_LINE,  # kubectl logs --prefix
        "[pod/sglang-prefill-0/server] 2026-01-05T10:00:33.1Z " + KV_LINE,  # --prefix --timestamps
        json.dumps({"log": KV_LINE + "\n", "stream": "stderr", "time": "2026-01-05T10:00:33Z"}),  # docker json-file
        "Jan 05 10:00:33 gpu-node-3 python3[4242]: " + KV_LINE,  # journald
        "\x1b[32m" + KV_LINE[:26] + "\x1b[0m" + KV_LINE[26:] + "\x1b[0m",  # ANSI colour
        KV_LINE + "\r\n",  # CRLF
        "Loading safetensors checkpoint shards: 100% 4/4\r" + KV_LINE,  # progress bar redrawn with CR
        KV_LINE.replace("2026-01-05 10:00:33", "10:00:33"),  # 2024 releases: no date
        KV_LINE.replace("10:00:33", "10:00:33.417"),  # SGLANG_LOG_MS=1
        KV_LINE[1:],  # a quote that lost the leading "["
    ],
)
def test_the_prefix_is_found_behind_container_and_terminal_decorations(line):
    reader = LogReader()
    events = reader.feed(line)
    assert events[0].kind == "kv_allocated"
    assert events[0].rank == RankTag(tp=0)
    assert events[0].values["tokens"] == 947824


def test_older_level_and_logger_prefix_after_the_bracket_is_skipped():
    reader = LogReader()
    events = reader.feed(
        "[2025-04-01 10:00:00 TP0] WARNING tp_worker.py:210: KV pool holds 98304 tokens, fewer than --context-length 131072."
    )
    assert events[0].kind == "context_warning"
    assert events[0].values == {"pool_tokens": 98304, "context_length": 131072}


def test_old_release_lines_without_tokens_or_dates_still_count():
    summary = summarise(
        "[22:30:32 TP0] Load weight begin. avail mem=191.33 GB\n"
        "[22:30:52 TP0] Load weight end. type=LlamaForCausalLM, dtype=torch.bfloat16, avail mem=176.33 GB\n"
        "[22:30:53 TP0] KV Cache is allocated. K size: 27.13 GB, V size: 27.13 GB.\n"
        "[22:31:06 TP0] Capture cuda graph begin. This can take up to several minutes.\n"
        "[22:31:13 TP0] Capture cuda graph end. Time elapsed: 6.57 s\n"
    )
    rank = summary.ranks[0] if summary.ranks else None
    assert rank is None  # sizes but no token count: no pool figure
    assert summary.is_sglang and summary.pool_tokens() is None
    assert "no pool figure (no KV cache allocation or max_total_num_tokens line)" in summary.missing
    assert summary.phase == "capturing_graphs"


def test_request_logs_and_other_programs_produce_no_events():
    reader = LogReader()
    noise = [
        "[2026-01-05 10:02:00 TP0] Prefill batch. #new-seq: 1, #new-token: 6, #cached-token: 0, token usage: 0.00",
        "[2026-01-05 10:02:00 TP0] Decode batch. #running-req: 1, #token: 38, token usage: 0.00, gen throughput (token/s): 5.08",
        '[2026-01-05 10:02:00] INFO:     127.0.0.1:40522 - "POST /generate HTTP/1.1" 200 OK',
        "[2026-01-05 10:02:00] Memory usage is high; consider max_total_num_tokens tuning",
        "[2026-01-05 10:02:00] The KV cache is warm",
        "INFO 08-19 07:51:03 model_runner.py:732] Loading model weights took 2.3463 GB",
        "Memory profiling results: total_gpu_memory=23.58GiB kv_cache_size=3.81GiB",
        "GPU KV cache size: 175,856 tokens",
        "INFO:     Uvicorn running on http://0.0.0.0:8000 (Press CTRL+C to quit)",
        "",
        "   ",
    ]
    events = [e for line in noise for e in reader.feed(line)]
    assert [e.kind for e in events] == ["uvicorn_running"]
    summary = reader.summary()
    assert summary.is_sglang is False and summary.ranks == ()


def test_binary_garbage_is_skipped_and_does_not_hide_real_lines():
    garbage = bytes(range(256)) * 40 + b"\xff\xfe\x00\x00" + b"\x00" * 5000
    data = garbage + b"\n" + KV_LINE.encode() + b"\n" + garbage
    summary = read_log(io.BytesIO(data))
    assert summary.pool_tokens() == 947824
    only_garbage = read_log(io.BytesIO(garbage * 3))
    assert only_garbage.is_sglang is False


def test_a_damaged_figure_is_no_figure_rather_than_a_crash():
    reader = LogReader()
    (event, _) = reader.feed("[2026-01-05 10:00:31 TP0] Load weight end. elapsed=2..1 s, avail mem=7..52 GB, mem usage=7.52 GB.")
    assert (event.kind, event.values["avail_mem_gib"], event.values["elapsed_s"]) == ("weights_end", None, None)
    assert event.values["mem_usage_gib"] == 7.52


def test_empty_input_is_not_an_sglang_log():
    summary = read_log(io.BytesIO(b""))
    assert (summary.is_sglang, summary.lines, summary.ranks, summary.pool_tokens()) == (False, 0, (), None)
    assert summary.phase == "starting"


# -- cut-short and failed boots ------------------------------------------------------------------------


def test_a_log_cut_before_the_final_line_says_what_it_lacks():
    cut = "\n".join(SGLANG_0_5_23_TP2.splitlines()[:12])
    summary = summarise(cut)
    assert summary.phase == "sizing_pool"
    assert summary.pool_tokens() == 947824
    assert all(rank.first_allocation_only for rank in summary.ranks)
    assert summary.missing == (
        "no final max_total_num_tokens line",
        "no context_len",
        "no 'The server is fired up and ready to roll!' line",
    )


def test_a_line_cut_in_the_middle_gives_no_figure():
    summary = summarise("[2026-01-05 10:01:20 TP0] max_total_num_tok")
    assert summary.ranks == () and summary.is_sglang is False


def test_a_scheduler_exception_fails_the_boot_and_keeps_the_traceback():
    text = (
        SGLANG_0_5_23_TP2.split("[2026-01-05 10:00:33 TP0] KV Cache")[0]
        + "[2026-01-05 10:00:33 TP0] Scheduler hit an exception: Traceback (most recent call last):\n"
        '  File "/usr/lib/python3/dist-packages/sglang/srt/managers/scheduler.py", line 6370, in run_scheduler_process\n'
        "    scheduler = Scheduler(server_args, port_args, gpu_id, tp_rank)\n"
        "[2026-01-05 10:00:33 TP1] Memory pool end. avail mem=13.57 GB\n"
        '  File "/usr/lib/python3/dist-packages/sglang/srt/model_executor/pool_configurator.py", line 97, in __post_init__\n'
        "    raise RuntimeError(\n"
        "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static. Current value: mem_fraction_static=0.5\n"
        "\n"
        "[2026-01-05 10:00:34] Received sigquit from a child process. It usually means the child failed.\n"
    )
    reader = LogReader()
    kinds = [e.kind for line in text.splitlines() for e in reader.feed(line)]
    assert "scheduler_exception" in kinds and kinds.count("error") == 2
    assert reader.phase == "failed"
    summary = reader.summary()
    assert summary.failure.startswith("Scheduler hit an exception")
    assert summary.errors == (
        "Scheduler hit an exception: Traceback (most recent call last):",
        '  File "/usr/lib/python3/dist-packages/sglang/srt/managers/scheduler.py", line 6370, in run_scheduler_process',
        "    scheduler = Scheduler(server_args, port_args, gpu_id, tp_rank)",
        '  File "/usr/lib/python3/dist-packages/sglang/srt/model_executor/pool_configurator.py", line 97, in __post_init__',
        "    raise RuntimeError(",
        "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static. Current value: mem_fraction_static=0.5",
        "Received sigquit from a child process. It usually means the child failed.",
    )


def test_a_launcher_traceback_with_a_startup_error_fails_the_boot():
    text = (
        "Traceback (most recent call last):\n"
        '  File "<frozen runpy>", line 198, in _run_module_as_main\n'
        "ValueError: Loaded weights leave no GPU memory for the KV cache under --mem-fraction-static=0.5.\n"
    )
    reader = LogReader()
    events = [e for line in text.splitlines() for e in reader.feed(line)]
    assert [e.kind for e in events] == ["error", "error", "phase"]
    assert events[1].values["exception"] == "ValueError" and events[1].values["fatal"] is True
    assert reader.phase == "failed"


def test_error_lines_are_bounded():
    reader = LogReader()
    reader.feed("Traceback (most recent call last):")
    for i in range(10_000):
        reader.feed(f'  File "x.py", line {i}, in f')
    reader.feed("KeyError: 'x'")
    errors = reader.summary().errors
    assert len(errors) == MAX_ERROR_LINES
    assert errors[-1] == "KeyError: 'x'"
    assert reader.phase == "starting"  # an error that is not a startup failure fails nothing


def test_a_restart_in_the_same_stream_reports_the_last_boot():
    first = SGLANG_0_5_23_TP2
    second = first.replace("947824", "900000").replace("0.828", "0.8")
    summary = summarise(first + second)
    assert summary.boots == 2
    assert summary.pool_tokens() == 900000
    assert summary.server_args["mem_fraction_static"] == 0.8


def test_a_restart_after_a_boot_cut_short_is_a_second_boot_not_one_mixed_from_both():
    # the first boot sized its pool and was killed before it was ready; the second was cut after its weights:
    # the figures of the first (947,824 tokens, context 131,072) must not stand for the second
    lines = SGLANG_0_5_23_TP2.splitlines(keepends=True)
    cut = next(i for i, line in enumerate(lines) if "max_total_num_tokens" in line) + 1
    second = "".join(lines[:4]).replace("'context_length': None", "'context_length': 1048576") + "".join(lines[4:9])
    summary = summarise("".join(lines[:cut]) + second)
    assert summary.boots == 2
    assert summary.pool_tokens() is None
    assert summary.server_args["context_length"] == 1048576


def test_another_nodes_server_args_before_the_weights_is_the_same_boot():
    # each node of a multi-node launch prints its own server_args, before distributed init lets any load weights
    lines = SGLANG_0_5_23_TP2.splitlines(keepends=True)
    summary = summarise("".join(lines[:3]) + lines[0] + "".join(lines[3:]))
    assert (summary.boots, summary.pool_tokens()) == (1, 947824)


# -- server_args, command lines, version ---------------------------------------------------------------


def test_server_args_parse_from_dicts_dataclass_reprs_elisions_and_cut_lines():
    assert parse_server_args("{'tp_size': 8, 'context_length': 1048576, 'allow_auto_truncate': True}") == {
        "tp_size": 8, "context_length": 1048576, "allow_auto_truncate": True,
    }
    assert parse_server_args("ServerArgs(model_path='Qwen/Qwen3-8B', ...)") == {"model_path": "Qwen/Qwen3-8B"}
    assert parse_server_args(
        "ServerArgs(model_path='m', tp_size=2, json_model_override_args='{}', lora_paths=None, "
        "cuda_graph_config=CudaGraphConfig(decode=1), mem_fraction_static=0.9)"
    ) == {"model_path": "m", "tp_size": 2, "json_model_override_args": "{}", "lora_paths": None, "mem_fraction_static": 0.9}
    assert parse_server_args("{'tp_size': 8, ..., 'page_size': 64}") == {"tp_size": 8, "page_size": 64}
    assert parse_server_args("{'tp_size': 8, 'model_path': 'a,b', 'dist': {'x': [1, 2]}, 'context_len") == {
        "tp_size": 8, "model_path": "a,b", "dist": {"x": [1, 2]},
    }
    assert parse_server_args("ServerArgs(tp_size=8, disaggregation_mode='prefill', enable_dp") == {
        "tp_size": 8, "disaggregation_mode": "prefill",
    }


def test_command_lines_are_found_behind_prompts_and_env():
    assert parse_command_line("(sglang) 130 me@host:~/x$ python -m sglang.bench_latency --batch 32") == (
        "python", "-m", "sglang.bench_latency", "--batch", "32",
    )
    assert parse_command_line("CUDA_VISIBLE_DEVICES=0,1 /opt/venv/bin/python3.11 -m sglang.launch_server --tp 2") == (
        "/opt/venv/bin/python3.11", "-m", "sglang.launch_server", "--tp", "2",
    )
    assert parse_command_line("$ sglang serve --model-path m --context-length 131072") == (
        "sglang", "serve", "--model-path", "m", "--context-length", "131072",
    )
    assert parse_command_line("pip install sglang") is None


@pytest.mark.parametrize(
    ("line", "version"),
    [
        ("sglang==0.5.23", "0.5.23"),
        ("sglang version: 0.5.23", "0.5.23"),
        ("Image: lmsysorg/sglang:v0.5.8.post1-cu129", "0.5.8.post1"),
        ("SGLang v0.5.22rc1 starting", "0.5.22rc1"),
        ('  File "/usr/lib/python3/dist-packages/sglang/srt/server_args.py", line 10', None),
        ("sglang serve --model-path m", None),
    ],
)
def test_the_version_is_taken_only_where_the_log_states_it(line, version):
    reader = LogReader()
    reader.feed(line)
    assert reader.summary().version == version


# -- reading streams -----------------------------------------------------------------------------------


def test_iter_log_lines_splits_on_newline_only_and_survives_chunk_boundaries():
    text = "é" * 5 + "\nsecond\r\n\nlast without newline"
    data = text.encode()
    for chunk in (1, 2, 3, 7, 1 << 20):
        assert list(iter_log_lines(io.BytesIO(data), chunk_bytes=chunk)) == [
            "é" * 5, "second\r", "", "last without newline",
        ]


def test_iter_log_lines_cuts_overlong_lines_in_constant_memory():
    data = b"x" * (MAX_LINE_CHARS * 3) + b"\n" + KV_LINE.encode() + b"\n"
    lines = list(iter_log_lines(io.BytesIO(data), chunk_bytes=1 << 16))
    assert [len(line) for line in lines] == [MAX_LINE_CHARS, len(KV_LINE)]
    assert read_log(io.BytesIO(data)).pool_tokens() == 947824


def test_gzip_logs_read_through_their_decompressed_stream():
    data = gzip.compress(SGLANG_0_5_23_TP2.encode())
    with gzip.GzipFile(fileobj=io.BytesIO(data)) as stream:
        assert read_log(stream).pool_tokens() == 947824


def feed_every_line(data: bytes) -> LogReader:
    """The reference: every line of `data` through feed(), one at a time."""
    reader = LogReader()
    lines = data.split(b"\n")
    if data.endswith(b"\n"):
        lines.pop()
    for line in lines:
        reader.feed(line)
    return reader


def assert_bulk_reading_equals_feeding_every_line(data: bytes, chunk_sizes) -> LogReader:
    expected = feed_every_line(data)
    bulk = LogReader()
    for chunk_bytes in chunk_sizes:
        bulk = LogReader()
        bulk.read_stream(io.BytesIO(data), chunk_bytes=chunk_bytes)
        assert bulk.summary() == expected.summary(), f"chunk_bytes={chunk_bytes}"
        assert bulk.lines == expected.lines
    return bulk


def long_log(*, kubectl: bool = False, seed: int = 5) -> bytes:
    """A boot, then request logs with every kind of line the bulk reader must not skip buried in them.

    Two boots (a restart after ready), tracebacks (uvicorn's, a chained one, one interleaved with other
    ranks' request logs), a continued command line, key messages and needles inside request logs,
    prefixes that look like a template but are not (a letter for a digit, no space after the bracket),
    ANSI codes, progress bars, CRLF, bad UTF-8, blank lines, bytes that are rare elsewhere ('x', 'V',
    'U') packed densely, and a line longer than the reader keeps.
    """
    rng = random.Random(seed)
    out: list[bytes] = []

    def stamp() -> str:
        if not kubectl:
            return ""
        fraction = "".join(rng.choice("0123456789") for _ in range(rng.randrange(1, 10)))
        return f"2026-01-05T11:{rng.randrange(60):02d}:{rng.randrange(60):02d}.{fraction}Z "

    def add(line: str | bytes) -> None:
        raw = line.encode() if isinstance(line, str) else line
        out.append(stamp().encode() + raw + b"\n")

    def requests(count: int) -> None:
        for _ in range(count):
            tp = rng.randrange(16)
            second = f"{rng.randrange(24):02d}:{rng.randrange(60):02d}:{rng.randrange(60):02d}"
            kind = rng.random()
            if kind < 0.45:
                add(f"[2026-01-05 {second} TP{tp}] Decode batch. #running-req: {rng.randrange(300)}, #token: "
                    f"{rng.randrange(900000)}, token usage: 0.{rng.randrange(100):02d}, cuda graph: True, "
                    f"gen throughput (token/s): {rng.random() * 9000:.2f}, #queue-req: {rng.randrange(20)},")
            elif kind < 0.8:
                add(f"[2026-01-05 {second} DP{tp % 4} TP{tp} EP{tp}] Prefill batch. #new-seq: {rng.randrange(8)}, "
                    f"#new-token: {rng.randrange(16384)}, #cached-token: {rng.randrange(9000)}")
            else:
                add(f'[2026-01-05 {second}] INFO:     10.0.{rng.randrange(255)}.{rng.randrange(255)}:'
                    f'{rng.randrange(65535)} - "POST /v1/chat/completions HTTP/1.1" 200 OK')

    boot = SGLANG_0_5_23_TP2.splitlines()
    for line in boot:
        add(line)
    requests(3000)
    specials: list[str | bytes | tuple[str, ...]] = [
        "[2026-01-05 11:00:00] ERROR:    Exception in ASGI application",
        "Traceback (most recent call last):",
        '  File "/usr/lib/python3/dist-packages/uvicorn/protocols/http/httptools_impl.py", line 409, in run_asgi',
        "ValueError: Input length (140000 tokens) exceeds the maximum allowed length (131066 tokens).",
        "",
        "During handling of the above exception, another exception occurred:",
        "[2026-01-05 11:00:00 TP3] Scheduler hit an exception: Traceback (most recent call last):",
        '  File "scheduler.py", line 3, in event_loop',
        "[2026-01-05 11:00:00 TP5] Decode batch. #running-req: 1, #token: 2, token usage: 0.00,",
        "RuntimeError: CUDA error: an illegal memory access was encountered",
        "[2026-01-05 11:00:00 TP1] Decode batch. #running-req: 1, holding KV Cache is allocated. #tokens: 5, K size: 1.00 GB",
        "[2026-01-05 11:00:00 TP1] Prefill batch. TokenizerManager hit an exception while decoding",
        "[2026-01-05 11:00:00 TP1] INFO scheduler.py:88: Load weight begin. avail mem=9.00 GB",
        "[2026-01-05 11:00:00 TP1]Load weight begin. avail mem=8.00 GB",
        "[2026-01-05 1O:00:00 TP1] Decode batch. #running-req: 1 sglang==0.5.9",
        "[2026-01-05 11:00:00 TP1] Decode batch. python -m sglang.launch_server --model-path x \\",
        ("$ python -m sglang.launch_server --model-path other --tp 4 \\",
         "[2026-01-05 11:00:00 TP0] Decode batch. #running-req: 1",
         "  --port 30000"),
        "[2026-01-05 11:00:00 TP0] \x1b[1mMemory pool end. avail mem=1.25 GB\x1b[0m",
        "[2026-01-05 11:00:00] INFO:     Uvicorn running on http://0.0.0.0:30001 (Press CTRL+C to quit)",
        "[2026-01-05 11:00:00 TP0] Decode batch.\rProgress 100% Capture cuda graph begin.",
        "[2026-01-05 11:00:00 TP0] Decode batch. ok\r",
        "\x1b[32m[2026-01-05 11:00:00 TP0] Memory pool end. avail mem=1.50 GB\x1b[0m",
        b"[2026-01-05 11:00:00 TP0] Decode batch. caf\xc3\xa9 \xff\xfe KV Cach\xc3\xa9",
        b"\xe2\x82[2026-01-05 11:00:00 TP0] max_total_num_tokens=5",
        "   ",
        "[2026-01-05 11:00:00 TP0] Decode batch. " + "xVU" * 4000,
        "KV pool holds 98304 tokens, fewer than --context-length 131072.",
        "[2026-01-05 11:00:00 TP0] " + "é" * (MAX_LINE_CHARS * 2 + 7) + " KV Cache is allocated. #tokens: 1",
        "[2026-01-05 11:00:00 TP0] KV Cache is allocated. #tokens: 12, KV size: 1.00 GB",
        "[pod/sglang-0/server] [2026-01-05 11:00:00 TP0] Decode batch. #running-req: 1",
        "[rank0]: Traceback (most recent call last):",
        "[rank0]: RuntimeError: Not enough memory. Please try to increase --mem-fraction-static",
        "  not a continuation",
    ]
    for special in specials:
        for line in special if isinstance(special, tuple) else (special,):
            add(line)
        requests(rng.randrange(0, 40))
    requests(2000)
    for line in boot:  # the engine restarts: its second boot is what the summary reports
        add(line.replace("947824", "947000"))
    requests(3000)
    out.append(b"[2026-01-05 12:00:00 TP0] Decode batch. cut mid-line")
    return b"".join(out)


@pytest.mark.parametrize("kubectl", [False, True])
def test_bulk_reading_of_a_long_log_equals_feeding_every_line_and_skips_the_request_logs(kubectl):
    data = long_log(kubectl=kubectl)
    bulk = assert_bulk_reading_equals_feeding_every_line(data, [1 << 10, 4099, 1 << 16, READ_CHUNK_BYTES])
    summary = bulk.summary()
    assert summary.boots == 2 and summary.pool_tokens() == 947000 and summary.ready
    assert summary.lines == data.count(b"\n") + 1
    assert "RuntimeError: CUDA error: an illegal memory access was encountered" in summary.errors
    # The request logs are skipped without parsing: under one line in 50 reaches the parser.
    assert bulk.parsed_lines * 50 < summary.lines, bulk.parsed_lines


@pytest.mark.parametrize("wrap", ["ansi", "docker-json"])
def test_bulk_reading_of_a_long_log_that_needs_every_line_parsed_equals_feeding_every_line(wrap):
    lines = long_log().split(b"\n")
    if wrap == "ansi":
        data = b"\n".join(b"\x1b[0m" + line for line in lines)
    else:
        data = b"\n".join(
            json.dumps({"log": line.decode("utf-8", "replace") + "\n", "stream": "stderr"}).encode() for line in lines
        )
    bulk = assert_bulk_reading_equals_feeding_every_line(data, [4099, 1 << 16, READ_CHUNK_BYTES])
    assert bulk.summary().pool_tokens() == 947000 and bulk.summary().boots == 2
    assert bulk.parsed_lines == bulk.lines == len(lines)


def test_bulk_reading_equals_feeding_every_line_on_random_logs():
    """Lines assembled from prefixes and messages of every kind, then bytes flipped at random."""
    rng = random.Random(20260105)
    prefixes = [
        "[2026-01-05 10:00:0{d} TP{d}] ", "[2026-01-05 10:00:0{d}] ", "[10:00:0{d} TP1{d}] ",
        "[2026-01-05 10:00:00.41{d} DP{d} TP{d} EP{d}] ", "2026-01-05T10:00:00.{d}{d}Z [2026-01-05 10:00:00 TP{d}] ",
        "[pod/s-{d}/c] [2026-01-05 10:00:00] ", "2026-01-05T10:00:00Z stderr F [10:00:0{d}] ", "",
        "[2026-01-05 10:00:00 PP{d} TP{d} XYZ{d}] ", "[2026-01-05 10:00:0{d} TP{d}]", "  ", "Jan 05 10:00:00 n python3[42]: ",
    ]
    messages = [
        "Decode batch. #running-req: 1, #token: 38", "Prefill batch. #new-seq: 1", 'INFO:     1.2.3.4 - "POST /generate" 200 OK',
        "INFO:     Uvicorn running on http://0.0.0.0:8000", "INFO scheduler.py:12: Load weight begin. avail mem=1.00 GB",
        "Load weight end. type=X, avail mem=7.0 GB, mem usage=1.0 GB.",
        "KV Cache is allocated. #tokens: 4{d}, K size: 1.00 GB, V size: 1.00 GB", "SWAKVPool mem usage: 1.0 GB, swa size: 5, full size: 9",
        "max_total_num_tokens=4{d}, context_len=8{d}", "server_args=ServerArgs(tp_size={d}, context_length=9{d})",
        "The server is fired up and ready to roll!", "Traceback (most recent call last):", '  File "x.py", line {d}',
        "ValueError: bad {d}", "RuntimeError: Not enough memory", "During handling of the above exception, another exception occurred:",
        "Scheduler hit an exception: Traceback (most recent call last):", "DetokenizerManager hit an exception",
        "python -m sglang.launch_server --model-path m \\", "  --tp {d} \\", "sglang==0.5.{d}", "Rank {d} scheduler died during initialization",
        "KV pool holds {d} tokens, fewer than --context-length 9{d}.", "Memory pool end. avail mem=1.0 GB", "Using KV cache dtype: fp8",
        "Capture cuda graph end. Time elapsed: {d}.0 s", "Post-capture KV sizing: KV cache allocated. #tokens: 3{d}",
        "\x1b[32mcolour\x1b[0m", "\x1b[0mLoad weight begin. avail mem=2.0 GB", "progress 10%\rprogress 100%", "", "Received sigquit from a child process", "x" * 30,
    ]
    for _ in range(60):
        lines = []
        for _ in range(rng.randrange(1, 120)):
            text = rng.choice(prefixes) + rng.choice(messages) + rng.choice(["", "", "\r", " KV Cache", " hit an exception"])
            raw = bytearray(text.replace("{d}", str(rng.randrange(10))).encode())
            for _ in range(rng.choice([0, 0, 0, 1, 3])):
                if raw:
                    raw[rng.randrange(len(raw))] = rng.choice(b"0123456789 []:.-TZxVU\r\x1b\xff\xc3a")
            lines.append(bytes(raw))
        data = b"\n".join(lines) + rng.choice([b"", b"\n", b"\r\n"])
        assert_bulk_reading_equals_feeding_every_line(data, [rng.choice([1, 5, 17, 64, 1000]), READ_CHUNK_BYTES])


def test_more_prefix_shapes_than_templates_are_read_line_by_line():
    lines = [f"[2026-01-05 10:00:00 {'A' * (i % 80 + 1)}{i}] Decode batch." for i in range(400)]
    data = ("\n".join(lines) + "\n" + KV_LINE + "\n").encode()
    bulk = assert_bulk_reading_equals_feeding_every_line(data, [1 << 12, READ_CHUNK_BYTES])
    assert bulk.summary().pool_tokens() == 947824


@pytest.mark.parametrize("needle", [b"KV Cache", b" hit an exception", b"Uvicorn"])
def test_needles_are_found_behind_dense_false_hits_of_their_rare_byte(needle):
    rng = random.Random(len(needle))
    for _ in range(200):
        noise = bytes(rng.choice(b"xVU \n" + needle[:3]) for _ in range(rng.randrange(0, 5000)))
        cut = rng.randrange(len(noise) + 1)
        data = noise[:cut] + needle + noise[cut:] if rng.random() < 0.7 else noise
        pos = rng.randrange(len(data) + 1)
        end = rng.randrange(pos, len(data) + 1)
        rare = next(i for i, (n, r) in enumerate(NEEDLES) if n == needle)
        assert find_needle(data, needle, NEEDLES[rare][1], pos, end) == data.find(needle, pos, end)


def _corpora() -> list[bytes]:
    texts = [
        SGLANG_0_5_23_TP2,
        "Traceback (most recent call last):\n  File \"x.py\", line 1, in f\n    g()\nKeyError: 'x'\n\n"
        "During handling of the above exception, another exception occurred:\n\nTraceback (most recent call last):\n"
        '  File "y.py", line 2\nRuntimeError: Not enough memory. Please try to increase --mem-fraction-static\n',
        "python -m sglang.launch_server --model-path m \\\n  --tp 2 \\\n  --port 30000\n" + SGLANG_0_5_23_TP2,
        "sglang==0.5.23\n" + SGLANG_0_5_23_TP2.replace("\n", "\r\n"),
        "".join(f"[pod/sglang-0/server1] 2026-01-05T10:00:01.5Z {line}\n" for line in SGLANG_0_5_23_TP2.splitlines()),
        "".join(f"\x1b[32m{line}\x1b[0m\n" for line in SGLANG_0_5_23_TP2.splitlines()),
        "".join(json.dumps({"log": line + "\n", "stream": "stderr"}) + "\n" for line in SGLANG_0_5_23_TP2.splitlines()),
        "[2026-01-05 10:00:33 TP0] Prefill batch. bs=[1, 2] MiniMax KV Cache is allocated. #tokens: 5, KV size: 1.00 GB\n"
        "[2026-01-05 10:00:33 TP0] DetokenizerManager hit an exception: Traceback (most recent call last):\n"
        '  File "d.py", line 3\nRuntimeError: boom\n',
        SGLANG_0_5_23_TP2[: SGLANG_0_5_23_TP2.index("max_total_num_tokens=") + 30],  # cut mid-line
        "\n\n   \n" + SGLANG_0_5_23_TP2.replace("] ", "]  ").replace("\n", "\n\n"),
    ]
    out = [text.encode() for text in texts]
    out.append(bytes(range(256)) * 100 + b"\n" + KV_LINE.encode())
    if LOGS.is_dir():
        out.extend(path.read_bytes() for path in sorted(LOGS.glob("*.log")))
    return out


@pytest.mark.parametrize("chunk_bytes", [7, 64, 1 << 20, READ_CHUNK_BYTES])
def test_bulk_reading_equals_feeding_every_line(chunk_bytes):
    """Every real log and every decorated corpus: identical figures, line numbers, errors, missing notes."""
    for data in _corpora():
        bulk = assert_bulk_reading_equals_feeding_every_line(data, [chunk_bytes])
        if data.startswith((b"[pod", b"\x1b", b'{"log')):
            assert bulk.summary().pool_tokens() == 947824 and bulk.summary().ready


def test_every_handler_key_names_a_reader_method_and_the_bulk_reader_knows_every_key():
    reader = LogReader()
    for key, method in HANDLERS.items():
        assert len(key) == 4, key
        assert callable(getattr(reader, method)), method
    assert HANDLER_KEYS == set(HANDLERS) | {word[:4] for word in LEVEL_STARTS}


def test_the_reading_state_of_a_rank_has_every_figure_of_rank_figures():
    from dataclasses import fields

    from kvcheck.engines.base import RankFigures
    from kvcheck.engines.sglang.logs.reader import _READING_STATE, _Rank

    figures = {f.name: f.type for f in fields(RankFigures) if f.name not in ("rank", "figure_line")}
    reading = {f.name: f.type for f in fields(_Rank) if f.name not in _READING_STATE}
    assert reading == figures
