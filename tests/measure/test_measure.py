"""MeasureBackend end to end against the engine double: every path, and no process left behind."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import re
import signal
import socket
import stat
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from kvcheck.backends.base import Backend
from kvcheck.backends.measure import MeasureBackend
from kvcheck.backends.measure.launchers import local
from kvcheck.backends.measure.launchers.local import conflicts
from kvcheck.errors import EstimateError, GpuInventoryError, InputError
from kvcheck.model import PoolMeasurement, RoleTarget
from tests.doubles.fake_nvml import MIB, FakeGpu, FakeNvml, FakeProcess
from tests.measure.conftest import ENGINE, FAKE_SGLANG, REPO, PidFile, make_target, pid_alive

DETACHING = REPO / "tests" / "doubles" / "detaching_engine.py"


def measure(*targets: RoleTarget, **options) -> list[PoolMeasurement]:
    options.setdefault("gpu_check", False)
    options.setdefault("progress", False)
    options.setdefault("grace_s", 5.0)
    options.setdefault("timeout_s", 60.0)
    return MeasureBackend(**options).measure(list(targets))


def rules(measurement: PoolMeasurement) -> list[tuple[str, str]]:
    return [(f.rule, f.severity) for f in measurement.findings]


def test_pool_is_read_from_log_and_server_info(pidfile: PidFile, tmp_path: Path, monkeypatch) -> None:
    envfile = tmp_path / "env.json"
    monkeypatch.setenv("FAKE_SGLANG_ENVFILE", str(envfile))
    target = make_target(args={"tp_size": 2, "mem_fraction_static": 0.85}, gpus=(2, 3), env={"KVTEST_X": "1"})
    [m] = measure(target)
    assert (m.role, m.source, m.pool_tokens, m.max_input_tokens, m.context_len) == (
        "prefill", "measure", 947824, 131066, 131072,
    )  # fmt: skip
    assert m.engine_version == "0.5.23"
    assert m.findings == ()
    assert m.gpus == (2, 3)
    port = m.details["ports"]["http"]
    assert m.argv == (
        *ENGINE,
        "--model-path", "meta-llama/Llama-3.1-8B-Instruct", "--tp-size", "2", "--mem-fraction-static", "0.85",
        "--host", "127.0.0.1", "--port", str(port),
    )  # fmt: skip
    seen = json.loads(envfile.read_text())
    assert seen["argv"] == list(m.argv[2:])
    assert seen["CUDA_VISIBLE_DEVICES"] == "2,3"
    assert seen["env"]["KVTEST_X"] == "1"
    assert seen["env"]["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID"
    # TP1 prints no final line; its allocation line counts as final since TP0's two lines agree
    assert m.details["log_ranks"] == [{"rank": "TP0", "pool_tokens": 947824, "context_len": 131072},
                                      {"rank": "TP1", "pool_tokens": 947824, "context_len": None}]
    assert m.details["kv_allocated_tokens"] == {"TP0": 947824, "TP1": 947824}
    assert m.details["server_info"]["dp_token_capacities"] == [947824]
    assert m.details["engine_env"] == {
        "CUDA_VISIBLE_DEVICES": "2,3",
        "CUDA_DEVICE_ORDER": "PCI_BUS_ID",
        "KVTEST_X": "1",
    }
    assert m.details["phase"] == "ready"
    assert m.resolved_args["tp_size"] == 2 and m.resolved_args["mem_fraction_static"] == 0.85
    assert len(pidfile.pids()) == 4


def test_attention_dp_pool_is_the_minimum_over_dp_ranks(pidfile: PidFile, monkeypatch) -> None:
    monkeypatch.setenv("FAKE_SGLANG_POOL_TOKENS", "500000,480000")
    [m] = measure(make_target(args={"tp_size": 4, "attn_dp_size": 2}, gpus=(0, 1, 2, 3)))
    # As SGLang prints it, only DP0's scheduler (tp_rank 0) logs the final line; DP0 TP0's allocation and
    # final lines agree, so the other ranks' allocation lines are final too (docs/logs.md), DP1's smaller
    # pool among them, and /server_info's per-rank token_capacity says the same
    assert m.pool_tokens == 480000
    assert m.details["log_ranks"] == [
        {"rank": "DP0 TP0", "pool_tokens": 500000, "context_len": 131072},
        {"rank": "DP0 TP1", "pool_tokens": 500000, "context_len": None},
        {"rank": "DP1 TP2", "pool_tokens": 480000, "context_len": None},
        {"rank": "DP1 TP3", "pool_tokens": 480000, "context_len": None},
    ]
    assert m.details["server_info"]["dp_token_capacities"] == [500000, 480000]
    assert rules(m) == []


def test_a_tp_rank_that_sized_a_smaller_pool_is_not_passed_over(pidfile: PidFile, monkeypatch) -> None:
    # only TP0 prints the final line (947,824); TP1's allocation line says 1,000: the pool is 1,000, and the
    # server's 947,824 disagrees (it passed on TP0's figure alone)
    monkeypatch.setenv("FAKE_SGLANG_TP_POOL_TOKENS", "1:1000")
    [m] = measure(make_target(args={"tp_size": 2}, gpus=(0, 1)))
    assert m.pool_tokens == 1000
    assert [r["pool_tokens"] for r in m.details["log_ranks"]] == [947824, 1000]
    assert ("KV310", "warning") in rules(m)


def test_pipeline_pool_is_the_minimum_over_stages(pidfile: PidFile, monkeypatch) -> None:
    monkeypatch.setenv("FAKE_SGLANG_POOL_TOKENS", "300000,250000")
    [m] = measure(make_target(args={"tp_size": 2, "pp_size": 2}, gpus=(0, 1, 2, 3)))
    assert m.pool_tokens == 250000
    assert [r["rank"] for r in m.details["log_ranks"]] == ["PP0 TP0", "PP0 TP1", "PP1 TP0", "PP1 TP1"]


def test_log_and_server_disagree_smaller_wins(pidfile: PidFile, monkeypatch) -> None:
    monkeypatch.setenv("FAKE_SGLANG_SERVER_POOL_TOKENS", "900000")
    [m] = measure(make_target())
    assert m.pool_tokens == 900000
    assert rules(m) == [("KV310", "warning")]


def test_engine_warning_below_context(pidfile: PidFile, monkeypatch) -> None:
    monkeypatch.setenv("FAKE_SGLANG_POOL_TOKENS", "98304")
    [m] = measure(make_target(args={"tp_size": 2}, gpus=(0, 1)))
    assert m.pool_tokens == 98304
    assert rules(m) == [("KV314", "warning")]
    assert m.findings[0].message.startswith("SGLang warned: [TP0] KV pool holds 98304 tokens, fewer than")
    assert m.findings[0].message.endswith("(2 ranks)")


def test_version_mismatch_is_kv303(pidfile: PidFile, monkeypatch) -> None:
    monkeypatch.setenv("FAKE_SGLANG_VERSION", "0.5.22")
    [m] = measure(make_target(engine_version="0.5.23"))
    assert m.pool_tokens == 947824
    assert m.engine_version == "0.5.22"
    assert rules(m) == [("KV303", "error")]


def test_older_release_log_format_and_get_server_info(pidfile: PidFile, monkeypatch) -> None:
    monkeypatch.setenv("FAKE_SGLANG_MODE", "old_release")
    [m] = measure(make_target(args={"tp_size": 2}, gpus=(0, 1), engine_version="0.4.1.post3"))
    assert m.pool_tokens == 947824
    assert m.findings == ()
    assert m.details["server_info"]["endpoint"] == "/get_server_info"
    assert [r["rank"] for r in m.details["log_ranks"]] == ["TP0", "TP1"]  # every rank printed it then


def test_log_level_warning_falls_back_to_server_info(pidfile: PidFile) -> None:
    [m] = measure(make_target(args={"log_level": "warning"}), ready_wait_s=0.1)
    assert m.pool_tokens == 947824
    assert rules(m) == [("KV310", "warning")]
    assert "no max_total_num_tokens line" in m.findings[0].message
    assert m.details["ready_line"] is False


def test_no_http_answer_means_log_only_and_unconfirmed_version(pidfile: PidFile, monkeypatch) -> None:
    monkeypatch.setenv("FAKE_SGLANG_MODE", "no_http")
    [m] = measure(make_target())
    assert m.pool_tokens == 947824
    assert rules(m) == [("KV310", "warning"), ("KV303", "error")]
    assert m.details["server_info_error"].startswith("http://127.0.0.1:")


def test_out_of_memory_while_sizing(pidfile: PidFile, monkeypatch) -> None:
    monkeypatch.setenv("FAKE_SGLANG_MODE", "oom")
    [m] = measure(make_target(args={"tp_size": 2, "mem_fraction_static": 0.6}, gpus=(0, 1)))
    assert m.pool_tokens is None
    assert rules(m) == [("KV301", "error")]
    message = m.findings[0].message
    assert message.startswith(
        "the engine exited with status 137 (killed by SIGKILL) before reporting its pool (phase: failed); "
        "its last lines:\n"
    )
    assert "Loaded weights leave no GPU memory for the KV cache under --mem-fraction-static=0.6" in message
    assert m.findings[0].hint == ("the engine ran out of memory: raise mem-fraction-static, add GPUs (tp-size) or "
                                  "choose a smaller model or KV dtype (keep the whole log with --logs-dir DIR)")
    assert m.details["exit_status"] == -9


def test_out_of_memory_while_capturing_graphs_after_the_pool(pidfile: PidFile, monkeypatch) -> None:
    monkeypatch.setenv("FAKE_SGLANG_MODE", "oom_graph")
    [m] = measure(make_target())
    assert m.pool_tokens is None
    assert rules(m) == [("KV301", "error")]
    assert "torch.OutOfMemoryError: CUDA out of memory" in m.findings[0].message


def test_crash_before_the_pool(pidfile: PidFile) -> None:
    # the double refuses, as real SGLang does, a --context-length above the model's (131072 here)
    [m] = measure(make_target(args={"context_length": 2097152}))
    assert rules(m) == [("KV301", "error")]
    assert m.findings[0].message.startswith("the engine exited with status 1 before reporting its pool")
    assert (
        "ValueError: Warning: User-specified context_length (2097152) is greater than the derived context_length "
        "(131072)" in m.findings[0].message
    )


def test_argparse_error_exit_2(pidfile: PidFile) -> None:
    [m] = measure(make_target(args={"cuda_graph_max_bs": 256}))
    assert rules(m) == [("KV301", "error")]
    assert m.findings[0].message.startswith("the engine exited with status 2 before reporting its pool")
    assert "ambiguous option: --cuda-graph-max-bs could match" in m.findings[0].message
    assert m.findings[0].hint.startswith("the engine rejected its command line")


def test_timeout_names_the_phase(pidfile: PidFile, monkeypatch) -> None:
    monkeypatch.setenv("FAKE_SGLANG_MODE", "hang")
    # the double hangs in "loading weights" for good: 5 s lets a loaded host reach that phase first
    [m] = measure(make_target(args={"tp_size": 2}, gpus=(0, 1)), timeout_s=5)
    assert rules(m) == [("KV301", "error")]
    assert m.findings[0].message.startswith(
        "the engine did not report its pool within 5 s (phase: loading weights); its last lines:"
    )


def test_children_that_ignore_sigterm_are_killed(pidfile: PidFile, monkeypatch) -> None:
    monkeypatch.setenv("FAKE_SGLANG_MODE", "ignore_sigterm")
    [m] = measure(make_target(args={"tp_size": 2}, gpus=(0, 1)), grace_s=0.2)
    assert m.pool_tokens == 947824
    assert len(pidfile.pids()) == 4  # the fixture asserts none of them survives


def test_multi_node_role_is_not_measured(pidfile: PidFile) -> None:
    [m] = measure(make_target(args={"nnodes": 2, "tp_size": 2}))
    assert rules(m) == [("KV301", "error")]
    assert m.findings[0].message == (
        "role prefill spans 2 nodes (nnodes: 2); measuring across nodes is not supported on one host"
    )
    assert pidfile.pids() == []


def test_missing_engine_program(pidfile: PidFile) -> None:
    target = make_target()
    target = RoleTarget(
        **{**target.__dict__, "engine_command": ("/nonexistent/python3", "-m", "sglang.launch_server")}
    )
    [m] = measure(target)
    assert rules(m) == [("KV301", "error")]
    assert m.findings[0].message.startswith("could not start the engine: No such file or directory")


def test_logs_dir_keeps_each_role_log_in_the_runs_own_folder(pidfile: PidFile, tmp_path: Path) -> None:
    [m] = measure(make_target(name="decode/0"), logs_dir=tmp_path / "logs")
    [run] = (tmp_path / "logs").iterdir()
    assert re.fullmatch(r"\d{8}T\d{6}Z-[0-9a-f]{6}", run.name)
    assert stat.S_IMODE(run.stat().st_mode) == 0o700
    log = run / "decode_0.log"
    assert m.details["log_file"] == str(log)
    assert stat.S_IMODE(log.stat().st_mode) == 0o600
    assert "max_total_num_tokens=947824" in log.read_text()
    assert "The server is fired up and ready to roll!" in log.read_text()


def test_without_logs_dir_the_temporary_log_is_removed(pidfile: PidFile, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    monkeypatch.setenv("FAKE_SGLANG_MODE", "oom")
    [m] = measure(make_target())
    assert m.details["log_file"] is None
    assert "--logs-dir" in m.findings[0].hint
    assert list(tmp_path.glob("kvcheck-*.log")) == []


def test_dummy_weights_and_bootstrap_port(pidfile: PidFile, tmp_path: Path, monkeypatch) -> None:
    envfile = tmp_path / "env.json"
    monkeypatch.setenv("FAKE_SGLANG_ENVFILE", str(envfile))
    [m] = measure(make_target(args={"disaggregation_mode": "prefill"}), dummy_weights=True)
    bootstrap = m.details["ports"]["bootstrap"]
    assert isinstance(bootstrap, int) and bootstrap != m.details["ports"]["http"]
    assert json.loads(envfile.read_text())["argv"][-4:] == [
        "--disaggregation-bootstrap-port", str(bootstrap), "--load-format", "dummy",
    ]  # fmt: skip
    assert m.details["dummy_weights"] is True


# -- scheduling ------------------------------------------------------------------------------------


def test_conflicts_keep_manifest_order() -> None:
    a, b, c, d = (
        make_target(n, gpus=g) for n, g in [("a", (0, 1)), ("b", (2, 3)), ("c", (1, 2)), ("d", (4,))]
    )
    assert conflicts([a, b, c, d]) == [[], [], [0, 1], []]
    anywhere = make_target("x", gpus=())
    assert conflicts([a, anywhere, d]) == [[], [0], [1]]


def test_roles_on_disjoint_gpus_boot_side_by_side(pidfile: PidFile, tmp_path: Path) -> None:
    # Each engine waits for the other to have started before it reports ready: sequential boots
    # would time out.
    a_started, b_started = tmp_path / "a.started", tmp_path / "b.started"
    a = make_target(
        "a", gpus=(0,), env={"FAKE_SGLANG_TOUCH": str(a_started), "FAKE_SGLANG_WAIT_FOR": str(b_started)}
    )
    b = make_target(
        "b", gpus=(1,), env={"FAKE_SGLANG_TOUCH": str(b_started), "FAKE_SGLANG_WAIT_FOR": str(a_started)}
    )
    ma, mb = measure(a, b, timeout_s=20)
    assert (ma.role, ma.pool_tokens, mb.role, mb.pool_tokens) == ("a", 947824, "b", 947824)


def test_roles_sharing_gpus_boot_one_after_another(pidfile: PidFile, tmp_path: Path, monkeypatch) -> None:
    events = tmp_path / "events"
    monkeypatch.setenv("FAKE_SGLANG_EVENTS", str(events))
    a = make_target("a", gpus=(0, 1), env={"FAKE_SGLANG_LABEL": "a"})
    b = make_target("b", gpus=(2,), env={"FAKE_SGLANG_LABEL": "b"})
    c = make_target("c", gpus=(1, 2), env={"FAKE_SGLANG_LABEL": "c"})
    results = measure(a, b, c)
    assert [m.pool_tokens for m in results] == [947824] * 3
    starts = {words[0]: words[3] for words in map(str.split, events.read_text().splitlines()) if words[1] == "start"}
    # c shares a GPU with a and with b: neither may still run when it starts; a and b share none
    assert starts["c"] == "running="
    assert "stop" not in events.read_text().split()  # measured roles are SIGKILLed: no SIGTERM, no 5 s sleep


# -- GPU inventory -----------------------------------------------------------------------------------


def test_busy_gpu_is_kv302_and_nothing_boots(pidfile: PidFile) -> None:
    nvml = FakeNvml([FakeGpu(), FakeGpu(used_mib=60000, processes=[FakeProcess(99, 59000 * MIB)])])
    [m] = measure(
        make_target(args={"tp_size": 2}, gpus=(0, 1), gpu="H200"), gpu_check=True, nvml=nvml, gpu_settle_s=0
    )
    assert m.pool_tokens is None
    assert rules(m) == [("KV302", "error")]
    assert pidfile.pids() == []
    assert nvml.calls == ["init", "shutdown"]


def test_idle_gpus_boot(pidfile: PidFile) -> None:
    nvml = FakeNvml([FakeGpu(name="NVIDIA H100 80GB HBM3", total_mib=81559)] * 2)
    [m] = measure(make_target(args={"tp_size": 2}, gpus=(0, 1), gpu="H100"), gpu_check=True, nvml=nvml)
    assert (m.pool_tokens, m.findings) == (947824, ())


def test_no_driver_stops_the_whole_verify(pidfile: PidFile) -> None:
    with pytest.raises(GpuInventoryError):
        measure(make_target(), gpu_check=True, nvml=FakeNvml(driver=False))
    assert pidfile.pids() == []


# -- estimate beside the measurement -----------------------------------------------------------------


class FixedEstimate(Backend):
    mode = "estimate"

    def __init__(self, pool_tokens: int | None, error: bool = False) -> None:
        self.pool_tokens = pool_tokens
        self.error = error

    def measure(self, targets):
        if self.error:
            raise EstimateError("unknown architecture FooForCausalLM")
        return [
            PoolMeasurement(role=t.name, source="estimate", pool_tokens=self.pool_tokens, pool_range=(1, 2))
            for t in targets
        ]


def test_estimate_far_from_measurement_is_kv304(pidfile: PidFile) -> None:
    [m] = measure(make_target(), estimator=FixedEstimate(1_200_000))
    assert rules(m) == [("KV304", "warning")]
    assert m.details["estimate_pool_tokens"] == 1_200_000
    assert m.details["estimate_pool_range"] == [1, 2]


def test_estimate_close_to_measurement_is_silent(pidfile: PidFile) -> None:
    [m] = measure(make_target(), estimator=FixedEstimate(950_000))
    assert m.findings == ()
    assert m.details["estimate_pool_tokens"] == 950_000


def test_estimate_that_cannot_be_made_is_only_noted(pidfile: PidFile) -> None:
    [m] = measure(make_target(), estimator=FixedEstimate(None, error=True))
    assert m.findings == ()
    assert m.details["estimate_error"] == "unknown architecture FooForCausalLM"


def test_progress_shows_each_role_outcome_on_stderr(pidfile: PidFile, capsys) -> None:
    measure(make_target("prefill", gpus=(0,)), make_target("decode", gpus=(1,)), progress=True)
    captured = capsys.readouterr()
    assert captured.out == ""
    assert [line.split()[:2] for line in captured.err.splitlines()] == [["prefill", "✓"], ["decode", "✓"]]
    assert captured.err.count("pool 947,824 tokens") == 2


def test_proxy_settings_do_not_capture_loopback(pidfile: PidFile, monkeypatch) -> None:
    monkeypatch.setenv("HTTP_PROXY", "http://127.0.0.1:9")
    monkeypatch.setenv("http_proxy", "http://127.0.0.1:9")
    monkeypatch.delenv("NO_PROXY", raising=False)
    monkeypatch.delenv("no_proxy", raising=False)
    [m] = measure(make_target())
    assert (m.pool_tokens, m.findings) == (947824, ())


def test_unwritable_logs_dir_is_an_input_error(pidfile: PidFile, tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(InputError) as caught:
        measure(make_target(), logs_dir=blocker / "logs")
    assert caught.value.exit_code == 2
    assert caught.value.message == f"--logs-dir {blocker / 'logs'}: cannot create this run's folder: Not a directory"
    assert pidfile.pids() == []


def test_an_info_log_without_the_ready_line_is_not_a_pass(pidfile: PidFile, monkeypatch) -> None:
    # The server answers and the figures agree, but an engine that logs at info never said it was
    # ready: its warm-up can still fail after sizing, so the role is not passed on figures alone.
    monkeypatch.setenv("FAKE_SGLANG_MODE", "no_ready")
    [m] = measure(make_target(), ready_wait_s=0.1, timeout_s=3.0)
    assert m.pool_tokens is None
    assert rules(m) == [("KV301", "error")]
    assert m.findings[0].message.startswith("the engine did not report its pool within 3 s")
    assert pidfile.survivors() == []


def test_a_server_that_is_not_this_engine_is_refused(pidfile: PidFile, monkeypatch) -> None:
    # Another SGLang server answering on the port kvcheck picked (it took the port while this
    # engine was still loading) must not become this role's measurement.
    from kvcheck.backends.measure.boot import BootSettings, RoleBoot
    from kvcheck.engines.base import ServerInfo

    boot = RoleBoot(make_target(args={"tp_size": 2}), BootSettings())
    other = ServerInfo(url="http://127.0.0.1:1", version="0.5.23", max_total_num_tokens=2_000_000,
                       max_req_input_len=None, dp_token_capacities=(), swa_token_capacities=(),
                       context_length_arg=None, served_context_len=None,
                       resolved_args={"port": 41234, "model_path": "other/model", "tp_size": 8},
                       launch_command=None, endpoint="/server_info", metrics={})
    assert boot._foreign(other, 40000) == "it serves port 41234"
    assert boot._foreign(other, 41234) == "it serves other/model, not meta-llama/Llama-3.1-8B-Instruct"
    same_model = dataclasses.replace(other, resolved_args={"port": 41234, "model_path": "meta-llama/Llama-3.1-8B-Instruct", "tp_size": 8})
    assert boot._foreign(same_model, 41234) == "its tp_size is 8, not 2"
    ours = dataclasses.replace(other, resolved_args={"port": 41234, "model_path": "meta-llama/Llama-3.1-8B-Instruct", "tp_size": 2})
    assert boot._foreign(ours, 41234) is None


def test_a_wrapper_that_exits_at_once_is_kv301(pidfile: PidFile) -> None:
    target = make_target()
    wrapper = (sys.executable, "-c", "import sys; print('submitted job 42'); sys.exit(0)")
    [m] = measure(RoleTarget(**{**target.__dict__, "engine_command": wrapper}))
    assert rules(m) == [("KV301", "error")]
    assert m.findings[0].message == (
        "the engine exited with status 0 before reporting its pool (phase: starting); its last lines:\n"
        "    | submitted job 42"
    )


def test_a_run_whose_roles_never_start_leaves_no_folder(pidfile: PidFile, tmp_path: Path) -> None:
    target = make_target(args={"nnodes": 2})  # refused by the local launcher before any engine starts
    [m] = measure(target, logs_dir=tmp_path / "logs")
    assert rules(m) == [("KV301", "error")]
    assert list((tmp_path / "logs").iterdir()) == []


def test_a_failure_reading_the_log_is_a_kvcheck_bug_not_a_verdict(pidfile: PidFile, monkeypatch) -> None:
    from kvcheck.backends.measure import boot

    def broken(self, line):  # a parser bug: the engine must still be drained, stopped, and reported
        raise ValueError("parser bug")

    monkeypatch.setattr(boot.RoleBoot, "_on_line", broken)
    with pytest.raises(RuntimeError, match="reading role prefill's engine log failed: ValueError"):
        measure(make_target(), timeout_s=3.0)
    assert pidfile.survivors() == []


def test_quoted_engine_lines_hide_the_manifests_secret_values() -> None:
    from kvcheck.backends.measure.boot import BootSettings, RoleBoot, _quote

    target = make_target(env={"MY_PASSWORD": "pwSECRET", "CUDA_HOME": "/usr/local/cuda"},
                         args={"api_key": "k-123456"})
    secrets = RoleBoot(target, BootSettings())._secrets()
    assert secrets == ("k-123456", "pwSECRET")
    quoted = _quote(["token rejected for pwSECRET", "bad key k-123456 at /usr/local/cuda"], secrets)
    assert quoted == "    | token rejected for REDACTED\n    | bad key REDACTED at /usr/local/cuda"


def _daemon(markers: Path) -> tuple[int, int]:
    [marker] = markers.iterdir()
    pid, port = marker.read_text().split()
    return int(pid), int(port)


def _port_free(port: int) -> bool:
    import socket

    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


@pytest.mark.parametrize("term", ["term", "ignore-term"])
@pytest.mark.parametrize("after", ["stay", "exit"])
def test_a_daemon_that_leaves_the_session_and_drops_its_output_is_stopped(
    pidfile: PidFile, tmp_path: Path, term: str, after: str
) -> None:
    # Issue 14's attack: a double-forked daemon in its own session, output on /dev/null, holding a
    # port; orphaned at once, so no process-group signal and no scan of the engine's children reaches
    # it. The reaper above the engine inherits it as an orphan and stops it with the engine: after the
    # measurement ("stay") or when the engine exits by itself ("exit"); SIGKILL if it ignores SIGTERM.
    marker = tmp_path / "daemon"
    target = dataclasses.replace(
        make_target(), engine_command=(sys.executable, str(DETACHING), str(marker), term, after, *ENGINE)
    )
    try:
        [m] = measure(target, timeout_s=30.0, grace_s=1.0)
        pid, port = _daemon(marker)
        assert not pid_alive(pid)
        assert _port_free(port)
        if after == "stay":
            assert (m.pool_tokens, m.findings) == (947824, ())
        else:
            assert rules(m) == [("KV301", "error")]
            assert m.findings[0].message.startswith("the engine exited with status 1 before reporting its pool")
            assert "left its daemon running" in m.findings[0].message
    finally:
        for leftover in marker.glob("[0-9]*"):
            try:
                os.kill(int(leftover.name), signal.SIGKILL)
            except (ProcessLookupError, ValueError):
                pass


@contextlib.contextmanager
def _engine_leaving_a_process(tmp_path: Path, *, first_boot_only: bool = False) -> Iterator[RoleTarget]:
    """A target whose engine command detaches a process (setsid) that keeps the engine's output, on every boot
    or the first only; that process is killed when the block ends."""
    marker = tmp_path / "escaped.pid"
    wrapper = tmp_path / "wrapper.sh"
    guard = f"[ -e {marker} ] || " if first_boot_only else ""
    wrapper.write_text(
        "#!/bin/sh\n"
        f"{guard}setsid sh -c 'echo $$ > {marker}; exec sleep 30' &\n"
        f'exec "{sys.executable}" "{FAKE_SGLANG}" "$@"\n'
    )
    wrapper.chmod(0o755)
    try:
        yield dataclasses.replace(make_target(), engine_command=(str(wrapper),))
    finally:
        if marker.exists():
            with contextlib.suppress(ProcessLookupError, ValueError):
                os.kill(int(marker.read_text()), signal.SIGKILL)


def test_a_process_that_escaped_even_the_reaper_is_kv301(pidfile: PidFile, tmp_path: Path, monkeypatch) -> None:
    # The last resort stays: without the reaper (not Linux, or PR_SET_CHILD_SUBREAPER refused) a
    # process that left the group and still holds the output is reported, never passed over.
    from kvcheck.backends.measure.launchers import process

    monkeypatch.setattr(process, "_reaper_argv", lambda argv, grace_s, report_fd: list(argv))
    with _engine_leaving_a_process(tmp_path) as target:
        [m] = measure(target, timeout_s=30.0)
    assert ("KV301", "error") in rules(m)
    assert any("still holds the engine's output" in f.message for f in m.findings)


def test_a_dp_rank_missing_from_server_info_is_not_measured(pidfile: PidFile, monkeypatch) -> None:
    monkeypatch.setenv("FAKE_SGLANG_MODE", "drop_dp_state")
    [m] = measure(make_target(args={"tp_size": 4, "attn_dp_size": 2}, gpus=(0, 1, 2, 3)))
    assert ("KV301", "error") in rules(m)
    [missing] = [f for f in m.findings if f.rule == "KV301"]
    assert missing.message == (
        "only 1 of the role's 2 data-parallel ranks stated their pool in /server_info; the others were not measured"
    )


def test_roles_that_would_share_a_log_file_are_an_input_error(pidfile: PidFile, tmp_path: Path) -> None:
    with pytest.raises(InputError) as caught:
        measure(make_target("a/b", gpus=(0,)), make_target("a b", gpus=(1,)), logs_dir=tmp_path / "logs")
    assert caught.value.message == "roles 'a/b' and 'a b' would both write the log a_b.log"
    assert not (tmp_path / "logs").exists()
    assert pidfile.pids() == []


# -- the HTTP port taken before the engine bound it ---------------------------------------------------------


def _held_port() -> tuple[socket.socket, int]:
    holder = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    holder.bind(("127.0.0.1", 0))
    holder.listen(1)
    return holder, int(holder.getsockname()[1])


@contextlib.contextmanager
def _first_port_taken(monkeypatch: pytest.MonkeyPatch) -> Iterator[int]:
    """The local launcher's first free_port() is a port another socket holds (listening) until the block ends."""
    holder, taken = _held_port()
    real_free_port = local.free_port
    handed = iter([taken])
    monkeypatch.setattr(local, "free_port", lambda: next(handed, None) or real_free_port())
    try:
        yield taken
    finally:
        holder.close()


