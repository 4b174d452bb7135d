"""Live progress on stderr while engines boot: per role the phase its log shows and the time spent.

Quiet unless stderr is a terminal (CI logs stay clean; stdout carries only the report).
"""

from __future__ import annotations

import sys
import threading

from rich.console import Console
from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn


class BootProgress:
    """One line per role; thread-safe (role threads report their own phase)."""

    def __init__(self, enabled: bool | None = None) -> None:
        self.enabled = sys.stderr.isatty() if enabled is None else enabled
        self._lock = threading.Lock()
        self._tasks: dict[str, int] = {}
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

    def add(self, role: str, text: str) -> None:
        if self._progress is None:
            return
        with self._lock:
            self._tasks[role] = self._progress.add_task(text, role=role, total=None, start=False)

    def start(self, role: str) -> None:
        """The role's clock starts when its engine does (not while it waits for shared GPUs)."""
        if self._progress is not None and role in self._tasks:
            self._progress.start_task(self._tasks[role])

    def phase(self, role: str, text: str) -> None:
        if self._progress is not None and role in self._tasks:
            self._progress.update(self._tasks[role], description=text)

    def finish(self, role: str, text: str) -> None:
        if self._progress is not None and role in self._tasks:
            task = self._tasks[role]
            self._progress.update(task, description=text, total=1, completed=1)
            self._progress.stop_task(task)
