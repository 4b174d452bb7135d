"""Every command output the documentation shows comes from running that command here.

A fenced block whose first line is `$ kvcheck ...` followed by output is run from the repository
root and its output (stdout, then stderr) must match the block: a line `...` stands for any number
of lines, a line ending in ` ...` for any line starting with the rest. Blocks whose command needs
what a checkout does not have (a GPU, live servers, a log of the reader's) are listed in ELSEWHERE
with the test that runs the same command on a double; any other block that cannot run fails here.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass

import pytest

from tests.conftest import REPO_ROOT, run_kvcheck

DOCS = sorted((REPO_ROOT / "docs").glob("*.md")) + [REPO_ROOT / "README.md"]
FENCE = re.compile(r"^```[a-z]*\n(.*?)^```", re.M | re.S)

# (file, command) -> where the same run is tested on a double, because it needs what a checkout lacks
ELSEWHERE = {
    ("docs/audit.md", "kvcheck audit http://10.0.0.5:30000 http://10.0.0.6:30000 --context-length 1048576"):
        "live servers: tests/audit/test_cli_audit.py runs audit against its server doubles",
    ("docs/logs.md", "kvcheck logs prefill.log"):
        "the reader's log: tests/backends/test_logs.py runs `kvcheck logs` on the incident's prefill log",
    ("docs/logs.md", "kvcheck logs vllm.log"):
        "the reader's log: tests/backends/test_logs.py feeds non-SGLang logs",
    ("docs/measure.md", "kvcheck verify deploy/prod.yaml"):
        "GPUs and SGLang: tests/measure/test_cli_measure.py boots the engine double",
}


@dataclass(frozen=True)
class Snippet:
    file: str
    line: int
    command: str
    output: tuple[str, ...]


def snippets() -> list[Snippet]:
    found = []
    for path in DOCS:
        text = path.read_text(encoding="utf-8")
        for match in FENCE.finditer(text):
            lines = match.group(1).splitlines()
            commands = [i for i, line in enumerate(lines) if line.startswith("$ kvcheck ")]
            if len(commands) != 1 or commands[0] != 0 or len(lines) < 2:
                continue  # usage lines without output, or several commands: nothing printed is claimed
            command = lines[0][2:].split("  #")[0].strip()
            found.append(Snippet(str(path.relative_to(REPO_ROOT)), text[: match.start()].count("\n") + 2,
                                 command, tuple(lines[1:])))
    return found


def matches(expected: tuple[str, ...], actual: list[str]) -> bool:
    """`...` lines match any run of lines (also none); `text ...` matches a line starting with text."""
    if not expected:
        return not actual
    head, rest = expected[0], expected[1:]
    if head == "...":
        return any(matches(rest, actual[i:]) for i in range(len(actual) + 1))
    if not actual:
        return False
    line = actual[0].rstrip()
    ok = line.startswith(head[:-4].rstrip()) if head.endswith(" ...") else line == head.rstrip()
    return ok and matches(rest, actual[1:])


ALL = snippets()


def test_the_docs_show_command_outputs_and_every_one_is_accounted_for() -> None:
    assert len(ALL) >= 5
    shown = {(s.file, s.command) for s in ALL}
    assert set(ELSEWHERE) <= shown, set(ELSEWHERE) - shown  # an entry whose block is gone goes too


@pytest.mark.parametrize("snippet", [s for s in ALL if (s.file, s.command) not in ELSEWHERE],
                         ids=lambda s: f"{s.file}:{s.line}")
def test_a_shown_output_is_what_the_command_prints(snippet: Snippet) -> None:
    args = shlex.split(snippet.command)[1:]
    result = run_kvcheck(*args, env={"COLUMNS": "100"})
    actual = (result.stdout + result.stderr).splitlines()
    assert matches(snippet.output, actual), (
        f"{snippet.file}:{snippet.line}: `{snippet.command}` prints (exit {result.exit_code}):\n"
        + "\n".join(actual)
    )
