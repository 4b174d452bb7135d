"""Ctrl-C is exit 130 from every point of a run: while settings, options and the manifest are read too,
where click's own handling printed "Aborted!" and exited 1, which a CI pipeline reads as a failed gate."""

from __future__ import annotations

from click.testing import CliRunner

import kvcheck.commands.settings as settings
from kvcheck.cli import main
from tests.conftest import EXAMPLES


def _interrupt(*_args, **_kwargs):
    raise KeyboardInterrupt


def test_ctrl_c_while_the_settings_are_read_is_exit_130(monkeypatch) -> None:
    monkeypatch.setattr(settings, "settings_for", _interrupt)
    result = CliRunner().invoke(main, ["verify", str(EXAMPLES / "single-server" / "manifest.yaml"),
                                       "--mode", "estimate"])
    assert result.exit_code == 130, result.output
    assert "Aborted!" not in result.output


def test_ctrl_c_while_an_option_is_parsed_is_exit_130(monkeypatch) -> None:
    import kvcheck.cli as cli

    command = cli.main.get_command(None, "verify")  # type: ignore[arg-type]
    assert command is not None
    for param in command.params:
        if param.name == "cmd":  # an option's callback runs while click parses, before the command
            monkeypatch.setattr(param, "callback", _interrupt)
    result = CliRunner().invoke(main, ["--no-config", "verify", "--mode", "estimate", "--cmd", "x"])
    assert result.exit_code == 130, result.output
    assert "Aborted!" not in result.output
