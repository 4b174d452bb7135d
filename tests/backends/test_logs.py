"""`kvcheck logs`: log files -> roles, measurements and findings; end to end through the CLI."""

from __future__ import annotations

import contextlib
import gzip
import io
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
import zlib
from pathlib import Path

import pytest

from kvcheck.backends.logs import args_from_argv, log_roles, read_log_file, read_logs
from kvcheck.errors import InputError
from kvcheck.model import Location
from tests.conftest import REPO_ROOT, _cli_env, run_kvcheck
from tests.datapaths import LOGS
from tests.engines.test_logparse import SGLANG_0_5_23_TP2, feed_every_line, long_log


def real_log(name: str) -> str:
    return str(LOGS / name)


def write(tmp_path: Path, name: str, text: str) -> str:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return str(path)


def final_line(tokens: int, context_len: int, tag: str = "TP0") -> str:
    return (
        f"[2026-01-05 10:01:20 {tag}] max_total_num_tokens={tokens}, chunked_prefill_size=8192, "
        f"max_prefill_tokens=16384, max_running_requests=3702, context_len={context_len}, available_gpu_mem=12.37 GB\n"
    )


PD_PREFILL = (
    "[2026-01-05 10:00:01] server_args={'model_path': 'zai-org/GLM-5.2-FP8', 'tp_size': 4, "
    "'disaggregation_mode': 'prefill', 'context_length': 1048576, 'allow_auto_truncate': True, "
    "'disaggregation_enable_kv_checksum': False, 'api_key': 'sk-live-123'}\n"
    "[2026-01-05 10:00:33 TP0] KV Cache is allocated. dtype: torch.float8_e4m3fn, #tokens: 681280, KV size: 40.00 GB\n"
    "[2026-01-05 10:01:20 TP0] KV pool holds 681280 tokens, fewer than --context-length 1048576. One full-length "
    "request cannot fit, so long requests will be refused or truncated at serving time.\n"
    + final_line(681280, 1048576)
    + "[2026-01-05 10:01:25] The server is fired up and ready to roll!\n"
)


# -- roles and figures -------------------------------------------------------------------------------


def test_a_complete_tp2_log_is_one_role_named_after_the_rank_with_the_final_line(tmp_path):
    path = write(tmp_path, "server.log", SGLANG_0_5_23_TP2)
    targets, measurements = read_logs([path], context_length=None)
    (target,), (measurement,) = targets, measurements
    assert target.name == measurement.role == "server.log[TP0]"  # the file's name; the path is in the locations
    assert (target.context_length, target.required_tokens, target.min_headroom) == (131072, 131072, 1.0)
    assert (measurement.pool_tokens, measurement.max_input_tokens, measurement.context_len) == (947824, 131066, 131072)
    assert measurement.source == "log" and measurement.findings == ()
    assert target.args["mem_fraction_static"] == 0.828 and target.args["tp_size"] == 2
    assert target.arg_location("mem_fraction_static") == Location(path, 1)
    assert target.location == Location(path, 18)
    assert measurement.details["figure_source"] == "final"
    assert [r["rank"] for r in measurement.details["ranks"]] == ["TP0", "TP1"]
    assert measurement.details["missing"] == []


def test_a_tp_rank_whose_allocation_is_smaller_is_the_pool_though_only_tp0_prints_a_final_line(tmp_path):
    # TP0's allocation and final lines agree, so TP1's allocation line is final too: 1,000, not TP0's 947,824
    path = write(tmp_path, "server.log", SGLANG_0_5_23_TP2.replace(
        "TP1] KV Cache is allocated. dtype: torch.bfloat16, #tokens: 947824", "TP1] KV Cache is allocated. dtype: "
        "torch.bfloat16, #tokens: 1000"))
    _, (measurement,) = read_logs([path], context_length=None)
    assert (measurement.role, measurement.pool_tokens) == ("server.log[TP1]", 1000)
    done = run_kvcheck("logs", path)
    assert done.exit_code == 1, done.stdout


def test_context_length_option_overrides_the_logs_window(tmp_path):
    path = write(tmp_path, "server.log", SGLANG_0_5_23_TP2)
    (target,), (measurement,) = read_logs([path], context_length=1048576, min_headroom=1.2)
    assert (target.context_length, target.required_tokens) == (1048576, 1258292)
    assert measurement.context_len == 131072  # the engine's own window stays reported


def test_attention_dp_ranks_are_one_role_each_and_dp0s_final_line_vouches_for_the_rest(tmp_path):
    lines = ["[2026-01-05 10:00:01] server_args={'tp_size': 4, 'attn_dp_size': 4}\n"]
    for dp in range(4):
        tokens = 500000 if dp != 2 else 480000
        lines.append(
            f"[2026-01-05 10:00:33 DP{dp} TP{dp} EP{dp}] KV Cache is allocated. #tokens: {tokens}, KV size: 30.00 GB\n"
        )
    lines.append(final_line(500000, 131072, "DP0 TP0 EP0"))
    lines.append("[2026-01-05 10:01:25] The server is fired up and ready to roll!\n")
    path = write(tmp_path, "decode.log", "".join(lines))
    targets, measurements = read_logs([path], context_length=None)
    assert [t.name for t in targets] == [f"decode.log[DP{i} TP{i} EP{i}]" for i in range(4)]
    assert [m.pool_tokens for m in measurements] == [500000, 500000, 480000, 500000]
    assert [m.details["figure_source"] for m in measurements] == ["final", "allocation", "allocation", "allocation"]
    assert [t.context_length for t in targets] == [131072] * 4
    assert all(m.findings == () for m in measurements)


