"""Compose files read as `docker compose` reads them: variables from the shell and `.env`, never from the
service's own `environment:` (that is the container's); a variable set nowhere is KV317, never a guess."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvcheck.inputs.deploy import budget
from kvcheck.inputs.deploy.interpolate import InterpolationError, interpolate
from kvcheck.inputs.deploy.server import Sourced
from tests.conftest import run_kvcheck

COMPOSE = """\
services:
  sglang:
    image: lmsysorg/sglang:${TAG:-v0.5.23-cu129}
    environment:
      TP: "8"
      MODEL: org/from-environment-key
    command: python3 -m sglang.launch_server --model-path ${MODEL} --tp $TP --mem-fraction-static ${MEM:-0.8} --served-model-name $${NAME}
    deploy:
      resources:
        reservations:
          devices:
            - {driver: nvidia, count: 2, capabilities: [gpu]}
"""


@pytest.fixture
def folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    for name in ("TAG", "MODEL", "TP", "MEM", "NAME"):
        monkeypatch.delenv(name, raising=False)
    (tmp_path / "compose.yaml").write_text(COMPOSE)
    return tmp_path


def _imported(folder: Path) -> dict:
    result = run_kvcheck("import", str(folder / "compose.yaml"), "--format", "json")
    assert result.exit_code == 0, result.stderr
    return json.loads(result.stdout)


def test_values_come_from_the_dotenv_file_beside_the_compose_file(folder: Path) -> None:
    (folder / ".env").write_text('# the deployment\nMODEL=org/from-dotenv\nexport TP=4  # four\nMEM="0.7"\n')
    imported = _imported(folder)
    assert imported["model"] == {"path": "org/from-dotenv"}
    assert imported["roles"]["sglang"]["args"] == {
        "tp-size": 4, "mem-fraction-static": 0.7, "served-model-name": "${NAME}",  # $$ is a literal $
    }
    assert imported["engine"] == {"version": "0.5.23"}  # ${TAG:-...}: the default


def test_the_shell_wins_over_dotenv(folder: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (folder / ".env").write_text("MODEL=org/from-dotenv\nTP=4\n")
    monkeypatch.setenv("TP", "2")
    monkeypatch.setenv("TAG", "v0.5.21")
    imported = _imported(folder)
    assert imported["roles"]["sglang"]["args"]["tp-size"] == 2
    assert imported["engine"] == {"version": "0.5.21"}


def test_the_services_environment_does_not_fill_the_file(folder: Path) -> None:
    """`TP: "8"` in environment is the container's: compose would pass an empty --tp, kvcheck says KV317."""
    result = run_kvcheck("import", str(folder / "compose.yaml"))
    assert result.exit_code == 3  # the value is left out of the manifest: not a manifest to verify alone
    f = folder / "compose.yaml"
    lines = [line for line in result.stderr.splitlines() if "KV317" in line]
    assert lines == [
        f"kvcheck: error: {f}:7:73: KV317 the value given to tp-size uses $TP, which the files do not set; TP: "
        "compose fills it from the shell or a .env file beside the compose file; kvcheck's environment does not "
        "set it and there is no such .env",
    ]
    assert "model.path: not in the files" in result.stdout


def test_a_dotenv_that_does_not_set_it_is_named(folder: Path) -> None:
    (folder / ".env").write_text("MODEL=org/m\n")
    result = run_kvcheck("import", str(folder / "compose.yaml"))
    assert f"TP: compose fills it from the shell or {folder / '.env'}, and neither kvcheck's environment nor that " \
           "file sets it" in result.stderr


def test_a_shell_inside_the_container_sees_the_environment(folder: Path) -> None:
    (folder / "compose.yaml").write_text(
        "services:\n  s:\n    image: lmsysorg/sglang:v0.5.23\n    environment: {TP: '8'}\n"
        "    command: sh -c \"python3 -m sglang.launch_server --model-path org/m --tp $$TP\"\n"
    )
    assert _imported(folder)["roles"]["s"]["args"] == {"tp-size": 8}


