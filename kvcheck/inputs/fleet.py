"""The servers to audit: command-line URLs, a fleet file, or a manifest's roles paired with URLs.

A fleet file is one URL per line (`#` comments, blank lines), or YAML mapping names to URLs (each a
URL or `{url, context_length, role}`, validated by the pydantic model FleetEntry, like the manifest),
or a YAML list of URLs. Every problem is reported in one pass with file:line:column.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from kvcheck.errors import InputError, InputIssue
from kvcheck.http import display_url, validate_base_url
from kvcheck.io.textfile import read_text_file
from kvcheck.model import Endpoint, Location, RoleTarget

if TYPE_CHECKING:
    from kvcheck.io.yamlpos import Positions

MAX_FLEET_BYTES = 4 * 1024 * 1024


# -- endpoints -----------------------------------------------------------------------------------


def endpoints_from_urls(urls: Iterable[str]) -> list[Endpoint]:
    """Command-line URLs, each named by its URL; every bad URL is reported in one pass."""
    endpoints, problems = [], []
    for url in urls:
        try:
            parsed = validate_base_url(url)
        except InputError as exc:
            problems.append(exc.message)
            continue
        endpoints.append(Endpoint(name=display_url(parsed), url=str(parsed)))
    if problems:
        raise InputError("\n".join(problems), hint="each URL is a server's base, e.g. http://10.0.0.5:30000")
    return endpoints


def parse_fleet_file(path: str | Path) -> list[Endpoint]:
    """A fleet file: one URL per line (`#` comments, blank lines), or a YAML mapping
    `name: URL` / `name: {url: URL, context_length: N, role: R}` (a YAML list of URLs also works)."""
    path = Path(path)
    display = str(path)
    text = _read_fleet(path, display)
    lines = text.splitlines()
    content = [(n, _strip_comment(line)) for n, line in enumerate(lines, 1)]
    content = [(n, line) for n, line in content if line.strip()]
    if not content:
        raise InputError(f"{display}: the fleet file lists no servers")
    if path.suffix.lower() in (".yaml", ".yml") or any(_looks_like_yaml(line) for _, line in content):
        endpoints, issues = _parse_fleet_yaml(text, display)
    else:
        endpoints, issues = _parse_fleet_lines(content, lines, display)
    issues.extend(duplicate_issues(endpoints, display))
    if issues:
        count = len(issues)
        body = "\n".join(issue.render() for issue in issues)
        raise InputError(
            f"{count} error{'s' if count != 1 else ''} in fleet file:\n{body}",
            hint="a fleet file is one URL per line, or YAML mapping names to URLs (see docs/audit.md)",
        )
    return endpoints


def endpoints_from_manifest(manifest_targets: Sequence[RoleTarget], pairs: Sequence[str]) -> list[Endpoint]:
    """`--endpoint ROLE=URL` pairs, checked against the manifest's roles (all problems in one pass)."""
    known = {t.name: t for t in manifest_targets}
    endpoints: list[Endpoint] = []
    problems: list[str] = []
    seen: dict[str, str] = {}
    for pair in pairs:
        role, sep, url = pair.partition("=")
        role, url = role.strip(), url.strip()
        if not sep or not role or not url:
            problems.append(f"--endpoint {pair!r}: expected ROLE=URL, e.g. prefill=http://10.0.0.5:30000")
            continue
        if role not in known:
            close = difflib.get_close_matches(role, list(known), n=1)
            suggestion = f" (did you mean '{close[0]}'?)" if close else ""
            problems.append(
                f"--endpoint {role}=...: the manifest has no role '{role}'{suggestion}; "
                f"its roles are: {', '.join(known)}"
            )
            continue
        if role in seen:
            problems.append(f"--endpoint {role}=...: role '{role}' is given twice")
            continue
        try:
            parsed = validate_base_url(url)
        except InputError as exc:
            problems.append(f"--endpoint {role}=...: {exc.message}")
            continue
        seen[role] = str(parsed)
        endpoints.append(
            Endpoint(name=role, url=str(parsed), role=role, context_length=known[role].context_length)
        )
    if problems:
        raise InputError("\n".join(problems))
    return endpoints