def test_pipeline_stages_of_one_server_share_the_smallest_final_figure(tmp_path):
    text = final_line(500000, 131072, "PP0 TP0") + final_line(480000, 131072, "PP1 TP0")
    text += "[2026-01-05 10:01:25] The server is fired up and ready to roll!\n"
    path = write(tmp_path, "pp.log", text)
    (target,), (measurement,) = read_logs([path], context_length=None)
    assert target.name == "pp.log[PP1 TP0]"
    assert measurement.pool_tokens == 480000


def test_a_single_untagged_rank_is_named_by_the_file_alone(tmp_path):
    path = write(tmp_path, "tp1.log", final_line(500000, 131072, "").replace(" ]", "]"))
    (target,), _ = read_logs([path], context_length=None)
    assert target.name == "tp1.log"


def test_a_log_with_only_the_first_allocation_line_gets_a_provisional_warning(tmp_path):
    text = "\n".join(SGLANG_0_5_23_TP2.splitlines()[:12]) + "\n"
    path = write(tmp_path, "cut.log", text)
    (target,), (measurement,) = read_logs([path], context_length=131072)
    assert measurement.pool_tokens == 947824 and measurement.max_input_tokens is None
    (warning,) = measurement.findings
    assert (warning.rule, warning.severity, warning.location) == ("KV312", "warning", Location(path, 10))
    assert warning.message == (
        "the pool figure (947,824 tokens, line 10) is provisional: it comes from the first allocation line; "
        "the log has no final max_total_num_tokens line, which states the pool the server serves "
        "(post-capture sizing or DCP can change it); the log ends before the server reported ready "
        "(last phase: sizing_pool)"
    )
    assert measurement.details["missing"] == [
        "no final max_total_num_tokens line",
        "no context_len",
        "no 'The server is fired up and ready to roll!' line",
    ]


def test_a_va_upper_bound_without_the_resized_pool_is_not_checked(tmp_path):
    text = (
        "[2026-01-05 10:00:33] KV Cache VA upper bound. dtype: torch.bfloat16, #tokens: 1048576, "
        "K size: 32.00 GB, V size: 32.00 GB\n"
    )
    path = write(tmp_path, "va.log", text)
    (_,), (measurement,) = read_logs([path], context_length=131072)
    (error,) = measurement.findings
    assert (error.rule, error.severity) == ("KV316", "error")
    assert error.message == (
        "the pool figure (1,048,576 tokens, line 1) is not a serving pool: it is the 'KV Cache VA upper "
        "bound' of post-capture sizing and the log has no line with the resized pool (post-capture sizing "
        "only shrinks it)"
    )
    assert measurement.details["figure_source"] == "upper_bound"
    result = run_kvcheck("logs", path, "--context-length", "131072", "--format", "json")
    assert result.exit_code == 3  # an upper bound that can only shrink never passes the gate
    assert json.loads(result.stdout)["roles"][0]["status"] == "error"


def test_an_engine_that_failed_after_sizing_its_pool_is_not_checked(tmp_path):
    text = (
        "[2026-01-05 10:00:33] KV Cache is allocated. dtype: torch.bfloat16, #tokens: 900000, "
        "K size: 27.47 GB, V size: 27.47 GB\n"
        "[2026-01-05 10:00:40] Scheduler hit an exception: Traceback (most recent call last):\n"
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB\n"
    )
    path = write(tmp_path, "graph-oom.log", text)
    (_,), (measurement,) = read_logs([path], context_length=131072)
    assert [(f.rule, f.severity) for f in measurement.findings] == [("KV316", "error")]
    assert "the engine failed after sizing its pool: Scheduler hit an exception" in measurement.findings[0].message
    assert run_kvcheck("logs", path, "--context-length", "131072").exit_code == 3


