"""Every error kvcheck raises on purpose; each carries the exit code the CLI turns it into."""

from __future__ import annotations

from dataclasses import dataclass

from kvcheck.model import ExitCode


class KvcheckError(Exception):
    """Base of kvcheck's own errors. `exit_code` follows the contract; `hint` says what to do."""

    exit_code: int = ExitCode.INTERNAL

    def __init__(self, message: str, *, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint


class InputError(KvcheckError):
    """The user's input is invalid (manifest, flags, a file that is not a SGLang log): exit 2."""

    exit_code = ExitCode.INPUT


class EngineRefusal(KvcheckError):
    """The engine would refuse these settings at startup (or as it builds the model): exit 2, with the engine's
    own reason.

    Deliberately not an EstimateError/InputError: those make a role "not estimated" (KV305, exit 3), while
    settings the engine refuses are the manifest's error, whatever the mode.
    """

    exit_code = ExitCode.INPUT


@dataclass(frozen=True)
class InputIssue:
    """One problem in an input file, pointing at the exact place."""

    file: str
    line: int | None
    column: int | None
    path: str  # dotted path into the document, "" for the whole file
    message: str

    @classmethod
    def at(cls, file: str, where: tuple[int, int] | None, path: str, message: str) -> InputIssue:
        """An issue at `where`, the (line, column) a YAML position lookup gives; None: no known place."""
        line, column = where if where is not None else (None, None)
        return cls(file, line, column, path, message)

    def render(self) -> str:
        where = self.file
        if self.line is not None:
            where += f":{self.line}"
            if self.column is not None:
                where += f":{self.column}"
        return f"{where}: {self.path}: {self.message}" if self.path else f"{where}: {self.message}"


class ManifestError(InputError):
    """A manifest failed validation; `issues` holds every problem found in one pass."""

    def __init__(self, issues: list[InputIssue], *, hint: str | None = None) -> None:
        self.issues = list(issues)
        lines = "\n".join(issue.render() for issue in self.issues)
        count = len(self.issues)
        super().__init__(f"{count} error{'s' if count != 1 else ''} in manifest:\n{lines}", hint=hint)


class CheckError(KvcheckError):
    """kvcheck could not check (engine did not boot, GPU missing, server unreachable): exit 3."""

    exit_code = ExitCode.ERROR


class EngineBootError(CheckError):
    """An engine exited, hung or printed nothing usable before giving its pool figures."""


class GpuInventoryError(CheckError):
    """The GPUs a role needs cannot be inspected or are not usable."""


class EndpointError(CheckError):
    """A live server could not be asked, or its answer was not a SGLang answer."""


class ServerUnusable(EndpointError):
    """The server could not be asked at all (no connection, TLS, the deadline), refused the
    credentials, or sent an answer too large or too malformed to read safely: another engine's
    client would fare no better, so audit does not try one."""


class EstimateError(CheckError):
    """The estimate model cannot predict this role (unknown architecture, missing config)."""


class MissingExtraError(KvcheckError):
    """An optional dependency is missing; the hint names the install command."""

    exit_code = ExitCode.ERROR
