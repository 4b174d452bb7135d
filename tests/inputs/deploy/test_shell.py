"""The shell subset that picks the server's argv out of `sh -c` strings, and Kubernetes $(VAR) expansion."""

from __future__ import annotations

import pytest

from kvcheck.inputs.deploy.server import Env, Sourced, expand_k8s
from kvcheck.inputs.deploy.shell import parse_script, shell_script, strip_prefixes

SCRIPT = """set -e
pip install foo && \\
  MODEL=/m NCCL_DEBUG=INFO exec python3 -m sglang.launch_server --model-path "$MODEL" \\
    --tp ${TP} --mem-frac 0.8 $EXTRA --x '$NOPE' --y "${UNSET}" --z ${U2:-5} --w $(hostname) # comment
echo done; sleep 1
"""


def test_commands_are_split_on_chains_and_newlines_and_prefixes_are_dropped() -> None:
    env = {"TP": "8", "EXTRA": "--a 1 --b"}
    commands = parse_script(SCRIPT, env.get)
    assert [strip_prefixes(c)[0].text for c in commands] == ["set", "pip", "python3", "echo", "sleep"]
    server = commands[2]
    assert {k: v.text for k, v in server.assignments.items()} == {"MODEL": "/m", "NCCL_DEBUG": "INFO"}
    words = strip_prefixes(server)
    assert [w.text for w in words] == [
        "python3", "-m", "sglang.launch_server", "--model-path", "$MODEL", "--tp", "8", "--mem-frac", "0.8",
        "--a", "1", "--b", "--x", "$NOPE", "--y", "${UNSET}", "--z", "5", "--w", "$(hostname)",
    ]
    # a VAR=value prefix sets the command's environment, not the words the shell expands before it
    assert words[4].unresolved == ["MODEL"]
    assert words[13].unresolved == []  # single quotes: literal
    assert words[15].unresolved == ["UNSET"]
    assert words[19].unresolved == ["$(hostname)"]
    assert SCRIPT[words[6].offset :].startswith("${TP}")  # offsets are into the script as written


def test_assignments_and_exports_carry_to_later_commands() -> None:
    commands = parse_script("export TP=4\nMEM=0.7\npython -m sglang.launch_server --tp $TP --mem-frac $MEM", {}.get)
    assert [w.text for w in commands[-1].words][-4:] == ["--tp", "4", "--mem-frac", "0.7"]


def test_shell_script_index() -> None:
    assert shell_script(["/bin/bash", "-c", "x"]) == 2
    assert shell_script(["sh", "-ec", "x"]) == 2
    assert shell_script(["bash", "-l", "-c", "x"]) == 3
    assert shell_script(["python3", "-c", "x"]) is None


def test_kubernetes_expansion_leaves_unknown_names_and_unescapes_double_dollars() -> None:
    env = Env({"A": Sourced("1", None)})
    assert expand_k8s("--x $(A) $(B) $$(A)", env) == ("--x 1 $(B) $(A)", ["B"])


ARRAY_SCRIPT = """args=(
  python3 -m sglang.launch_server   # the server
  --model-path "$MODEL" --tp 2
)
args+=(--mem-frac 0.8)
exec "${args[@]}" "$@" --x ${args[4]} $1
"""


def test_bash_arrays_and_positional_parameters_give_each_word_from_its_own_place() -> None:
    [command] = parse_script(ARRAY_SCRIPT, {"MODEL": "/m"}.get, ["--context-length", "32768"])
    words = strip_prefixes(command)
    assert [w.text for w in words] == [
        "python3", "-m", "sglang.launch_server", "--model-path", "/m", "--tp", "2", "--mem-frac", "0.8",
        "--context-length", "32768", "--x", "/m", "--context-length",
    ]
    assert ARRAY_SCRIPT[words[4].offset :].startswith('"$MODEL"')  # an element keeps its own column
    assert ARRAY_SCRIPT[words[7].offset :].startswith("--mem-frac")  # args+=( ... ) appends
    assert [w.positional for w in words[9:11]] == [1, 2]  # "$@": the words after `sh -c SCRIPT NAME`
    assert words[4].variables == ["MODEL"]