def test_a_port_taken_before_the_engine_bound_it_is_booted_again_on_another(
    pidfile: PidFile, tmp_path: Path, monkeypatch
) -> None:
    """SGLang binds its HTTP port only after the pool is sized; when another process took it meanwhile,
    uvicorn logs the bind error and SGLang stays up serving nobody. That boot is stopped at once (not
    waited on until --timeout) and the role booted again on a fresh port."""
    with _first_port_taken(monkeypatch) as taken:
        [m] = measure(make_target(), timeout_s=60, logs_dir=tmp_path / "logs")
    assert m.findings == ()
    assert m.pool_tokens == 947824
    assert m.details["ports_taken"] == [taken]
    assert m.details["ports"]["http"] != taken
    assert m.details["boot_s"] < 30  # the first boot was not waited on until the 60 s timeout
    [run] = (tmp_path / "logs").iterdir()
    log = (run / "prefill.log").read_text()
    assert "error while attempting to bind" not in log  # the log is the boot that counted
    assert "The server is fired up and ready to roll!" in log


def test_a_port_taken_on_every_boot_is_an_error_naming_the_ports(pidfile: PidFile, monkeypatch) -> None:
    holders = [_held_port() for _ in range(3)]
    handed = iter([port for _, port in holders])
    monkeypatch.setattr(local, "free_port", lambda: next(handed))
    try:
        [m] = measure(make_target(), timeout_s=60)
    finally:
        for holder, _ in holders:
            holder.close()
    ports = [port for _, port in holders]
    assert rules(m) == [("KV301", "error")]
    assert m.pool_tokens is None
    assert m.findings[0].message.startswith(
        f"the engine's HTTP server could not listen on port {ports[2]}: another process holds it (address "
        f"already in use) (3 boots, on ports {ports[0]}, {ports[1]}, {ports[2]}); the engine stayed up serving "
        "nobody and was stopped (phase: "
    )
    assert f"error while attempting to bind on address ('127.0.0.1', {ports[2]})" in m.findings[0].message
    assert m.details["ports_taken"] == ports[:2]


