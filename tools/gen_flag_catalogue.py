#!/usr/bin/env python3
"""Generate kvcheck's SGLang flag catalogues by reading released sglang wheels statically.

Usage:
    python tools/gen_flag_catalogue.py WHEEL... --out profiles/sglang/
    python tools/gen_flag_catalogue.py --download 0.5.20 0.5.21 --out profiles/sglang/

The wheel is opened as a zip file and its Python sources are parsed with ``ast``; sglang is
never imported (it needs torch and a GPU stack). The generator mirrors how the release builds
its argparse parser: ``prepare_server_args`` creates ``argparse.ArgumentParser`` and calls
``ServerArgs.add_cli_args``, which (0.5.20 onwards) calls ``add_cli_args_from_dataclass`` over
the namespace classes in ``srt/arg_groups/fields/*.py`` and then registers a few flags by hand
with ``parser.add_argument``. Both halves are reproduced here: the dataclass half by the same
decision tree as ``srt/arg_groups/arg_utils.py``, the manual half by interpreting the
``add_argument`` calls with a small static evaluator that resolves constants across modules.
Releases 0.4.0-0.5.13 only call ``add_argument`` (and copy some dests into fields in
``ServerArgs.from_cli_args``, which gives those flags their field); 0.5.14-0.5.19 annotate the
``ServerArgs`` dataclass itself.

Output is deterministic (flags sorted, one flag per line) so regenerating gives no diff.
``removed`` is derived across every catalogue in the output directory, so the generator
rewrites the ``removed`` section of catalogues it was not asked to regenerate when needed. A post
release whose parser equals its release's previous build gets no file (kvcheck falls back to
that build's catalogue for it).
"""

from __future__ import annotations

import argparse
import ast
import json
import operator
import re
import subprocess
import sys
import zipfile
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

SCHEMA = "kvcheck/sglang-flags/v1"
GENERATED_BY = "tools/gen_flag_catalogue.py"
CATALOGUE_GLOB = "flags-*.json"

# Successors that are not visible as "same field, new name" in the source: the old flag set one
# value for both phases and was split into per-phase flags. The decode flag is the replacement
# because the old flag sized the decode graphs.
KNOWN_SUCCESSORS = {
    "--cuda-graph-max-bs": "--cuda-graph-max-bs-decode",
    "--cuda-graph-bs": "--cuda-graph-bs-decode",
}

# Helpers whose body cannot be evaluated statically but whose meaning is fixed: SGLang's
# ``_declared_default("field")`` returns the ServerArgs field default (msgspec slot descriptors
# hide it from a plain class-attribute read).
DECLARED_DEFAULT_HELPERS = frozenset({"_declared_default"})

# argparse actions that consume no value and store True.
_STORE_TRUE_ACTIONS = frozenset({"store_true"})
# argparse's own zero-argument actions that do not store True.
_ZERO_ARG_BUILTIN_ACTIONS = frozenset(
    {"store_false", "store_const", "append_const", "count", "help", "version"}
)
_BOOLEAN_OPTIONAL = "BooleanOptionalAction"


class CatalogueError(Exception):
    """The wheel cannot be catalogued: missing files, an unknown layout or an unreadable flag."""


# --------------------------------------------------------------------------------------------
# Wheel access
# --------------------------------------------------------------------------------------------


class WheelTree:
    """Read-only view of the Python modules inside one sglang wheel."""

    def __init__(self, path: Path):
        self.path = Path(path)
        try:
            self._zip = zipfile.ZipFile(self.path)
        except (OSError, zipfile.BadZipFile) as exc:
            raise CatalogueError(f"{self.path}: not a readable wheel ({exc})") from exc
        self._names = set(self._zip.namelist())
        self._parsed: dict[str, ast.Module] = {}
        self.version = self._read_version()

    def _read_version(self) -> str:
        for name in sorted(self._names):
            if re.fullmatch(r"sglang-[^/]+\.dist-info/METADATA", name):
                text = self._zip.read(name).decode("utf-8", "replace")
                match = re.search(r"^Version:\s*(\S+)\s*$", text, re.MULTILINE)
                if match:
                    return match.group(1)
        raise CatalogueError(f"{self.path.name}: no sglang-*.dist-info/METADATA with a Version line")

    def module_file(self, dotted: str) -> str | None:
        """Zip member holding module ``dotted`` (a package resolves to its ``__init__.py``)."""
        base = dotted.replace(".", "/")
        for candidate in (base + ".py", base + "/__init__.py"):
            if candidate in self._names:
                return candidate
        return None

    def is_package(self, dotted: str) -> bool:
        return (dotted.replace(".", "/") + "/__init__.py") in self._names

    def parse(self, dotted: str) -> ast.Module | None:
        member = self.module_file(dotted)
        if member is None:
            return None
        if member not in self._parsed:
            source = self._zip.read(member).decode("utf-8")
            self._parsed[member] = ast.parse(source, filename=member)
        return self._parsed[member]


# --------------------------------------------------------------------------------------------
# Static evaluator: just enough Python to resolve choice lists, defaults and type names
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Opaque:
    """A value the evaluator cannot know without running code (env reads, calls, f-strings)."""

    why: str


@dataclass(frozen=True)
class ExternalRef:
    """A name imported from outside the wheel (stdlib, typing, third party): kept as a path."""

    path: str

    @property
    def name(self) -> str:
        return self.path.rsplit(".", 1)[-1]


@dataclass(frozen=True)
class ModuleRef:
    dotted: str


@dataclass(frozen=True)
class ClassRef:
    module: str
    node: ast.ClassDef = field(compare=False, hash=False)

    @property
    def name(self) -> str:
        return self.node.name


@dataclass(frozen=True)
class FunctionRef:
    module: str
    node: ast.FunctionDef = field(compare=False, hash=False)
    owner: ClassRef | None = None

    @property
    def name(self) -> str:
        return self.node.name


@dataclass(frozen=True)
class EnumMember:
    name: str
    value: Any


@dataclass(frozen=True)
class BoundMethod:
    target: Any
    name: str


@dataclass(frozen=True)
class Thunk:
    """A ``lambda: EXPR`` without parameters, with EXPR already evaluated (``default_factory``)."""

    value: Any = field(compare=False, hash=False)


@dataclass(frozen=True)
class FieldCall:
    """``msgspec.field(...)`` / ``dataclasses.field(...)``: a default spelled as a call."""

    kwargs: tuple


_BINOPS = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Pow: operator.pow,
    ast.LShift: operator.lshift,
    ast.RShift: operator.rshift,
    ast.BitOr: operator.or_,
    ast.BitAnd: operator.and_,
}
_UNARYOPS = {
    ast.USub: operator.neg,
    ast.UAdd: operator.pos,
    ast.Not: operator.not_,
    ast.Invert: operator.invert,
}
_PURE_METHODS = {
    str: {"lower", "upper", "strip", "replace", "split", "join", "format"},
    dict: {"keys", "values", "items", "copy", "get"},
    list: {"copy", "index"},
    tuple: {"index"},
    set: {"copy", "union"},
    frozenset: {"copy", "union"},
}
_BUILTIN_CALLS = {
    "list": list,
    "tuple": tuple,
    "set": set,
    "frozenset": frozenset,
    "sorted": sorted,
    "dict": dict,
    "len": len,
    "str": str,
    "int": int,
    "float": float,
    "bool": bool,
    "reversed": lambda x: list(reversed(x)),
}
_BUILTIN_NAMES = {"None": None, "True": True, "False": False}
# Values from outside the wheel that are fixed on every platform SGLang serves from (64-bit Linux).
_EXTERNAL_CONSTANTS = {"sys.maxsize": 2**63 - 1}


def is_concrete(value: Any) -> bool:
    """True when ``value`` is plain data with no unresolved part anywhere inside it."""
    if isinstance(value, (Opaque, ModuleRef, ClassRef, FunctionRef, BoundMethod, FieldCall, Thunk)):
        return False
    if isinstance(value, ExternalRef):
        return False
    if isinstance(value, (list, tuple, set, frozenset)):
        return all(is_concrete(v) for v in value)
    if isinstance(value, dict):
        return all(is_concrete(k) and is_concrete(v) for k, v in value.items())
    return True


class Scope:
    """Local names over a module's globals (function bodies, comprehensions, class bodies)."""

    def __init__(self, module: str, local: dict[str, Any] | None = None, parent: Scope | None = None):
        self.module = module
        self.local = dict(local or {})
        self.parent = parent

    def find(self, name: str) -> tuple[bool, Any]:
        if name in self.local:
            return True, self.local[name]
        if self.parent is not None:
            return self.parent.find(name)
        return False, None