def test_an_array_or_positional_parameter_that_is_not_known_stays_unresolved() -> None:
    [command] = parse_script('python3 -m sglang.launch_server "${extra[@]}" "$@"', {}.get)
    assert [(w.text, w.unresolved) for w in command.words[3:]] == [('"${extra[@]}"', ["extra"]), ("$@", ["$@"])]
    [command] = parse_script('python3 -m sglang.launch_server "$@"', {}.get, [])
    assert [w.text for w in command.words] == ["python3", "-m", "sglang.launch_server"]  # no arguments: nothing


def test_an_array_that_is_never_closed_is_a_shell_error_where_it_opens() -> None:
    from kvcheck.inputs.deploy.shell import ShellSyntaxError

    with pytest.raises(ShellSyntaxError, match=r"unterminated array args=\(") as info:
        parse_script("echo hi\nargs=(\n  python3 -m sglang.launch_server\n", {}.get)
    assert info.value.offset == 8


@pytest.mark.parametrize("script", [
    'run() { exec python3 -m sglang.launch_server "$@"; }\nrun --tp 2',
    'function run { exec python3 -m sglang.launch_server "$@"; }; run --tp 2',
    'set -e\nset -- --tp 2\nexec python3 -m sglang.launch_server "$@"',
    'shift\nexec python3 -m sglang.launch_server "$@"',
])
def test_positional_parameters_a_script_rebinds_stay_unresolved(script: str) -> None:
    # inside a function "$@" is the function's arguments; `set --` and `shift` replace the script's
    server = next(c for c in parse_script(script, {}.get, ["--mem-frac", "0.8"]) if "sglang.launch_server" in c.argv)
    assert [(w.text, w.unresolved) for w in server.words if w.text == "$@"] == [("$@", ["$@"])]


@pytest.mark.parametrize("setting", ["set -ex", "set -o pipefail", "set -eu -o pipefail # strict", "set +x"])
def test_set_with_options_only_keeps_the_scripts_arguments(setting: str) -> None:
    [_, server] = parse_script(f'{setting}\nexec python3 -m sglang.launch_server "$@"', {}.get, ["--tp", "2"])
    assert server.argv[-2:] == ["--tp", "2"]


def test_redirections_are_not_words_of_the_command() -> None:
    script = "exec python3 -m sglang.launch_server --tp 8 >/var/log/s.log 2>&1 --mem-frac 0.8 &>> x 3<in <<< 'here'"
    [command] = parse_script(script, {}.get)
    assert command.argv == ["exec", "python3", "-m", "sglang.launch_server", "--tp", "8", "--mem-frac", "0.8"]
    [first, second] = parse_script("python3 -m sglang.launch_server --tp 2 2>&1 | tee /log", {}.get)
    assert (first.argv[-2:], second.argv) == (["--tp", "2"], ["tee", "/log"])


def test_a_here_documents_body_is_skipped_not_read_as_commands() -> None:
    script = (
        "cat > /tmp/run.sh <<'EOF'\n"
        "python3 -m sglang.launch_server --tp 8\n"
        "EOF\n"
        "cat <<-END >> /tmp/x\n"
        "\tpython3 -m sglang.launch_server --tp 4\n"
        "\tEND\n"
        "exec python3 -m sglang.launch_server --tp 2\n"
    )
    commands = parse_script(script, {}.get)
    assert [c.argv for c in commands] == [["cat"], ["cat"], ["exec", "python3", "-m", "sglang.launch_server", "--tp", "2"]]


def test_a_redirection_without_a_target_is_a_shell_error() -> None:
    from kvcheck.inputs.deploy.shell import ShellSyntaxError

    with pytest.raises(ShellSyntaxError, match="> without a target"):
        parse_script("python3 -m sglang.launch_server --tp 2 >\n", {}.get)


def _last_value(script: str, env: dict[str, str] | None = None):
    """The word `$MTT` expands to in the script's last command."""
    word = parse_script(script, (env or {}).get)[-1].words[-1]
    return word.text, word.unresolved, word.why


