"""Where kvcheck's data (GPU profiles, SGLang flag catalogues) lives, in a checkout or a wheel."""

from __future__ import annotations

from functools import cache
from importlib import resources
from pathlib import Path


@cache
def profiles_root() -> Path:
    """The `profiles/` folder: top level in a checkout, `kvcheck/_profiles` in an installed wheel."""
    checkout = Path(__file__).resolve().parent.parent / "profiles"
    if checkout.is_dir():
        return checkout
    packaged = resources.files("kvcheck") / "_profiles"
    path = Path(str(packaged))
    if path.is_dir():
        return path
    raise FileNotFoundError(
        "kvcheck's profiles/ data is missing from this installation; reinstall kvcheck"
    )


def profile_path(*parts: str) -> Path:
    """A path inside profiles/, e.g. profile_path("gpus", "h100.yaml")."""
    return profiles_root().joinpath(*parts)
