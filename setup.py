"""Ship the top-level profiles/ folder inside the wheel as kvcheck/_profiles.

pyproject.toml holds all metadata; this file only adds the package-dir mapping, which
setuptools' declarative configuration cannot combine with automatic package discovery.
"""

from pathlib import Path

from setuptools import find_packages, setup

ROOT = Path(__file__).parent
profile_dirs = sorted({p.parent for p in (ROOT / "profiles").rglob("*") if p.is_file()} | {ROOT / "profiles"})
profile_packages = {
    ".".join(["kvcheck", "_profiles", *d.relative_to(ROOT / "profiles").parts]): str(d.relative_to(ROOT))
    for d in profile_dirs
}

setup(
    packages=find_packages(include=["kvcheck", "kvcheck.*"]) + sorted(profile_packages),
    package_dir=profile_packages,
    package_data={name: ["*.json", "*.yaml", "*.yml", "*.md"] for name in profile_packages},
)
