"""GPU profiles: the memory figures SGLang's sizing depends on, as data in `profiles/gpus/`."""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import yaml

from kvcheck.errors import EstimateError, InputError
from kvcheck.profiles import profile_path

MIB = 1 << 20


@dataclass(frozen=True)
class PreBaseline:
    """Device MiB in use before SGLang's baseline reading: `base + per_peer x (ranks - 1)`.

    The uncertainty grows with the peers too: `band + per_peer_band x (ranks - 1)`, since the
    collective-library buffers (NCCL, NVLS, custom all-reduce) are the least known part.
    """

    base_mib: float
    per_peer_mib: float
    band_mib: float
    source: str
    per_peer_band_mib: float = 0.0

    def mib(self, ranks: int) -> float:
        """Memory taken before the baseline on the most loaded of `ranks` ranks sharing one world."""
        return self.base_mib + self.per_peer_mib * max(0, ranks - 1)

    def band(self, ranks: int) -> float:
        """The +/- MiB band around `mib(ranks)`."""
        return self.band_mib + self.per_peer_band_mib * max(0, ranks - 1)


@dataclass(frozen=True)
class GpuProfile:
    """One accelerator model: its memory as SGLang reads it and what is used before the baseline."""

    name: str
    vendor: str  # nvidia | amd
    description: str
    aliases: tuple[str, ...]
    compute_capability: str  # "9.0" on NVIDIA, "gfx942" on AMD
    memory_total_mib: int  # nvidia-smi memory.total (rocminfo on AMD), what SGLang's heuristics read
    memory_source: str
    pre_baseline: PreBaseline
    path: Path | None = None

    @property
    def is_rocm(self) -> bool:
        return self.vendor == "amd"

    @property
    def sm(self) -> int | None:
        """CUDA SM version as an int (90, 100, 120), None on AMD."""
        if self.is_rocm:
            return None
        major, _, minor = self.compute_capability.partition(".")
        return int(major) * 10 + int(minor or 0)

    @property
    def is_hopper(self) -> bool:
        return self.sm == 90

    @property
    def is_sm100(self) -> bool:
        """SGLang's `is_sm100`: SM100/SM103 datacenter Blackwell (B200, B300), not SM120."""
        return self.sm in (100, 103)

    @property
    def is_blackwell(self) -> bool:
        return self.sm is not None and self.sm >= 100


def _norm(name: str) -> str:
    return re.sub(r"[^a-z0-9]", "", name.lower())


def _parse_profile(path: Path) -> GpuProfile:
    try:
        raw = yaml.safe_load(path.read_text())
        pre = raw["pre_baseline_mib"]
        return GpuProfile(
            name=str(raw["name"]),
            vendor=str(raw["vendor"]),
            description=str(raw.get("description", "")),
            aliases=tuple(str(a) for a in raw.get("aliases", ())),
            compute_capability=str(raw["compute_capability"]),
            memory_total_mib=int(raw["memory_total_mib"]),
            memory_source=str(raw["memory_source"]),
            pre_baseline=PreBaseline(
                base_mib=float(pre["base"]),
                per_peer_mib=float(pre["per_peer"]),
                band_mib=float(pre["band"]),
                per_peer_band_mib=float(pre.get("per_peer_band", 0.0)),
                source=str(pre["source"]),
            ),
            path=path,
        )
    except (OSError, yaml.YAMLError, KeyError, TypeError, ValueError) as exc:
        raise InputError(f"{path}: not a valid GPU profile: {exc}") from exc


@functools.cache
def _load_dir(directory: Path) -> tuple[GpuProfile, ...]:
    if not directory.is_dir():
        raise EstimateError(f"GPU profile folder {directory} is missing")
    return tuple(_parse_profile(p) for p in sorted(directory.glob("*.yaml")))


class GpuProfiles:
    """Every known GPU profile, looked up by short name or by the name nvidia-smi prints."""

    def __init__(self, profiles: tuple[GpuProfile, ...]) -> None:
        self.profiles = profiles
        self._by_key: dict[str, GpuProfile] = {}
        for profile in profiles:
            for key in (profile.name, *profile.aliases):
                self._by_key.setdefault(_norm(key), profile)

    @classmethod
    def load(cls, directory: Path | None = None) -> GpuProfiles:
        return cls(_load_dir(directory or profile_path("gpus")))

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(p.name for p in self.profiles)

    def find(self, name: str) -> GpuProfile | None:
        return self._by_key.get(_norm(name))

    def get(self, name: str) -> GpuProfile:
        """The profile for `name`; EstimateError naming the known profiles when there is none."""
        profile = self.find(name)
        if profile is None:
            raise EstimateError(
                f"no GPU profile for {name!r}",
                hint=f"use one of {', '.join(self.names)} or add profiles/gpus/<name>.yaml",
            )
        return profile


def default_profiles() -> GpuProfiles:
    return GpuProfiles.load()


def as_profiles(value: GpuProfiles | Mapping[str, GpuProfile] | Path | None) -> GpuProfiles:
    """Accept a GpuProfiles, a folder of YAML files or a name->profile mapping (tests, planners)."""
    if value is None:
        return default_profiles()
    if isinstance(value, GpuProfiles):
        return value
    if isinstance(value, Path):
        return GpuProfiles.load(value)
    return GpuProfiles(tuple(value.values()))