def test_one_figure_gets_one_verdict(tmp_path):
    # KV316 said "not a serving pool" and KV101 then judged the same figure short of the window
    crashed = write(tmp_path, "crashed.log", (
        "[2026-01-05 10:00:33] KV Cache is allocated. dtype: torch.bfloat16, #tokens: 90000, "
        "K size: 2.75 GB, V size: 2.75 GB\n"
        "[2026-01-05 10:00:40] Scheduler hit an exception: Traceback (most recent call last):\n"
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB\n"))
    result = run_kvcheck("logs", crashed, "--context-length", "131072", "--format", "json")
    report = json.loads(result.stdout)
    assert (result.exit_code, [f["rule"] for f in report["findings"]]) == (3, ["KV316"])
    assert report["roles"][0]["pool_tokens"] is None and report["roles"][0]["details"]["figure_source"] == "allocation"
    # an upper bound already below the window: the served pool is smaller still, so it is known to fall short
    bound = write(tmp_path, "bound.log", (
        "[2026-01-05 10:00:33] KV Cache VA upper bound. dtype: torch.bfloat16, #tokens: 65536, "
        "K size: 2.00 GB, V size: 2.00 GB\n"))
    result = run_kvcheck("logs", bound, "--context-length", "131072", "--format", "json")
    report = json.loads(result.stdout)
    assert (result.exit_code, [f["rule"] for f in report["findings"]]) == (1, ["KV312", "KV101"])  # warning, error
    assert report["roles"][0]["pool_tokens"] == 65536


def test_a_log_without_any_pool_figure_is_an_error_quoting_the_engines_failure(tmp_path):
    text = (
        "[2026-01-05 10:00:01] server_args={'model_path': 'm', 'context_length': 131072}\n"
        "[2026-01-05 10:00:31 TP0] Load weight end. elapsed=20.84 s, type=LlamaForCausalLM, avail mem=1.43 GB, mem usage=77.52 GB.\n"
        "[2026-01-05 10:00:33 TP0] Scheduler hit an exception: Traceback (most recent call last):\n"
        '  File "/sglang/srt/mem_cache/kv_cache_configurator.py", line 3043, in _profile_available_bytes\n'
        "ValueError: Loaded weights leave no GPU memory for the KV cache under --mem-fraction-static=0.5.\n"
    )
    path = write(tmp_path, "oom.log", text)
    (target,), (measurement,) = read_logs([path], context_length=None)
    assert target.name == "oom.log" and target.context_length == 131072
    assert measurement.pool_tokens is None
    (error,) = measurement.findings
    assert (error.rule, error.severity) == ("KV309", "error")
    assert error.message == (
        "the log holds no KV pool figure; the engine failed: Scheduler hit an exception: "
        "ValueError: Loaded weights leave no GPU memory for the KV cache under --mem-fraction-static=0.5."
    )  # the exception line, not "Traceback (most recent call last):" (issue 19, item 5)
    assert measurement.details["errors"][-1].startswith("ValueError: Loaded weights leave no GPU memory")
    assert measurement.details["phase"] == "failed"


def test_no_context_length_anywhere_is_an_error_finding_not_a_pass(tmp_path):
    path = write(tmp_path, "alloc.log", "[2026-01-05 10:00:33 TP0] KV Cache is allocated. #tokens: 5000, KV size: 1.00 GB\n")
    (target,), (measurement,) = read_logs([path], context_length=None)
    assert target.context_length == 0
    assert [f.rule for f in measurement.findings] == ["KV312", "KV313"]
    assert measurement.findings[1].severity == "error"


def test_server_args_context_length_is_the_window_when_no_line_states_context_len(tmp_path):
    text = "[2026-01-05 10:00:01] server_args={'context_length': 65536}\n" + (
        "[2026-01-05 10:00:33 TP0] KV Cache is allocated. #tokens: 500000, KV size: 1.00 GB\n"
    )
    path = write(tmp_path, "ctx.log", text)
    (target,), (measurement,) = read_logs([path], context_length=None)
    assert (target.context_length, measurement.context_len, measurement.max_input_tokens) == (65536, 65536, 65530)


def test_engine_args_come_from_server_args_with_secrets_redacted(tmp_path):
    path = write(tmp_path, "prefill.log", PD_PREFILL)
    (target,), (measurement,) = read_logs([path], context_length=None)
    assert target.args["disaggregation_mode"] == "prefill"
    assert target.args["allow_auto_truncate"] is True
    assert target.args["api_key"] == "REDACTED" and measurement.resolved_args["api_key"] == "REDACTED"
    assert measurement.details["engine_warnings"] == [
        "line 3: KV pool holds 681280 tokens, fewer than --context-length 1048576. One full-length request "
        "cannot fit, so long requests will be refused or truncated at serving time."
    ]


def test_engine_args_come_from_the_quoted_command_when_there_is_no_server_args():
    argv = (
        "python3", "-m", "sglang.launch_server", "--model", "/m", "--tp", "4", "--mem-fraction-static", "0.93",
        "--trust-remote-code", "--host", "0.0.0.0", "--port", "8000", "--api-key", "sk-1",
        "--json-model-override-args", '{"a": 1}', "--made-up-flag", "7",
    )
    args = args_from_argv(argv, version=None)
    assert args == {
        "model_path": "/m", "tp_size": 4, "mem_fraction_static": 0.93, "trust_remote_code": True,
        "host": "0.0.0.0", "port": 8000, "api_key": "sk-1", "json_model_override_args": '{"a": 1}',
        "made_up_flag": 7,
    }


def test_the_quoted_command_becomes_argv_and_argv_args_without_secrets(tmp_path):
    text = (
        "$ python3 -m sglang.launch_server --model-path m --tp 2 --api-key sk-1 --port 30000\n"
        + final_line(500000, 131072)
    )
    path = write(tmp_path, "cmd.log", text)
    (target,), (measurement,) = read_logs([path], context_length=None)
    assert measurement.argv == (
        "python3", "-m", "sglang.launch_server", "--model-path", "m", "--tp", "2", "--api-key", "REDACTED",
        "--port", "30000",
    )
    assert target.argv_args == ("--tp", "2", "--api-key", "REDACTED")
    assert target.engine_command == ("python3", "-m", "sglang.launch_server")
    assert target.args["tp_size"] == 2 and target.args["api_key"] == "REDACTED"
    assert measurement.details["args_source"] == "command_line"


def test_gzip_logs_are_read(tmp_path):
    path = tmp_path / "server.log.gz"
    path.write_bytes(gzip.compress(SGLANG_0_5_23_TP2.encode()))
    (_,), (measurement,) = read_logs([str(path)], context_length=None)
    assert measurement.pool_tokens == 947824


def _roles(name, summary):
    return [(t, m) for t, m in log_roles(name, summary, context_length=131072, min_headroom=1.0)]


def test_a_long_log_from_a_file_a_gzip_file_and_a_pipe_reads_as_feeding_every_line(tmp_path, monkeypatch):
    """The bulk reader behind `kvcheck logs`: same figures, line numbers, quoted errors and notes."""
    data = long_log(kubectl=True)
    expected = feed_every_line(data).summary()
    plain = tmp_path / "server.log"
    plain.write_bytes(data)
    packed = tmp_path / "server.log.gz"
    packed.write_bytes(gzip.compress(data))
    assert read_log_file(str(plain)) == expected
    assert read_log_file(str(packed)) == expected

    read_fd, write_fd = os.pipe()

    def write() -> None:
        with open(write_fd, "wb") as pipe:
            pipe.write(data)

    writer = threading.Thread(target=write)
    writer.start()
    with open(read_fd, "rb") as pipe:
        monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(pipe))
        from_pipe = read_log_file("-")
    writer.join()
    assert from_pipe == expected

    roles = _roles("server.log", read_log_file(str(plain)))
    assert roles == _roles("server.log", expected)
    (_, measurement), *_ = roles
    assert measurement.pool_tokens == 947000 and measurement.details["boots"] == 2
    assert measurement.details["errors"] == list(expected.errors[-12:])


# -- bad input: exit 2 ---------------------------------------------------------------------------------


def test_files_that_are_not_sglang_logs_are_all_reported_in_one_input_error(tmp_path):
    empty = write(tmp_path, "empty.log", "")
    garbage = tmp_path / "garbage.bin"
    garbage.write_bytes(bytes(range(256)) * 64)
    missing = str(tmp_path / "missing.log")
    good = write(tmp_path, "good.log", SGLANG_0_5_23_TP2)
    with pytest.raises(InputError) as caught:
        read_logs([good, empty, str(garbage), missing, good], context_length=None)
    assert caught.value.exit_code == 2
    assert caught.value.message.splitlines() == [
        f"{empty}: empty, not an SGLang log",
        f"{garbage}: not an SGLang log: none of its 65 lines is an SGLang startup line (server_args, "
        "'Load weight', 'KV Cache is allocated', 'max_total_num_tokens=', ...)",
        f"{missing}: no such file",
        f"{good}: given more than once",
    ]


def test_a_folder_and_a_damaged_gzip_are_input_errors(tmp_path):
    damaged = tmp_path / "x.log.gz"
    damaged.write_bytes(gzip.compress(SGLANG_0_5_23_TP2.encode())[:40])
    with pytest.raises(InputError) as caught:
        read_logs([str(tmp_path), str(damaged)], context_length=None)
    lines = caught.value.message.splitlines()
    assert lines[0] == f"{tmp_path}: is a folder, not a log file"
    assert lines[1].startswith(f"{damaged}: damaged gzip file")


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"context_length": 0}, "--context-length must be a positive number of tokens, not 0"),
        ({"context_length": None, "min_headroom": 0.0}, "--min-headroom must be at least 1, not 0.0"),
        ({"context_length": None, "min_headroom": 0.99}, "--min-headroom must be at least 1, not 0.99"),
    ],
)
def test_bad_options_are_input_errors(tmp_path, kwargs, message):
    path = write(tmp_path, "server.log", SGLANG_0_5_23_TP2)
    with pytest.raises(InputError) as caught:
        read_logs([path], **kwargs)
    assert caught.value.message == message