@pytest.mark.parametrize(("script", "why"), [
    # an assignment that runs on some paths only: the launch's value is not the last one read
    ("MTT=1000\n[ -n \"$BIG\" ] && MTT=500000\n", "assigned at line 2 only on some paths"),
    ("MTT=1000\ntrue || MTT=500000\n", "assigned at line 2 only on some paths"),
    ("MTT=1000\ntest -n \"$BIG\" &&\n  MTT=500000\n", "assigned at line 3 only on some paths"),
    ("MTT=1000\nif [ -n \"$X\" ]; then MTT=500000; fi\n", "assigned at line 2 only on some paths"),
    ("if [ -n \"$X\" ]; then\n  MTT=1000\nelse\n  MTT=500000\nfi\n", "assigned at line 4 only on some paths"),
    ("MTT=1000\ncase \"$MODE\" in big) MTT=500000;; esac\n", "assigned at line 2 only on some paths"),
    ("MTT=1000\nwhile false; do MTT=500000; done\n", "assigned at line 2 only on some paths"),
    ("MTT=500000\nfor v in 1000; do MTT=$v; done\n", "from $v, which is not known there"),
    ("MTT=1000\nset_big() { MTT=500000; }\n", "assigned at line 2 only on some paths"),
    ("MTT=1000\n(MTT=500000)\n", "assigned at line 2 only on some paths"),
    ("MTT=1000\nMTT=500000 &\n", "assigned at line 2 only on some paths"),
    ("MTT=1000\n[ -n \"$BIG\" ] && export MTT=500000\n", "exported at line 2 only on some paths"),
    # commands that set the variables they name, and those that may set any
    ("MTT=500000\nread MTT < /etc/mtt\n", "`read` at line 2 sets it"),
    ("MTT=500000\ndeclare -i MTT=1000\n", "`declare` at line 2 sets it"),
    ("MTT=500000\nunset MTT\n", "`unset` at line 2 sets it"),
    ("MTT=500000\neval \"MTT=1000\"\n", "`eval` at line 2 may set any variable"),
    ("MTT=500000\nsource ./env.sh\n", "`source` at line 2 may set any variable"),
    ("MTT=500000\n. ./env.sh\n", "`.` at line 2 may set any variable"),
])
def test_a_variable_the_script_may_or_may_not_set_is_unresolved_naming_why(script: str, why: str) -> None:
    text, unresolved, reasons = _last_value(script + "python -m sglang.launch_server --max-total-tokens $MTT\n")
    assert (text, unresolved) == ("$MTT", ["MTT"])
    assert why in reasons["MTT"]
    # ${MTT:-default} is no more known than $MTT: the default holds only where MTT is unset
    text, unresolved, _ = _last_value(script + "python -m sglang.launch_server --max-total-tokens ${MTT:-7}\n")
    assert (text, unresolved) == ("${MTT:-7}", ["MTT"])


@pytest.mark.parametrize(("script", "value"), [
    # set again after the uncertain part, unconditionally: known
    ("[ -n \"$BIG\" ] && MTT=500000\nMTT=1000\n", "1000"),
    ("source ./env.sh\nMTT=1000\n", "1000"),
    ("if true; then echo; fi\nMTT=1000\n", "1000"),
    # a condition that assigns nothing leaves the value as it was; so does a command's own prefix assignment
    ("MTT=1000\n[ -n \"$BIG\" ] && echo big\n", "1000"),
    ("MTT=1000\nMTT=5 env\n", "1000"),
    ("MTT=1000\nfor v in a b; do echo $v; done\n", "1000"),
])
def test_a_variable_set_unconditionally_stays_known(script: str, value: str) -> None:
    text, unresolved, _ = _last_value(script + "python -m sglang.launch_server --max-total-tokens $MTT\n")
    assert (text, unresolved) == (value, [])


def test_an_array_assigned_on_some_paths_is_unresolved() -> None:
    script = ("ARGS=(--max-total-tokens 500000)\n[ -n \"$SMALL\" ] && ARGS=(--max-total-tokens 1000)\n"
              "python -m sglang.launch_server \"${ARGS[@]}\"\n")
    word = parse_script(script, {}.get)[-1].words[-1]
    assert (word.unresolved, "only on some paths" in word.why["ARGS"]) == (["ARGS"], True)


def test_env_option_operands_are_not_the_program() -> None:
    """`env -u NAME` and `env -C DIR` take an operand: the program is the word after it, and the environment
    the same one pass reads drops NAME (strip_prefixes and launch_environment walked the prefixes apart and
    disagreed: 'A' was taken for the program)."""
    from kvcheck.inputs.deploy.shell import launch_environment

    [command] = parse_script("A=1 env -u A -C /srv B=2 python3 -m sglang.launch_server --tp 2", lambda _n: None)
    assert [w.text for w in strip_prefixes(command)][:3] == ["python3", "-m", "sglang.launch_server"]
    assert launch_environment(command) == {"B": "2"}