def _read_fleet(path: Path, display: str) -> str:
    return read_text_file(path, display, kind="fleet file", max_bytes=MAX_FLEET_BYTES)


def _strip_comment(line: str) -> str:
    """A line without its `#` comment (a `#` starts one at the line start or after a blank)."""
    if line.lstrip().startswith("#"):
        return ""
    for index, char in enumerate(line):
        if char == "#" and index > 0 and line[index - 1] in " \t":
            return line[:index].rstrip()
    return line.rstrip()


def _looks_like_yaml(line: str) -> bool:
    """YAML keys end in `:` followed by a blank or the line end; URLs have `://` and `:port`."""
    stripped = line.strip()
    return stripped.startswith(("- ", "{", "[")) or any(
        char == ":" and (index + 1 == len(stripped) or stripped[index + 1] in " \t")
        for index, char in enumerate(stripped)
    )


def _parse_fleet_lines(
    content: list[tuple[int, str]], lines: list[str], display: str
) -> tuple[list[Endpoint], list[InputIssue]]:
    endpoints, issues = [], []
    for number, line in content:
        column = len(lines[number - 1]) - len(lines[number - 1].lstrip()) + 1
        words = line.split()
        if len(words) != 1:
            issues.append(
                InputIssue(display, number, column, "", f"expected one URL per line, got {line.strip()!r}")
            )
            continue
        try:
            parsed = validate_base_url(words[0])
        except InputError as exc:
            issues.append(InputIssue(display, number, column, "", exc.message))
            continue
        name = display_url(parsed)
        endpoints.append(Endpoint(name=name, url=str(parsed), location=Location(display, number, column)))
    return endpoints, issues


def _parse_fleet_yaml(text: str, display: str) -> tuple[list[Endpoint], list[InputIssue]]:
    from kvcheck.io.yamlpos import load_yaml_with_positions

    data, positions, issues = load_yaml_with_positions(text, display)
    reader = _FleetYaml(display, positions, issues)
    if isinstance(data, list):
        return reader.listed(data), issues
    if not isinstance(data, dict):
        issues.append(
            InputIssue(display, 1, 1, "", "a YAML fleet file maps server names to URLs (or lists URLs)")
        )
        return [], issues
    return reader.named(data), issues


class _FleetYaml:
    """Reads a parsed YAML fleet file into endpoints; each problem becomes an issue at its place."""

    def __init__(self, display: str, positions: Positions, issues: list[InputIssue]) -> None:
        self.display = display
        self.positions = positions
        self.issues = issues

    def where(self, path: tuple[str | int, ...], *, key: bool = False) -> tuple[int | None, int | None]:
        found = self.positions.of_key(path) if key else self.positions.of_value(path)
        return found or (None, None)

    def url_of(self, value: Any, path: tuple[str | int, ...], label: str) -> str | None:
        if not isinstance(value, str):
            self.issues.append(InputIssue(self.display, *self.where(path), label, f"expected a URL, got {_kind(value)}"))
            return None
        try:
            return str(validate_base_url(value))
        except InputError as exc:
            self.issues.append(InputIssue(self.display, *self.where(path), label, exc.message))
            return None

    def listed(self, data: list[Any]) -> list[Endpoint]:
        """A YAML list of URLs."""
        endpoints: list[Endpoint] = []
        for index, item in enumerate(data):
            url = self.url_of(item, (index,), f"[{index}]")
            if url is not None:
                endpoints.append(
                    Endpoint(name=display_url(url), url=url, location=Location(self.display, *self.where((index,))))
                )
        return endpoints

    def named(self, data: dict[Any, Any]) -> list[Endpoint]:
        """A mapping of names to a URL or to `{url, context_length, role}`."""
        endpoints = [self._entry(name, value) for name, value in data.items()]
        return [endpoint for endpoint in endpoints if endpoint is not None]

    def _entry(self, name: Any, value: Any) -> Endpoint | None:
        location = Location(self.display, *self.where((name,), key=True))
        if isinstance(value, str):
            url = self.url_of(value, (name,), name)
            return Endpoint(name=name, url=url, location=location) if url is not None else None
        if not isinstance(value, dict):
            self.issues.append(
                InputIssue(
                    self.display,
                    *self.where((name,)),
                    name,
                    f"expected a URL or a mapping with url, got {_kind(value)}",
                )
            )
            return None
        try:
            entry = FleetEntry.model_validate(value)
        except ValidationError as exc:
            self.issues.extend(_entry_issues(exc, str(name), self.display, self.where))
            return None
        return Endpoint(
            name=name, url=entry.url, role=entry.role, context_length=entry.context_length, location=location
        )


