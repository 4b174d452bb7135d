"""Boot progress on stderr: plain lines where stderr is not a terminal, a live display where it is."""

from __future__ import annotations

import io

from kvcheck.backends.measure.progress import BootProgress


class _Stream(io.StringIO):
    def __init__(self, tty: bool) -> None:
        super().__init__()
        self._tty = tty

    def isatty(self) -> bool:
        return self._tty


def test_plain_lines_name_the_role_and_change_only_when_the_text_does() -> None:
    stream = _Stream(tty=False)
    with BootProgress(stream=stream) as progress:
        progress.note("engine logs: /logs/20261130T171502Z-3fa9c1/")
        progress.add("prefill", "queued")
        progress.phase("prefill", "[dim]loading weights[/]")
        progress.phase("prefill", "loading weights")  # the same text: no new line
        progress.finish("prefill", "[green]✓ pool 681,280 tokens[/]")
    assert stream.getvalue().splitlines() == [
        "kvcheck: engine logs: /logs/20261130T171502Z-3fa9c1/",
        "kvcheck: [prefill] queued",
        "kvcheck: [prefill] loading weights",
        "kvcheck: [prefill] ✓ pool 681,280 tokens",
    ]


def test_the_live_display_prints_the_run_note_on_stderr_only(capsys) -> None:
    with BootProgress(enabled=True, stream=_Stream(tty=True)) as progress:
        progress.note("engine logs: /logs/run-[bold]x[/]/")  # a path is shown as written, not as markup
        progress.add("decode", "queued")
    out, err = capsys.readouterr()
    assert out == ""
    assert "engine logs: /logs/run-[bold]x[/]/" in err


def test_disabled_progress_prints_nothing() -> None:
    stream = _Stream(tty=False)
    with BootProgress(enabled=False, stream=stream) as progress:
        progress.note("engine logs: /logs/x/")
        progress.add("prefill", "queued")
    assert stream.getvalue() == ""


def test_a_role_name_is_shown_as_written_not_as_markup(capsys) -> None:
    # the live display read the name as Rich markup: a role "x[/]" stopped kvcheck (MarkupError, exit 4)
    with BootProgress(enabled=True, stream=_Stream(tty=True)) as progress:
        progress.add("x[/]", "queued")
        progress.finish("x[/]", "[green]✓ pool 681,280 tokens[/]")
    out, err = capsys.readouterr()
    assert out == ""
    assert "x[/]" in err
