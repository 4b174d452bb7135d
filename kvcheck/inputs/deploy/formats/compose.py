"""docker compose files: each service whose entrypoint + command starts an engine's server is a role."""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from kvcheck.errors import InputIssue
from kvcheck.inputs.deploy.formats.base import Format, Inputs, RoleSource, get, is_kubernetes_object
from kvcheck.inputs.deploy.formats.pods import image_version
from kvcheck.inputs.deploy.server import Env, ScriptError, Sourced, Token, find_server
from kvcheck.inputs.deploy.shell import ShellBudgetError, ShellSyntaxError, parse_script
from kvcheck.inputs.deploy.source import Doc
from kvcheck.io.yamlpos import Path_


def read_compose(doc: Doc, inputs: Inputs) -> list[RoleSource]:
    """A compose file: each service whose entrypoint + command starts an engine's server."""
    out = []
    group = str(doc.data.get("name") or Path(doc.source.name).stem)
    for name, service in (doc.data.get("services") or {}).items():
        if not isinstance(service, Mapping):
            continue
        path: Path_ = ("services", name)
        env = _compose_env(doc, service, path)
        tokens = _compose_tokens(doc, service, path, env)
        server = find_server(tokens, env, doc=None) if tokens else None
        if server is None:
            continue
        version = image_version(doc, service, path, server.engine)
        out.append(
            RoleSource(name=str(name), kind="compose", group=group, doc=doc, location=doc.at(path, key=True),
                       server=server, env=env, gpus_per_node=_compose_gpus(doc, service, path), version=version,
                       standalone=True)
        )
    return out


def _compose_env(doc: Doc, service: Mapping[str, Any], path: Path_) -> Env:
    """A service's `environment`, as a mapping or as a list of NAME=value."""
    env = Env()
    environment = service.get("environment")
    if isinstance(environment, Mapping):
        for key, value in environment.items():
            if value is not None:
                env.values[str(key)] = Sourced(str(value), doc.at((*path, "environment", key)))
    elif isinstance(environment, list):
        for i, item in enumerate(environment):
            if isinstance(item, str) and "=" in item:
                key, _, value = item.partition("=")
                env.values[key] = Sourced(value, doc.at((*path, "environment", i)))
    return env


def _compose_tokens(doc: Doc, service: Mapping[str, Any], path: Path_, env: Env) -> list[Token]:
    """The service's entrypoint + command as words, each at its place in the file."""
    tokens: list[Token] = []
    for key in ("entrypoint", "command"):
        value = service.get(key)
        if isinstance(value, str):
            # compose splits a string command like a shell would, without running one
            try:
                commands = parse_script(value.replace("$$", "\x00"), env.lookup)
            except ShellBudgetError as exc:  # a command that multiplies a variable: the read stops here
                where = doc.inside((*path, key), exc.offset)
                raise ScriptError(InputIssue(where.file, where.line, where.column, "", f"shell: {exc}"),
                                  fatal=True) from exc
            except ShellSyntaxError:
                commands = []
            for command in commands[:1]:
                for word in command.words:
                    tokens.append(Token(word.text.replace("\x00", "$"), doc.inside((*path, key), word.offset),
                                        list(word.unresolved)))
        elif isinstance(value, list):
            for i, item in enumerate(value):
                tokens.append(Token(str(item), doc.at((*path, key, i))))
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
