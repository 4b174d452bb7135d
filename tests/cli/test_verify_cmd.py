"""`kvcheck verify --cmd "python -m sglang.launch_server ..."`: an engine command line checked directly,
as `import --cmd` reads it."""

from __future__ import annotations

import json

from tests.conftest import EXAMPLES, run_kvcheck

CONFIG = str(EXAMPLES / "single-server" / "llama-3.1-8b-instruct.config.json")
LINE = "python -m sglang.launch_server --model-path meta-llama/Llama-3.1-8B-Instruct --tp 1 --mem-frac 0.8"


def test_a_command_line_is_checked_like_deployment_files() -> None:
    done = run_kvcheck("verify", "--mode", "estimate", "--gpu", "H100", "--context-length", "131072",
                       "--model-config", CONFIG, "--sglang-version", "0.5.23", "--cmd", LINE, "--format", "json")
    assert done.exit_code == 0, done.stderr
    report = json.loads(done.stdout)
    [role] = report["roles"]
    assert (report["source"], role["name"], role["status"], role["required_tokens"]) == (
        "--cmd", "server", "pass", 131072)
    assert role["details"]["mem_fraction_static"] == 0.8  # --mem-frac, argparse's abbreviation, was read
    too_long = run_kvcheck("verify", "--mode", "estimate", "--gpu", "H100", "--context-length", "1M",
                           "--model-config", CONFIG, "--sglang-version", "0.5.23", "--cmd", LINE)
    assert too_long.exit_code == 1  # the model's own 131,072 tokens are below the window


def test_an_unknown_flag_in_the_command_line_is_exit_2_at_its_column() -> None:
    done = run_kvcheck("verify", "--mode", "estimate", "--gpu", "H100", "--sglang-version", "0.5.23",
                       "--cmd", "python -m sglang.launch_server --model-path m --mem-fracc 0.8")
    assert done.exit_code == 2
    assert "--cmd:1:47: unknown SGLang flag 'mem-fracc' (SGLang 0.5.23) (did you mean 'mem-fraction-static'?)" in done.stderr


def test_nothing_to_check_is_exit_2() -> None:
    done = run_kvcheck("verify")
    assert done.exit_code == 2
    assert 'give a manifest or deployment files (FILE..., - for stdin), or --cmd "..."' in done.stderr


def test_errors_in_a_command_line_speak_of_the_command_line_not_of_deployment_files() -> None:
    bad = "python -m sglang.launch_server --model-path m --tp two"
    for command in ("verify", "import"):
        done = run_kvcheck(command, "--gpu", "H100", "--sglang-version", "0.5.23", "--cmd", bad)
        assert (done.exit_code, done.stderr) == (2, (
            "kvcheck: error: 1 error in the --cmd command line:\n"
            "--cmd:1:52: 'tp-size' must be an integer, not 'two'\n"
            "kvcheck: hint: fix the command line, or see docs/import.md for how kvcheck reads an engine's command line\n"))
    # no release named: the note and the error say the command line does not name it
    done = run_kvcheck("verify", "--mode", "estimate", "--gpu", "H100",
                       "--cmd", "python -m sglang.launch_server --model-path m --bogus-flag 3")
    assert done.exit_code == 2
    assert done.stderr.splitlines()[1] == (
        "--cmd:1:47: unknown SGLang flag 'bogus-flag' (SGLang 0.5.23). The command line does not name the SGLang "
        "release, so kvcheck read it with the flags of 0.5.23, the newest it knows: if the deployment runs an older "
        "release, pass --engine-version")
    done = run_kvcheck("verify", "--mode", "estimate", "--gpu", "H100", "--sglang-version", "0.5.23",
                       "--cmd", "python -m sglang.launch_server --model-path m")
    assert (done.exit_code, done.stderr.splitlines()[0]) == (2, (
        "kvcheck: error: --cmd: the command line does not state the context window to check "
        "(command-line: the roles set no common --context-length)"))
    done = run_kvcheck("import", "--cmd", "python -m sglang.launch_server --tp 2")
    assert done.exit_code == 0
    assert done.stdout.splitlines()[1:4] == [
        "# note: the command line does not name the SGLang release (no lmsysorg/sglang image tag); role 'server' "
        "was read with the flags of 0.5.23, the newest release kvcheck knows",
        "# context_length: not in the command line; add the window you advertise (required)",
        "# model.path: not in the command line; add it (required)",
    ]


def test_cmd_given_twice_is_exit_2_not_the_last_one_alone() -> None:
    # click keeps the last of a repeated option: the first command line (a 1,000-token pool) went unchecked
    short = LINE + " --context-length 131072 --max-total-tokens 1000"
    for command in ("verify", "import"):
        extra = ("--mode", "estimate", "--gpu", "H100", "--model-config", CONFIG) if command == "verify" else ()
        done = run_kvcheck(command, *extra, "--sglang-version", "0.5.23", "--cmd", short, "--cmd", LINE)
        assert (done.exit_code, done.stdout) == (2, "")
        assert "Invalid value for '--cmd': given 2 times: kvcheck reads one command line" in done.stderr
