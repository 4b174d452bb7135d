"""Invalid input (exit 2) as a report, so that machine formats carry it too.

A CI job reads annotations, SARIF results and JUnit files, not stderr: an invalid manifest that wrote
nothing there looked, on the pull request, like a check that never ran. As checkov and kubeconform
do with parse errors, each problem becomes a KV001 finding, at its file:line:column when the error
names one, in a report with verdict `error` and exit code 2 (`Report.exit_code`: a KV0xx error).
The message on stderr stays as it was; this report is what the requested formats render.
"""

from __future__ import annotations

import re
from pathlib import Path

from kvcheck.errors import InputError, InputIssue, KvcheckError, ManifestError
from kvcheck.model import Finding, Location, Report
from kvcheck.policy.registry import define_rule

INPUT_MODE = "input"  # the report's mode: nothing was measured, estimated or asked

KV001 = define_rule(
    "KV001",
    "error",
    "the input is invalid, so nothing was checked",
    """kvcheck stopped before checking anything: a manifest or deployment file failed validation
    (an unknown key, a wrong type, a flag the declared SGLang or vLLM release does not have), a file could
    not be read, or an option or its value was wrong. The command exits 2, and every requested
    format carries each problem as a KV001 finding, at the file, line and column it names when it
    names one, so that a pull request shows it where a check result would be. `policy.ignore` and
    `policy.severity` do not apply to it: the input was not read far enough for a policy. Fix: correct the input as the message says (it suggests the nearest
    known key or flag), then run the check again.""",
)

KV300 = define_rule(
    "KV300",
    "error",
    "the run stopped before any role or server was checked",
    """kvcheck could not start checking: measure mode found no GPU it may use on this host, the cluster's
    API server or the batch scheduler did not answer, or an extra the run needs is not installed. The
    command exits 3 (could not check: fail closed), and every requested format carries the message as
    this finding, so that a job reading a JUnit, SARIF or JSON report sees a gate that did not pass,
    not a missing file. It cannot be ignored or suppressed. Fix: do what the message and its hint say
    (run where the GPUs or the cluster are, install the extra), or check with `--mode estimate`.""",
)

# "deploy/prod.yaml:14:3: message" or "deploy/prod.yaml:14: message": how kvcheck's errors name a place
_PLACE = re.compile(r"(?P<file>[^\s:][^:\n]*):(?P<line>[0-9]+)(?::(?P<column>[0-9]+))?: (?P<message>.+)", re.DOTALL)
# "deploy/prod.yaml: message": a whole file, taken as a place only when that file exists
_FILE = re.compile(r"(?P<file>[^\s:][^:\n]*): (?P<message>.+)", re.DOTALL)


def input_findings(message: str, *, hint: str | None = None, issues: list[InputIssue] | None = None) -> tuple[Finding, ...]:
    """One KV001 finding per problem: a manifest's every issue, else the one message."""
    if issues:
        return tuple(
            Finding(
                KV001.code,
                "error",
                None,
                f"{issue.path}: {issue.message}" if issue.path else issue.message,
                hint=hint,
                location=Location(issue.file, issue.line, issue.column) if issue.file else None,
            )
            for issue in issues
        )
    head, *lines = message.split("\n")
    if lines and head.endswith(":") and all(_PLACE.match(line) for line in lines):
        parts = lines  # "2 errors in fleet file:" then one file:line:column line per problem
    else:
        parts = [message]
    return tuple(Finding(KV001.code, "error", None, text, hint=hint, location=location)
                 for text, location in map(_located, parts))


def _located(message: str) -> tuple[str, Location | None]:
    """The message without its leading file:line:column, and that place (None: it names none)."""
    first_line = message.split("\n", 1)[0]
    placed = _PLACE.match(first_line)
    if placed is not None:
        column = placed.group("column")
        rest = message[placed.start("message"):]
        return rest, Location(placed.group("file"), int(placed.group("line")), int(column) if column else None)
    whole = _FILE.match(first_line)
    if whole is not None and Path(whole.group("file")).is_file():
        return message[whole.start("message"):], Location(whole.group("file"))
    return message, None


def check_error_report(command: str, error: KvcheckError, *, mode: str, source: str | None,
                       secrets: frozenset[str] = frozenset()) -> Report:
    """The report of a run stopped before checking anything (exit 3): no roles, one KV300 finding."""
    finding = Finding(KV300.code, "error", None, error.message, hint=error.hint)
    return Report(command=command, mode=mode, source=source, context_length=None, roles=(), findings=(finding,),
                  secrets=secrets)


def input_error_report(command: str, error: InputError | str, *, source: str | None,
                       hint: str | None = None, secrets: frozenset[str] = frozenset()) -> Report:
    """The report of a run stopped by invalid input: no roles, a KV001 finding per problem, exit 2."""
    if isinstance(error, ManifestError):
        findings = input_findings(error.message, hint=error.hint, issues=error.issues)
    elif isinstance(error, InputError):
        findings = input_findings(error.message, hint=error.hint)
    else:
        findings = input_findings(error, hint=hint)
    return Report(command=command, mode=INPUT_MODE, source=source, context_length=None, roles=(),
                  findings=findings, secrets=secrets)