# -- real logs -----------------------------------------------------------------------------------------

# file -> (role names after the path, pool_tokens, KV312?, window the log states)
REAL = {
    "sglang-deepseek-r1-2x8xH20-tp16-k8s-doc.log": (["[TP0]"], [712400], True, 163840),
    "sglang-dsv32-exp-8xB200-dpattn-pr11309.log": (["[DP0 TP0]"], [975424], True, None),
    "sglang-glm5-fp8-mi35x-tp8-fp8kv.log": (["[TP0]"], [3262823], True, None),
    "sglang-mimo-v2-flash-tp4-swa-pr18039-main.log": (["[TP0]"], [375360], True, None),
    "sglang-qwen3-235b-fp8-4xH100-vllm21348.log": ([""], [367404], True, None),
    "sglang-qwen3-8b-tp1-blackwell288-clean-startup-doc.log": ([""], [1707904], True, 40960),
}


@pytest.mark.parametrize("name", sorted(REAL))
def test_real_logs_become_roles_with_their_pool(name):
    suffixes, pools, provisional, window = REAL[name]
    path = real_log(name)
    targets, measurements = read_logs([path], context_length=None)
    assert [t.name for t in targets] == [name + suffix for suffix in suffixes]
    assert [m.pool_tokens for m in measurements] == pools
    assert [f.rule for f in measurements[0].findings if f.rule == "KV312"] == (["KV312"] if provisional else [])
    assert measurements[0].context_len == window


def test_the_quoted_glm5_command_gives_typed_args():
    (target,), _ = read_logs([real_log("sglang-glm5-fp8-mi35x-tp8-fp8kv.log")], context_length=131072)
    assert target.args == {
        "attention_backend": "triton", "model_path": "zai-org/GLM-5-FP8", "tp_size": 8, "kv_cache_dtype": "fp8_e4m3",
    }
    assert target.model_path == "zai-org/GLM-5-FP8"


# -- end to end through the CLI ------------------------------------------------------------------------


