"""Check kvcheck's import graph: no cycle, and (with --contracts) the layer contracts; exit 1 on a breach.

Usage: python tools/import_graph.py [--contracts] [--dot] [--root DIR]   (DIR: a checkout, default this one)

Every `import kvcheck.x` / `from kvcheck.x import y` counts, wherever it stands, because a deferred
import is still a dependency: hiding a cycle inside a function only moves the failure to run time.
`from kvcheck.pkg import name` counts as a dependency on `kvcheck.pkg.name` when that is a module.
A string that names a kvcheck module (`"kvcheck.plan.text"`, `"kvcheck.plan.text:plan_section"`)
counts too: a registry of module names imported later by `importlib` is an import all the same.

The layer contracts (`CONTRACTS`), each breach printed as file:line:
- only `kvcheck/engines/<name>/` and the registry `kvcheck/engines/__init__.py` import
  `kvcheck.engines.<name>`: everything else reaches an engine through `get_engine` and `Engine`;
- the bottom layer (`BOTTOM`) imports nothing but the bottom layer;
- inputs, launchers and report do not import the policy's rules (`kvcheck.policy.rules`).
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = "kvcheck"


@dataclass(frozen=True)
class Edge:
    """One import (or module-naming string) of one kvcheck module by another, with where it stands."""

    importer: str
    imported: str
    path: Path  # the importer's file, relative to the root
    line: int


def module_name(path: Path, root: Path = ROOT) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def find_modules(root: Path = ROOT) -> dict[str, Path]:
    """Every module of the package under `root`, by dotted name."""
    return {module_name(p, root): p for p in sorted((root / PACKAGE).rglob("*.py"))}


def _docstrings(tree: ast.Module) -> set[int]:
    """The ids of the docstring nodes: prose that mentions a module is not a dependency on it."""
    found: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                found.add(id(body[0].value))
    return found


def _named_targets(node: ast.AST, name: str, is_package: bool, modules: dict[str, Path]) -> list[str]:
    """The dotted names one AST node depends on (before they are matched to modules)."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    if isinstance(node, ast.ImportFrom):
        if node.level:
            base = name.split(".") if is_package else name.split(".")[:-1]
            base = base[: len(base) - (node.level - 1)]
            source = ".".join(base + ([node.module] if node.module else []))
        else:
            source = node.module or ""
        return [source] + [f"{source}.{alias.name}" for alias in node.names if f"{source}.{alias.name}" in modules]
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        # A string registry: only a string that is exactly a module's name (or module:attribute).
        text = node.value.split(":", 1)[0]
        if text.startswith(PACKAGE + ".") and text in modules:
            return [text]
    return []


def _resolve(target: str, modules: dict[str, Path]) -> str | None:
    """The module an imported name lives in (`kvcheck.pkg.name` is `kvcheck.pkg` when name is no module)."""
    if target != PACKAGE and not target.startswith(PACKAGE + "."):
        return None
    while target not in modules and "." in target:
        target = target.rsplit(".", 1)[0]
    return target if target in modules else None


def module_edges(name: str, path: Path, modules: dict[str, Path], root: Path = ROOT) -> Iterator[Edge]:
    """Every dependency of one module, deferred imports and module-naming strings included."""
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    prose = _docstrings(tree)
    is_package = path.name == "__init__.py"
    relative = path.relative_to(root)
    for node in ast.walk(tree):
        if id(node) in prose:
            continue
        for target in _named_targets(node, name, is_package, modules):
            imported = _resolve(target, modules)
            if imported is not None and imported != name:
                yield Edge(importer=name, imported=imported, path=relative, line=getattr(node, "lineno", 0))


def all_edges(root: Path = ROOT) -> list[Edge]:
    modules = find_modules(root)
    return [edge for name, path in modules.items() for edge in module_edges(name, path, modules, root)]


def build_graph(root: Path = ROOT) -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {name: set() for name in find_modules(root)}
    for edge in all_edges(root):
        # A package's __init__ importing its own submodules is not a dependency cycle.
        if not edge.imported.startswith(edge.importer + "."):
            graph[edge.importer].add(edge.imported)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0

    def visit(node: str) -> None:
        nonlocal counter
        index[node] = low[node] = counter
        counter += 1
        stack.append(node)
        on_stack.add(node)
        for succ in sorted(graph[node]):
            if succ not in index:
                visit(succ)
                low[node] = min(low[node], low[succ])
            elif succ in on_stack:
                low[node] = min(low[node], index[succ])
        if low[node] == index[node]:
            component = []
            while True:
                item = stack.pop()
                on_stack.discard(item)
                component.append(item)
                if item == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    sys.setrecursionlimit(10_000)
    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


# -- layer contracts ---------------------------------------------------------------------------------


