"""What the container and the terminal put around a program's log line, taken off for every engine's reader.

`kubectl logs --prefix` (`[pod/name/container] `), `kubectl logs --timestamps` / `docker logs -t` stamps,
the CRI files under /var/log/pods (`2026-01-05T11:00:00.123456789Z stderr F `), Docker's json-file records
(`{"log": "...\\n", "stream": "stderr", "time": "..."}`), ANSI colour codes and carriage-return progress
bars. One mechanism for all readers, so that no engine's anchored patterns miss a line another engine's
reader would have read.
"""

from __future__ import annotations

import re

from kvcheck.io.jsontext import loads as json_loads

ANSI_RE = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b[@-Z\\-_]")
# kubectl logs --prefix: "[pod/name/container] "
KUBECTL_PREFIX_RE = re.compile(r"\[([a-z]+/[^\]\s]+)\] ")
# kubectl logs --timestamps, docker logs -t, CRI files under /var/log/pods ("... stdout F ").
RFC3339_RE = re.compile(
    r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(?:[.,]\d+)?(?:Z|[+-]\d{2}:?\d{2})? (?:(?:stdout|stderr) [FP] )?"
)


def unwrap_json(line: str) -> str:
    """Docker's json-file driver: {"log": "...\\n", "stream": "stderr", "time": "..."}."""
    try:
        record = json_loads(line)
    except ValueError:
        return line
    if isinstance(record, dict) and isinstance(record.get("log"), str):
        text: str = record["log"]
        return text.rstrip("\r\n")
    return line


def unwrap(line: str) -> tuple[str, int, str | None, bool]:
    """`(shown, offset, source, plain)` of one raw line (no newline needed).

    `shown` is the line as a terminal shows it (CR-redrawn progress bars, ANSI codes and Docker's JSON
    wrapper taken off); `shown[offset:]` is what the program printed, behind kubectl's prefix and the
    runtime's timestamp; `source` the `pod/name/container` of kubectl's `--prefix` (None without one: the
    stream of one container); `plain` is False when the line needed undecorating (then the characters
    before `offset` alone do not tell how it splits). Runs on every line a reader parses: cheap character
    tests guard each regex.
    """
    line = line.rstrip("\r\n")
    plain = True
    if "\r" in line:  # progress bars redraw with CR: the last segment is what the terminal showed
        line = line.rsplit("\r", 1)[-1]
        plain = False
    if "\x1b" in line:
        line = ANSI_RE.sub("", line)
        plain = False
    if line[:2] == '{"':
        line = unwrap_json(line)
        plain = False
    offset = 0
    source = None
    first = line[:1]
    if first == "[" and not line[1:2].isdigit():
        match = KUBECTL_PREFIX_RE.match(line)
        if match:
            offset, source = match.end(), match.group(1)
            first = line[offset : offset + 1]
    if first.isdigit() and line[offset + 10 : offset + 11] == "T":
        match = RFC3339_RE.match(line, offset)
        if match:
            offset = match.end()
    return line, offset, source, plain