class Evaluator:
    """Resolve names and constant expressions across the modules of one wheel."""

    def __init__(self, tree: WheelTree):
        self.tree = tree
        self._globals: dict[tuple[str, str], Any] = {}
        self._in_progress: set[tuple[str, str]] = set()

    # ---- module-level names

    def module_global(self, module: str, name: str) -> Any:
        key = (module, name)
        if key in self._globals:
            return self._globals[key]
        if key in self._in_progress:
            return Opaque(f"circular definition of {module}.{name}")
        self._in_progress.add(key)
        try:
            value = self._bind_module_global(module, name)
        finally:
            self._in_progress.discard(key)
        self._globals[key] = value
        return value

    def _bind_module_global(self, module: str, name: str) -> Any:
        tree = self.tree.parse(module)
        if tree is None:
            return Opaque(f"module {module} is not in the wheel")
        value: Any = _UNBOUND
        for stmt in tree.body:
            value = self._apply_binding(stmt, module, name, value, Scope(module))
        if value is _UNBOUND:
            if self.tree.is_package(module) and self.tree.module_file(f"{module}.{name}"):
                return ModuleRef(f"{module}.{name}")
            if name in _BUILTIN_NAMES:
                return _BUILTIN_NAMES[name]
            return ExternalRef(f"builtins.{name}")
        return value

    def _apply_binding(self, stmt: ast.stmt, module: str, name: str, current: Any, scope: Scope) -> Any:
        """Fold one top-level statement into the running value of ``name``."""
        if isinstance(stmt, ast.ImportFrom):
            for alias in stmt.names:
                if alias.name == "*":
                    # Older releases re-export helpers with `from sglang.srt.utils.common import *`.
                    source = self._absolute_module(module, stmt.module, stmt.level)
                    if self._star_exports(source, name):
                        return self.module_global(source, name)
                elif (alias.asname or alias.name) == name:
                    source = self._absolute_module(module, stmt.module, stmt.level)
                    return self._import_from(source, alias.name)
        elif isinstance(stmt, ast.Import):
            for alias in stmt.names:
                bound = alias.asname or alias.name.split(".")[0]
                if bound == name:
                    target = alias.name if alias.asname else alias.name.split(".")[0]
                    return self._module_ref(target)
        elif isinstance(stmt, ast.ClassDef) and stmt.name == name:
            return ClassRef(module, stmt)
        elif isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)) and stmt.name == name:
            return FunctionRef(module, stmt)
        elif isinstance(stmt, ast.Assign):
            if any(_binds(t, name) for t in stmt.targets):
                if not all(isinstance(t, ast.Name) for t in stmt.targets):
                    return Opaque(f"{name} bound by unpacking")
                value = self.eval(stmt.value, scope)
                if (
                    isinstance(value, Opaque)
                    and isinstance(current, ClassRef)
                    and _mentions(stmt.value, name)
                ):
                    # `X = msgspec.defstruct("X", ..., namespace=vars(X))` rebuilds the class from
                    # its own body: the methods we read (add_cli_args) are the same code.
                    return current
                return value
        elif isinstance(stmt, ast.AnnAssign):
            if _binds(stmt.target, name) and stmt.value is not None:
                return self.eval(stmt.value, scope)
        elif isinstance(stmt, ast.AugAssign):
            if _binds(stmt.target, name):
                op = _BINOPS.get(type(stmt.op))
                rhs = self.eval(stmt.value, scope)
                if op is None or not is_concrete(current) or not is_concrete(rhs):
                    return Opaque(f"augmented assignment to {name}")
                try:
                    return op(current, rhs)
                except Exception:  # noqa: BLE001 - any failure means "not statically known"
                    return Opaque(f"augmented assignment to {name}")
        elif isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call):
            func = stmt.value.func
            if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) and func.value.id == name:
                return self._mutate(current, func.attr, stmt.value, scope, name)
        elif isinstance(stmt, (ast.If, ast.Try, ast.For, ast.While, ast.With)):
            if name in _names_bound_in(stmt):
                return Opaque(f"{name} is bound inside a conditional block")
        return current

    def _mutate(self, current: Any, method: str, call: ast.Call, scope: Scope, name: str) -> Any:
        if not is_concrete(current):
            return current
        args = [self.eval(a, scope) for a in call.args]
        if not all(is_concrete(a) for a in args) or call.keywords:
            return Opaque(f"{name}.{method}() with unresolved arguments")
        copy = current.copy() if hasattr(current, "copy") else current
        if method in {"append", "extend", "add", "update", "insert", "remove", "discard"} and hasattr(
            copy, method
        ):
            getattr(copy, method)(*args)
            return copy
        return Opaque(f"{name}.{method}() mutates {name}")

    def _star_exports(self, source: str, name: str, depth: int = 0) -> bool:
        """Whether ``from source import *`` binds ``name`` (defined there or star-imported again)."""
        tree = self.tree.parse(source)
        if tree is None or name.startswith("_") or depth > 4:
            return False
        if _defines(tree, name):
            return True
        for stmt in tree.body:
            if isinstance(stmt, ast.ImportFrom) and any(a.name == "*" for a in stmt.names):
                inner = self._absolute_module(source, stmt.module, stmt.level)
                if self._star_exports(inner, name, depth + 1):
                    return True
        return False

    def _absolute_module(self, module: str, target: str | None, level: int) -> str:
        if level == 0:
            return target or ""
        package = module if self.tree.is_package(module) else module.rsplit(".", 1)[0]
        for _ in range(level - 1):
            package = package.rsplit(".", 1)[0]
        return f"{package}.{target}" if target else package

    def _module_ref(self, dotted: str) -> Any:
        if self.tree.module_file(dotted) is not None:
            return ModuleRef(dotted)
        return ExternalRef(dotted)

    def _import_from(self, source: str, name: str) -> Any:
        if self.tree.module_file(source) is None:
            path = f"{source}.{name}"
            return _EXTERNAL_CONSTANTS.get(path, ExternalRef(path))
        if self.tree.module_file(f"{source}.{name}") is not None and not _defines(
            self.tree.parse(source), name
        ):
            return ModuleRef(f"{source}.{name}")
        return self.module_global(source, name)

    # ---- expressions

    def eval(self, node: ast.expr, scope: Scope) -> Any:
        try:
            return self._eval(node, scope)
        except RecursionError:
            return Opaque("expression too deep")

    def _eval(self, node: ast.expr, scope: Scope) -> Any:
        if isinstance(node, ast.Constant):
            return node.value
        if isinstance(node, (ast.List, ast.Tuple, ast.Set)):
            items: list[Any] = []
            for elt in node.elts:
                if isinstance(elt, ast.Starred):
                    inner = self._eval(elt.value, scope)
                    if not is_concrete(inner):
                        return Opaque("starred expansion of an unresolved value")
                    items.extend(inner)
                else:
                    items.append(self._eval(elt, scope))
            if isinstance(node, ast.List):
                return items
            if isinstance(node, ast.Tuple):
                return tuple(items)
            if not all(is_concrete(i) for i in items):
                return Opaque("set of unresolved values")
            return set(items)
        if isinstance(node, ast.Dict):
            out: dict[Any, Any] = {}
            for k, v in zip(node.keys, node.values, strict=True):
                if k is None:
                    return Opaque("dict unpacking")
                key = self._eval(k, scope)
                if not is_concrete(key):
                    return Opaque("dict with an unresolved key")
                out[key] = self._eval(v, scope)
            return out
        if isinstance(node, ast.Name):
            found, value = scope.find(node.id)
            if found:
                return value
            return self.module_global(scope.module, node.id)
        if isinstance(node, ast.Attribute):
            return self._attribute(self._eval(node.value, scope), node.attr)
        if isinstance(node, ast.BinOp):
            left, right = self._eval(node.left, scope), self._eval(node.right, scope)
            op = _BINOPS.get(type(node.op))
            if op is None or not is_concrete(left) or not is_concrete(right):
                return Opaque("arithmetic on unresolved values")
            try:
                return op(left, right)
            except Exception:  # noqa: BLE001
                return Opaque("arithmetic failed")
        if isinstance(node, ast.UnaryOp):
            operand = self._eval(node.operand, scope)
            op = _UNARYOPS.get(type(node.op))
            if op is None or not is_concrete(operand):
                return Opaque("unary operator on an unresolved value")
            return op(operand)
        if isinstance(node, ast.Subscript):
            target, index = self._eval(node.value, scope), self._eval(node.slice, scope)
            if is_concrete(target) and is_concrete(index) and not isinstance(node.slice, ast.Slice):
                try:
                    return target[index]
                except Exception:  # noqa: BLE001
                    return Opaque("subscript failed")
            return Opaque("subscript of an unresolved value")
        if isinstance(node, ast.Call):
            return self._call(node, scope)
        if isinstance(node, (ast.ListComp, ast.SetComp, ast.GeneratorExp)):
            return self._comprehension(node, scope)
        if isinstance(node, ast.Lambda) and not (node.args.args or node.args.vararg or node.args.kwarg):
            return Thunk(self._eval(node.body, scope))
        return Opaque(f"{type(node).__name__} expression")

    def _attribute(self, target: Any, attr: str) -> Any:
        if isinstance(target, ModuleRef):
            return self.module_global(target.dotted, attr)
        if isinstance(target, ExternalRef):
            path = f"{target.path}.{attr}"
            return _EXTERNAL_CONSTANTS.get(path, ExternalRef(path))
        if isinstance(target, ClassRef):
            return self.class_attribute(target, attr)
        if isinstance(target, EnumMember):
            if attr == "name":
                return target.name
            if attr == "value":
                return target.value
            return Opaque(f"enum member attribute {attr}")
        if type(target) in _PURE_METHODS and attr in _PURE_METHODS[type(target)]:
            return BoundMethod(target, attr)
        return Opaque(f"attribute {attr} of an unresolved value")

    def class_attribute(self, cls: ClassRef, attr: str) -> Any:
        """A class-level attribute, evaluated in the class body's own scope; enum members wrap."""
        members = self.enum_members(cls)
        if members is not None:
            for member in members:
                if member.name == attr:
                    return member
        scope = Scope(cls.module)
        value: Any = _UNBOUND
        for stmt in cls.node.body:
            if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)) and stmt.name == attr:
                value = FunctionRef(cls.module, stmt, owner=cls)
            elif isinstance(stmt, ast.ClassDef) and stmt.name == attr:
                value = ClassRef(cls.module, stmt)
            elif isinstance(stmt, ast.Assign):
                for target in stmt.targets:
                    if isinstance(target, ast.Name):
                        scope.local[target.id] = self.eval(stmt.value, scope)
                if any(_binds(t, attr) for t in stmt.targets):
                    value = scope.local.get(attr, Opaque(f"{cls.name}.{attr} bound by unpacking"))
            elif (
                isinstance(stmt, ast.AnnAssign)
                and stmt.value is not None
                and isinstance(stmt.target, ast.Name)
            ):
                scope.local[stmt.target.id] = self.eval(stmt.value, scope)
                if stmt.target.id == attr:
                    value = scope.local[attr]
        if value is _UNBOUND:
            for base in cls.node.bases:
                base_ref = self.eval(base, Scope(cls.module))
                if isinstance(base_ref, ClassRef):
                    inherited = self.class_attribute(base_ref, attr)
                    if not (isinstance(inherited, Opaque) and inherited.why.startswith("no attribute")):
                        return inherited
            return Opaque(f"no attribute {attr} on class {cls.name}")
        return value

    def enum_members(self, cls: ClassRef) -> list[EnumMember] | None:
        """Members of an ``enum.Enum`` subclass in definition order; None for other classes."""
        if not any(self._is_enum_base(self.eval(b, Scope(cls.module))) for b in cls.node.bases):
            return None
        members: list[EnumMember] = []
        scope = Scope(cls.module)
        for stmt in cls.node.body:
            if (
                isinstance(stmt, ast.Assign)
                and len(stmt.targets) == 1
                and isinstance(stmt.targets[0], ast.Name)
            ):
                name = stmt.targets[0].id
                if name.startswith("_"):
                    continue
                value = self.eval(stmt.value, scope)
                scope.local[name] = value
                members.append(EnumMember(name, value))
        return members

    def _is_enum_base(self, base: Any) -> bool:
        if isinstance(base, ExternalRef):
            return base.path in {"enum.Enum", "enum.IntEnum", "enum.StrEnum", "enum.Flag", "enum.IntFlag"}
        if isinstance(base, ClassRef):
            return any(self._is_enum_base(self.eval(b, Scope(base.module))) for b in base.node.bases)
        return False

    def _call(self, node: ast.Call, scope: Scope) -> Any:
        func = self._eval(node.func, scope)
        if isinstance(func, ExternalRef) and func.path in {
            "msgspec.field",
            "dataclasses.field",
            "msgspec.structs.field",
        }:
            kwargs = tuple((k.arg, self._eval(k.value, scope)) for k in node.keywords if k.arg)
            return FieldCall(kwargs)
        args = [self._eval(a, scope) for a in node.args if not isinstance(a, ast.Starred)]
        if any(isinstance(a, ast.Starred) for a in node.args) or any(k.arg is None for k in node.keywords):
            return Opaque("call with *args/**kwargs")
        kwargs = {k.arg: self._eval(k.value, scope) for k in node.keywords}
        if (
            isinstance(func, ExternalRef)
            and func.path.startswith("builtins.")
            and func.name in _BUILTIN_CALLS
        ):
            if func.name in {"list", "tuple", "set", "frozenset", "sorted"} and args:
                args[0] = self._iterable(args[0])
            if not all(is_concrete(a) for a in args) or not all(is_concrete(v) for v in kwargs.values()):
                return Opaque(f"{func.name}() of an unresolved value")
            try:
                return _BUILTIN_CALLS[func.name](*args, **kwargs)
            except Exception:  # noqa: BLE001
                return Opaque(f"{func.name}() failed")
        if isinstance(func, BoundMethod):
            if isinstance(func.target, dict) and func.name == "keys" and not args:
                # Registries map names to classes; only the names matter here.
                keys = list(func.target)
                return keys if all(is_concrete(k) for k in keys) else Opaque("dict with unresolved keys")
            if not is_concrete(func.target) or not all(is_concrete(a) for a in args):
                return Opaque(f".{func.name}() on an unresolved value")
            try:
                result = getattr(func.target, func.name)(*args, **kwargs)
            except Exception:  # noqa: BLE001
                return Opaque(f".{func.name}() failed")
            if func.name in {"keys", "values", "items"}:
                return list(result)
            return result
        if isinstance(func, FunctionRef):
            return self.call_function(func, args, kwargs)
        return Opaque("call of a class or an external function")

    def _iterable(self, value: Any) -> Any:
        if isinstance(value, ClassRef):
            members = self.enum_members(value)
            if members is not None:
                return members
        if isinstance(value, dict) and all(is_concrete(k) for k in value):
            return list(value)
        return value

    def _comprehension(self, node: ast.ListComp | ast.SetComp | ast.GeneratorExp, scope: Scope) -> Any:
        if len(node.generators) != 1 or not isinstance(node.generators[0].target, ast.Name):
            return Opaque("nested comprehension")
        gen = node.generators[0]
        source = self._iterable(self._eval(gen.iter, scope))
        if isinstance(source, (Opaque, ModuleRef, ClassRef, FunctionRef, ExternalRef)) or not isinstance(
            source, (list, tuple, set, frozenset)
        ):
            return Opaque("comprehension over an unresolved value")
        out = []
        for item in sorted(source) if isinstance(source, (set, frozenset)) else source:
            inner = Scope(scope.module, {gen.target.id: item}, scope)
            if all(self._eval(cond, inner) is True for cond in gen.ifs):
                out.append(self._eval(node.elt, inner))
        if isinstance(node, ast.SetComp):
            return set(out) if all(is_concrete(v) for v in out) else Opaque("set of unresolved values")
        return out

    def call_function(self, func: FunctionRef, args: list[Any], kwargs: dict[str, Any]) -> Any:
        """Evaluate a helper by its last top-level ``return``: the path taken without plugins.

        Statements before it that bind names (local imports, assignments) are applied in order;
        branches are skipped. SGLang's choice helpers have exactly this shape: an early return
        for an already-imported plugin registry, then the static name list.
        """
        params = [a.arg for a in func.node.args.args]
        if func.owner is not None and params and params[0] in {"self", "cls"}:
            params = params[1:]
        local: dict[str, Any] = dict(zip(params, args, strict=False))
        local.update(kwargs)
        scope = Scope(func.module, local)
        result: Any = Opaque(f"{func.name}() has no top-level return")
        for stmt in func.node.body:
            if isinstance(stmt, ast.ImportFrom):
                source = self._absolute_module(func.module, stmt.module, stmt.level)
                for alias in stmt.names:
                    scope.local[alias.asname or alias.name] = self._import_from(source, alias.name)
            elif isinstance(stmt, ast.Import):
                for alias in stmt.names:
                    bound = alias.asname or alias.name.split(".")[0]
                    scope.local[bound] = self._module_ref(alias.name if alias.asname else bound)
            elif isinstance(stmt, ast.Assign) and all(isinstance(t, ast.Name) for t in stmt.targets):
                value = self.eval(stmt.value, scope)
                for target in stmt.targets:
                    scope.local[target.id] = value
            elif isinstance(stmt, ast.Return) and stmt.value is not None:
                result = self.eval(stmt.value, scope)
        return result


