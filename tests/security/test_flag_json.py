"""JSON inside engine flag values is hostile input too: bounded like a server's answer, exit 2 with its line.

Python's json.loads has no depth bound of its own: 5,000 nested brackets in `--json-model-override-args`
ended in a RecursionError (exit 4, "a bug in kvcheck"). Every attack runs the real command on a real file.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvcheck.io.jsontext import JsonRejected, loads
from tests.conftest import REPO_ROOT
from tests.security.helpers import attack

LLAMA = REPO_ROOT / "docs" / "examples" / "vllm" / "config.json"
DEEP = "[" * 5000 + "]" * 5000


def manifest(tmp_path: Path, engine: str, version: str, args: str) -> Path:
    (tmp_path / "config.json").write_text(LLAMA.read_text())
    path = tmp_path / "deploy.yaml"
    path.write_text(f"""name: hostile flag
context_length: 100000
model: {{path: meta-llama/Llama-3.1-8B-Instruct, config: config.json}}
engine: {{name: {engine}, version: "{version}"}}
gpu: H100
args:
  {args}
roles:
  server: {{gpus: [0]}}
""")
    return path


CASES = {
    "sglang json-model-override-args": ("sglang", "0.5.23", f"json-model-override-args: '{DEEP}'",
                                        "args.json-model-override-args: 'json-model-override-args' cannot be read "
                                        "safely: nested deeper than 64 levels"),
    "sglang model-loader-extra-config": ("sglang", "0.5.23", f"model-loader-extra-config: '{DEEP}'",
                                         "'model-loader-extra-config' cannot be read safely: nested deeper than 64"),
    "vllm compilation-config": ("vllm", "0.32.0", f"compilation-config: '{DEEP}'",
                                "args.compilation-config: 'compilation-config' cannot be read safely: nested deeper"),
    "vllm speculative-config": ("vllm", "0.32.0", "speculative-config: '" + '{"a":' * 3000 + "1" + "}" * 3000 + "'",
                                "'speculative-config' cannot be read safely: nested deeper than 64 levels"),
    "a key given twice": ("vllm", "0.32.0", """compilation-config: '{"cudagraph_mode": "FULL", "cudagraph_mode": "NONE"}'""",
                          "the key 'cudagraph_mode' is given 2 times in one object ('FULL', then 'NONE'): ambiguous"),
}


@pytest.mark.parametrize(("engine", "version", "args", "message"), CASES.values(), ids=CASES.keys())
def test_nested_json_in_a_flag_is_bad_input_with_its_line(tmp_path, engine, version, args, message):
    path = manifest(tmp_path, engine, version, args)
    out = attack("verify", str(path), "--mode", "estimate", timeout=60)
    assert out.exit_code == 2, out.stderr
    assert f"{path}:7:" in out.stderr
    assert message in out.stderr
    assert "internal error" not in out.stderr


def test_a_json_flag_that_is_not_json_is_bad_input_not_a_could_not_check(tmp_path):
    # SGLang json.loads --json-model-override-args at startup: text that is not JSON never boots.
    path = manifest(tmp_path, "sglang", "0.5.23", "json-model-override-args: '{bad'")
    out = attack("verify", str(path), "--mode", "estimate")
    assert out.exit_code == 2, out.stderr
    assert (f"{path}:7:29: args.json-model-override-args: 'json-model-override-args' must be JSON: Expecting "
            "property name enclosed in double quotes") in out.stderr


def test_a_regex_flag_is_not_read_as_json(tmp_path):
    path = manifest(tmp_path, "sglang", "0.5.23", r"constrained-json-whitespace-pattern: '[\n\t ]*'")
    out = attack("verify", str(path), "--mode", "estimate", "--format", "json")
    assert out.exit_code == 0, out.stderr


@pytest.mark.parametrize(("command", "message"), [
    ("python -m sglang.launch_server --model-path m --json-model-override-args '" + DEEP + "'",
     "--cmd:1:74: 'json-model-override-args' cannot be read safely: nested deeper than 64 levels"),
    ("vllm serve m --speculative-config." + ".".join(["a"] * 3000) + "=1",
     "--cmd:1:14: '--speculative-config.a.a.a.a.a.a.a.a.a.a.a.a.a.a.a.a.a.a.a.a.a.a.a.a.a.a.a.a.a.a...': 3000 nested "
     "keys; kvcheck reads at most 63"),
    ("vllm serve m -cc '" + DEEP + "'", "'compilation-config' cannot be read safely: nested deeper than 64 levels"),
], ids=["sglang json text", "vllm dotted keys", "vllm -cc"])
def test_a_hostile_command_line_is_bad_input(command, message):
    out = attack("import", "--cmd", command)
    assert out.exit_code == 2, out.stderr
    assert message in out.stderr
    assert "internal error" not in out.stderr


def test_a_baseline_file_nested_past_the_bound_is_bad_input(tmp_path):
    path = manifest(tmp_path, "vllm", "0.32.0", "max-model-len: 8192")
    baseline = tmp_path / "baseline.json"
    baseline.write_text('{"schema": ' + DEEP + "}")
    out = attack("verify", str(path), "--mode", "estimate", "--baseline", str(baseline))
    assert out.exit_code == 2, out.stderr
    assert f"kvcheck: error: {baseline}: cannot be read safely: nested deeper than 64 levels" in out.stderr


def test_loads_keeps_the_decoders_message_and_refuses_the_bounds():
    assert loads('{"a": [1, 2]}') == {"a": [1, 2]}
    with pytest.raises(json.JSONDecodeError, match="Expecting value: line 1 column 7"):
        loads('{"a": }')
    with pytest.raises(JsonRejected, match="nested deeper than 64 levels"):
        loads("[" * 65 + "]" * 65)
    assert loads("[" * 64 + "]" * 64) is not None
