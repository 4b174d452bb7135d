"""`kvcheck logs`: read SGLang or vLLM startup logs and judge every rank's pool as verify judges a role."""

from __future__ import annotations

from dataclasses import dataclass

from kvcheck.inputs.deploy.source import STDIN, STDIN_NAME
from kvcheck.model import Report
from kvcheck.policy.config import PolicyConfig
from kvcheck.policy.judge import judge
from kvcheck.policy.suppress import Gate, GateOptions


@dataclass(frozen=True)
class LogsOptions:
    """Everything `kvcheck logs` takes."""

    files: tuple[str, ...]
    context_length: int | None = None
    min_headroom: float = 1.0
    strict: bool = False
    gate: GateOptions | None = None  # --ignore-file, --baseline, --write-baseline
    stdin_timeout_s: float = 120.0  # --timeout: how long a pipe that does not end is read


def logs(options: LogsOptions) -> Report:
    """Judge every rank's pool in SGLang or vLLM startup logs, as verify judges a booted role."""
    from kvcheck.backends.logs import read_logs

    targets, measurements = read_logs(
        options.files, context_length=options.context_length, min_headroom=options.min_headroom,
        stdin_timeout_s=options.stdin_timeout_s,
    )
    return judge(
        command="logs",
        mode="logs",
        source=", ".join(STDIN_NAME if name == STDIN else name for name in options.files),
        targets=targets,
        measurements=measurements,
        policy=PolicyConfig(min_headroom=options.min_headroom),
        strict=options.strict,
        context_length=options.context_length,
        gate=Gate.open(options.gate),  # a log's own text never suppresses: no inline comments read
    )