_UNBOUND = Opaque("unbound")


def _binds(target: ast.expr, name: str) -> bool:
    if isinstance(target, ast.Name):
        return target.id == name
    if isinstance(target, (ast.Tuple, ast.List)):
        return any(_binds(t, name) for t in target.elts)
    return False


def _mentions(node: ast.AST, name: str) -> bool:
    return any(isinstance(n, ast.Name) and n.id == name for n in ast.walk(node))


def _names_bound_in(stmt: ast.stmt) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(stmt):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((a.asname or a.name.split(".")[0]) for a in node.names)
        elif isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            names.add(node.name)
    return names


def _defines(tree: ast.Module | None, name: str) -> bool:
    if tree is None:
        return False
    return any(name in _names_bound_in(stmt) for stmt in tree.body)


# --------------------------------------------------------------------------------------------
# Flag records
# --------------------------------------------------------------------------------------------

FLAG_KEYS = (
    "flag",
    "aliases",
    "field",
    "type",
    "nargs",
    "store_true",
    "action",
    "default",
    "choices",
    "required",
    "deprecated",
)


@dataclass
class Registration:
    """One ``parser.add_argument`` call as the release's argparse would receive it."""

    option_strings: list[str]
    kwargs: dict[str, Any]
    origin: str
    help_text: str | None = None


