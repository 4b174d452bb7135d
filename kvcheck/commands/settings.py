"""Defaults from a settings file, so CI does not repeat options on every call.

kvcheck looks, from the working folder upward, for `.kvcheck.yaml` (or `.kvcheck.yml`), then a
`pyproject.toml` holding a `[tool.kvcheck]` table; the nearest wins. `--config FILE` names one
instead, `--no-config` ignores them. A key at the top applies to every command that has that
option; a table named after a command applies to it alone and wins over the top:

    [tool.kvcheck]                 # .kvcheck.yaml: the same keys, in YAML
    format = "github"
    fail-on = "warning"
    profiles = ["ci/gpu-profiles"]
    [tool.kvcheck.verify]
    timeout = 900

Keys are option names (`fail-on` or `fail_on`); an unknown key is exit 2 naming the file (and for
YAML the line) with the likely intended one. Values go through the option's own type, as on the
command line; folders and files are relative to the settings file. The command line wins over the
file. docs/ci.md describes it.
"""

from __future__ import annotations

import difflib
import os
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from kvcheck.errors import InputError, InputIssue
from kvcheck.io.textfile import describe, read_bounded

if TYPE_CHECKING:
    from kvcheck.io.yamlpos import Positions

YAML_NAMES = (".kvcheck.yaml", ".kvcheck.yml")
PYPROJECT = "pyproject.toml"
MAX_SETTINGS_BYTES = 1 * 2**20
# Options a settings file may not set: what names the inputs of one run, and the switches of this loader.
NOT_SETTABLE = frozenset({"files", "manifest", "url", "urls", "code", "help", "version"})


@dataclass(frozen=True)
class Settings:
    """A settings file's defaults, as click's default_map: {command: {parameter: value}}."""

    path: Path
    default_map: dict[str, dict[str, Any]]


def find_settings(start: Path) -> Path | None:
    """The nearest settings file from `start` upward, or None."""
    for folder in (start, *start.parents):
        for name in YAML_NAMES:
            candidate = folder / name
            if candidate.is_file():
                return candidate
            if os.path.lexists(candidate):  # a folder, a dangling link or a loop of links: not ignored in silence
                what = describe(candidate) or "not a file"
                raise InputError(f"{candidate}: the settings file is {what}, not a file",
                                 hint="fix or remove it, or run with --no-config")
        pyproject = folder / PYPROJECT
        if pyproject.is_file() and _has_tool_table(pyproject):
            return pyproject
    return None