def test_a_required_variable_set_nowhere_is_kv317_at_its_place(folder: Path) -> None:
    (folder / "compose.yaml").write_text(
        "services:\n  s:\n    image: lmsysorg/sglang:v0.5.23\n"
        "    command: [python3, -m, sglang.launch_server, --model-path, org/m, --tp, '${TP:?set TP}']\n"
    )
    result = run_kvcheck("import", str(folder / "compose.yaml"))
    assert result.exit_code == 3
    assert f"{folder / 'compose.yaml'}:4:77: KV317 the value given to tp-size uses $TP" in result.stderr


def test_an_invalid_reference_is_exit_2_at_its_column(folder: Path) -> None:
    (folder / "compose.yaml").write_text(
        "services:\n  s:\n    image: lmsysorg/sglang:v0.5.23\n"
        "    command: python3 -m sglang.launch_server --model-path org/m --tp ${1}\n"
    )
    result = run_kvcheck("import", str(folder / "compose.yaml"))
    assert result.exit_code == 2
    assert f"{folder / 'compose.yaml'}:4:70: compose: invalid interpolation '${{1}}'" in result.stderr


def _lookup(values: dict[str, str]):
    return lambda name: Sourced(values[name], None, "test") if name in values else None


@pytest.mark.parametrize(
    ("text", "values", "expected", "unresolved"),
    [
        ("$A ${A}", {"A": "x"}, "x x", []),
        ("${A:-d} ${A-d}", {"A": ""}, "d ", []),
        ("${A:-d} ${A-d}", {}, "d d", []),
        ("${A:+alt}|${A+alt}", {"A": ""}, "|alt", []),
        ("${A:-${B:-deep}}", {}, "deep", []),
        ("$$A $$ $ a$", {}, "$A $ $ a$", []),
        ("${A:?need A} $B", {"A": ""}, "${A} $B", ["A", "B"]),
        ("${A?need A}", {"A": ""}, "", []),
    ],
)
def test_interpolation_follows_the_compose_specification(
    text: str, values: dict[str, str], expected: str, unresolved: list[str]
) -> None:
    out = interpolate(text, _lookup(values))
    assert (out.text, [name for _, name in out.unresolved]) == (expected, unresolved)


def test_an_unclosed_brace_is_refused() -> None:
    with pytest.raises(InterpolationError, match="unclosed"):
        interpolate("--tp ${TP", _lookup({}))


def test_a_dotenv_that_multiplies_itself_stops_at_the_budget(folder: Path) -> None:
    """A=x, then A=$A$A forty times: 2**40 characters; the read's expansion budget stops it (exit 2)."""
    (folder / ".env").write_text("A=xxxxxxxx\n" + "A=$A$A\n" * 40)
    (folder / "compose.yaml").write_text(
        "services:\n  s:\n    image: lmsysorg/sglang:v0.5.23\n"
        "    command: python3 -m sglang.launch_server --model-path org/m --served-model-name $A\n"
    )
    result = run_kvcheck("import", str(folder / "compose.yaml"))
    assert result.exit_code == 2
    assert "expanding the variables here produces more than" in result.stderr
    assert budget.current() is None


def test_a_command_that_multiplies_a_dotenv_value_stops_at_the_budget(folder: Path) -> None:
    """BIG (64 KiB in .env) named 3,000 times: 192 Mi characters; the budget stops it at the command."""
    (folder / ".env").write_text(f"BIG={'x' * 65536}\n")
    refs = " ".join(["${BIG}"] * 3000)
    (folder / "compose.yaml").write_text(
        "services:\n  s:\n    image: lmsysorg/sglang:v0.5.23\n"
        f"    command: python3 -m sglang.launch_server --model-path org/m --served-model-name {refs}\n"
    )
    result = run_kvcheck("import", str(folder / "compose.yaml"))
    assert result.exit_code == 2
    assert result.stderr.startswith(f"kvcheck: error: 1 error in deployment files:\n{folder / 'compose.yaml'}:4:")
    assert "expanding the variables here produces more than" in result.stderr
