"""The streams kvcheck writes to can fail; the exit code keeps the contract (issue 20, class 6).

These need a real process: they close, fill or re-encode the process's own file descriptors.
"""

from __future__ import annotations

import os
import subprocess
import sys

from tests.conftest import EXAMPLES, REPO_ROOT

INCIDENT = str(EXAMPLES / "incident" / "manifest.yaml")


def shell(command: str, **env: str) -> subprocess.CompletedProcess[str]:
    """Run `command` under bash with `kvcheck` meaning this checkout's CLI."""
    full = {**os.environ, "PYTHONPATH": str(REPO_ROOT), **env}
    full.pop("KVCHECK_DEBUG", None)
    kvcheck = f"{sys.executable} -m kvcheck"
    return subprocess.run(["bash", "-c", command.replace("kvcheck ", kvcheck + " ", 1)], cwd=REPO_ROOT,
                          env=full, capture_output=True, text=True, timeout=120)


def test_a_broken_stderr_pipe_keeps_exit_2() -> None:
    # `2>&1 | true` closed stderr before the error line: click's EPIPE handler made that exit 1
    done = shell('kvcheck verify nope.yaml 2>&1 | true; exit "${PIPESTATUS[0]}"')
    assert done.returncode == 2


def test_a_closed_stderr_keeps_the_verdict() -> None:
    done = shell(f"kvcheck verify {INCIDENT} --mode estimate --format json 2>&-")
    assert done.returncode == 1 and '"verdict": "fail"' in done.stdout


def test_stdout_on_a_full_disk_is_exit_3_with_the_reason() -> None:
    done = shell(f"kvcheck verify {INCIDENT} --mode estimate > /dev/full")
    assert done.returncode == 3
    assert "kvcheck: error: cannot write the report to standard output: No space left on device" in done.stderr
    assert "Traceback" not in done.stderr and "internal error" not in done.stderr


def test_a_report_file_on_a_full_disk_is_exit_3_as_stdout_is() -> None:
    # a report that could not be written was exit 2 (invalid input, with click's usage line) after the whole run
    for option in ("--output /dev/full", "--report sarif=/dev/full"):
        done = shell(f"kvcheck verify {INCIDENT} --mode estimate {option} > /dev/null")
        assert done.returncode == 3, (option, done.stderr)
        assert f"kvcheck: error: cannot write {option}: No space left on device" in done.stderr
        assert "Usage:" not in done.stderr and "Traceback" not in done.stderr


def test_a_closed_stdout_is_exit_3_and_output_file_still_works(tmp_path) -> None:
    done = shell(f"kvcheck verify {INCIDENT} --mode estimate >&-")
    assert done.returncode == 3
    assert "cannot write the report: standard output is closed" in done.stderr
    report = tmp_path / "report.txt"
    done = shell(f"kvcheck verify {INCIDENT} --mode estimate --output {report} >&-")
    assert done.returncode == 1 and "kvcheck verify: FAIL (exit 1)" in report.read_text(encoding="utf-8")


def test_an_encoding_that_cannot_carry_a_character_gets_escapes_not_a_crash() -> None:
    done = shell(f"kvcheck verify {INCIDENT} --mode estimate", PYTHONIOENCODING="latin-1")
    assert done.returncode == 1, done.stderr
    assert "\\u2501" in done.stdout  # the table's rule, escaped
    assert "kvcheck verify: FAIL (exit 1)" in done.stdout


def test_context_length_options_read_token_counts_as_manifests_do(tmp_path) -> None:
    # `--context-length 64k` was refused on the command line although manifests accept it
    from tests.conftest import run_kvcheck

    log = tmp_path / "server.log"
    log.write_text(
        "[2026-12-01 10:00:06] max_total_num_tokens=70000, chunked_prefill_size=8192, max_prefill_tokens=16384, "
        "max_running_requests=256, context_len=131072, available_gpu_mem=21.49 GB\n"
        "[2026-12-01 10:00:09] The server is fired up and ready to roll!\n", encoding="utf-8")
    for given, required in (("64k", 64000), ("64Ki", 65536), ("65536", 65536)):
        result = run_kvcheck("logs", str(log), "--context-length", given, "--format", "json")
        import json

        assert json.loads(result.stdout)["roles"][0]["required_tokens"] == required, given
    result = run_kvcheck("logs", str(log), "--context-length", "64K")
    assert result.exit_code == 2
    assert "'--context-length' must be an integer such as 131072, 128k or 1Mi (suffixes are case-sensitive)" in \
        result.stderr
