"""Names and words from deployment files in findings' messages (KV319, KV317, KV502) are one escaped line.

KV319 quotes a workload's kind, name and container name, KV317 and KV502 a word of the command line. They
were written into the message as the file gave them: a name holding a newline started a line of its own in
the table, on stderr (`kvcheck import`) and in JUnit (a forged `ERROR KV101` under the real finding), and
JSON and SARIF carried the raw escape sequence. Rich markup in a name (`[red]`, `[/]`) is shown, never read.
Every format runs the real CLI on a real deployment file.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from xml.etree import ElementTree as ET

import pytest

from kvcheck.report.formats import FORMATTERS
from tests.conftest import REPO_ROOT, run_kvcheck, run_kvcheck_in_terminal

FIX = REPO_ROOT / "tests" / "inputs" / "deploy" / "fixtures"
LLAMA = str(REPO_ROOT / "docs" / "examples" / "single-server" / "llama-3.1-8b-instruct.config.json")

# rich markup that would colour, close styles and link; a terminal escape (clear screen), a hyperlink escape,
# a bell, and a newline followed by what a forged finding looks like in the table
CONTAINER = "w[red]PASS[/][link=https://evil.example]x[/link]\x1b[2J\x1b]8;;https://evil.example\x07\nERROR   KV101 forged"
WORKLOAD = "evil[/][bold]\x1b[31m"
SHOWN_CONTAINER = "w[red]PASS[/][link=https://evil.example]x[/link]\\x1b[2J\\x1b]8;;https://evil.example\\x07\\nERROR   KV101 forged"
KV319_MESSAGE = (
    f"Deployment 'evil[/][bold]\\x1b[31m', container '{SHOWN_CONTAINER}', asks for 4 GPUs (limits[nvidia.com/gpu]) "
    "but starts no engine server kvcheck reads: python3 serve.py; it is not checked"
)
RAW = ("\x1b", "\x07")


def _files(tmp_path: Path) -> Path:
    workload = (
        "---\napiVersion: apps/v1\nkind: Deployment\n"
        f"metadata: {{name: {json.dumps(WORKLOAD)}}}\n"
        "spec:\n  template:\n    spec:\n      containers:\n"
        f"        - name: {json.dumps(CONTAINER)}\n"
        "          image: registry.example.com/llm-wrapper:1.4\n"
        '          command: ["python3", "serve.py"]\n'
        "          resources: {limits: {nvidia.com/gpu: 4}}\n"
    )
    path = tmp_path / "all.yaml"
    path.write_text((FIX / "deployment.yaml").read_text(encoding="utf-8") + workload, encoding="utf-8")
    return path


def _verify(path: Path, fmt: str) -> str:
    result = run_kvcheck("verify", str(path), "--mode", "estimate", "--model-config", LLAMA, "--format", fmt)
    assert result.exit_code == 0, result.stderr  # KV319 is a warning
    for raw in RAW:
        assert raw not in result.stdout, (fmt, raw)
    return result.stdout


def _no_forged_line(text: str) -> None:
    """No line of its own holds the forged finding (the table indents a message's own lines)."""
    assert [line for line in text.splitlines() if re.match(r"\s*(kvcheck: )?ERROR\s+KV101", line)] == []


def test_kv319_quotes_the_names_on_one_escaped_line(tmp_path: Path) -> None:
    report = json.loads(_verify(_files(tmp_path), "json"))
    (kv319,) = [f for f in report["findings"] if f["rule"] == "KV319"]
    assert kv319["message"] == KV319_MESSAGE


@pytest.mark.parametrize("fmt", sorted(FORMATTERS))
def test_every_format_shows_the_names_escaped_and_forges_no_line(tmp_path: Path, fmt: str) -> None:
    text = _verify(_files(tmp_path), fmt)
    if fmt == "table":
        _no_forged_line(text)
        # rich reads the name as text: the markup is there as written (compared without the folds' blanks)
        assert "".join(KV319_MESSAGE.split()) in "".join(text.split())
    elif fmt == "markdown":
        _no_forged_line(text)
        assert "container 'w\\[red\\]PASS\\[/\\]\\[link=https://evil.example\\]x\\[/link\\]\\\\x1b\\[2J" in text
    elif fmt == "github":
        _no_forged_line(text)
        assert all(line.startswith(("::warning ", "kvcheck verify: ")) for line in text.splitlines())
    elif fmt == "junit":
        _no_forged_line(text)
        messages = [failure.text or "" for failure in ET.fromstring(text).iter() if "KV319" in (failure.text or "")]
        assert len(messages) == 1 and KV319_MESSAGE in messages[0]
    elif fmt == "sarif":
        results = json.loads(text)["runs"][0]["results"]
        (kv319,) = [r for r in results if r["ruleId"] == "KV319"]
        assert kv319["message"]["text"].split("\nfix: ")[0] == KV319_MESSAGE
    elif fmt == "gitlab":
        (kv319,) = [item for item in json.loads(text) if item["check_name"] == "KV319"]
        assert kv319["description"].split("\nfix: ")[0] == f"KV319 {KV319_MESSAGE}"
    else:
        assert fmt == "json"
        assert KV319_MESSAGE in [f["message"] for f in json.loads(text)["findings"]]


def test_import_warns_on_one_stderr_line(tmp_path: Path) -> None:
    path = _files(tmp_path)
    result = run_kvcheck("import", str(path), "--model-config", LLAMA)
    assert result.exit_code == 0, result.stderr
    assert result.stderr.splitlines() == [f"kvcheck: warning: {path}:51:11: KV319 {KV319_MESSAGE}"]


def test_a_file_name_with_a_newline_does_not_start_a_line_of_its_own(tmp_path: Path) -> None:
    # the finding's location is the file's name: a newline and an escape in it are shown, not obeyed
    named = tmp_path / "hf\nERROR   KV101 forged\x1b[2J.yaml"
    _files(tmp_path).rename(named)
    result = run_kvcheck("import", str(named), "--model-config", LLAMA)
    assert result.exit_code == 0, result.stderr
    shown = f"{tmp_path}/hf\\nERROR   KV101 forged\\x1b[2J.yaml"
    assert result.stderr.splitlines() == [f"kvcheck: warning: {shown}:51:11: KV319 {KV319_MESSAGE}"]


def test_a_terminal_in_colour_shows_the_markup_as_written(tmp_path: Path) -> None:
    path = _files(tmp_path)
    # wide enough for the message on one line
    code, output = run_kvcheck_in_terminal("verify", str(path), "--mode", "estimate", "--model-config", LLAMA,
                                           columns=400)
    assert code == 0, output
    assert "\x1b[31mKV" not in output  # kvcheck's own colours only: WARNING in yellow, no red from the name
    assert "\x1b[2J" not in output and "\x1b]8;;" not in output and "\x07" not in output
    assert KV319_MESSAGE in output
    _no_forged_line(output)


def test_a_word_of_the_command_line_is_one_escaped_line_in_kv317(tmp_path: Path) -> None:
    path = tmp_path / "web.yaml"
    path.write_text(
        "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: web}\nspec:\n  template:\n    spec:\n"
        "      containers:\n        - name: c\n          image: lmsysorg/sglang:v0.5.23\n"
        "          command: [python3, -m, sglang.launch_server]\n"
        '          args: [--model-path, m, --context-length, "32768", --config, "a.yaml\\nERROR KV101 forged\\u001b[2J"]\n'
        "          resources: {limits: {nvidia.com/gpu: 1}}\n",
        encoding="utf-8",
    )
    args = ("verify", str(path), "--mode", "estimate", "--gpu", "H100", "--model-config", LLAMA)
    report = json.loads(run_kvcheck(*args, "--format", "json").stdout)
    assert report["exit_code"] == 3
    (kv317,) = [f for f in report["findings"] if f["rule"] == "KV317"]
    assert kv317["message"] == (
        "--config a.yaml\\nERROR KV101 forged\\x1b[2J: the file is not among the inputs, so the flags it sets are unknown"
    )
    table = run_kvcheck(*args)
    assert table.exit_code == 3
    _no_forged_line(table.stdout)
