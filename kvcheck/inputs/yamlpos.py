"""YAML loading that remembers where every key and value sits, for file:line:column errors."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import yaml

from kvcheck.errors import InputError, InputIssue

Path_ = tuple[str | int, ...]


@dataclass
class Positions:
    """1-based (line, column) of each key and value, by path into the document."""

    keys: dict[Path_, tuple[int, int]] = field(default_factory=dict)
    values: dict[Path_, tuple[int, int]] = field(default_factory=dict)

    def of_key(self, path: Path_) -> tuple[int, int] | None:
        """Where the key at `path` is written, else the nearest enclosing place."""
        for cut in range(len(path), -1, -1):
            prefix = tuple(path[:cut])
            if prefix in self.keys:
                return self.keys[prefix]
            if prefix in self.values:
                return self.values[prefix]
        return None

    def of_value(self, path: Path_) -> tuple[int, int] | None:
        """Where the value at `path` is written, else the nearest enclosing place."""
        for cut in range(len(path), -1, -1):
            prefix = tuple(path[:cut])
            if prefix in self.values:
                return self.values[prefix]
            if prefix in self.keys:
                return self.keys[prefix]
        return None


def _mark(node: yaml.Node) -> tuple[int, int]:
    return node.start_mark.line + 1, node.start_mark.column + 1


def load_yaml_with_positions(text: str, filename: str) -> tuple[Any, Positions, list[InputIssue]]:
    """Parse one YAML document; duplicate keys are reported (YAML would silently keep the last)."""
    positions = Positions()
    issues: list[InputIssue] = []
    loader = yaml.SafeLoader(text)
    try:
        node = loader.get_single_node()
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line, column = (mark.line + 1, mark.column + 1) if mark else (None, None)
        problem = exc.problem or "invalid YAML"
        if exc.context:
            problem = f"{exc.context}: {problem}"
        raise InputError(
            InputIssue(filename, line, column, "", f"YAML syntax error: {problem}").render()
        ) from exc
    except yaml.YAMLError as exc:
        raise InputError(f"{filename}: YAML error: {exc}") from exc
    finally:
        loader.dispose()
    if node is None:
        return None, positions, issues

    constructor = yaml.SafeLoader("")

    def build(n: yaml.Node, path: Path_) -> Any:
        positions.values[path] = _mark(n)
        if isinstance(n, yaml.MappingNode):
            constructor.flatten_mapping(n)
            out: dict[Any, Any] = {}
            for key_node, value_node in n.value:
                key = constructor.construct_object(key_node, deep=True)
                if not isinstance(key, str | int | float | bool) or key is None:
                    line, column = _mark(key_node)
                    issues.append(
                        InputIssue(filename, line, column, _dotted(path), "keys must be plain names")
                    )
                    continue
                key = str(key) if not isinstance(key, str) else key
                child = (*path, key)
                if key in out:
                    line, column = _mark(key_node)
                    issues.append(
                        InputIssue(filename, line, column, _dotted(child), "duplicate key")
                    )
                    continue
                positions.keys[child] = _mark(key_node)
                out[key] = build(value_node, child)
            return out
        if isinstance(n, yaml.SequenceNode):
            return [build(item, (*path, i)) for i, item in enumerate(n.value)]
        return constructor.construct_object(n, deep=True)

    try:
        data = build(node, ())
    except yaml.YAMLError as exc:
        raise InputError(f"{filename}: YAML error: {exc}") from exc
    return data, positions, issues


def _dotted(path: Path_) -> str:
    out = ""
    for part in path:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += ("." if out else "") + part
    return out


dotted = _dotted
