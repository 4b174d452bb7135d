"""`kvcheck verify MANIFEST` in measure mode, end to end: the real CLI, the engine double, exact exits."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import run_kvcheck
from tests.measure.conftest import FAKE_SGLANG, REPO, PidFile, start_until_engines_started

MANIFEST = """\
name: double
context_length: 131072
model:
  path: meta-llama/Llama-3.1-8B-Instruct
engine:
  version: "0.5.23"
  command: [{python}, {engine}]
gpu: H200
args:
  tp-size: 2
  mem-fraction-static: 0.85
roles:
  prefill:
    gpus: [0, 1]
    args: {{disaggregation-mode: prefill, disaggregation-enable-kv-checksum: true}}
  decode:
    gpus: [2, 3]
    args: {{disaggregation-mode: decode, disaggregation-enable-kv-checksum: true}}
"""


@pytest.fixture
def manifest(tmp_path: Path) -> Path:
    path = tmp_path / "deploy.yaml"
    path.write_text(MANIFEST.format(python=json.dumps(sys.executable), engine=json.dumps(str(FAKE_SGLANG))))
    return path


def kvcheck(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """`python -m kvcheck ARGS`, run in this process (tests/inprocess.py); the signal tests start a process."""
    done = run_kvcheck(*args, cwd=REPO, env=env)
    return subprocess.CompletedProcess(["kvcheck", *args], done.exit_code, done.stdout, done.stderr)


def verify_json(manifest: Path, *extra: str, env: dict[str, str] | None = None) -> tuple[int, dict, str]:
    done = kvcheck("verify", str(manifest), "--no-gpu-check", "--format", "json", *extra, env=env)
    assert done.stdout, done.stderr
    return done.returncode, json.loads(done.stdout), done.stderr


def test_pass_exit_0_with_measured_figures(manifest: Path, pidfile: PidFile) -> None:
    code, report, _ = verify_json(manifest)
    assert (code, report["verdict"], report["mode"], report["exit_code"]) == (0, "pass", "measure", 0)
    assert [(r["name"], r["status"], r["pool_tokens"], r["required_tokens"], r["max_input_tokens"], r["source"])
            for r in report["roles"]] == [
        ("prefill", "pass", 947824, 131072, 131066, "measure"),
        ("decode", "pass", 947824, 131072, 131066, "measure"),
    ]  # fmt: skip
    prefill = report["roles"][0]
    assert prefill["gpus"] == [0, 1]
    assert prefill["argv"][2:12] == [
        "--model-path", "meta-llama/Llama-3.1-8B-Instruct", "--tp-size", "2", "--mem-fraction-static", "0.85",
        "--disaggregation-mode", "prefill", "--disaggregation-enable-kv-checksum", "--host",
    ]  # fmt: skip
    assert prefill["details"]["engine_version"] == "0.5.23"
    assert report["findings"] == []
    assert len(pidfile.pids()) == 8  # two engines: launcher, two schedulers, detokenizer each


def test_pool_below_window_is_exit_1(manifest: Path, pidfile: PidFile) -> None:
    code, report, _ = verify_json(manifest, env={"FAKE_SGLANG_POOL_TOKENS": "100000"})
    assert (code, report["verdict"]) == (1, "fail")
    assert [(f["rule"], f["severity"], f["role"]) for f in report["findings"]] == [
        ("KV314", "warning", "prefill"),
        ("KV101", "error", "prefill"),
        ("KV314", "warning", "decode"),
        ("KV101", "error", "decode"),
        ("KV104", "warning", None),  # decode admits 511 tokens fewer: its reservation per request
    ]
    assert [r["pool_tokens"] for r in report["roles"]] == [100000, 100000]
    assert [r["max_input_tokens"] for r in report["roles"]] == [99994, 100000 - 512 + 1]


def test_engine_out_of_memory_is_exit_3(manifest: Path, pidfile: PidFile) -> None:
    code, report, _ = verify_json(manifest, "--role", "decode", env={"FAKE_SGLANG_MODE": "oom"})
    assert (code, report["verdict"]) == (3, "error")
    [role] = report["roles"]
    assert (role["name"], role["status"], role["pool_tokens"]) == ("decode", "error", None)
    [kv301] = [f for f in report["findings"] if f["rule"] == "KV301"]
    assert kv301["message"].startswith("the engine exited with status 137 (killed by SIGKILL)")
    assert "Scheduler hit an exception" in kv301["message"]


def test_version_mismatch_is_exit_3(manifest: Path, pidfile: PidFile) -> None:
    code, report, _ = verify_json(manifest, "--role", "prefill", env={"FAKE_SGLANG_VERSION": "0.5.22"})
    assert code == 3
    assert [f["rule"] for f in report["findings"]] == ["KV112", "KV303"]  # KV112: --role left out decode
    assert report["roles"][0]["pool_tokens"] == 947824


def test_logs_dir_and_dummy_weights(manifest: Path, pidfile: PidFile, tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    code, report, stderr = verify_json(manifest, "--logs-dir", str(logs), "--dummy-weights")
    assert code == 0
    [run] = logs.iterdir()  # this run's own folder
    assert stderr.splitlines()[0] == f"kvcheck: engine logs: {run}/"  # stderr is not a terminal: plain lines
    assert sorted(p.name for p in run.iterdir()) == ["decode.log", "prefill.log"]
    assert "max_total_num_tokens=947824" in (run / "prefill.log").read_text()
    assert [r["details"]["log_file"] for r in report["roles"]] == [str(run / "prefill.log"), str(run / "decode.log")]
    assert report["roles"][0]["argv"][-2:] == ["--load-format", "dummy"]
    assert [(f["rule"], f["severity"], f["role"]) for f in report["findings"]] == [
        ("KV315", "warning", "prefill"), ("KV315", "warning", "decode"),
    ]
    strict, _, _ = verify_json(manifest, "--dummy-weights", "--strict")
    assert strict == 1  # a pass on dummy weights is not enough for --strict


def test_gpu_inventory_without_nvml_is_exit_3(manifest: Path, pidfile: PidFile) -> None:
    try:
        import pynvml  # noqa: F401
    except ImportError:
        pass
    else:
        pytest.skip("pynvml is installed here; this checks the hint on hosts without it")
    done = kvcheck("verify", str(manifest))
    assert done.returncode == 3
    assert done.stdout == ""
    assert "pip install 'kvcheck[gpu]'" in done.stderr
    assert pidfile.pids() == []


def _start_verify(manifest: Path, pidfile: PidFile, expected: int) -> subprocess.Popen[str]:
    # Children that ignore SIGTERM are covered in test_interrupt.py with a short grace; the CLI's
    # grace is SGLang's 15 s drain, so here they die with their launcher (PDEATHSIG) as SGLang's do.
    argv = [sys.executable, "-m", "kvcheck", "verify", str(manifest), "--no-gpu-check"]
    return start_until_engines_started(argv, pidfile, expected, mode="hang")


def test_ctrl_c_stops_every_engine_and_exits_130(manifest: Path, pidfile: PidFile) -> None:
    proc = _start_verify(manifest, pidfile, expected=8)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert out == ""
    # progress lines (stderr is not a terminal here), then the interruption: no traceback
    assert err.splitlines()[-1] == "kvcheck: interrupted; every process kvcheck started has been stopped"
    assert all(line.startswith("kvcheck: ") for line in err.splitlines())
    assert pidfile.survivors() == []


def test_sigterm_stops_every_engine_and_dies_of_sigterm(manifest: Path, pidfile: PidFile) -> None:
    proc = _start_verify(manifest, pidfile, expected=8)
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == -signal.SIGTERM, err  # a shell shows 143
    assert out == ""
    assert pidfile.survivors() == []


def test_progress_comes_as_plain_lines_on_stderr_when_it_is_not_a_terminal(manifest: Path) -> None:
    code, report, stderr = verify_json(manifest)
    assert code == report["exit_code"]
    lines = stderr.splitlines()
    for role in ("prefill", "decode"):
        mine = [line for line in lines if line.startswith(f"kvcheck: [{role}] ")]
        assert mine[0] == f"kvcheck: [{role}] queued"
        assert f"kvcheck: [{role}] starting" in mine
        assert mine[-1].startswith(f"kvcheck: [{role}] ✓ pool ") and mine[-1].endswith(" s)")
    assert not any("[/" in line or "[green]" in line for line in lines)  # no rich markup in a CI log


def test_the_heading_says_no_engine_was_booted_only_when_every_role_was_refused_before_boot(
    manifest: Path, pidfile: PidFile
) -> None:
    # the local launcher refuses a role over 2 nodes before its engine starts; before, the report still said
    # "measured pools (engine booted)"
    refused = manifest.read_text().replace(
        "gpus: [0, 1]\n    args: {disaggregation-mode: prefill,", "gpus: [0]\n    args: {nnodes: 2, disaggregation-mode: prefill,")
    assert refused != manifest.read_text()
    manifest.write_text(refused)
    done = kvcheck("verify", str(manifest), "--no-gpu-check", "--role", "prefill", env={"COLUMNS": "100"})
    assert done.returncode == 3, done.stderr
    assert "\nmeasure mode: no engine was booted, no pool was measured\n" in done.stdout
    done = kvcheck("verify", str(manifest), "--no-gpu-check", env={"COLUMNS": "100"})  # decode boots
    assert done.returncode == 3, done.stderr
    assert "\nmeasured pools (engine booted)\n" in done.stdout and "no engine was booted" not in done.stdout
    assert "ERROR KV301 [prefill] role prefill spans 2 nodes (nnodes: 2)" in done.stdout


SINGLE = """\
name: single
context_length: 131072
model:
  path: meta-llama/Llama-3.1-8B-Instruct
