"""Engine-specific knowledge, one sub-package per engine, behind the Engine interface (base.py).

`ENGINES` is the registry: a role's `engine` picks an entry; commands, inputs, backends and launchers
only ever talk to the `Engine` it returns. Engines come from two places: the built-in entries below
and, for engines kept outside kvcheck (TensorRT-LLM, an in-house fork), the `kvcheck.engines`
entry-point group: a distribution that declares

    [project.entry-points."kvcheck.engines"]
    trtllm = "my_package.kvcheck_engine:TrtllmEngine"

adds `trtllm` to the registry without an edit to kvcheck. The object an entry point names is an
`Engine` subclass or a factory returning an `Engine`; a built-in name cannot be replaced.
"""

from __future__ import annotations

from collections.abc import Callable
from importlib.metadata import EntryPoint, entry_points
from typing import TYPE_CHECKING

from kvcheck.errors import InputError

if TYPE_CHECKING:
    from kvcheck.engines.base import Engine

ENTRY_POINT_GROUP = "kvcheck.engines"


def _sglang() -> Engine:
    from kvcheck.engines.sglang.engine import SglangEngine

    return SglangEngine()


def _vllm() -> Engine:
    from kvcheck.engines.vllm.engine import VllmEngine

    return VllmEngine()


# Factories, so that importing the registry does not import every engine's modules.
BUILTIN_ENGINES: dict[str, Callable[[], Engine]] = {"sglang": _sglang, "vllm": _vllm}
ENGINES: dict[str, Callable[[], Engine]] = dict(BUILTIN_ENGINES)
_instances: dict[str, Engine] = {}
_plugins_loaded = False


class EnginePluginError(InputError):
    """An installed `kvcheck.engines` entry point that cannot be loaded or is not an Engine."""


def _plugin_factory(point: EntryPoint) -> Callable[[], Engine]:
    """A factory that loads the entry point when the engine is first asked for."""

    def build() -> Engine:
        from kvcheck.engines.base import Engine

        name, value = point.name, point.value
        try:
            target = point.load()
        except Exception as exc:  # a broken plug-in is the user's install, not kvcheck's bug
            raise EnginePluginError(
                f"engine plug-in '{name}' ({value}) cannot be loaded: {type(exc).__name__}: {exc}",
                hint="reinstall the package that provides it, or uninstall it",
            ) from exc
        engine = target() if callable(target) else target
        if not isinstance(engine, Engine):
            raise EnginePluginError(
                f"engine plug-in '{name}' ({value}) gave {type(engine).__name__}, not a kvcheck Engine",
                hint="the entry point must name an Engine subclass (kvcheck.engines.base.Engine) or a factory",
            )
        if engine.name != name:
            raise EnginePluginError(
                f"engine plug-in '{name}' ({value}) calls itself '{engine.name}'",
                hint="the entry point's name and the Engine's `name` must be the same",
            )
        return engine

    return build


def load_plugins() -> None:
    """Add the engines installed under the `kvcheck.engines` entry-point group (once per process)."""
    global _plugins_loaded
    if _plugins_loaded:
        return
    _plugins_loaded = True
    for point in entry_points(group=ENTRY_POINT_GROUP):
        if point.name in BUILTIN_ENGINES or point.name in ENGINES:
            continue  # a plug-in cannot shadow a built-in engine (or an engine registered earlier)
        ENGINES[point.name] = _plugin_factory(point)


def register_engine(name: str, factory: Callable[[], Engine]) -> None:
    """Register an engine under `name` in this process (what an entry point does, for tests and embedders)."""
    if name in BUILTIN_ENGINES:
        raise ValueError(f"'{name}' is a built-in engine")
    ENGINES[name] = factory
    _instances.pop(name, None)


def engine_names() -> list[str]:
    """Every engine kvcheck knows in this process, built-in and installed, sorted."""
    load_plugins()
    return sorted(ENGINES)


def get_engine(name: str = "sglang") -> Engine:
    """The engine registered under `name` (one shared instance: engines hold no per-run state)."""
    if name not in ENGINES:
        load_plugins()
    if name not in ENGINES:
        raise InputError(f"unknown engine '{name}' (kvcheck knows: {', '.join(sorted(ENGINES))})")
    if name not in _instances:
        _instances[name] = ENGINES[name]()
    return _instances[name]


__all__ = ["ENGINES", "ENTRY_POINT_GROUP", "engine_names", "get_engine", "load_plugins", "register_engine"]