def test_a_bind_failure_line_is_read_only_from_sglangs_uvicorn() -> None:
    from kvcheck.engines import get_engine

    line = ("[2026-12-07 17:05:13] ERROR:    [Errno 98] error while attempting to bind on address "
            "('127.0.0.1', 40697): address already in use")
    assert get_engine("sglang").port_taken(line) == 40697
    # vLLM binds before it loads anything and exits on failure; its own retry warning is no bind failure
    assert get_engine("vllm").port_taken(line) is None
    assert get_engine("sglang").port_taken("WARNING: Address already in use. Retrying with a new port.") is None


def test_a_boot_that_left_a_process_holding_its_output_is_not_retried_out_of_sight(
    pidfile: PidFile, tmp_path: Path, monkeypatch
) -> None:
    """The retry on a taken port looked only at the group's survivors: a process of the first boot that had
    left the group and still held its output (KV301 when that boot is the last) was dropped from the report
    when the next boot passed, and left running. Such a boot is final."""
    from kvcheck.backends.measure.launchers import process

    monkeypatch.setattr(process, "_reaper_argv", lambda argv, grace_s, report_fd: list(argv))  # no reaper
    with _first_port_taken(monkeypatch), _engine_leaving_a_process(tmp_path, first_boot_only=True) as target:
        [m] = measure(target, timeout_s=30.0)
    assert any("still holds the engine's output" in f.message for f in m.findings), m.findings
    assert m.pool_tokens is None
    assert "ports_taken" not in m.details
