"""Progress on stderr while engines boot: per role the phase its log shows and the time spent.

On a terminal, a live display; anywhere else (a CI log), one plain line per change, so a run of
many minutes shows what it is doing. stdout carries only the report either way.
"""

from __future__ import annotations

import sys
import threading
import time
from typing import TextIO

from rich.console import Console
from rich.errors import MarkupError
from rich.markup import escape
from rich.progress import Progress, SpinnerColumn, TaskID, TextColumn, TimeElapsedColumn
from rich.text import Text

from kvcheck.escape import one_line


def literal(text: str) -> str:
    """Text (a role name, an engine's words) shown as written inside a progress description, which is markup."""
    return escape(text)


class BootProgress:
    """One line per role; thread-safe (role threads report their own phase)."""

    def __init__(self, enabled: bool | None = None, *, stream: TextIO | None = None) -> None:
        """enabled None: live on a terminal, plain lines elsewhere; False: nothing."""
        self.stream = stream or sys.stderr
        terminal = self.stream.isatty()
        self.enabled = terminal if enabled is None else enabled
        self.plain = enabled is None and not terminal
        self._lock = threading.Lock()
        self._tasks: dict[str, TaskID] = {}
        self._started: dict[str, float] = {}
        self._last: dict[str, str] = {}
        self._progress: Progress | None = None
        if self.enabled:
            self._progress = Progress(
                SpinnerColumn(finished_text=" "),
                TextColumn("[bold]{task.fields[role]}[/]"),
                TextColumn("{task.description}"),
                TimeElapsedColumn(),
                console=Console(stderr=True),
                transient=False,
            )

    def __enter__(self) -> BootProgress:
        if self._progress is not None:
            self._progress.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        if self._progress is not None:
            self._progress.stop()

    def _line(self, role: str, text: str) -> None:
        """A plain progress line (markup dropped), once per change: `kvcheck: [prefill] loading weights (12 s)`."""
        try:
            plain = Text.from_markup(text).plain
        except MarkupError:
            plain = text
        with self._lock:
            if self._last.get(role) == plain:
                return
            self._last[role] = plain
            started = self._started.get(role)
            elapsed = f" ({time.monotonic() - started:.0f} s)" if started is not None else ""
            # one line: a name's newline would start a line a CI runner may read as a command (`::error`)
            self.stream.write(one_line(f"kvcheck: [{role}] {plain}{elapsed}") + "\n")
            self.stream.flush()

    def note(self, text: str) -> None:
        """One line about the whole run (where its engine logs go), in either mode."""
        if self.plain:
            with self._lock:
                self.stream.write(one_line(f"kvcheck: {text}") + "\n")
                self.stream.flush()
        elif self._progress is not None:
            self._progress.console.print(Text(text))

    def add(self, role: str, text: str) -> None:
        if self.plain:
            self._line(role, text)
        if self._progress is None:
            return
        with self._lock:
            # the column reads its field as markup: a name is shown as written ("x[/]" stopped the display)
            self._tasks[role] = self._progress.add_task(text, role=escape(one_line(role)), total=None, start=False)

    def start(self, role: str) -> None:
        """The role's clock starts when its engine does (not while it waits for shared GPUs)."""
        self._started.setdefault(role, time.monotonic())
        if self._progress is not None and role in self._tasks:
            self._progress.start_task(self._tasks[role])

    def phase(self, role: str, text: str) -> None:
        if self.plain:
            self._line(role, text)
        if self._progress is not None and role in self._tasks:
            self._progress.update(self._tasks[role], description=text)

    def finish(self, role: str, text: str) -> None:
        if self.plain:
            self._line(role, text)
        if self._progress is not None and role in self._tasks:
            task = self._tasks[role]
            self._progress.update(task, description=text, total=1, completed=1)
            self._progress.stop_task(task)