def test_cli_passes_a_complete_log_with_exit_0(tmp_path):
    path = write(tmp_path, "server.log", SGLANG_0_5_23_TP2)
    result = run_kvcheck("logs", path, "--format", "json")
    assert result.exit_code == 0, result.stderr
    report = json.loads(result.stdout)
    assert (report["verdict"], report["exit_code"], report["context_length"]) == ("pass", 0, 131072)
    (role,) = report["roles"]
    assert (role["name"], role["status"], role["pool_tokens"], role["required_tokens"], role["max_input_tokens"]) == (
        "server.log[TP0]", "pass", 947824, 131072, 131066,
    )
    assert role["source"] == "log" and report["findings"] == []


def test_cli_fails_the_incidents_prefill_pool_with_exit_1(tmp_path):
    path = write(tmp_path, "prefill.log", PD_PREFILL)
    result = run_kvcheck("logs", path, "--format", "json")
    assert result.exit_code == 1, result.stderr
    report = json.loads(result.stdout)
    (role,) = report["roles"]
    assert (role["status"], role["pool_tokens"], role["required_tokens"], role["max_input_tokens"]) == (
        "fail", 681280, 1048576, 681274,
    )
    rules = sorted((f["rule"], f["severity"]) for f in report["findings"])
    assert rules == [("KV101", "error"), ("KV202", "warning"), ("KV203", "warning")]
    kv202 = next(f for f in report["findings"] if f["rule"] == "KV202")
    assert kv202["location"] == {"file": path, "line": 1, "column": None}


def test_cli_reads_kubectl_logs_from_stdin_with_a_context_length():
    text = "".join(f"2026-01-05T10:00:{i % 60:02d}.123456789Z {line}\n" for i, line in enumerate(SGLANG_0_5_23_TP2.splitlines()))
    result = run_kvcheck("logs", "-", "--context-length", "1048576", "--format", "json", stdin=text)
    assert result.exit_code == 1, result.stderr
    report = json.loads(result.stdout)
    (role,) = report["roles"]
    assert (role["name"], role["pool_tokens"], role["required_tokens"]) == ("<stdin>[TP0]", 947824, 1048576)
    assert sorted(f["rule"] for f in report["findings"]) == ["KV101", "KV102"]


def test_cli_without_any_window_is_exit_3(tmp_path):
    path = write(tmp_path, "alloc.log", "[2026-01-05 10:00:33 TP0] KV Cache is allocated. #tokens: 5000, KV size: 1.00 GB\n")
    result = run_kvcheck("logs", path, "--format", "json")
    assert result.exit_code == 3, result.stderr
    report = json.loads(result.stdout)
    assert report["verdict"] == "error"
    assert sorted(f["rule"] for f in report["findings"]) == ["KV312", "KV313"]


def test_cli_reads_a_vllm_v0_log_with_the_vllm_reader():
    # vLLM's V0 wording is read by the vLLM engine (tests/engines/vllm/test_logs.py): V0 keeps 1% of the
    # 22,982 blocks free, so one request holds (22982 - 229) x 16 tokens; the excerpt states no window
    path = real_log("vllm-gemma2-9b-8xL4-tp8-vllm7593.log")
    result = run_kvcheck("logs", path, "--format", "json")
    assert result.exit_code == 3, result.stderr
    (role,) = json.loads(result.stdout)["roles"]
    assert role["pool_tokens"] == (22982 - 229) * 16


def test_cli_strict_fails_on_a_provisional_figure(tmp_path):
    text = "\n".join(SGLANG_0_5_23_TP2.splitlines()[:12]) + "\n"
    path = write(tmp_path, "cut.log", text)
    assert run_kvcheck("logs", path, "--context-length", "131072").exit_code == 0
    assert run_kvcheck("logs", path, "--context-length", "131072", "--strict").exit_code == 1


def test_cli_real_tp16_log_passes_its_own_window():
    result = run_kvcheck("logs", real_log("sglang-deepseek-r1-2x8xH20-tp16-k8s-doc.log"), "--format", "json")
    assert result.exit_code == 0, result.stderr
    (role,) = json.loads(result.stdout)["roles"]
    assert (role["pool_tokens"], role["required_tokens"], role["max_input_tokens"]) == (712400, 163840, 163834)
    assert [r["rank"] for r in role["details"]["ranks"]] == [f"TP{i}" for i in range(8)]


def test_roles_are_named_by_the_file_and_rank_with_the_path_in_the_location(tmp_path):
    path = write(tmp_path, "prefill.log", PD_PREFILL)
    result = run_kvcheck("logs", path, "--format", "json")
    report = json.loads(result.stdout)
    assert [role["name"] for role in report["roles"]] == ["prefill.log[TP0]"]
    assert report["source"] == path
    located = [f for f in report["findings"] if f["location"] is not None]
    assert located and all(f["location"]["file"] == path and f["role"] == "prefill.log[TP0]" for f in located)