@dataclass
class Extraction:
    """Everything read from one wheel: its flags and the parser's behaviour switches."""

    version: str
    source: str
    allow_abbrev: bool
    config_file: bool
    flags: list[dict[str, Any]]
    warnings: list[str]


def type_name(value: Any) -> str:
    """The catalogue's name for an argparse ``type=`` callable."""
    if isinstance(value, ExternalRef):
        if value.path in {"builtins.int", "builtins.float", "builtins.str", "builtins.bool"}:
            return value.name
        if value.path in {"json.loads", "orjson.loads"}:
            return "json"
        return value.name
    if isinstance(value, (FunctionRef, ClassRef)):
        return value.name
    if value in (int, float, str, bool):
        return value.__name__
    return "unknown"


def _json_value(value: Any) -> Any:
    """Plain JSON data for a default or a choice list (tuples become lists, sets are sorted)."""
    if isinstance(value, EnumMember):
        return _json_value(value.value)
    if isinstance(value, (list, tuple)):
        return [_json_value(v) for v in value]
    if isinstance(value, (set, frozenset)):
        return [_json_value(v) for v in sorted(value, key=lambda v: (str(type(v)), v))]
    if isinstance(value, dict):
        return {str(k): _json_value(v) for k, v in value.items()}
    if isinstance(value, float) and value != value:  # NaN has no JSON spelling
        return None
    return value


class FlagCollector:
    """Turn add_argument calls into catalogue records, the way argparse would interpret them."""

    def __init__(
        self,
        evaluator: Evaluator,
        record_fields: dict[str, Any],
        copied_fields: dict[str, str] | None = None,
    ):
        self.evaluator = evaluator
        self.record_fields = record_fields
        # argparse dest -> ServerArgs field for dests that from_cli_args copies by hand
        # (`args.tp_size = args.tensor_parallel_size` before 0.5.15).
        self.copied_fields = copied_fields or {}
        self.flags: list[dict[str, Any]] = []
        self.warnings: list[str] = []
        self._seen: dict[str, str] = {}

    def add(self, reg: Registration) -> None:
        kwargs = reg.kwargs
        long_options = [s for s in reg.option_strings if s.startswith("--")]
        if not long_options:
            raise CatalogueError(f"{reg.origin}: no long option in {reg.option_strings}")
        for option in reg.option_strings:
            if option in self._seen:
                raise CatalogueError(f"{reg.origin}: {option} already registered by {self._seen[option]}")
            self._seen[option] = reg.origin
        dest = kwargs.get("dest")
        if not isinstance(dest, str):
            dest = long_options[0][2:].replace("-", "_")

        action = kwargs.get("action")
        action_name, action_defaults, deprecated_action = self._describe_action(action, reg)
        effective = {**action_defaults, **{k: v for k, v in kwargs.items() if k != "action"}}

        store_true = False
        nargs = effective.get("nargs")
        if action_name in _STORE_TRUE_ACTIONS:
            store_true, nargs, flag_type = True, None, "bool"
            default = effective.get("default", False)
        elif action_name == _BOOLEAN_OPTIONAL:
            nargs, flag_type = None, "bool"
            default = effective.get("default")
        elif action_name in _ZERO_ARG_BUILTIN_ACTIONS:
            nargs, flag_type = 0, "bool"
            default = effective.get("default", True if action_name == "store_false" else None)
        elif nargs == 0:
            # Custom zero-argument action: store_true-like when the value it stores is True.
            stored = effective.get("const", effective.get("const_value"))
            store_true = stored is True
            nargs = None if store_true else 0
            flag_type = "bool"
            default = effective.get("default")
        else:
            flag_type = type_name(effective["type"]) if "type" in effective else "str"
            default = effective.get("default")

        if isinstance(default, FieldCall):
            default = _field_call_default(default)
        choices_value = effective.get("choices")
        choices: Any = None
        if choices_value is not None:
            choices_value = self.evaluator._iterable(choices_value)
            if is_concrete(choices_value) and isinstance(choices_value, (list, tuple, set, frozenset)):
                choices = _json_value(choices_value)
            else:
                self.warnings.append(
                    f"{long_options[0]}: choices not statically resolvable ({_why(choices_value)})"
                )
        if isinstance(default, ExternalRef) and default.path == "argparse.SUPPRESS":
            default = None  # no attribute unless given; the ServerArgs field default applies
        if not is_concrete(default):
            self.warnings.append(f"{long_options[0]}: default not statically resolvable ({_why(default)})")
            default = None
        if isinstance(nargs, Opaque) or not (nargs is None or isinstance(nargs, (int, str))):
            raise CatalogueError(f"{reg.origin}: nargs of {long_options[0]} is not a literal")

        help_text = reg.help_text
        deprecated = bool(deprecated_action or effective.get("deprecated") is True)
        if isinstance(help_text, str) and re.match(r"\s*\(?\[?deprecated\b", help_text, re.IGNORECASE):
            deprecated = True

        aliases = [s for s in reg.option_strings if s != long_options[0]]
        record = {
            "flag": long_options[0],
            "aliases": aliases,
            "field": dest if dest in self.record_fields else self.copied_fields.get(dest),
            "type": flag_type,
            "nargs": nargs,
            "store_true": store_true,
            "action": action_name,
            "default": _json_value(default),
            "choices": choices,
            "required": effective.get("required") is True,
            "deprecated": deprecated,
        }
        self.flags.append(record)

    def _describe_action(self, action: Any, reg: Registration) -> tuple[str | None, dict[str, Any], bool]:
        """(catalogue action name, constructor defaults, deprecated?) for an ``action=`` value."""
        if action is None or action == "store":
            return None, {}, False
        if isinstance(action, str):
            return action, {}, False
        if isinstance(action, ExternalRef):
            if action.path in {"argparse.BooleanOptionalAction"}:
                return _BOOLEAN_OPTIONAL, {}, False
            if action.path.startswith("argparse."):
                return action.name, {}, False
            raise CatalogueError(f"{reg.origin}: action {action.path} comes from outside the wheel")
        if isinstance(action, ClassRef):
            defaults = self._init_defaults(action)
            return action.name, defaults, self._is_deprecated_action(action)
        raise CatalogueError(f"{reg.origin}: action is not statically resolvable ({_why(action)})")

    def _init_defaults(self, cls: ClassRef) -> dict[str, Any]:
        """Keyword defaults of the action's ``__init__`` (e.g. ``nargs=0, const=True``)."""
        for stmt in cls.node.body:
            if isinstance(stmt, ast.FunctionDef) and stmt.name == "__init__":
                args = stmt.args
                positional = args.args[len(args.args) - len(args.defaults) :]
                pairs = list(zip(positional, args.defaults, strict=True))
                pairs += [
                    (a, d) for a, d in zip(args.kwonlyargs, args.kw_defaults, strict=True) if d is not None
                ]
                return {a.arg: self.evaluator.eval(d, Scope(cls.module)) for a, d in pairs}
        for base in cls.node.bases:
            ref = self.evaluator.eval(base, Scope(cls.module))
            if isinstance(ref, ClassRef):
                return self._init_defaults(ref)
            if isinstance(ref, ExternalRef) and ref.path == "argparse._StoreTrueAction":
                return {"nargs": 0, "const": True, "default": False}
        return {}

    def _is_deprecated_action(self, cls: ClassRef) -> bool:
        if cls.name.startswith("Deprecated"):
            return True
        for base in cls.node.bases:
            ref = self.evaluator.eval(base, Scope(cls.module))
            if isinstance(ref, ClassRef) and self._is_deprecated_action(ref):
                return True
        return False