class FleetEntry(BaseModel):
    """One server of a YAML fleet file written as a mapping: `{url, context_length, role}`."""

    model_config = ConfigDict(extra="forbid", strict=True)

    url: str = Field(description="The server's base URL, http(s)://host:port.")
    context_length: int | None = Field(default=None, description="The window to check this server against, tokens.")
    role: str | None = Field(default=None, description="The deployment role the server plays (prefill, decode).")

    @field_validator("url", mode="before")
    @classmethod
    def _url(cls, value: Any) -> str:
        if not isinstance(value, str):
            raise ValueError(f"expected a URL, got {_kind(value)}")
        try:
            return str(validate_base_url(value))
        except InputError as exc:
            raise ValueError(exc.message) from None

    @field_validator("context_length", mode="before")
    @classmethod
    def _tokens(cls, value: Any) -> int | None:
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
            raise ValueError(f"expected a positive number of tokens, got {value!r}")
        return value

    @field_validator("role", mode="before")
    @classmethod
    def _role(cls, value: Any) -> str | None:
        if value is not None and (not isinstance(value, str) or not value.strip()):
            raise ValueError(f"expected a name, got {value!r}")
        return value


FLEET_ENTRY_KEYS = tuple(FleetEntry.model_fields)


def _entry_issues(
    exc: ValidationError, name: str, display: str, where: Callable[..., tuple[int | None, int | None]]
) -> list[InputIssue]:
    """Pydantic's errors for one entry as file:line:column issues: unknown keys first, then by field."""
    order = {"extra_forbidden": -1} | {field: index for index, field in enumerate(FLEET_ENTRY_KEYS)}
    errors = sorted(
        exc.errors(), key=lambda e: order["extra_forbidden"] if e["type"] == "extra_forbidden" else order.get(str(e["loc"][0]), 99)
    )
    issues = []
    for error in errors:
        key = str(error["loc"][0])
        if error["type"] == "extra_forbidden":
            close = difflib.get_close_matches(key, FLEET_ENTRY_KEYS, n=1)
            suggestion = f" (did you mean '{close[0]}'?)" if close else ""
            message = f"unknown key{suggestion}; allowed: {', '.join(FLEET_ENTRY_KEYS)}"
            issues.append(InputIssue(display, *where((name, key), key=True), f"{name}.{key}", message))
        elif error["type"] == "missing":
            issues.append(InputIssue(display, *where((name,), key=True), name, f"missing {key}"))
        else:
            message = str(error["msg"]).removeprefix("Value error, ")
            issues.append(InputIssue(display, *where((name, key)), f"{name}.{key}", message))
    return issues


def duplicate_issues(endpoints: Sequence[Endpoint], display: str) -> list[InputIssue]:
    issues: list[InputIssue] = []
    first_seen: dict[str, str] = {}  # url -> the name it was first listed under
    for endpoint in endpoints:
        key = endpoint.url.rstrip("/")
        if key in first_seen:
            where = endpoint.location or Location(display)
            issues.append(
                InputIssue(
                    display,
                    where.line,
                    where.column,
                    "",
                    f"{display_url(key)} is listed twice (first as {first_seen[key]})",
                )
            )
        else:
            first_seen[key] = endpoint.name
    return issues


def _kind(value: Any) -> str:
    return "nothing" if value is None else f"{value!r} ({type(value).__name__})"
