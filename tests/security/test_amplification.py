"""Expansions that multiply a small file (issue 20, class 2): exit 2 with the line, in bounded memory.

A 700-byte Deployment whose script doubled a shell variable reached 2 GiB in 30 s; so did an array that
triples itself and a chain of `$(VAR)` references. Every expansion now spends from one budget per read:
16 times the characters read plus 1 Mi (kvcheck/inputs/deploy/budget.py). Each attack below runs the
real CLI in a subprocess whose address space is capped at 2 GiB (so that one that gets through fails with
MemoryError instead of taking the machine), and must end in exit 2 naming the file and line being
expanded, with a peak under PEAK_MIB_LIMIT.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from kvcheck.inputs.deploy.budget import (
    FACTOR,
    FLOOR,
    VARIABLE_COST,
    ExpansionBudgetExceeded,
    expansion_budget,
)
from kvcheck.inputs.deploy.shell import ShellBudgetError, parse_script
from tests.security.helpers import PEAK_MIB_LIMIT, attack

IMAGE = "lmsysorg/sglang:v0.5.23-cu129"
LAUNCH = "exec python3 -m sglang.launch_server --model-path Qwen/Qwen3-8B"


def deployment(script: str = "", *, env: str = "", command: str = "", name: str = "amp", extra: str = "") -> str:
    """A Deployment whose container runs `bash -c SCRIPT` (or `command`), with `env` entries."""
    if not command:
        body = "\n".join("              " + line for line in script.splitlines())
        command = f'          command: ["bash", "-c"]\n          args:\n            - |\n{body}\n'
    return (
        f"{extra}apiVersion: apps/v1\nkind: Deployment\nmetadata: {{name: {name}}}\nspec:\n  template:\n"
        f"    spec:\n      containers:\n        - name: sglang\n          image: {IMAGE}\n{env}{command}"
    )


def shell_doubling(times: int) -> str:
    """`A=$A$A` once a line: 8 * 2**times characters from about 11 bytes a line."""
    return deployment("A=xxxxxxxx\n" + "A=$A$A\n" * times + f'{LAUNCH} --served-model-name "$A"\n')


def array_tripling() -> str:
    triple = 'a=("${a[@]}" "${a[@]}" "${a[@]}")'
    return deployment("a=(--x)\n" + f"{triple}\n" * 20 + f'{LAUNCH} "${{a[@]}}"\n')


def array_appending() -> str:
    """`a+=("${a[@]}")`: the sibling that doubles through +=."""
    return deployment("a=(x)\n" + 'a+=("${a[@]}")\n' * 40 + f'{LAUNCH} --served-model-name "${{a[*]}}"\n')


def k8s_chain() -> str:
    """V1 = $(V0)$(V0), V2 = $(V1)$(V1)...: the kubelet's own expansion, 2**40 times the first value."""
    env = "          env:\n            - {name: V0, value: xxxxxxxx}\n" + "".join(
        f"            - {{name: V{i}, value: $(V{i - 1})$(V{i - 1})}}\n" for i in range(1, 41))
    return deployment(env=env, command='          command: [python3, -m, sglang.launch_server, --model-path, m, '
                                       '--served-model-name, "$(V40)"]\n')


def config_map_referenced_in_args() -> str:
    """One 64 KiB ConfigMap value named 40,000 times in one argument: 2.6 GB from 230 KB."""
    cm = f"apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: cm}}\ndata: {{BIG: {'x' * 65536}}}\n---\n"
    env = "          env:\n            - name: BIG\n              valueFrom: {configMapKeyRef: {name: cm, key: BIG}}\n"
    refs = "$(BIG)" * 40000
    return deployment(env=env, extra=cm, command=(
        f'          command: [python3, -m, sglang.launch_server, --model-path, m, --served-model-name, "{refs}"]\n'))


def config_map_in_many_containers() -> str:
    """A 20,000-key ConfigMap read through envFrom by 300 Deployments: 6 million variables."""
    data = "".join(f"  K{k}: v\n" for k in range(20000))
    docs = [f"apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: cm}}\ndata:\n{data}"]
    env = "          envFrom: [{configMapRef: {name: cm}}]\n"
    command = "          command: [python3, -m, sglang.launch_server, --model-path, m]\n"
    docs += [deployment(env=env, command=command, name=f"d{k}") for k in range(300)]
    return "---\n".join(docs)


def exports_times_commands() -> str:
    """5,000 exports then 20,000 commands: each command is handed every export (work, not output)."""
    return deployment("".join(f"export E{k}=1\n" for k in range(5000)) + ":\n" * 20000 + f"{LAUNCH}\n")


def positional_times_references() -> str:
    """`"$@"` named 5,000 times with 5,000 arguments after the script: 25 million words."""
    args = "".join(f"            - a{k}\n" for k in range(5000))
    refs = " ".join(['"$@"'] * 5000)
    script = f"'{LAUNCH} {refs}'"
    return deployment(command=f'          command: ["bash", "-c"]\n          args:\n            - {script}\n'
                              f"            - --\n{args}")


def compose_interpolation() -> str:
    """A compose command's shell naming a 64 KiB variable of the container's environment 30,000 times
    (compose itself fills the file from the shell and .env only: `$$BIG` reaches the container's sh)."""
    refs = " ".join(["$$BIG"] * 30000)
    return (f"services:\n  sglang:\n    image: {IMAGE}\n    environment:\n      BIG: {'x' * 65536}\n"
            f"    command: sh -c \"python3 -m sglang.launch_server --model-path m --served-model-name {refs}\"\n")