def _field_call_default(call: FieldCall) -> Any:
    kwargs = dict(call.kwargs)
    if "default" in kwargs:
        return kwargs["default"]
    factory = kwargs.get("default_factory")
    if isinstance(factory, ExternalRef) and factory.path in {
        "builtins.list",
        "builtins.dict",
        "builtins.set",
    }:
        return {"list": [], "dict": {}, "set": []}[factory.name]
    if isinstance(factory, Thunk) and is_concrete(factory.value):
        return factory.value
    return Opaque("default_factory other than list/dict/set or a lambda of a constant")


def _why(value: Any) -> str:
    if isinstance(value, Opaque):
        return value.why
    return type(value).__name__


# --------------------------------------------------------------------------------------------
# Dataclass-driven registration (mirror of srt/arg_groups/arg_utils.add_cli_args_from_dataclass)
# --------------------------------------------------------------------------------------------

_MISSING = Opaque("no default")


@dataclass
class FieldDecl:
    """One annotated field of a ServerArgs namespace class."""

    name: str
    module: str
    annotation: ast.expr
    default_node: ast.expr | None


@dataclass
class ArgMeta:
    """Static view of an ``Arg(...)`` marker (only the keywords argparse sees)."""

    help: Any = ""
    choices: Any = None
    aliases: Any = None
    cli_name: Any = None
    type_parser: Any = None
    nargs: Any = None
    required: Any = None
    action: Any = None
    action_kwargs: Any = None
    const: Any = None
    no_cli: Any = False


class TypeView:
    """Canonical view of an annotation: ``kind`` plus its arguments (as AST nodes)."""

    def __init__(self, kind: str, args: list[ast.expr], node: ast.expr):
        self.kind = kind
        self.args = args
        self.node = node


_TYPING_KINDS = {
    "typing.Annotated": "annotated",
    "typing_extensions.Annotated": "annotated",
    "typing.Optional": "optional",
    "typing.Union": "union",
    "typing.Literal": "literal",
    "typing_extensions.Literal": "literal",
    "typing.List": "list",
    "builtins.list": "list",
    "typing.Dict": "dict",
    "builtins.dict": "dict",
    "typing.Set": "set",
    "builtins.set": "set",
    "typing.Tuple": "tuple",
    "builtins.tuple": "tuple",
    "typing.ClassVar": "classvar",
    "builtins.bool": "bool",
    "builtins.int": "int",
    "builtins.float": "float",
    "builtins.str": "str",
}


class DataclassReader:
    """Read namespace classes and register their fields like ``add_cli_args_from_dataclass``."""

    def __init__(self, evaluator: Evaluator):
        self.ev = evaluator

    def fields_of(self, cls: ClassRef) -> list[FieldDecl]:
        """Annotated fields in definition order, base classes first (msgspec/dataclass order)."""
        out: list[FieldDecl] = []
        for base in cls.node.bases:
            ref = self.ev.eval(base, Scope(cls.module))
            if isinstance(ref, ClassRef):
                out.extend(self.fields_of(ref))
        for stmt in cls.node.body:
            if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name):
                if self.view(stmt.annotation, cls.module).kind == "classvar":
                    continue
                out = [f for f in out if f.name != stmt.target.id]
                out.append(FieldDecl(stmt.target.id, cls.module, stmt.annotation, stmt.value))
        return out

    def view(self, node: ast.expr, module: str) -> TypeView:
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            try:
                node = ast.parse(node.value, mode="eval").body
            except SyntaxError:
                return TypeView("other", [], node)
        if isinstance(node, ast.Constant) and node.value is None:
            return TypeView("none", [], node)
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr):
            return TypeView("union", _flatten_bitor(node), node)
        if isinstance(node, ast.Subscript):
            head = self.ev.eval(node.value, Scope(module))
            kind = _TYPING_KINDS.get(head.path, "other") if isinstance(head, ExternalRef) else "other"
            args = list(node.slice.elts) if isinstance(node.slice, ast.Tuple) else [node.slice]
            return TypeView(kind, args, node)
        head = self.ev.eval(node, Scope(module))
        if isinstance(head, ExternalRef):
            return TypeView(_TYPING_KINDS.get(head.path, "other"), [], node)
        return TypeView("other", [], node)

    def arg_meta(self, decl: FieldDecl) -> tuple[ast.expr, ArgMeta | None, str | None]:
        """(inner annotation, Arg metadata or None, help text) as ``_unwrap_annotated`` sees it."""
        view = self.view(decl.annotation, decl.module)
        if view.kind != "annotated":
            return decl.annotation, None, None
        inner, extras = view.args[0], view.args[1:]
        for extra in extras:
            if isinstance(extra, ast.Call):
                func = self.ev.eval(extra.func, Scope(decl.module))
                if isinstance(func, ClassRef) and func.name == "Arg":
                    meta = ArgMeta()
                    for kw in extra.keywords:
                        if kw.arg is None:
                            raise CatalogueError(f"{decl.module}.{decl.name}: Arg(**...) is not readable")
                        if hasattr(meta, kw.arg):
                            setattr(meta, kw.arg, self.ev.eval(kw.value, Scope(decl.module)))
                    if extra.args:
                        meta.help = self.ev.eval(extra.args[0], Scope(decl.module))
                    help_text = meta.help if isinstance(meta.help, str) else None
                    return inner, meta, help_text
                continue  # NS(...) and other markers
            if _is_str_expr(extra):
                value = self.ev.eval(extra, Scope(decl.module))
                return inner, ArgMeta(help=value), value if isinstance(value, str) else None
        return inner, None, None

    def registrations(self, decls: Iterable[FieldDecl]) -> Iterator[Registration]:
        for decl in decls:
            reg = self._registration(decl)
            if reg is not None:
                yield reg

    def _registration(self, decl: FieldDecl) -> Registration | None:
        where = f"{decl.module}.{decl.name}"
        raw, meta, help_text = self.arg_meta(decl)
        if meta is None:
            return None
        no_cli = meta.no_cli
        if not isinstance(no_cli, bool):
            raise CatalogueError(f"{where}: no_cli is not a literal bool")
        if no_cli:
            return None
        cli_name = meta.cli_name or "--" + decl.name.replace("_", "-")
        aliases = meta.aliases or []
        if (
            not isinstance(cli_name, str)
            or not is_concrete(aliases)
            or not all(isinstance(a, str) for a in aliases)
        ):
            raise CatalogueError(f"{where}: cli_name/aliases are not literal strings")
        names = [cli_name, *aliases]
        default = self.default_of(decl)
        auto_dest = cli_name.lstrip("-").replace("-", "_")
        dest_kwarg = {"dest": decl.name} if decl.name != auto_dest else {}

        def reg(kwargs: dict[str, Any]) -> Registration:
            return Registration(names, kwargs, where, help_text)

        if meta.action is not None:
            kwargs: dict[str, Any] = {"action": meta.action, **dest_kwarg}
            if default is not _MISSING:
                kwargs["default"] = default
            if meta.action_kwargs:
                if not isinstance(meta.action_kwargs, dict):
                    raise CatalogueError(f"{where}: action_kwargs is not a literal dict")
                kwargs.update(meta.action_kwargs)
            return reg(kwargs)

        inner, _optional = self.unwrap_optional(raw, decl.module)
        inner_view = self.view(inner, decl.module)

        if inner_view.kind == "literal":
            literal_vals = [self.ev.eval(a, Scope(decl.module)) for a in inner_view.args]
            choices = meta.choices or literal_vals
            first = literal_vals[0] if literal_vals else ""
            type_func = meta.type_parser or self._infer_type_from_value(first)
            kwargs = {"type": type_func, "choices": choices, **dest_kwarg}
            if default is not _MISSING:
                kwargs["default"] = default
            if meta.const is not None:
                kwargs["const"] = meta.const
            return reg(kwargs)

        if inner_view.kind == "list" and meta.type_parser is None:
            elem = inner_view.args[0] if inner_view.args else None
            elem_kind = self.view(elem, decl.module).kind if elem is not None else "str"
            kwargs = {"type": _infer_type(elem_kind), "nargs": meta.nargs or "+", **dest_kwarg}
            if meta.choices:
                kwargs["choices"] = meta.choices
            if default is not _MISSING:
                kwargs["default"] = default
            if meta.const is not None:
                kwargs["const"] = meta.const
            return reg(kwargs)

        if inner_view.kind == "bool":
            kwargs = {"action": "store_true", **dest_kwarg}
            if default is not _MISSING:
                kwargs["default"] = default
            return reg(kwargs)

        kwargs = {"type": meta.type_parser or _infer_type(inner_view.kind), **dest_kwarg}
        if meta.choices:
            kwargs["choices"] = meta.choices
        if meta.nargs:
            kwargs["nargs"] = meta.nargs
        if default is not _MISSING:
            kwargs["default"] = default
        if meta.const is not None:
            kwargs["const"] = meta.const
        if meta.required is True or (meta.required is None and default is _MISSING):
            kwargs["required"] = True
        return reg(kwargs)

    def unwrap_optional(self, node: ast.expr, module: str) -> tuple[ast.expr, bool]:
        """Mirror of ``_unwrap_optional``: ``X | None`` gives X; a wider union stays as it is."""
        view = self.view(node, module)
        if view.kind in {"optional", "union"}:
            members = _flatten_union_args([node], self, module)
            non_none = [m for m in members if self.view(m, module).kind != "none"]
            if len(non_none) == 1:
                return non_none[0], True
        return node, False

    def default_of(self, decl: FieldDecl) -> Any:
        if decl.default_node is None:
            return _MISSING
        value = self.ev.eval(decl.default_node, Scope(decl.module))
        if isinstance(value, FieldCall):
            kwargs = dict(value.kwargs)
            if "default" not in kwargs and "default_factory" not in kwargs:
                return _MISSING
            value = _field_call_default(value)
        return value

    @staticmethod
    def _infer_type_from_value(value: Any) -> ExternalRef:
        if isinstance(value, bool):
            return ExternalRef("builtins.str")  # _infer_type_func(bool) falls through to str
        if isinstance(value, int):
            return ExternalRef("builtins.int")
        if isinstance(value, float):
            return ExternalRef("builtins.float")
        return ExternalRef("builtins.str")


