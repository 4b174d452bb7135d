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
    # scalar style of text values ("|" literal block, ">" folded, "'" or '"' quoted, "" plain)
    styles: dict[Path_, str] = field(default_factory=dict)

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


MAX_DEPTH = 100  # manifests nest under 10 levels, Kubernetes objects under 30; PyYAML recurses per level
# Values an alias-free document may add by expansion: a few anchors reused a few times fit easily, an
# alias bomb (`&a [*a, *a, ...]` chained: 10**9 values from 700 bytes) does not.
ALIAS_EXPANSION_ALLOWANCE = 10_000


class _BoundedLoader(yaml.SafeLoader):
    """SafeLoader that refuses nesting deeper than MAX_DEPTH while composing (PyYAML's composer recurses
    per level, so 100k `[` would exhaust the stack) and counts the nodes written in the file."""

    def __init__(self, stream: str, filename: str) -> None:
        super().__init__(stream)
        self.filename = filename
        self.depth = 0
        self.written_nodes = 0

    def fetch_flow_collection_start(self, token_class: Any) -> None:
        # PyYAML's scanner keeps one pending simple key per open `[`/`{` and walks them all per token:
        # 100k open brackets cost minutes before the composer sees depth 2. Refuse them as they open.
        if self.flow_level >= MAX_DEPTH:
            mark = self.get_mark()
            raise InputError(
                f"{self.filename}:{mark.line + 1}:{mark.column + 1}: YAML nested more than {MAX_DEPTH} levels deep"
            )
        super().fetch_flow_collection_start(token_class)

    def compose_node(self, parent: yaml.Node | None, index: Any) -> yaml.Node | None:
        self.depth += 1
        self.written_nodes += 1
        try:
            if self.depth > MAX_DEPTH:
                mark = self.peek_event().start_mark
                raise InputError(
                    f"{self.filename}:{mark.line + 1}:{mark.column + 1}: YAML nested more than {MAX_DEPTH} "
                    "levels deep"
                )
            return super().compose_node(parent, index)
        finally:
            self.depth -= 1


class _BoundedConstructor(yaml.constructor.SafeConstructor):
    """SafeConstructor whose merge keys (`<<: [*a, *a]`, chained) cannot multiply a mapping without bound."""

    def __init__(self, filename: str, max_entries: int) -> None:
        super().__init__()
        self.filename = filename
        self.max_entries = max_entries
        self.merged: dict[int, int] = {}  # id(mapping node) -> how many of its first pairs came from merge keys

    def flatten_mapping(self, node: yaml.MappingNode) -> None:
        own = sum(1 for key, _ in node.value if key.tag != "tag:yaml.org,2002:merge")
        super().flatten_mapping(node)  # recursive calls come back here, so every level is checked
        self.merged.setdefault(id(node), len(node.value) - own)  # a second flatten finds no merge keys
        if len(node.value) > self.max_entries:
            line, column = _mark(node)
            raise InputError(
                f"{self.filename}:{line}:{column}: merge keys (<<) expand this mapping to more than "
                f"{self.max_entries:,} entries"
            )


    def construct_yaml_int(self, node: yaml.ScalarNode) -> int:
        try:
            return super().construct_yaml_int(node)
        except ValueError:  # int() reads at most 4,300 digits (sys.get_int_max_str_digits)
            line, column = _mark(node)
            raise InputError(f"{self.filename}:{line}:{column}: an integer of more than 4,300 digits") from None


_BoundedConstructor.add_constructor(  # type: ignore[type-var]  # stubs: add_constructor of a subclass
    "tag:yaml.org,2002:int", _BoundedConstructor.construct_yaml_int)


def load_yaml_with_positions(text: str, filename: str) -> tuple[Any, Positions, list[InputIssue]]:
    """Parse one YAML document; duplicate keys are reported (YAML would silently keep the last)."""
    positions = Positions()
    issues: list[InputIssue] = []
    loader = _BoundedLoader(text, filename)
    try:
        node = loader.get_single_node()
    except yaml.YAMLError as exc:
        raise _syntax_error(exc, filename) from exc
    finally:
        loader.dispose()
    if node is None:
        return None, positions, issues

    max_nodes = 2 * loader.written_nodes + ALIAS_EXPANSION_ALLOWANCE
    data = _build_document(node, filename, positions, issues, max_nodes=max_nodes)
    return data, positions, issues


class _Budget:
    """Counts nodes as aliases are expanded, so `&a [*a, *a, ...]` chains cannot exhaust memory."""

    def __init__(self, filename: str, max_nodes: int | None) -> None:
        self.filename = filename
        self.left = max_nodes

    def spend(self, node: yaml.Node, depth: int) -> None:
        if depth > MAX_DEPTH:
            line, column = _mark(node)
            raise InputError(f"{self.filename}:{line}:{column}: YAML nested more than {MAX_DEPTH} levels deep")
        if self.left is None:
            return
        self.left -= 1
        if self.left < 0:
            line, column = _mark(node)
            raise InputError(
                f"{self.filename}:{line}:{column}: the YAML expands to too many values "
                "(aliases repeating large anchors?)"
            )


