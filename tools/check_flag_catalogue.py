#!/usr/bin/env python3
"""Compare a committed flag catalogue with the parser the release really builds.

Usage:
    python tools/check_flag_catalogue.py WHEEL CATALOGUE

Unlike the generator, this runs the wheel's code: it imports `sglang.srt.server_args` from the
wheel with every other import replaced by a permissive stub (torch, transformers, sglang's own
modules; the stdlib and `sglang.srt.arg_groups` stay real), calls `ServerArgs.add_cli_args` on a
fresh `argparse.ArgumentParser` and compares each option with the catalogue: option strings,
`nargs`, `required`, plain defaults and choice lists. A choice list built by a stubbed module
comes out shorter and is counted, not compared. Run it in a throwaway process (it leaves the
stubs in `sys.modules`). Works for the `add_argument` layouts (0.4.0-0.5.19); 0.5.20+ build their
fields with msgspec and are checked against an independent extraction instead.

Exit status: 0 when everything compared matches, 1 when something differs, 2 on bad input.
"""

from __future__ import annotations

import abc
import argparse
import importlib
import importlib.abc
import importlib.machinery
import json
import sys
import tempfile
import types
import zipfile
from typing import Any

REAL_PREFIXES = ("sglang.srt.arg_groups",)


class _AnyMeta(abc.ABCMeta):
    """A class that answers every attribute, operator and call with another stub."""

    def __getattr__(cls, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return _stub_class(name)

    def __getitem__(cls, key: Any) -> Any:
        return cls

    def __or__(cls, other: Any) -> Any:
        return cls

    __ror__ = __or__

    def __iter__(cls) -> Any:
        return iter(())

    def __add__(cls, other: Any) -> Any:
        return other

    __radd__ = __add__

    def __call__(cls, *args: Any, **kwargs: Any) -> Any:
        if len(args) == 1 and callable(args[0]) and not kwargs:
            return args[0]  # used as a decorator
        return super().__call__(*args, **kwargs)


class _AnyBase(metaclass=_AnyMeta):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        pass

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return _stub_class(name)()

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if len(args) == 1 and callable(args[0]) and not kwargs:
            return args[0]
        return _stub_class("result")()

    def __iter__(self) -> Any:
        return iter(())

    def __add__(self, other: Any) -> Any:
        return other

    __radd__ = __add__

    def __bool__(self) -> bool:
        return False

    def __getitem__(self, key: Any) -> Any:
        return _stub_class("item")()


def _stub_class(name: str) -> type:
    return _AnyMeta(name, (_AnyBase,), {})


class _StubModule(types.ModuleType):
    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return _stub_class(name)


class _StubFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, name: str, path: Any, target: Any = None) -> Any:
        top = name.split(".")[0]
        if top in sys.stdlib_module_names or name.startswith(REAL_PREFIXES):
            return None
        if name in ("sglang", "sglang.srt", "sglang.srt.server_args"):
            return None
        return importlib.machinery.ModuleSpec(name, self, is_package=True)

    def create_module(self, spec: Any) -> Any:
        module = _StubModule(spec.name)
        module.__path__ = []
        return module

    def exec_module(self, module: Any) -> None:
        pass


def real_parser(wheel: str) -> argparse.ArgumentParser:
    root = tempfile.mkdtemp(prefix="kvcheck-wheel-")
    with zipfile.ZipFile(wheel) as zf:
        zf.extractall(root)
    sys.path.insert(0, root)
    sys.meta_path.insert(0, _StubFinder())
    for package in ("sglang", "sglang.srt"):  # skip the packages' heavy __init__ files
        module = types.ModuleType(package)
        module.__path__ = [f"{root}/{package.replace('.', '/')}"]
        sys.modules[package] = module
    server_args = importlib.import_module("sglang.srt.server_args")
    parser = argparse.ArgumentParser()
    server_args.ServerArgs.add_cli_args(parser)
    return parser


def compare(parser: argparse.ArgumentParser, catalogue: dict) -> tuple[list[str], int, int]:
    """(differences, options compared, choice lists left out because a stub built them)."""
    ours = {f["flag"]: f for f in catalogue["flags"]}
    theirs = {}
    for action in parser._actions:
        longs = [s for s in action.option_strings if s.startswith("--")]
        if longs and longs[0] != "--help":
            theirs[longs[0]] = action
    problems = [f"{name}: not in the catalogue" for name in sorted(set(theirs) - set(ours))]
    problems += [f"{name}: not in the parser" for name in sorted(set(ours) - set(theirs))]
    stubbed = 0
    for name, action in sorted(theirs.items()):
        flag = ours.get(name)
        if flag is None:
            continue
        boolean_optional = flag["action"] == "BooleanOptionalAction"
        options = [o for o in action.option_strings if not (boolean_optional and o.startswith("--no-"))]
        if sorted(options) != sorted([flag["flag"], *flag["aliases"]]):
            problems.append(f"{name}: option strings {options}")
        zero = action.nargs == 0 and (flag["store_true"] or flag["nargs"] == 0 or boolean_optional)
        if action.nargs != flag["nargs"] and not zero:
            problems.append(f"{name}: nargs {action.nargs!r}, catalogue {flag['nargs']!r}")
        if action.required != flag["required"]:
            problems.append(f"{name}: required {action.required}")
        default = action.default
        plain = isinstance(default, int | float | str | bool | type(None)) and not isinstance(default, _AnyBase)
        if plain and default != flag["default"] and not (default == argparse.SUPPRESS and flag["default"] is None):
            problems.append(f"{name}: default {default!r}, catalogue {flag['default']!r}")
        choices = action.choices
        if choices is not None and list(choices) and all(isinstance(c, str | int | float) for c in choices):
            real, mine = sorted(map(str, choices)), sorted(map(str, flag["choices"] or []))
            if set(real) < set(mine):
                stubbed += 1
            elif real != mine:
                problems.append(f"{name}: choices {real}, catalogue {mine}")
    return problems, len(theirs), stubbed


def main(argv: list[str] | None = None) -> int:
    cli = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    cli.add_argument("wheel")
    cli.add_argument("catalogue")
    args = cli.parse_args(argv)
    try:
        with open(args.catalogue, encoding="utf-8") as fh:
            catalogue = json.load(fh)
    except (OSError, json.JSONDecodeError) as exc:
        print(f"check_flag_catalogue: error: {args.catalogue}: {exc}", file=sys.stderr)
        return 2
    problems, compared, stubbed = compare(real_parser(args.wheel), catalogue)
    for problem in problems:
        print(problem)
    print(
        f"{catalogue['sglang_version']}: {compared} options compared, {len(problems)} differences, "
        f"{stubbed} choice lists built by stubbed modules left out"
    )
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