def _infer_type(kind: str) -> ExternalRef:
    """Mirror of ``_infer_type_func``: str/int/float map to themselves, anything else to str."""
    return ExternalRef(f"builtins.{kind}" if kind in {"int", "float"} else "builtins.str")


def _flatten_bitor(node: ast.expr) -> list[ast.expr]:
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr):
        return _flatten_bitor(node.left) + _flatten_bitor(node.right)
    return [node]


def _flatten_union_args(args: list[ast.expr], reader: DataclassReader, module: str) -> list[ast.expr]:
    out: list[ast.expr] = []
    for arg in args:
        view = reader.view(arg, module)
        if view.kind in {"union"}:
            out.extend(_flatten_union_args(view.args, reader, module))
        elif view.kind == "optional":
            out.extend(_flatten_union_args(view.args, reader, module))
            out.append(ast.Constant(value=None))
        else:
            out.append(arg)
    return out


def _is_str_expr(node: ast.expr) -> bool:
    if isinstance(node, ast.Constant):
        return isinstance(node.value, str)
    if isinstance(node, ast.JoinedStr):
        return True
    if isinstance(node, ast.BinOp):
        return _is_str_expr(node.left) or _is_str_expr(node.right)
    return False


# --------------------------------------------------------------------------------------------
# Reading a release
# --------------------------------------------------------------------------------------------

SERVER_ARGS_MODULE = "sglang.srt.server_args"


def extract(wheel: Path) -> Extraction:
    """Read one wheel and return its flags exactly as its ``prepare_server_args`` parser has them."""
    tree = WheelTree(wheel)
    ev = Evaluator(tree)
    module = tree.parse(SERVER_ARGS_MODULE)
    if module is None:
        raise CatalogueError(f"{tree.path.name}: no sglang/srt/server_args.py")
    server_args = ev.module_global(SERVER_ARGS_MODULE, "ServerArgs")
    if not isinstance(server_args, ClassRef):
        raise CatalogueError(f"{tree.path.name}: ServerArgs is not a class in srt/server_args.py")
    reader = DataclassReader(ev)

    namespaces = ev.module_global(SERVER_ARGS_MODULE, "_INPUT_NAMESPACES")
    decls: list[FieldDecl] = reader.fields_of(server_args)
    if isinstance(namespaces, list):
        if not all(isinstance(ns, ClassRef) for ns in namespaces):
            raise CatalogueError(f"{tree.path.name}: _INPUT_NAMESPACES holds names that are not classes")
        for ns in namespaces:
            decls.extend(reader.fields_of(ns))
        layout = "srt/arg_groups/fields/*.py + ServerArgs.add_cli_args"
    else:
        layout = None
    record_fields = {d.name: d for d in decls}

    collector = FlagCollector(ev, record_fields, _copied_fields(ev, server_args, record_fields))
    add_cli_args = ev.class_attribute(server_args, "add_cli_args")
    if not isinstance(add_cli_args, FunctionRef):
        raise CatalogueError(f"{tree.path.name}: ServerArgs.add_cli_args not found")
    interpreter = AddCliArgsInterpreter(ev, reader, collector, server_args, decls)
    interpreter.run(add_cli_args, parser_names={_first_param(add_cli_args)})
    if not collector.flags:
        raise CatalogueError(f"{tree.path.name}: ServerArgs.add_cli_args registered no flags")
    if layout is None:
        # 0.5.14-0.5.19 annotate the ServerArgs dataclass itself; earlier releases only call add_argument.
        layout = (
            "srt/server_args.py ServerArgs fields + ServerArgs.add_cli_args"
            if interpreter.used_dataclass
            else "srt/server_args.py ServerArgs.add_cli_args"
        )

    allow_abbrev, config_merger = _parser_switches(ev, tree)
    flag_names = {f["flag"] for f in collector.flags}
    return Extraction(
        version=tree.version,
        source=f"{tree.path.name}: {layout}",
        allow_abbrev=allow_abbrev,
        config_file=config_merger and "--config" in flag_names,
        flags=sorted(collector.flags, key=lambda f: f["flag"]),
        warnings=collector.warnings + interpreter.warnings,
    )


def _copied_fields(ev: Evaluator, server_args: ClassRef, record_fields: dict[str, Any]) -> dict[str, str]:
    """``args.FIELD = args.DEST`` statements of ``ServerArgs.from_cli_args``, as {DEST: FIELD}.

    Releases before 0.5.15 register ``--tensor-parallel-size``/``--tp-size`` with the dest
    ``tensor_parallel_size`` and copy it into the field ``tp_size`` there, so the flag's field is
    the copy's target, not its dest.
    """
    func = ev.class_attribute(server_args, "from_cli_args")
    if not isinstance(func, FunctionRef):
        return {}
    params = [a.arg for a in func.node.args.args]
    if len(params) < 2:
        return {}
    namespace = params[1]
    copied: dict[str, str] = {}
    for stmt in func.node.body:
        if (
            isinstance(stmt, ast.Assign)
            and len(stmt.targets) == 1
            and _is_attribute_of(stmt.targets[0], namespace)
            and _is_attribute_of(stmt.value, namespace)
            and stmt.targets[0].attr in record_fields
        ):
            copied[stmt.value.attr] = stmt.targets[0].attr
    return copied


