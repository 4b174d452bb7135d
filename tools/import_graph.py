"""Print kvcheck's import cycles (module level and deferred imports alike); exit 1 when there is one.

Usage: python tools/import_graph.py [--dot]   (from the repository root)

Every `import kvcheck.x` / `from kvcheck.x import y` counts, wherever it stands, because a deferred
import is still a dependency: hiding a cycle inside a function only moves the failure to run time.
`from kvcheck.pkg import name` counts as a dependency on `kvcheck.pkg.name` when that is a module.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "kvcheck"


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def build_graph() -> dict[str, set[str]]:
    modules = {module_name(p): p for p in PACKAGE.rglob("*.py")}
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        is_package = path.name == "__init__.py"
        for node in ast.walk(tree):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = name.split(".") if is_package else name.split(".")[:-1]
                    base = base[: len(base) - (node.level - 1)]
                    source = ".".join(base + ([node.module] if node.module else []))
                else:
                    source = node.module or ""
                targets = [source]
                targets += [f"{source}.{alias.name}" for alias in node.names if f"{source}.{alias.name}" in modules]
            for target in targets:
                if not target.startswith("kvcheck"):
                    continue
                while target not in modules and "." in target:
                    target = target.rsplit(".", 1)[0]
                # A package's __init__ importing its own submodules is not a dependency cycle.
                if target in modules and target != name and not (is_package and target.startswith(name + ".")):
                    graph[name].add(target)
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


def main() -> int:
    graph = build_graph()
    if "--dot" in sys.argv:
        print("digraph kvcheck {")
        for node in sorted(graph):
            for succ in sorted(graph[node]):
                print(f'  "{node}" -> "{succ}";')
        print("}")
        return 0
    found = cycles(graph)
    for component in found:
        print("import cycle: " + ", ".join(component))
    if not found:
        print(f"no import cycle among {len(graph)} modules")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
