"""Keep secrets (API keys, bearer tokens, passwords) out of every report kvcheck prints.

Manifests, engine command lines, engine logs and server answers can all carry secrets. Every
report passes through `redact_report` on its way out (kvcheck/cli.py), so no format and no
command can leak one, whatever a backend put into its details or quoted from an engine's log.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import fields, is_dataclass, replace
from typing import Any

from kvcheck.model import Finding, Report, RoleResult

REDACTED = "REDACTED"  # shell-safe, so a redacted launch command stays copy-pastable
_SECRET_NAME = re.compile(
    r"api[_-]?key|secret|passw(or)?d|credential|private[_-]?key|(^|[_-])token$|^authorization$", re.I
)
_WORD = r"[A-Za-z0-9_.\-]*"
# 'api_key': 'x'  "hf_token": "x"  api_key=x  API_KEY: x  (quoted or bare values)
_ASSIGNED = re.compile(
    r"(?P<key>(?P<q>['\"]?)(?:" + _WORD + r"(?:api[_-]?key|secret|passw(?:or)?d|credential|private[_-]?key)"
    + _WORD + r"|" + _WORD + r"(?<![A-Za-z0-9])token|" + _WORD + r"[_-]token)(?P=q))"
    r"(?P<sep>\s*[:=]\s*)(?P<value>'[^']*'|\"[^\"]*\"|[^\s,}\]'\"]+)",
    re.I,
)
# --api-key x   --admin-api-key=x
_FLAG = re.compile(
    r"(?P<flag>--(?:" + _WORD + r"(?:api-key|secret|password|passwd|credential|private-key)" + _WORD
    + r"|(?:" + _WORD + r"-)?token))(?P<sep>[ =])(?P<value>'[^']*'|\"[^\"]*\"|\S+)",
    re.I,
)
_BEARER = re.compile(r"(?P<head>\bBearer\s+)[A-Za-z0-9._~+/=\-]+", re.I)
# Well-known token shapes that may appear anywhere (Hugging Face, OpenAI-style keys).
_TOKEN_SHAPES = re.compile(r"\b(?:hf_[A-Za-z0-9]{16,}|sk-[A-Za-z0-9_\-]{16,})\b")


def is_secret_name(name: str) -> bool:
    """True for argument or variable names that hold secrets (`api_key`, `--admin-api-key`, `HF_TOKEN`)."""
    return bool(_SECRET_NAME.search(name.lstrip("-")))


def redact_args(args: Mapping[str, Any]) -> dict[str, Any]:
    """The args with every secret-looking value replaced."""
    return {
        key: (REDACTED if is_secret_name(str(key)) and value not in (None, "", False) else value)
        for key, value in args.items()
    }


def redact_argv(argv: Sequence[str]) -> list[str]:
    """An argv with the values of secret flags (`--api-key X`, `--api-key=X`) hidden."""
    out: list[str] = []
    hide_next = False
    for word in argv:
        if hide_next:
            out.append(REDACTED)
            hide_next = False
        elif word.startswith("--") and "=" in word and is_secret_name(word.split("=", 1)[0]):
            out.append(word.split("=", 1)[0] + "=" + REDACTED)
        elif word.startswith("--") and is_secret_name(word):
            out.append(word)
            hide_next = True
        else:
            out.append(redact_text(word))
    return out


def redact_command(command: str) -> str:
    """A shell command line with the values of secret flags hidden."""
    try:
        words = shlex.split(command)
    except ValueError:
        return REDACTED  # unbalanced quotes: cannot tell where a secret ends, show nothing
    return shlex.join(redact_argv(words))


def redact_text(text: str) -> str:
    """Free text (a quoted engine log line, an error message) with secret values hidden."""
    text = _ASSIGNED.sub(lambda m: f"{m['key']}{m['sep']}{_quoted(m['value'])}", text)
    text = _FLAG.sub(lambda m: f"{m['flag']}{m['sep']}{_quoted(m['value'])}", text)
    text = _BEARER.sub(lambda m: f"{m['head']}{REDACTED}", text)
    return _TOKEN_SHAPES.sub(REDACTED, text)


def _quoted(value: str) -> str:
    if value[:1] in ("'", '"') and value[-1:] == value[:1] and len(value) >= 2:
        return value[0] + REDACTED + value[0]
    return REDACTED


def redact_value(value: Any) -> Any:
    """Any JSON-like value: secret-named keys hidden, argv-like lists and strings scrubbed."""
    if isinstance(value, Mapping):
        return {
            key: (REDACTED if is_secret_name(str(key)) and item not in (None, "", False) else redact_value(item))
            for key, item in value.items()
        }
    if isinstance(value, list | tuple):
        if value and all(isinstance(item, str) for item in value):
            return type(value)(redact_argv(value)) if isinstance(value, list) else tuple(redact_argv(value))
        return type(value)(redact_value(item) for item in value)
    if isinstance(value, str):
        return redact_text(value)
    return value


def _finding(item: Finding) -> Finding:
    return replace(
        item,
        message=redact_text(item.message),
        hint=redact_text(item.hint) if item.hint else item.hint,
    )


def _scrub_typed(value: Any) -> Any:
    """A typed value (plan, probe rows) with every text in it scrubbed; numbers and flags stay."""
    if isinstance(value, str):
        return redact_text(value)
    if is_dataclass(value) and not isinstance(value, type):
        return replace(value, **{f.name: _scrub_typed(getattr(value, f.name)) for f in fields(value) if f.init})
    if isinstance(value, tuple):
        return tuple(_scrub_typed(item) for item in value)
    return value


def _role(role: RoleResult) -> RoleResult:
    return replace(
        role,
        argv=tuple(redact_argv(role.argv)) if role.argv is not None else None,
        details=redact_value(dict(role.details)),
        engine_version=redact_text(role.engine_version) if role.engine_version else role.engine_version,
        fit_hints=_scrub_typed(role.fit_hints),
        plan=_scrub_typed(role.plan),
        plan_error=_scrub_typed(role.plan_error),
        probe=_scrub_typed(role.probe),
    )


def redact_report(report: Report) -> Report:
    """The report with every secret hidden: argv, details (env, server args), typed texts, finding texts."""
    return replace(
        report,
        roles=tuple(_role(role) for role in report.roles),
        findings=tuple(_finding(item) for item in report.findings),
        source=redact_text(report.source) if report.source else report.source,
    )