def load_settings(path: Path, group: click.Group) -> Settings:
    """Read and check a settings file against the commands' own options."""
    display = str(path)
    raw = read_bounded(path, display, kind="settings file", max_bytes=MAX_SETTINGS_BYTES)
    # YAML is loaded only when a settings file is found: most runs have none, and start up without it
    from kvcheck.io.yamlpos import Positions, load_yaml_with_positions

    positions = Positions()
    if path.name == PYPROJECT or path.suffix == ".toml":
        try:
            document = tomllib.loads(raw.decode("utf-8"))
        except (UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
            raise InputError(f"{display}: not a readable TOML file: {exc}") from exc
        tool = document.get("tool", {}).get("kvcheck") if path.name == PYPROJECT else document
        data: Any = {} if tool is None else tool
    else:
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise InputError(f"{display}: not UTF-8 text ({exc.reason} at byte {exc.start})") from exc
        data, positions, issues = load_yaml_with_positions(text, display)
        if issues:
            raise _settings_error(issues)
        data = {} if data is None else data
    if not isinstance(data, Mapping):
        raise InputError(f"{display}: the settings must be a table of option names, not {type(data).__name__}")
    return Settings(path, _default_map(data, group, display, positions, path.parent))


def _default_map(
    data: Mapping[str, Any], group: click.Group, display: str, positions: Positions, base: Path
) -> dict[str, dict[str, Any]]:
    commands = {name: cmd for name, cmd in group.commands.items() if not isinstance(cmd, click.Group)}
    options = {name: _options(cmd) for name, cmd in commands.items()}
    every = {key for table in options.values() for key in table}
    spelled = sorted({str(p.opts[0]).lstrip("-") for table in options.values() for p in table.values()})
    issues: list[InputIssue] = []
    out: dict[str, dict[str, Any]] = {name: {} for name in commands}
    per_command: list[tuple[str, Mapping[str, Any]]] = []
    for key, value in data.items():
        key = str(key)
        if key in commands and isinstance(value, Mapping):
            per_command.append((key, value))
            continue
        if key in commands:
            issues.append(InputIssue.at(display, positions.of_key((key,)), "",
                                        f"'{key}' is a command: its settings are a table of its options "
                                        f"(`{key}: {{option: value}}`), not a {type(value).__name__}"))
            continue
        name = _normal(key)
        if name not in every:
            issues.append(_unknown(display, positions, (key,), key, [*spelled, *commands]))
            continue
        _set_everywhere(out, options, name, value, (display, positions, (key,), base), issues)
    for command, table in per_command:
        for key, value in table.items():
            name = _normal(str(key))
            if name not in options[command]:
                issues.append(_unknown(display, positions, (command, str(key)), f"{command}.{key}",
                                       sorted({str(p.opts[0]).lstrip("-") for p in options[command].values()})))
                continue
            param = options[command][name]
            if _bad_value(param, value, display, positions, (command, str(key)), issues):
                continue
            out[command][str(param.name)] = _value(param, value, base)
    if issues:
        raise _settings_error(issues, hint="keys are the commands' option names (kvcheck COMMAND --help)")
    return {command: table for command, table in out.items() if table}


def _options(command: click.Command) -> dict[str, click.Parameter]:
    """The options of a command a settings file may set, by long option name and parameter name
    (dashes as underscores): `format` and `fmt` both name --format."""
    found: dict[str, click.Parameter] = {}
    for param in command.params:
        if not isinstance(param, click.Option) or not param.name or param.name in NOT_SETTABLE:
            continue
        found[param.name] = param
        for opt in param.opts:
            if opt.startswith("--"):
                found[_normal(opt)] = param
    return found


def _set_everywhere(out: dict[str, dict[str, Any]], options: Mapping[str, Mapping[str, click.Parameter]], name: str,
                    value: Any, where: tuple[str, Positions, tuple[str, ...], Path], issues: list[InputIssue]) -> None:
    """A top-level setting: the option `name` of every command that has it and takes the value (`format:
    markdown` sets verify's, not import's yaml|json); an issue when no command takes it."""
    display, positions, path, base = where
    refused: list[InputIssue] = []
    taken = False
    for command, known in options.items():
        if name in known and not _bad_value(known[name], value, display, positions, path, refused):
            out[command][str(known[name].name)] = _value(known[name], value, base)
            taken = True
    if refused and not taken:
        issues.append(refused[0])


def _bad_value(param: click.Parameter, value: Any, display: str, positions: Positions, path: tuple[str, ...],
               issues: list[InputIssue]) -> bool:
    """Whether the option refuses `value` (an issue at its file:line, as the command line would refuse it)."""
    if isinstance(param.type, click.Path) or value is None:
        return False  # a path is checked where it is used (relative to this file's folder)
    items = value if getattr(param, "multiple", False) and isinstance(value, list) else [value]
    for item in items:
        try:
            param.type.convert(item, None, None)
        except click.BadParameter as exc:
            flag = next((opt for opt in getattr(param, "opts", ()) if opt.startswith("--")), param.name)
            issues.append(InputIssue.at(display, positions.of_value(path), "", f"{flag}: {exc.format_message()}"))
            return True
    return False


def _normal(key: str) -> str:
    return key.strip().lstrip("-").replace("-", "_")


def _value(param: click.Parameter, value: Any, base: Path) -> Any:
    """A value as the command line would give it; paths relative to the settings file's folder."""
    if isinstance(param.type, click.Path):
        if isinstance(value, list):
            return [str(base / str(item)) for item in value]
        return str(base / str(value))
    if getattr(param, "multiple", False) and not isinstance(value, list):
        return [value]
    return value


def _unknown(display: str, positions: Positions, path: tuple[str, ...], key: str, known: list[str]) -> InputIssue:
    spelled = [name.replace("_", "-") for name in known]
    guess = difflib.get_close_matches(path[-1].strip().lstrip("-").replace("_", "-"), spelled, n=1, cutoff=0.6)
    message = f"unknown setting '{key}'" + (f"; did you mean '{guess[0]}'?" if guess else "")
    return InputIssue.at(display, positions.of_key(path), "", message)


def _settings_error(issues: list[InputIssue], *, hint: str | None = None) -> InputError:
    count = len(issues)
    lines = "\n".join(issue.render() for issue in issues)
    return InputError(f"{count} error{'s' if count != 1 else ''} in the settings file:\n{lines}", hint=hint)


def _has_tool_table(path: Path) -> bool:
    try:
        raw = read_bounded(path, str(path), kind="pyproject.toml", max_bytes=MAX_SETTINGS_BYTES)
        document = tomllib.loads(raw.decode("utf-8"))
    except (InputError, UnicodeDecodeError, tomllib.TOMLDecodeError):
        return False  # someone else's broken pyproject.toml is not kvcheck's settings
    tool = document.get("tool")
    return isinstance(tool, dict) and "kvcheck" in tool


def settings_for(group: click.Group, *, explicit: Path | None, disabled: bool) -> Settings | None:
    """The settings this run uses: --config FILE, else the nearest file, unless --no-config."""
    if disabled:
        return None
    if explicit is not None:
        if not explicit.is_file():
            raise InputError(f"--config {explicit}: no such file")
        return load_settings(explicit, group)
    found = find_settings(Path(os.getcwd()))
    return load_settings(found, group) if found is not None else None