def _is_attribute_of(node: ast.expr, name: str) -> bool:
    return isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == name


def _first_param(func: FunctionRef) -> str:
    params = [a.arg for a in func.node.args.args]
    if params and params[0] in {"self", "cls"} and not _is_staticmethod(func.node):
        params = params[1:]
    if not params:
        raise CatalogueError(f"{func.name}() takes no parser argument")
    return params[0]


def _is_staticmethod(node: ast.FunctionDef) -> bool:
    return any(isinstance(d, ast.Name) and d.id == "staticmethod" for d in node.decorator_list)


class AddCliArgsInterpreter:
    """Walk ``ServerArgs.add_cli_args`` statement by statement, registering what argparse would."""

    def __init__(
        self,
        ev: Evaluator,
        reader: DataclassReader,
        collector: FlagCollector,
        server_args: ClassRef,
        decls: list[FieldDecl],
    ):
        self.ev = ev
        self.reader = reader
        self.collector = collector
        self.server_args = server_args
        self.decls = decls
        self.warnings: list[str] = []
        self.used_dataclass = False
        self._depth = 0

    def run(self, func: FunctionRef, parser_names: set[str], local: dict[str, Any] | None = None) -> None:
        self._depth += 1
        if self._depth > 8:
            raise CatalogueError(f"{func.name}: helper calls nested too deeply")
        scope = Scope(func.module, local)
        for stmt in func.node.body:
            self._statement(stmt, scope, parser_names, func)
        self._depth -= 1

    def _statement(self, stmt: ast.stmt, scope: Scope, parsers: set[str], func: FunctionRef) -> None:
        where = f"{func.module}:{stmt.lineno}"
        if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call):
            self._call(stmt.value, scope, parsers, where)
        elif isinstance(stmt, ast.Assign):
            value = stmt.value
            if isinstance(value, ast.Call) and _is_parser_method(
                value.func, parsers, {"add_argument_group", "add_mutually_exclusive_group"}
            ):
                for target in stmt.targets:
                    if isinstance(target, ast.Name):
                        parsers.add(target.id)
                return
            if isinstance(value, ast.Call) and _is_parser_method(value.func, parsers, {"add_argument"}):
                self._call(value, scope, parsers, where)
                return
            result = self.ev.eval(value, scope)
            for target in stmt.targets:
                if isinstance(target, ast.Name):
                    scope.local[target.id] = result
        elif isinstance(stmt, (ast.If, ast.For, ast.While, ast.With, ast.Try)):
            if _contains_add_argument(stmt):
                raise CatalogueError(
                    f"{where}: add_argument inside a {type(stmt).__name__} block; the flag set depends on "
                    "runtime state and cannot be catalogued statically"
                )
            self.warnings.append(
                f"{where}: {type(stmt).__name__} block skipped (runtime-dependent, registers no flag)"
            )
        elif isinstance(stmt, (ast.Import, ast.ImportFrom)):
            for alias in stmt.names:
                bound = alias.asname or alias.name.split(".")[0]
                if isinstance(stmt, ast.ImportFrom):
                    source = self.ev._absolute_module(func.module, stmt.module, stmt.level)
                    scope.local[bound] = self.ev._import_from(source, alias.name)
                else:
                    scope.local[bound] = self.ev._module_ref(alias.name if alias.asname else bound)

    def _call(self, call: ast.Call, scope: Scope, parsers: set[str], where: str) -> None:
        if _is_parser_method(call.func, parsers, {"add_argument"}):
            self.collector.add(self._registration(call, scope, where))
            return
        func = self.ev.eval(call.func, scope)
        passes_parser = any(isinstance(a, ast.Name) and a.id in parsers for a in call.args)
        if isinstance(func, FunctionRef) and func.name == "add_cli_args_from_dataclass":
            self._from_dataclass(call, scope, where)
        elif isinstance(func, FunctionRef) and passes_parser:
            params = [a.arg for a in func.node.args.args]
            local = dict(zip(params, [self.ev.eval(a, scope) for a in call.args], strict=False))
            inner_parsers = {
                p
                for p, a in zip(params, call.args, strict=False)
                if isinstance(a, ast.Name) and a.id in parsers
            }
            self.run(func, inner_parsers, local)
        elif passes_parser:
            raise CatalogueError(
                f"{where}: the parser is handed to a call that cannot be followed statically"
            )

    def _from_dataclass(self, call: ast.Call, scope: Scope, where: str) -> None:
        if len(call.args) < 2:
            raise CatalogueError(f"{where}: add_cli_args_from_dataclass without a class argument")
        self.used_dataclass = True
        target = self.ev.eval(call.args[1], scope)
        if not isinstance(target, ClassRef):
            raise CatalogueError(f"{where}: add_cli_args_from_dataclass target is not a class")
        only = None
        for kw in call.keywords:
            if kw.arg == "fields":
                only = self.ev.eval(kw.value, scope)
                if not (only is None or (is_concrete(only) and isinstance(only, (list, tuple, set)))):
                    raise CatalogueError(f"{where}: add_cli_args_from_dataclass(fields=...) is not a literal")
        decls = self.decls if target.node is self.server_args.node else self.reader.fields_of(target)
        if only is not None:
            decls = [d for d in decls if d.name in set(only)]
        for reg in self.reader.registrations(decls):
            self.collector.add(reg)

    def _registration(self, call: ast.Call, scope: Scope, where: str) -> Registration:
        options: list[str] = []
        for arg in call.args:
            value = self.ev.eval(arg, scope)
            if not isinstance(value, str):
                raise CatalogueError(f"{where}: add_argument option string is not a literal")
            options.append(value)
        kwargs: dict[str, Any] = {}
        help_text = None
        for kw in call.keywords:
            if kw.arg is None:
                raise CatalogueError(f"{where}: add_argument(**kwargs) is not readable statically")
            if kw.arg == "help":
                value = self.ev.eval(kw.value, scope)
                help_text = value if isinstance(value, str) else _leading_text(kw.value)
                continue
            kwargs[kw.arg] = self._kwarg(kw.value, scope)
        if not options or not all(o.startswith("-") for o in options):
            raise CatalogueError(f"{where}: positional argument {options} is not a flag")
        return Registration(options, kwargs, where, help_text)

    def _kwarg(self, node: ast.expr, scope: Scope) -> Any:
        if isinstance(node, ast.Call):
            func = self.ev.eval(node.func, scope)
            if (
                isinstance(func, FunctionRef)
                and func.name in DECLARED_DEFAULT_HELPERS
                and len(node.args) == 1
            ):
                name = self.ev.eval(node.args[0], scope)
                decl = next((d for d in self.decls if d.name == name), None)
                if decl is not None:
                    value = self.reader.default_of(decl)
                    return None if value is _MISSING else value
        return self.ev.eval(node, scope)


