"""The fix kvcheck names for an SGLang that exited before its pool was known: status 137 is SGLang
killing its own processes after any scheduler exception, so only the log's words say out of memory."""

from __future__ import annotations

from kvcheck.engines import get_engine
from tests.conftest import REPO_ROOT

CRASH = REPO_ROOT / "tests" / "data" / "real-engines" / "sglang-0.5.23-cpu-prefill-checksum-crash.log"


def hint(returncode: int | None, lines: list[str]) -> str | None:
    return get_engine("sglang").exit_hint(returncode, lines)


def test_a_real_137_after_an_assertion_is_not_called_out_of_memory() -> None:
    lines = CRASH.read_text().splitlines()[-40:]
    assert hint(-9, lines) == ("SGLang killed its own processes (status 137) after the exception quoted above: fix "
                               "what it names (an argument, the model, the environment)")
    assert hint(137, lines) == hint(-9, lines)


def test_out_of_memory_words_name_the_memory_fixes_whatever_the_status() -> None:
    for line in ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB",
                 "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static."):
        assert hint(-9, ["Scheduler hit an exception: Traceback (most recent call last):", line]) == (
            "the engine ran out of memory: raise mem-fraction-static, add GPUs (tp-size) or choose a smaller "
            "model or KV dtype")
        assert hint(1, [line]).startswith("the engine ran out of memory")


def test_a_sigkill_without_an_exception_points_at_the_hosts_oom_killer() -> None:
    assert hint(-9, ["[2026-12-02 00:05:40] Load weight begin. avail mem=21.00 GB"]).startswith(
        "killed by SIGKILL with no exception in its log: the host's out-of-memory killer")


def test_a_rejected_command_line_and_other_statuses() -> None:
    assert hint(2, ["launch_server.py: error: unrecognized arguments: --bogus"]) == (
        "the engine rejected its command line: check the role's args against the engine's --help")
    assert hint(1, ["ValueError: something else"]) is None