def test_two_files_of_one_name_keep_their_paths_as_names(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    first = write(tmp_path / "a", "server.log", SGLANG_0_5_23_TP2)
    second = write(tmp_path / "b", "server.log", SGLANG_0_5_23_TP2)
    targets, _ = read_logs([first, second], context_length=None)
    assert [t.name for t in targets] == [f"{first}[TP0]", f"{second}[TP0]"]


REFUSED_START = """\
Traceback (most recent call last):
  File "<frozen runpy>", line 198, in _run_module_as_main
  File "/venv/lib/python3.11/site-packages/sglang/launch_server.py", line 29, in <module>
    server_args = prepare_server_args(sys.argv[1:])
  File "/venv/lib/python3.11/site-packages/sglang/srt/server_args.py", line 730, in __post_init__
    self._handle_gpu_memory_settings(gpu_mem)
ValueError: The value of --max-total-tokens must be positive, got -5
"""


def test_a_start_refused_while_arguments_resolve_is_could_not_check_with_the_exception(tmp_path):
    # real SGLang 0.5.23 prints only a traceback: kvcheck said "not an SGLang log" (exit 2)
    path = write(tmp_path, "refused.log", REFUSED_START)
    result = run_kvcheck("logs", path, "--format", "json")
    report = json.loads(result.stdout)
    assert (result.exit_code, [f["rule"] for f in report["findings"]]) == (3, ["KV309"])
    assert report["findings"][0]["message"] == (
        "the log holds no KV pool figure; the engine failed: ValueError: The value of --max-total-tokens must be "
        "positive, got -5")


def test_another_programs_traceback_is_still_not_an_sglang_log(tmp_path):
    path = write(tmp_path, "other.log", REFUSED_START.replace("/sglang/", "/myapp/"))
    result = run_kvcheck("logs", path)
    assert result.exit_code == 2 and "not an SGLang log" in result.stderr


def test_a_crash_while_serving_keeps_the_sized_pool_with_a_warning_quoting_the_exception(tmp_path):
    # it was KV316 "failed after sizing its pool" quoting "Traceback (most recent call last):"
    boot = "".join(line for line in (LOGS / "sglang-dsv4-flash-base-8xH20-tp8-mfs060-fixture.log").read_text(
        encoding="utf-8").splitlines(keepends=True) if not line.startswith("#"))
    crash = ("[2026-05-15 09:31:02 TP3] Scheduler hit an exception: Traceback (most recent call last):\n"
             '  File "/sgl-workspace/sglang/python/sglang/srt/managers/scheduler.py", line 2710, in run_scheduler\n'
             "    scheduler.event_loop_overlap()\n"
             "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.50 GiB\n")
    path = write(tmp_path, "served.log", boot + crash)
    result = run_kvcheck("logs", path, "--format", "json")
    report = json.loads(result.stdout)
    assert result.exit_code == 0, result.stdout
    assert [(r["status"], r["pool_tokens"]) for r in report["roles"]] == [("pass", 1317632)]
    (warning,) = report["findings"]
    assert (warning["rule"], warning["severity"]) == ("KV316", "warning")
    assert warning["message"] == (
        "the engine failed while serving, after it was ready: Scheduler hit an exception: torch.OutOfMemoryError: "
        "CUDA out of memory. Tried to allocate 1.50 GiB; the pool it sized at boot is judged")


CPU_SERVER = """\
[2026-12-01 10:00:01] server_args=ServerArgs(model_path='/tmp/tiny-llama', context_length=8192, max_total_tokens=2048, device='cpu')
[2026-12-01 10:00:05] Load weight end. elapsed=0.21 s, type=LlamaForCausalLM, dtype=torch.bfloat16, avail mem=21.50 GB, mem usage=-0.00 GB.
[2026-12-01 10:00:05] KV Cache is allocated. dtype: torch.bfloat16, #tokens: 2048, K size: 0.00 GB, V size: 0.00 GB
[2026-12-01 10:00:06] max_total_num_tokens=2048, chunked_prefill_size=8192, max_prefill_tokens=16384, max_running_requests=2048, context_len=8192, available_cpu_mem=21.49 GB
[2026-12-01 10:00:09] The server is fired up and ready to roll!
"""


def test_a_negative_weights_figure_is_kept_clamped_with_a_note(tmp_path):
    # real SGLang on CPU prints `mem usage=-0.00 GB`; the figure was dropped as unreadable
    path = write(tmp_path, "cpu.log", CPU_SERVER)
    (_,), (measurement,) = read_logs([path], context_length=None)
    (rank,) = measurement.details["ranks"]
    assert (rank["weights_gib"], rank["weights_note"]) == (0.0, "the log states mem usage=-0.00 GB (below zero); read as 0")
    assert str(rank["weights_gib"]) == "0.0"  # not -0.0


def test_the_fix_names_the_cap_when_max_total_tokens_sized_the_pool(tmp_path):
    # the hint spoke only of GPU memory, TP and FP8 although --max-total-tokens was why the pool was short
    path = write(tmp_path, "cpu.log", CPU_SERVER)
    result = run_kvcheck("logs", path, "--format", "json")
    assert result.exit_code == 1
    (kv101,) = [f for f in json.loads(result.stdout)["findings"] if f["rule"] == "KV101"]
    assert kv101["hint"] == ("the largest context that fits this pool is 2,048 tokens; the pool is capped by "
                             "--max-total-tokens 2,048: raise it to at least 8,192 if the memory holds that many")


def _follow(text: str | bytes, *args: str, timeout_s: float = 1.0) -> tuple[subprocess.CompletedProcess, float]:
    """`kubectl logs -f POD | kvcheck logs -`: the log is written and the pipe stays open until kvcheck exits."""
    start = time.monotonic()
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        proc = subprocess.Popen([sys.executable, "-m", "kvcheck", "logs", "-", "--timeout", str(timeout_s), *args],
                                cwd=REPO_ROOT, env=_cli_env(None), stdin=subprocess.PIPE, stdout=out, stderr=err)
        assert proc.stdin is not None
        try:
            proc.stdin.write(text if isinstance(text, bytes) else text.encode())
            proc.stdin.flush()  # and left open (not communicate(), which closes it), as a follow stream leaves it
            proc.wait(timeout=60)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            proc.stdin.close()
        wall = time.monotonic() - start
        out.seek(0)
        err.seek(0)
        return subprocess.CompletedProcess(proc.args, proc.returncode, out.read().decode(), err.read().decode()), wall


def test_a_pipe_that_does_not_end_is_read_until_the_timeout_and_judged_with_kv312():
    """`kvcheck logs -` behind `kubectl logs -f` used to wait for ever: the pipe never ends. It now stops at
    --timeout and judges the startup it read (exit 0 here), saying what it did not read."""
    done, wall = _follow(SGLANG_0_5_23_TP2, "--context-length", "131072", "--format", "json", timeout_s=1.5)
    assert done.returncode == 0, done.stderr
    assert wall < 30  # not the 60 s the helper waits: kvcheck ended on its own
    report = json.loads(done.stdout)
    (role,) = report["roles"]
    assert (role["pool_tokens"], role["status"]) == (947824, "pass")
    (kv312,) = [f for f in report["findings"] if f["rule"] == "KV312"]
    assert kv312["severity"] == "warning"
    assert kv312["message"] == (
        "the pool figure (947,824 tokens, line 18) was read and the server said it was ready ('The server is fired "
        "up and ready to roll!'); <stdin> was still open after 1.5 s, so the stream was cut at the time limit after "
        "23 lines: a restart after that point, with another pool, would not be seen")
    # --strict makes the unread tail a failure
    strict, _ = _follow(SGLANG_0_5_23_TP2, "--context-length", "131072", "--strict", timeout_s=0.5)
    assert strict.returncode == 1, strict.stderr


def _written_then_held(text: str, *args: str, timeout_s: float) -> tuple[int, dict]:
    """`kubectl logs -f POD | kvcheck logs -` with a real writer: a process writes the log, then sleeps with the
    pipe open, as a server that is up and logs nothing more does. The exit code and the JSON report."""
    writer = subprocess.Popen([sys.executable, "-c", "import sys, time; sys.stdout.write(sys.argv[1]); "
                               "sys.stdout.flush(); time.sleep(120)", text], stdout=subprocess.PIPE)
    try:
        done = subprocess.run([sys.executable, "-m", "kvcheck", "logs", "-", "--timeout", str(timeout_s), *args,
                               "--format", "json"], cwd=REPO_ROOT, env=_cli_env(None), stdin=writer.stdout,
                              capture_output=True, text=True, timeout=60)
    finally:
        writer.kill()
        writer.wait()
        assert writer.stdout is not None
        writer.stdout.close()
    return done.returncode, json.loads(done.stdout)


READY = "The server is fired up and ready to roll!"


def _kv312(report: dict) -> list[tuple[str, str]]:
    return [(f["severity"], f["message"]) for f in report["findings"] if f["rule"] == "KV312"]


def test_a_pipe_cut_after_the_ready_line_says_the_pool_was_read_and_the_server_was_ready():
    """The time limit cut a pipe that had given the whole startup: the pool figure was read and the server said
    it was ready. The message said 'its startup was not read to its end' whenever the log lacked any line kvcheck
    looks for (here the server_args line, which a rotated log loses), as if the log stopped before readiness.
    It stays KV312, a warning (exit 0, 1 under --strict): a restart after the cut, with another pool, is unseen."""
    code, report = _written_then_held(SGLANG_0_5_23_TP2, "--context-length", "131072", timeout_s=1)
    assert code == 0
    assert (report["roles"][0]["pool_tokens"], report["roles"][0]["status"]) == (947824, "pass")
    assert _kv312(report) == [("warning",
        f"the pool figure (947,824 tokens, line 18) was read and the server said it was ready ('{READY}'); "
        "<stdin> was still open after 1 s, so the stream was cut at the time limit after 23 lines: a restart "
        "after that point, with another pool, would not be seen")]
    no_args = "\n".join(SGLANG_0_5_23_TP2.splitlines()[1:]) + "\n"
    code, report = _written_then_held(no_args, "--context-length", "131072", timeout_s=1)
    assert code == 0
    assert _kv312(report) == [("warning",
        f"the pool figure (947,824 tokens, line 17) was read and the server said it was ready ('{READY}'); "
        "<stdin> was still open after 1 s, so the stream was cut at the time limit after 22 lines: a restart "
        "after that point, with another pool, would not be seen")]
    strict, _ = _written_then_held(no_args, "--context-length", "131072", "--strict", timeout_s=1)
    assert strict == 1


def test_a_pipe_cut_before_the_ready_line_says_so():
    head = "\n".join(SGLANG_0_5_23_TP2.splitlines()[:20]) + "\n"  # the final pool line, not the ready line
    code, report = _written_then_held(head, "--context-length", "131072", timeout_s=1)
    assert code == 0
    assert _kv312(report) == [
        ("warning", "the pool figure (947,824 tokens, line 18) is provisional: the log ends before the server "
                    "reported ready (last phase: capturing_graphs)"),
        ("warning", f"<stdin> was still open after 1 s, so the stream was cut at the time limit after 20 lines, "
                    f"before the server said it was ready ('{READY}'): the pool figure (947,824 tokens, line 18) "
                    "was read, but the startup was not read to its end"),
    ]


def test_a_vllm_pipe_cut_after_the_ready_line_says_the_pool_was_read_and_the_server_was_ready():
    log = (REPO_ROOT / "tests" / "data" / "vllm" / "0.32.0-cpu-pass.log").read_text(encoding="utf-8")
    code, report = _written_then_held(log, timeout_s=1)
    assert code == 0
    figure_line = report["roles"][0]["details"]["figure_line"]
    assert _kv312(report) == [("warning",
        f"the pool figure (16,256 tokens, line {figure_line}) was read and the server said it was ready "
        "('Application startup complete.'); <stdin> was still open after 1 s, so the stream was cut at the time "
        f"limit after {len(log.splitlines()):,} lines: a restart after that point, with another pool, would not "
        "be seen")]


def test_a_pipe_that_stops_before_the_pool_is_exit_3_at_the_timeout():
    head = "\n".join(SGLANG_0_5_23_TP2.splitlines()[:3]) + "\n"
    done, _ = _follow(head, "--context-length", "131072", "--format", "json", timeout_s=0.5)
    assert done.returncode == 3, done.stderr
    report = json.loads(done.stdout)
    assert sorted(f["rule"] for f in report["findings"]) == ["KV309", "KV312"]
    kv312 = next(f for f in report["findings"] if f["rule"] == "KV312")
    assert kv312["message"] == (
        "<stdin> was still open after 0.5 s, so the stream was cut at the time limit after 3 lines, before the "
        "server said it was ready ('The server is fired up and ready to roll!'): no pool figure was read")


def test_a_pipe_that_ends_is_not_cut(monkeypatch):
    # the whole log arrives and the pipe closes: no KV312, however short the time limit
    result = run_kvcheck("logs", "-", "--context-length", "131072", "--timeout", "0.1", "--format", "json",
                         stdin=SGLANG_0_5_23_TP2)
    assert result.exit_code == 0, result.stderr
    assert [f["rule"] for f in json.loads(result.stdout)["findings"]] == []


def test_a_pipe_that_never_pauses_is_cut_at_the_timeout_too():
    """`yes | kvcheck logs -`, or a chatty `kubectl logs -f`: data arrives faster than it is read, so the reader
    never waits on the pipe. It used to read for ever (the time limit was only looked at while waiting); it
    stops at --timeout all the same."""
    start = time.monotonic()
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        proc = subprocess.Popen([sys.executable, "-m", "kvcheck", "logs", "-", "--timeout", "1",
                                 "--context-length", "131072", "--format", "json"],
                                cwd=REPO_ROOT, env=_cli_env(None), stdin=subprocess.PIPE, stdout=out, stderr=err)
        assert proc.stdin is not None

        def flood() -> None:
            try:
                proc.stdin.write(SGLANG_0_5_23_TP2.encode())
                while True:
                    proc.stdin.write(b"y\n" * 4096)
            except (BrokenPipeError, OSError, ValueError):
                pass

        writer = threading.Thread(target=flood, daemon=True)
        writer.start()
        try:
            proc.wait(timeout=60)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            with contextlib.suppress(OSError):  # the flood's last write, unread
                proc.stdin.close()
        assert time.monotonic() - start < 30  # ended on its own, not by the 60 s the test waits
        out.seek(0)
        err.seek(0)
        assert proc.returncode == 0, err.read().decode()
        report = json.loads(out.read().decode())
    assert report["roles"][0]["pool_tokens"] == 947824
    (kv312,) = [f for f in report["findings"] if f["rule"] == "KV312"]
    assert kv312["message"].startswith(
        "the pool figure (947,824 tokens, line 18) was read and the server said it was ready ('The server is fired "
        "up and ready to roll!'); <stdin> was still open after 1 s, so the stream was cut at the time limit after ")


def test_a_gzip_pipe_cut_at_the_timeout_is_judged_on_what_arrived_not_called_damaged():
    """A compressed log on a slow pipe (`ssh host cat boot.log.gz`) that the time limit cuts before gzip's
    end: what arrived decompresses and is judged, with KV312, as a plain pipe is. It used to be exit 2,
    'damaged gzip file', for a file nothing was wrong with."""
    packer = zlib.compressobj(wbits=31)  # the gzip format
    head = packer.compress(SGLANG_0_5_23_TP2.encode()) + packer.flush(zlib.Z_SYNC_FLUSH)  # no end marker yet
    done, _ = _follow(head, "--context-length", "131072", "--format", "json", timeout_s=1.0)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["roles"][0]["pool_tokens"] == 947824
    assert [f["rule"] for f in report["findings"]] == ["KV312"]


def test_a_pipe_that_gave_nothing_by_the_timeout_is_not_checked_not_an_empty_log():
    """`kubectl logs -f` on a pod still pulling its image: nothing arrived in time. That is a log not read to
    its end (exit 3, KV309 and KV312), not an empty file that is no SGLang log (exit 2) as it used to be."""
    done, _ = _follow("", "--context-length", "131072", "--format", "json", timeout_s=0.5)
    assert done.returncode == 3, done.stderr
    report = json.loads(done.stdout)
    assert sorted(f["rule"] for f in report["findings"]) == ["KV309", "KV312"]
    kv312 = next(f for f in report["findings"] if f["rule"] == "KV312")
    assert kv312["message"] == (
        "<stdin> was still open after 0.5 s, so the stream was cut at the time limit after 0 lines, before the "
        "server said it was ready ('The server is fired up and ready to roll!'): no pool figure was read")