def _leading_text(node: ast.expr) -> str | None:
    """First literal piece of an f-string or concatenation (enough to spot 'Deprecated...')."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr) and node.values:
        return _leading_text(node.values[0])
    if isinstance(node, ast.BinOp):
        return _leading_text(node.left)
    return None


def _is_parser_method(func: ast.expr, parsers: set[str], methods: set[str]) -> bool:
    return (
        isinstance(func, ast.Attribute)
        and func.attr in methods
        and isinstance(func.value, ast.Name)
        and func.value.id in parsers
    )


def _contains_add_argument(stmt: ast.stmt) -> bool:
    return any(
        isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == "add_argument"
        for n in ast.walk(stmt)
    )


def _parser_switches(ev: Evaluator, tree: WheelTree) -> tuple[bool, bool]:
    """(allow_abbrev, config merger wired) read from ``prepare_server_args``."""
    func = ev.module_global(SERVER_ARGS_MODULE, "prepare_server_args")
    if not isinstance(func, FunctionRef):
        raise CatalogueError(f"{tree.path.name}: prepare_server_args not found in srt/server_args.py")
    allow_abbrev: bool | None = None
    for node in ast.walk(func.node):
        if isinstance(node, ast.Call):
            target = ev.eval(node.func, Scope(func.module))
            if isinstance(target, ExternalRef) and target.path == "argparse.ArgumentParser":
                allow_abbrev = True  # argparse's default
                for kw in node.keywords:
                    if kw.arg == "allow_abbrev":
                        value = ev.eval(kw.value, Scope(func.module))
                        if not isinstance(value, bool):
                            raise CatalogueError(f"{tree.path.name}: allow_abbrev is not a literal")
                        allow_abbrev = value
    if allow_abbrev is None:
        raise CatalogueError(f"{tree.path.name}: prepare_server_args builds no argparse.ArgumentParser")
    merger = any(
        (isinstance(n, ast.Name) and n.id == "ConfigArgumentMerger")
        or (isinstance(n, ast.alias) and n.name == "ConfigArgumentMerger")
        for n in ast.walk(func.node)
    )
    return allow_abbrev, merger


# --------------------------------------------------------------------------------------------
# Catalogues: removed flags, serialisation, the output directory
# --------------------------------------------------------------------------------------------


def _version_key(version: str) -> tuple:
    from packaging.version import Version

    return (Version(version),)


def compute_removed(catalogues: dict[str, dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """For each version: option strings seen in an older catalogue and gone from this one."""
    ordered = sorted(catalogues, key=_version_key)
    result: dict[str, list[dict[str, Any]]] = {}
    for i, version in enumerate(ordered):
        current = catalogues[version]["flags"]
        present = {s for f in current for s in [f["flag"], *f["aliases"]]}
        by_field = {f["field"]: f["flag"] for f in current if f["field"]}
        last_seen: dict[str, tuple[str, str | None]] = {}
        for older in ordered[:i]:
            for f in catalogues[older]["flags"]:
                for option in [f["flag"], *f["aliases"]]:
                    last_seen[option] = (older, f["field"])
        removed = []
        for option in sorted(set(last_seen) - present):
            last_version, old_field = last_seen[option]
            replacement = KNOWN_SUCCESSORS.get(option)
            if replacement is None and old_field and old_field in by_field:
                replacement = by_field[old_field]
            if replacement is not None and replacement not in present:
                replacement = None
            removed.append({"flag": option, "last_version": last_version, "replacement": replacement})
        result[version] = removed
    return result


def redundant_post_releases(catalogues: dict[str, dict[str, Any]]) -> list[str]:
    """Post releases whose parser is identical to the previous catalogued build of the same release.

    SGLang ships post releases that add and drop flags (0.4.1.post2 dropped three, 0.4.3.post3
    added ten), so each gets its own catalogue, except when nothing changed: then kvcheck's lookup
    of ``X.Y.Z.postN`` falls back to the newest catalogue of ``X.Y.Z`` at or below it, which is the
    same parser, and no file is written.
    """
    from packaging.version import Version

    ordered = sorted(catalogues, key=_version_key)
    redundant = []
    kept: str | None = None
    for version in ordered:
        parsed = Version(version)
        if (
            kept is not None
            and parsed.post is not None
            and parsed.release == Version(kept).release
            and _parser_of(catalogues[version]) == _parser_of(catalogues[kept])
        ):
            redundant.append(version)
            continue
        kept = version
    return redundant


def _parser_of(catalogue: dict[str, Any]) -> tuple:
    return (catalogue["allow_abbrev"], catalogue["config_file"], catalogue["flags"])


def catalogue_dict(extraction: Extraction) -> dict[str, Any]:
    return {
        "schema": SCHEMA,
        "sglang_version": extraction.version,
        "source": extraction.source,
        "generated_by": GENERATED_BY,
        "allow_abbrev": extraction.allow_abbrev,
        "config_file": extraction.config_file,
        "flags": [{k: f[k] for k in FLAG_KEYS} for f in extraction.flags],
        "removed": [],
    }


def render(catalogue: dict[str, Any]) -> str:
    """Stable text: top-level keys one per line, then one JSON object per flag line."""
    lines = ["{"]
    keys = list(catalogue)
    for n, key in enumerate(keys):
        comma = "," if n < len(keys) - 1 else ""
        value = catalogue[key]
        if key in {"flags", "removed"}:
            if not value:
                lines.append(f" {json.dumps(key)}: []{comma}")
                continue
            lines.append(f" {json.dumps(key)}: [")
            for m, item in enumerate(value):
                item_comma = "," if m < len(value) - 1 else ""
                lines.append("  " + json.dumps(item, ensure_ascii=False) + item_comma)
            lines.append(f" ]{comma}")
        else:
            lines.append(f" {json.dumps(key)}: {json.dumps(value, ensure_ascii=False)}{comma}")
    lines.append("}")
    return "\n".join(lines) + "\n"


def catalogue_path(out_dir: Path, version: str) -> Path:
    return out_dir / f"flags-{version}.json"


def write_catalogues(extractions: list[Extraction], out_dir: Path) -> list[Path]:
    """Write the new catalogues and refresh ``removed`` in every catalogue of ``out_dir``."""
    out_dir.mkdir(parents=True, exist_ok=True)
    catalogues: dict[str, dict[str, Any]] = {}
    for path in sorted(out_dir.glob(CATALOGUE_GLOB)):
        data = json.loads(path.read_text(encoding="utf-8"))
        if data.get("schema") != SCHEMA:
            raise CatalogueError(f"{path}: schema {data.get('schema')!r} is not {SCHEMA}")
        catalogues[data["sglang_version"]] = data
    for extraction in extractions:
        catalogues[extraction.version] = catalogue_dict(extraction)
    # Removed flags are derived before redundant post releases are dropped, so `last_version`
    # names the last release that accepted a flag even when that release has no file.
    removed = compute_removed(catalogues)
    written = []
    for version in redundant_post_releases(catalogues):
        # kvcheck reads the same release's newest older catalogue for it, which is identical.
        del catalogues[version]
        path = catalogue_path(out_dir, version)
        if path.exists():
            path.unlink()
            written.append(path)
    for version, data in sorted(catalogues.items(), key=lambda kv: _version_key(kv[0])):
        data["removed"] = removed[version]
        path = catalogue_path(out_dir, version)
        text = render(data)
        if not path.exists() or path.read_text(encoding="utf-8") != text:
            path.write_text(text, encoding="utf-8")
            written.append(path)
    return written


def download(versions: list[str], wheel_dir: Path) -> list[Path]:
    """Fetch each sglang release wheel with pip (no dependencies) and return the files."""
    wheels = []
    for version in versions:
        existing = sorted(wheel_dir.glob(f"sglang-{version}-*.whl"))
        if not existing:
            cmd = [
                sys.executable,
                "-m",
                "pip",
                "download",
                f"sglang=={version}",
                "--no-deps",
                "-d",
                str(wheel_dir),
            ]
            proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
            if proc.returncode != 0:
                raise CatalogueError(f"pip download sglang=={version} failed:\n{proc.stderr.strip()}")
            existing = sorted(wheel_dir.glob(f"sglang-{version}-*.whl"))
            if not existing:
                raise CatalogueError(f"pip download sglang=={version} produced no wheel in {wheel_dir}")
        wheels.append(existing[0])
    return wheels


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("wheels", nargs="*", type=Path, help="sglang wheel files to catalogue")
    parser.add_argument(
        "--download",
        nargs="+",
        metavar="VERSION",
        default=[],
        help="pip download these sglang versions first",
    )
    parser.add_argument(
        "--wheel-dir", type=Path, default=Path("/tmp/wheels"), help="where --download puts wheels"
    )
    parser.add_argument("--out", type=Path, required=True, help="catalogue directory (profiles/sglang/)")
    parser.add_argument(
        "--strict", action="store_true", help="fail when any choice list or default is unresolvable"
    )
    args = parser.parse_args(argv)
    try:
        wheels = list(args.wheels) + download(args.download, args.wheel_dir)
        if not wheels:
            parser.error("give wheel files or --download VERSION...")
        extractions = []
        for wheel in wheels:
            extraction = extract(wheel)
            for warning in extraction.warnings:
                print(f"{extraction.version}: warning: {warning}", file=sys.stderr)
            if args.strict and any("not statically resolvable" in w for w in extraction.warnings):
                raise CatalogueError(f"{wheel.name}: unresolved values with --strict")
            extractions.append(extraction)
        versions = [e.version for e in extractions]
        if len(set(versions)) != len(versions):
            raise CatalogueError(f"two wheels of the same version: {sorted(versions)}")
        written = write_catalogues(extractions, args.out)
    except CatalogueError as exc:
        print(f"gen_flag_catalogue: error: {exc}", file=sys.stderr)
        return 2
    for extraction in extractions:
        print(f"{extraction.version}: {len(extraction.flags)} flags", file=sys.stderr)
    for path in written:
        verb = "wrote" if path.exists() else "dropped (same parser as the release's previous build)"
        print(f"{verb} {path}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