def _within(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


# The bottom layer: shared values, errors, HTTP, GPU profiles, host memory, file reading. No engine words.
BOTTOM = (
    f"{PACKAGE}.model",
    f"{PACKAGE}.errors",
    f"{PACKAGE}.http",
    f"{PACKAGE}.gpus",
    f"{PACKAGE}.hostmem",
    f"{PACKAGE}.io",
    f"{PACKAGE}.profiles",
    f"{PACKAGE}.redact",
    f"{PACKAGE}.scrub",
    f"{PACKAGE}.escape",
)
ENGINES = f"{PACKAGE}.engines"
POLICY_RULES = f"{PACKAGE}.policy.rules"
# The layers that stay below the policy: they may raise findings, never apply the policy's rules.
BELOW_POLICY = (f"{PACKAGE}.inputs", f"{PACKAGE}.backends.measure.launchers", f"{PACKAGE}.report")


def _in_bottom(module: str) -> bool:
    # The package itself belongs too: it holds only the version.
    return module == PACKAGE or any(_within(module, layer) for layer in BOTTOM)


def engine_contract(edge: Edge, engines: frozenset[str]) -> str | None:
    """Only an engine's own sub-package (and the registry) imports it."""
    engine = next((name for name in engines if _within(edge.imported, name)), None)
    if engine is None or edge.importer == ENGINES or _within(edge.importer, engine):
        return None
    # The way out: get_engine(target.engine) and the Engine interface (kvcheck/engines/base.py).
    return f"only {engine.replace('.', '/')}/ and the registry {ENGINES.replace('.', '/')}/__init__.py import {engine}"


def bottom_contract(edge: Edge, engines: frozenset[str]) -> str | None:
    """The bottom layer imports nothing above it."""
    if not _in_bottom(edge.importer) or _in_bottom(edge.imported):
        return None
    return f"the bottom layer ({', '.join(BOTTOM)}) imports nothing above it"


def policy_rules_contract(edge: Edge, engines: frozenset[str]) -> str | None:
    """Inputs, launchers and report do not import the policy's rules."""
    if not _within(edge.imported, POLICY_RULES) or not any(_within(edge.importer, layer) for layer in BELOW_POLICY):
        return None
    return f"{', '.join(BELOW_POLICY)} do not import {POLICY_RULES}"


# Each contract turns an edge (and the engine sub-packages) into the reason it breaks the contract,
# or None when it keeps it.
CONTRACTS: tuple[Callable[[Edge, frozenset[str]], str | None], ...] = (
    engine_contract,
    bottom_contract,
    policy_rules_contract,
)


@dataclass(frozen=True)
class Violation:
    """One import that breaks a layer contract."""

    edge: Edge
    reason: str

    def __str__(self) -> str:
        return f"{self.edge.path.as_posix()}:{self.edge.line}: {self.edge.importer} imports {self.edge.imported}: {self.reason}"


def engine_packages(modules: dict[str, Path]) -> frozenset[str]:
    """The engines' sub-packages (`kvcheck.engines.<name>`); the neutral modules beside them are no engine."""
    return frozenset(name for name, path in modules.items()
                     if path.name == "__init__.py" and name.rsplit(".", 1)[0] == ENGINES)


def violations(root: Path = ROOT) -> list[Violation]:
    """Every contract breach, once per import statement and contract, in file and line order."""
    engines = engine_packages(find_modules(root))
    found: dict[tuple[Path, int, str], Violation] = {}
    for edge in all_edges(root):
        for contract in CONTRACTS:
            reason = contract(edge, engines)
            key = (edge.path, edge.line, contract.__name__)
            if reason is not None and key not in found:
                found[key] = Violation(edge, reason)
    return sorted(found.values(), key=lambda v: (v.edge.path.as_posix(), v.edge.line, v.reason))


def _print_dot(graph: dict[str, set[str]]) -> None:
    print("digraph kvcheck {")
    for node in sorted(graph):
        for succ in sorted(graph[node]):
            print(f'  "{node}" -> "{succ}";')
    print("}")


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    root = Path(args[args.index("--root") + 1]).resolve() if "--root" in args else ROOT
    graph = build_graph(root)
    if "--dot" in args:
        _print_dot(graph)
        return 0
    found = cycles(graph)
    for component in found:
        print("import cycle: " + ", ".join(component))
    breaches = violations(root) if "--contracts" in args else []
    for breach in breaches:
        print(breach)
    if breaches:
        print(f"{len(breaches)} import(s) break a layer contract")
    elif not found:
        contracts = "; the layer contracts hold" if "--contracts" in args else ""
        print(f"no import cycle among {len(graph)} modules{contracts}")
    return 1 if found or breaches else 0


if __name__ == "__main__":
    sys.exit(main())