def slurm_doubling() -> str:
    return ("#!/bin/bash\n#SBATCH --nodes=1\n#SBATCH --gres=gpu:h100:8\nA=xxxxxxxx\n" + "A=$A$A\n" * 40
            + 'srun python3 -m sglang.launch_server --model-path m --served-model-name "$A"\n')


# attack -> (file name, text, the lines the error may point at: the expansions that pass the budget)
ATTACKS = {
    "shell variable doubling": ("deploy.yaml", shell_doubling(40), range(12, 53)),
    "array tripling": ("deploy.yaml", array_tripling(), range(12, 33)),
    "array doubling through +=": ("deploy.yaml", array_appending(), range(12, 53)),
    "$(VAR) chain in env": ("deploy.yaml", k8s_chain(), range(11, 52)),
    "ConfigMap value named 40k times": ("deploy.yaml", config_map_referenced_in_args(), range(18, 19)),
    "ConfigMap in 300 containers' envFrom": ("deploy.yaml", config_map_in_many_containers(), range(1, 30000)),
    "exports times commands": ("deploy.yaml", exports_times_commands(), range(12, 25020)),
    '"$@" times arguments': ("deploy.yaml", positional_times_references(), range(12, 13)),
    "compose interpolation": ("compose.yaml", compose_interpolation(), range(6, 7)),
    "Slurm script doubling": ("job.sbatch", slurm_doubling(), range(5, 45)),
}


@pytest.mark.parametrize(("name", "text", "lines"), ATTACKS.values(), ids=ATTACKS.keys())
def test_an_expansion_that_multiplies_the_file_is_bad_input_at_its_line(tmp_path: Path, name: str, text: str,
                                                                        lines: range) -> None:
    path = tmp_path / name
    path.write_text(text)
    limit = FACTOR * len(text) + FLOOR
    for command in (("import", str(path)), ("verify", str(path), "--mode", "estimate", "--gpu", "H100")):
        out = attack(*command, timeout=120, process=True, address_space_mib=2048)
        assert out.exit_code == 2, (command, out.exit_code, out.stderr[-2000:])
        assert f"produces more than {limit:,} characters" in out.stderr
        found = re.search(rf"{re.escape(str(path))}:(\d+):\d+: (shell: )?expanding the variables here", out.stderr)
        assert found is not None, out.stderr[-2000:]
        assert int(found.group(1)) in lines
        assert out.stderr.count("expanding the variables here") == 1  # the read stops at the first
        assert out.peak_mib < PEAK_MIB_LIMIT


def test_a_command_line_that_doubles_a_variable_is_bad_input_at_its_column() -> None:
    cmd = "A=xxxxxxxx; " + "A=$A$A; " * 40 + 'python3 -m sglang.launch_server --model-path m --served-model-name "$A"'
    out = attack("import", "--cmd", cmd, timeout=60, process=True, address_space_mib=2048)
    assert out.exit_code == 2, out.stderr[-2000:]
    found = re.search(r"--cmd:1:(\d+): expanding the variables here produces more than", out.stderr)
    assert found is not None, out.stderr
    assert 12 < int(found.group(1)) < len(cmd)
    assert out.peak_mib < PEAK_MIB_LIMIT


def test_expansions_within_the_budget_are_read_as_before(tmp_path: Path) -> None:
    """Ten doublings (8 KiB) and a tripled array are far inside the budget: the role is read, whole."""
    path = tmp_path / "deploy.yaml"
    path.write_text(shell_doubling(10))
    out = attack("import", str(path), "--gpu", "H100")
    assert out.exit_code == 0, out.stderr
    assert yaml.safe_load(out.stdout)["roles"]["amp"]["args"]["served-model-name"] == "x" * 8 * 2**10


def test_the_budget_counts_what_each_expansion_produces() -> None:
    """The budget is spent by the characters produced and the variables handed to each command: with
    nothing read, 15 doublings of 8 characters fit in the 1 Mi floor and the 16th passes it."""
    def script(times: int) -> str:
        return "A=xxxxxxxx\n" + "A=$A$A\n" * times + "echo $A\n"

    with expansion_budget(0) as budget:
        parse_script(script(15), lambda name: None)
    # each doubling reads $A twice (2 * 8 * 2**k) and is a command with one assignment (2 entries);
    # the last line reads $A once and is a command without assignments (one entry)
    assert budget.spent == sum(2 * 8 * 2**k for k in range(15)) + 8 * 2**15 + VARIABLE_COST * (2 * 16 + 1)
    with expansion_budget(0), pytest.raises(ShellBudgetError) as caught:
        parse_script(script(16), lambda name: None)
    assert script(16).count("\n", 0, caught.value.offset) == 16  # at the 16th doubling
    with expansion_budget(0) as budget, pytest.raises(ExpansionBudgetExceeded):
        budget.spend(FLOOR + 1)


def test_a_platform_of_containers_reading_one_config_map_is_read(tmp_path: Path) -> None:
    """The budget is not a trap for real streams: 200 workloads (one of them SGLang) each reading a
    500-key ConfigMap through envFrom are read, the server role found."""
    data = "".join(f"  SETTING_{k}: value-{k}\n" for k in range(500))
    docs = [f"apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: platform}}\ndata:\n{data}"]
    env = "          envFrom: [{configMapRef: {name: platform}}]\n"
    docs += [deployment(env=env, command="          command: [/bin/service]\n", name=f"svc{k}") for k in range(199)]
    docs.append(deployment(env=env, command="          command: [python3, -m, sglang.launch_server, --model-path, m]\n"))
    path = tmp_path / "platform.yaml"
    path.write_text("---\n".join(docs))
    out = attack("import", str(path), "--gpu", "H100")
    assert out.exit_code == 0, out.stderr[-2000:]
    assert list(yaml.safe_load(out.stdout)["roles"]) == ["amp"]