engine:
  version: "0.5.23"
  command: [{python}, {engine}]
gpu: H200
args:
  max-running-requests: 1
roles:
  server:
    gpus: [0]
policy:
  min_concurrency: 2
"""


def test_min_concurrency_counts_the_engines_max_running_requests(tmp_path: Path, pidfile: PidFile) -> None:
    """A pool that holds 7 windows behind max_running_requests=1 serves them one at a time: KV111, exit 1
    (it passed: KV111 counted only pool / window)."""
    path = tmp_path / "single.yaml"
    path.write_text(SINGLE.format(python=json.dumps(sys.executable), engine=json.dumps(str(FAKE_SGLANG))))
    code, report, _ = verify_json(path)
    assert (code, report["verdict"]) == (1, "fail"), report
    assert [(r["name"], r["status"], r["pool_tokens"]) for r in report["roles"]] == [("server", "fail", 947824)]
    [kv111] = report["findings"]
    assert (kv111["rule"], kv111["severity"], kv111["role"]) == ("KV111", "error", "server")
    assert kv111["message"] == (
        "the engine runs at most 1 request at once (max_running_requests=1), below the policy's min_concurrency 2: "
        "its pool of 947,824 tokens would hold 7.23 requests of the 131,072-token window, but max_running_requests "
        "binds, so long requests queue behind each other")
    assert kv111["hint"] == "raise --max-running-requests to at least 2, or lower policy.min_concurrency"
    assert kv111["location"]["line"] == 10  # the manifest's max-running-requests


def test_an_engine_that_dies_after_reporting_its_pool_says_so_and_agrees_with_logs(
        manifest: Path, pidfile: PidFile, tmp_path: Path) -> None:
    """The pool line, then a crash in warm-up: exit 3, and KV301 names the figure and its line as `logs` does
    (KV316) instead of 'before reporting its pool'."""
    logs_dir = tmp_path / "logs"
    code, report, _ = verify_json(manifest, "--role", "decode", "--logs-dir", str(logs_dir),
                                  env={"FAKE_SGLANG_MODE": "crash_after_pool"})
    assert (code, report["verdict"]) == (3, "error"), report
    [role] = report["roles"]
    assert (role["status"], role["pool_tokens"]) == ("error", None)
    log = Path(role["details"]["log_file"])
    line = next(n for n, text in enumerate(log.read_text().splitlines(), 1) if "max_total_num_tokens=947824" in text)
    [kv301] = [f for f in report["findings"] if f["rule"] == "KV301"]
    assert kv301["message"].startswith(
        f"the engine exited with status 137 (killed by SIGKILL) after reporting its pool (947,824 tokens, line "
        f"{line}), before it was ready (phase: failed): the pool figure is not a serving pool: the engine failed "
        "after sizing its pool")
    assert "IndexError: index out of range in self" in kv301["message"]
    done = kvcheck("logs", str(log), "--format", "json")
    assert done.returncode == 3
    [kv316] = json.loads(done.stdout)["findings"]
    assert kv316["rule"] == "KV316"
    assert kv316["message"].startswith(f"the pool figure (947,824 tokens, line {line}) is not a serving pool: the "
                                       "engine failed after sizing its pool: ")


TOKENIZER_TAIL = [
    "ValueError: Couldn't instantiate the backend tokenizer from one of:",
    "(1) a `tokenizers` library serialization file,",
    "(2) a slow tokenizer instance to convert or",
    "(3) an equivalent slow tokenizer class to instantiate and convert.",
    "You need to have sentencepiece or tiktoken installed to convert a slow tokenizer to a fast one.",
]


def test_a_multi_line_exception_is_quoted_whole_by_measure_and_logs(
        manifest: Path, pidfile: PidFile, tmp_path: Path) -> None:
    """KV301's last lines end with the exception's whole message, not its first line; `logs` on the same log
    quotes the failure (it said only 'no pool figure')."""
    code, report, _ = verify_json(manifest, "--role", "decode", "--logs-dir", str(tmp_path / "logs"),
                                  env={"FAKE_SGLANG_MODE": "no_tokenizer"})
    assert (code, report["verdict"]) == (3, "error"), report
    [kv301] = [f for f in report["findings"] if f["rule"] == "KV301"]
    quoted = kv301["message"].split("; its last lines:\n", 1)[1].rsplit(" (engine log: ", 1)[0]
    assert [line.removeprefix("    | ") for line in quoted.splitlines()][-5:] == TOKENIZER_TAIL
    assert len(quoted.splitlines()) == 8  # bounded as before
    done = kvcheck("logs", report["roles"][0]["details"]["log_file"], "--format", "json")
    assert done.returncode == 3
    assert [(f["rule"], f["message"]) for f in json.loads(done.stdout)["findings"]] == [
        ("KV309", "the log holds no KV pool figure; the engine failed: " + " ".join(TOKENIZER_TAIL))]


def test_a_pool_one_token_short_reads_99_9_percent_and_never_gets_the_pass_mark(
        manifest: Path, pidfile: PidFile) -> None:
    """131,071 of 131,072: the table said 100.0%, KV101 'short by 1 tokens (100.0% of the window)', and the
    progress line '✓ pool 131,071 tokens' for a role that fails."""
    env = {"FAKE_SGLANG_POOL_TOKENS": "131071"}
    code, report, stderr = verify_json(manifest, "--role", "decode", env=env)
    assert (code, report["verdict"]) == (1, "fail"), report
    [kv101] = [f for f in report["findings"] if f["rule"] == "KV101"]
    assert kv101["message"] == ("pool holds 131,071 tokens, below the 131,072 required (1 x context_length 131,072); "
                                "short by 1 token (99.9% of the window)")
    [last] = [line for line in stderr.splitlines() if line.startswith("kvcheck: [decode] ")][-1:]
    assert last.startswith("kvcheck: [decode] ✗ pool 131,071 tokens, below the 131,072 required"), last
    table = kvcheck("verify", str(manifest), "--no-gpu-check", "--role", "decode", env=env)
    assert table.returncode == 1
    [row] = [line for line in table.stdout.splitlines() if line.startswith("decode ")]
    assert row.split()[:5] == ["decode", "FAIL", "131,071", "131,072", "99.9%"], row
    assert "100.0%" not in table.stdout


def test_a_role_name_cannot_forge_a_workflow_command_in_the_progress_lines(manifest: Path, pidfile: PidFile) -> None:
    # the plain progress lines on stderr held the raw name: its newline started a line `::error ...`, which a
    # GitHub runner obeys (stderr too), and "waiting for NAME" repeated it
    manifest.write_text(manifest.read_text().replace("  prefill:\n", '  "x\\n::error title=pwn::owned":\n')
                        .replace("gpus: [2, 3]", "gpus: [0, 1]"))
    code, report, stderr = verify_json(manifest)
    assert (code, [r["status"] for r in report["roles"]]) == (0, ["pass", "pass"])
    assert not [line for line in stderr.splitlines() if line.lstrip().startswith("::")]
    assert "kvcheck: [x\\n::error title=pwn::owned] queued" in stderr.splitlines()
    assert "kvcheck: [decode] waiting for x\\n::error title=pwn::owned" in stderr.splitlines()