def _build_document(
    node: yaml.Node, filename: str, positions: Positions, issues: list[InputIssue], *, max_nodes: int | None
) -> Any:
    constructor = _BoundedConstructor(filename, max_nodes or 2_000_000)
    budget = _Budget(filename, max_nodes)
    active: set[int] = set()  # the collection nodes being built, to catch an alias to its own ancestor

    def build(n: yaml.Node, path: Path_) -> Any:
        budget.spend(n, len(path))
        if isinstance(n, yaml.CollectionNode):
            if id(n) in active:
                line, column = _mark(n)
                raise InputError(f"{filename}:{line}:{column}: an alias refers to the collection that contains "
                                 "it (a recursive alias)")
            active.add(id(n))
            try:
                return build_collection(n, path)
            finally:
                active.discard(id(n))
        positions.values[path] = _mark(n)
        if isinstance(n, yaml.ScalarNode):
            positions.styles[path] = n.style or ""
        return constructor.construct_object(n, deep=True)

    def build_collection(n: yaml.CollectionNode, path: Path_) -> Any:
        positions.values[path] = _mark(n)
        if isinstance(n, yaml.MappingNode):
            constructor.flatten_mapping(n)
            merged = constructor.merged.get(id(n), 0)
            out: dict[Any, Any] = {}
            own: set[Any] = set()
            for index, (key_node, value_node) in enumerate(n.value):
                key = constructor.construct_object(key_node, deep=True)
                if not isinstance(key, str | int | float | bool) or key is None:
                    line, column = _mark(key_node)
                    issues.append(
                        InputIssue(filename, line, column, _dotted(path), "keys must be plain names")
                    )
                    continue
                key = str(key) if not isinstance(key, str) else key
                child = (*path, key)
                # YAML's merge rule: a merged key yields to a later merge's and to the mapping's own key
                if index >= merged:
                    if key in own:
                        line, column = _mark(key_node)
                        issues.append(
                            InputIssue(filename, line, column, _dotted(child), "duplicate key")
                        )
                        continue
                    own.add(key)
                positions.keys[child] = _mark(key_node)
                out[key] = build(value_node, child)
            return out
        return [build(item, (*path, i)) for i, item in enumerate(n.value)]

    try:
        return build(node, ())
    except yaml.YAMLError as exc:
        raise InputError(f"{filename}: YAML error: {exc}") from exc


@dataclass
class YamlDocument:
    """One document of a YAML stream, with the positions of its keys and values in the whole file."""

    data: Any
    positions: Positions
    issues: list[InputIssue]
    line: int  # where the document starts, 1-based


def load_yaml_documents(text: str, filename: str, *, max_nodes: int = 2_000_000) -> list[YamlDocument]:
    """Parse every document of a stream (`---` separated, as Helm and kustomize print them), safely.

    Only plain YAML types are built (SafeLoader); aliases count against `max_nodes` as they are
    expanded and nesting is bounded, so a hostile file ends in an InputError, not exhausted memory.
    Empty documents are skipped.
    """
    documents: list[YamlDocument] = []
    loader = _BoundedLoader(text, filename)
    budget_left = max_nodes
    try:
        while loader.check_node():
            node = loader.get_node()
            if node is None:
                continue
            positions = Positions()
            issues: list[InputIssue] = []
            # as many values as the file writes, twice over plus an allowance: an alias bomb stops
            # after a few thousand values, in milliseconds, not at the 2-million ceiling
            budget = min(budget_left, 2 * loader.written_nodes + ALIAS_EXPANSION_ALLOWANCE)
            data = _build_document(node, filename, positions, issues, max_nodes=budget)
            budget_left -= max(1, len(positions.values))
            documents.append(YamlDocument(data, positions, issues, node.start_mark.line + 1))
    except yaml.YAMLError as exc:
        raise _syntax_error(exc, filename) from exc
    finally:
        loader.dispose()
    return documents


def safe_load_all(text: str, filename: str) -> list[Any]:
    """Every non-empty document of a YAML stream as plain values: `yaml.safe_load_all` under the same
    bounds as the loaders above (nesting, alias expansion). Bad YAML raises yaml.YAMLError as PyYAML
    does; a document over a bound raises InputError with file:line."""
    loader = _BoundedLoader(text, filename)
    out: list[Any] = []
    try:
        while loader.check_node():
            node = loader.get_node()
            if node is not None:
                budget = 2 * loader.written_nodes + ALIAS_EXPANSION_ALLOWANCE
                out.append(_build_document(node, filename, Positions(), [], max_nodes=budget))
    finally:
        loader.dispose()
    return out


def _dotted(path: Path_) -> str:
    out = ""
    for part in path:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += ("." if out else "") + part
    return out


dotted = _dotted


def _syntax_error(exc: yaml.YAMLError, filename: str) -> InputError:
    """PyYAML's error as an input error at the file:line:column it marks (exit 2)."""
    if isinstance(exc, yaml.MarkedYAMLError):
        mark = exc.problem_mark or exc.context_mark
        line, column = (mark.line + 1, mark.column + 1) if mark else (None, None)
        problem = exc.problem or "invalid YAML"
        if exc.context:
            problem = f"{exc.context}: {problem}"
        return InputError(InputIssue(filename, line, column, "", f"YAML syntax error: {problem}").render())
    return InputError(f"{filename}: YAML error: {exc}")
