"""docker compose files: each service whose entrypoint + command starts an engine's server is a role."""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from kvcheck.errors import InputIssue
from kvcheck.inputs.deploy.budget import ExpansionBudgetExceeded
from kvcheck.inputs.deploy.formats.base import Format, Inputs, RoleSource, get, is_kubernetes_object
from kvcheck.inputs.deploy.formats.pods import image_engine, image_version
from kvcheck.inputs.deploy.interpolate import (
    Interpolated,
    InterpolationError,
    Lookup,
    compose_lookup,
    interpolate,
)
from kvcheck.inputs.deploy.server import Env, ScriptError, Sourced, Token, find_server
from kvcheck.inputs.deploy.shell import ShellBudgetError, ShellSyntaxError, parse_script
from kvcheck.inputs.deploy.source import STDIN_NAME, Doc
from kvcheck.io.yamlpos import Path_


def read_compose(doc: Doc, inputs: Inputs) -> list[RoleSource]:
    """A compose file: each service whose entrypoint + command starts an engine's server."""
    out = []
    group = str(doc.data.get("name") or Path(doc.source.name).stem)
    lookup, why = compose_lookup(doc.source.name, stdin=doc.source.name == STDIN_NAME)
    fill = _Filler(doc, lookup, why)
    for name, service in (doc.data.get("services") or {}).items():
        if not isinstance(service, Mapping):
            continue
        path: Path_ = ("services", name)
        env = _compose_env(fill, service, path)
        tokens = _compose_tokens(fill, service, path)
        image = service.get("image")
        filled = {"image": fill.text(image, (*path, "image")).text} if isinstance(image, str) else {}
        starts = image_engine(filled.get("image", "")) if "entrypoint" not in service else None
        if starts is not None and starts.image_entrypoint:  # the image's own ENTRYPOINT, the command appended
            at = doc.at((*path, "image"))
            tokens = [Token(word, at) for word in starts.image_entrypoint] + tokens
        server = find_server(tokens, env, doc=None) if tokens else None
        if server is None:
            continue
        version = image_version(doc, filled, path, server.engine)
        out.append(
            RoleSource(name=str(name), kind="compose", group=group, doc=doc, location=doc.at(path, key=True),
                       server=server, env=env, gpus_per_node=_compose_gpus(doc, service, path), version=version,
                       standalone=True)
        )
    return out


class _Filler:
    """Compose's interpolation of one file's values, with errors at the value's place in the file."""

    def __init__(self, doc: Doc, lookup: Lookup, why: str) -> None:
        self.doc, self.lookup, self.why = doc, lookup, why

    def text(self, value: str, path: Path_) -> Interpolated:
        try:
            return interpolate(value, self.lookup)
        except InterpolationError as exc:
            where = self.doc.inside(path, exc.offset)
            raise ScriptError(InputIssue(where.file, where.line, where.column, "", f"compose: {exc}")) from exc
        except ExpansionBudgetExceeded as exc:  # a value that multiplies a variable: the read stops here
            where = self.doc.at(path)
            raise ScriptError(InputIssue(where.file, where.line, where.column, "", str(exc)), fatal=True) from exc

    def token(self, value: str, path: Path_) -> Token:
        filled = self.text(value, path)
        missing, used = filled.names_between(0, len(filled.text) + 1)
        return Token(filled.text, self.doc.at(path), missing, via=used, why=dict.fromkeys(missing, self.why))


def _compose_env(fill: _Filler, service: Mapping[str, Any], path: Path_) -> Env:
    """A service's `environment`, as a mapping or as a list of NAME=value; a name without a value takes
    the shell's (or .env's), as compose passes it on."""
    env = Env()
    environment = service.get("environment")
    items: list[tuple[str, Any, Path_]] = []
    if isinstance(environment, Mapping):
        items = [(str(key), value, (*path, "environment", key)) for key, value in environment.items()]
    elif isinstance(environment, list):
        for i, item in enumerate(environment):
            if isinstance(item, str):
                key, eq, value = item.partition("=")
                items.append((key, value if eq else None, (*path, "environment", i)))
    for key, value, where in items:
        if value is None:
            found = fill.lookup(key)
            if found is None:
                env.unknown[key] = fill.why
            else:
                env.values[key] = found
            continue
        filled = fill.text(str(value), where)
        if filled.unresolved:
            env.unknown[key] = f"its value uses ${filled.unresolved[0][1]}: {fill.why}"
        else:
            env.values[key] = Sourced(filled.text, fill.doc.at(where))
    return env


def _compose_tokens(fill: _Filler, service: Mapping[str, Any], path: Path_) -> list[Token]:
    """The service's entrypoint + command as words, each at its place in the file."""
    tokens: list[Token] = []
    doc = fill.doc
    for key in ("entrypoint", "command"):
        value = service.get(key)
        if isinstance(value, str):
            filled = fill.text(value, (*path, key))
            # compose splits a string command like a shell would, without running one: after
            # interpolation every `$` left is literal, so the splitter must not expand it
            try:
                commands = parse_script(filled.text.replace("$", "\x00"), lambda _name: None)
            except ShellBudgetError as exc:
                where = doc.inside((*path, key), filled.origin[min(exc.offset, len(filled.text))])
                raise ScriptError(InputIssue(where.file, where.line, where.column, "", f"shell: {exc}"),
                                  fatal=True) from exc
            except ShellSyntaxError:
                commands = []
            for command in commands[:1]:
                starts = [word.offset for word in command.words] + [len(filled.text) + 1]
                for word, end in zip(command.words, starts[1:], strict=True):
                    missing, used = filled.names_between(word.offset, end)
                    at = filled.origin[min(word.offset, len(filled.text))]
                    tokens.append(Token(word.text.replace("\x00", "$"), doc.inside((*path, key), at),
                                        [*word.unresolved, *missing], via=used,
                                        why=dict.fromkeys(missing, fill.why)))
        elif isinstance(value, list):
            for i, item in enumerate(value):
                tokens.append(fill.token(str(item), (*path, key, i)))
    return tokens


def _compose_gpus(doc: Doc, service: Mapping[str, Any], path: Path_) -> Sourced | None:
    """GPUs reserved under deploy.resources.reservations.devices (device_ids or count); the last wins."""
    devices = get(service, "deploy", "resources", "reservations", "devices")
    gpus = None
    for d, device in enumerate(devices or []):
        if not isinstance(device, Mapping) or "gpu" not in (device.get("capabilities") or []):
            continue
        dpath: Path_ = (*path, "deploy", "resources", "reservations", "devices", d)
        if isinstance(device.get("device_ids"), list):
            gpus = Sourced(len(device["device_ids"]), doc.at((*dpath, "device_ids")), "device_ids")
        elif isinstance(device.get("count"), int):
            gpus = Sourced(device["count"], doc.at((*dpath, "count")), "devices count")
    return gpus


def detect(doc: Doc) -> bool:
    data = doc.data
    return isinstance(data, Mapping) and not is_kubernetes_object(data) and isinstance(data.get("services"), Mapping)


_SERVICES_LINE_RE = re.compile(r"^services:", re.M)

FORMAT = Format(
    name="compose",
    reads="docker compose files",
    detect=detect,
    read=read_compose,
    marks=lambda data: isinstance(data, Mapping) and "services" in data,
    marks_text=lambda text: _SERVICES_LINE_RE.search(text) is not None,
)
