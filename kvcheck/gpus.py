"""GPU profiles: the memory figures SGLang's sizing depends on, as data in `profiles/gpus/`.

Three sources, looked up in this order: a `gpu:` mapping in the manifest (a card without a profile),
the folders given with `--profiles DIR`, then the profiles shipped in `profiles/gpus/`.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from packaging.version import InvalidVersion, Version

from kvcheck.errors import EstimateError, InputError
from kvcheck.profiles import profile_path

MIB = 1 << 20
VENDORS = ("nvidia", "amd", "huawei")
# no accelerator has a quarter of this (the largest, 288 GB, is 294,896 MiB): a figure above it is a typo, which
# would otherwise price pools of billions of tokens and pass
MAX_GPU_MEMORY_MIB = 2 * 1024 * 1024


class GpuNameError(InputError):
    """A `gpu:` name that matches several profiles (A100: 40 GB or 80 GB): exit 2 listing them."""


TERM_SCALES = ("launch", "peer", "custom_ar_group")
_TERM_KEYS = {"name", "since", "min_ranks", "per", "above", "below", "shift", "source"}


@dataclass(frozen=True)
class PreBaselineTerm:
    """Memory before the baseline that the fitted figure does not hold, for the settings it names.

    A term widens the band on one side: `above` MiB more may be in use (the pool's low end drops),
    `below` MiB less (its high end rises); a term with `shift` moves the figure itself by that many MiB,
    where logs of those releases show the memory in use (a refit that keeps the older fit points as
    they are). It applies from SGLang release `since` on (an undeclared or unreadable release gets it
    too: the estimate cannot know), at `min_ranks` or more ranks on the host, once (`per: launch`), per
    peer (`per: peer`, x ranks - 1), or per custom all-reduce group on a rank (`per: custom_ar_group`,
    the count the engine gives).
    """

    name: str
    source: str
    since: str | None = None
    min_ranks: int = 2
    per: str = "launch"
    above_mib: float = 0.0
    below_mib: float = 0.0
    shift_mib: float = 0.0

    def applies(self, ranks: int, release: str | None) -> bool:
        if ranks < self.min_ranks:
            return False
        if self.since is None or release is None:
            return True
        try:
            return Version(release) >= Version(self.since)
        except InvalidVersion:
            return True  # a development build or an image tag: its release is not known, so widen

    def count(self, ranks: int, custom_ar_groups: int) -> int:
        if self.per == "peer":
            return max(0, ranks - 1)
        if self.per == "custom_ar_group":
            return max(0, custom_ar_groups)
        return 1


@dataclass(frozen=True)
class PreBaselineFigure:
    """The memory in use before the baseline for one launch, with its band and what widened it."""

    mib: float
    below_mib: float  # up to this much less may be in use (the pool's high end)
    above_mib: float  # up to this much more may be in use (the pool's low end)
    notes: tuple[str, ...] = ()


@dataclass(frozen=True)
class PreBaseline:
    """Device MiB in use before SGLang's baseline reading, by the number of ranks on one host.

    `by_ranks` holds fitted figures for the rank counts real logs show (1 is `base`); a count in
    between is interpolated linearly, one beyond the table adds `per_peer` for each further rank.
    Without a table it is `base + per_peer x (ranks - 1)`. The uncertainty grows with the peers
    too: `band + per_peer_band x (ranks - 1)`, since the collective-library buffers (NCCL, NVLS,
    custom all-reduce) are the least known part. `terms` widen that band on one side, or move the
    figure (`shift`), for the releases and settings whose memory the fitted figure does not hold (`figure`).
    """

    base_mib: float
    per_peer_mib: float
    band_mib: float
    source: str
    per_peer_band_mib: float = 0.0
    by_ranks: tuple[tuple[int, float], ...] = ()
    terms: tuple[PreBaselineTerm, ...] = ()

    def mib(self, ranks: int) -> float:
        """Memory taken before the baseline on the most loaded of `ranks` ranks sharing one host."""
        ranks = max(1, ranks)
        if not self.by_ranks:
            return self.base_mib + self.per_peer_mib * (ranks - 1)
        points = [(1, self.base_mib), *sorted(p for p in self.by_ranks if p[0] > 1)]
        for (r0, m0), (r1, m1) in zip(points, points[1:], strict=False):
            if r0 <= ranks <= r1:
                return m0 + (m1 - m0) * (ranks - r0) / (r1 - r0)
        last_r, last_m = points[-1]
        return last_m + self.per_peer_mib * (ranks - last_r)

    def band(self, ranks: int) -> float:
        """The +/- MiB band around `mib(ranks)` (without the terms)."""
        return self.band_mib + self.per_peer_band_mib * max(0, ranks - 1)

    def figure(self, ranks: int, *, release: str | None = None, custom_ar_groups: int = 0) -> PreBaselineFigure:
        """`mib(ranks)` moved by every shift term and its band widened by every band term that applies to
        `release` and the launch."""
        ranks = max(1, ranks)
        mib = self.mib(ranks)
        below = above = self.band(ranks)
        notes = []
        for term in self.terms:
            if not term.applies(ranks, release):
                continue
            n = term.count(ranks, custom_ar_groups)
            if n and term.shift_mib:
                mib += term.shift_mib * n
                notes.append(f"memory before the baseline: {term.shift_mib * n:,.0f} MiB more in use from "
                             f"{term.since or 'every release'} ({term.name}: {term.source})")
            if n == 0 or (term.above_mib == 0 and term.below_mib == 0):
                continue
            above += term.above_mib * n
            below += term.below_mib * n
            side = ", ".join(part for part in (
                f"{term.above_mib * n:,.0f} MiB above" if term.above_mib else "",
                f"{term.below_mib * n:,.0f} MiB below" if term.below_mib else "") if part)
            notes.append(f"memory before the baseline not determined by the inputs ({term.name}): band widened by "
                         f"{side} ({term.source})")
        return PreBaselineFigure(mib, below, above, tuple(notes))


def _term(raw: Any) -> PreBaselineTerm:
    if not isinstance(raw, Mapping):
        raise TypeError("pre_baseline_mib.terms entries must be mappings")
    unknown = sorted(set(raw) - _TERM_KEYS)
    if unknown:
        raise ValueError(f"pre_baseline_mib.terms: unknown key(s) {', '.join(map(str, unknown))} "
                         f"(known: {', '.join(sorted(_TERM_KEYS))})")
    per = str(raw.get("per", "launch"))
    if per not in TERM_SCALES:
        raise ValueError(f"pre_baseline_mib.terms: per {per!r} is not one of {', '.join(TERM_SCALES)}")
    since = raw.get("since")
    if since is not None:
        Version(str(since))  # InvalidVersion is a ValueError: a malformed profile fails at load time
    term = PreBaselineTerm(
        name=str(raw["name"]), source=str(raw["source"]), since=None if since is None else str(since),
        min_ranks=int(raw.get("min_ranks", 2)), per=per,
        above_mib=float(raw.get("above", 0.0)), below_mib=float(raw.get("below", 0.0)),
        shift_mib=float(raw.get("shift", 0.0)),
    )
    if term.above_mib < 0 or term.below_mib < 0:
        raise ValueError("pre_baseline_mib.terms: above and below are widths, not negative")
    if term.shift_mib < 0:
        raise ValueError("pre_baseline_mib.terms: shift is memory in use, not negative")
    return term


@dataclass(frozen=True)
class GpuProfile:
    """One accelerator model: its memory as SGLang reads it and what is used before the baseline."""

    name: str
    vendor: str  # nvidia | amd | huawei
    description: str
    aliases: tuple[str, ...]
    compute_capability: str  # "9.0" on NVIDIA, "gfx942" on AMD, "ascend910b" on Ascend
    memory_total_mib: int  # nvidia-smi memory.total (rocminfo on AMD, torch_npu on Ascend)
    memory_source: str
    pre_baseline: PreBaseline
    path: Path | None = None
    families: tuple[str, ...] = field(default=())  # loose names shared with sibling profiles (A100)

    @property
    def is_rocm(self) -> bool:
        return self.vendor == "amd"

    @property
    def is_npu(self) -> bool:
        return self.vendor == "huawei"

    @property
    def sm(self) -> int | None:
        """CUDA SM version as an int (90, 100, 120), None off NVIDIA."""
        if self.vendor != "nvidia":
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


# How cloud platforms and node labellers name cards, where that name is not one of a profile's aliases:
# GKE's cloud.google.com/gke-accelerator ("nvidia-h100-80gb", "nvidia-tesla-a100"), EKS/Karpenter's
# karpenter.k8s.aws/instance-gpu-name ("h100"), NVIDIA GPU feature discovery's nvidia.com/gpu.product
# (also OpenShift's): "NVIDIA-H100-80GB-HBM3". A label names one card; a label that leaves the memory
# open (Karpenter's "a100") matches the family, which is ambiguous, as the plain name is.
_LABEL_PREFIXES = ("nvidiatesla", "nvidia", "tesla", "amd", "radeon")
_LABEL_EXACT = {
    "nvidiateslaa100": "A100-40GB",  # GKE: a2-highgpu/megagpu carry the 40 GB A100
}
_LABEL_INFIX = re.compile(r"(mega|ultra|sxm\d?|hbm\d?e?)")  # GKE's a3-mega, form factors and memory kinds


def label_keys(name: str) -> list[str]:
    """The names a platform label may stand for, most specific first (the label itself first)."""
    key = _norm(name)
    keys = [key]
    if key in _LABEL_EXACT:
        keys.insert(0, _norm(_LABEL_EXACT[key]))
    for prefix in _LABEL_PREFIXES:
        if key.startswith(prefix) and len(key) > len(prefix):
            stem = key[len(prefix):]
            keys.append(stem)
            bare = _LABEL_INFIX.sub("", stem)
            keys.append(bare)
            keys.append(re.sub(r"\d+gb$", "", bare))  # "h200141gb" -> "h200": a card of one memory size
            break
    return list(dict.fromkeys(k for k in keys if k))


def _pre_baseline(pre: Mapping[str, Any]) -> PreBaseline:
    table = pre.get("by_ranks") or {}
    if not isinstance(table, Mapping):
        raise TypeError("pre_baseline_mib.by_ranks must map a rank count to MiB")
    return PreBaseline(
        base_mib=float(pre["base"]),
        per_peer_mib=float(pre.get("per_peer", 0.0)),
        band_mib=float(pre.get("band", 0.0)),
        per_peer_band_mib=float(pre.get("per_peer_band", 0.0)),
        source=str(pre.get("source", "")),
        by_ranks=tuple(sorted((int(k), float(v)) for k, v in table.items())),
        terms=tuple(_term(t) for t in (pre.get("terms") or ())),
    )


def profile_from_mapping(raw: Mapping[str, Any], path: Path | None = None) -> GpuProfile:
    """A GpuProfile from a profile file's mapping; KeyError/TypeError/ValueError when malformed."""
    vendor = str(raw["vendor"])
    if vendor not in VENDORS:
        raise ValueError(f"vendor {vendor!r} is not one of {', '.join(VENDORS)}")
    profile = GpuProfile(
        name=str(raw["name"]),
        vendor=vendor,
        description=str(raw.get("description", "")),
        aliases=tuple(str(a) for a in raw.get("aliases", ())),
        families=tuple(str(a) for a in raw.get("families", ())),
        compute_capability=str(raw["compute_capability"]),
        memory_total_mib=int(raw["memory_total_mib"]),
        memory_source=str(raw["memory_source"]),
        pre_baseline=_pre_baseline(raw["pre_baseline_mib"]),
        path=path,
    )
    if not 0 < profile.memory_total_mib <= MAX_GPU_MEMORY_MIB:
        raise ValueError(f"memory_total_mib must be between 1 and {MAX_GPU_MEMORY_MIB:,} MiB (2 TiB)")
    profile.sm  # noqa: B018 -- a malformed NVIDIA capability fails here, at load time
    return profile


MAX_PROFILE_BYTES = 1024 * 1024


def _parse_profile(path: Path) -> GpuProfile:
    from kvcheck.io.textfile import read_text_file
    from kvcheck.io.yamlpos import safe_load_all

    # a user's --profiles folder is input like a manifest: a regular file, bounded, bounded YAML
    text = read_text_file(path, str(path), kind="GPU profile", max_bytes=MAX_PROFILE_BYTES)
    try:
        documents = safe_load_all(text, str(path))
        raw = documents[0] if len(documents) == 1 else None
        if not isinstance(raw, Mapping):
            raise TypeError("not a mapping")
        return profile_from_mapping(raw, path)
    except (OSError, yaml.YAMLError, KeyError, TypeError, ValueError) as exc:
        raise InputError(f"{path}: not a valid GPU profile: {exc!r}") from exc


@functools.cache
def _load_dir(directory: Path) -> tuple[GpuProfile, ...]:
    if not directory.is_dir():
        raise EstimateError(f"GPU profile folder {directory} is missing")
    return tuple(_parse_profile(p) for p in sorted(directory.glob("*.yaml")))


class GpuProfiles:
    """Known GPU profiles, looked up by short name or by the name nvidia-smi prints.

    A profile's own name or one of its aliases names it; a `families` entry ("A100") is shared by
    sibling profiles and is ambiguous unless only one profile carries it. Profiles earlier in the
    tuple win over later ones of the same name (user folders come before the shipped ones).
    """

    def __init__(self, profiles: tuple[GpuProfile, ...]) -> None:
        seen: set[str] = set()
        kept = []
        for profile in profiles:
            if _norm(profile.name) not in seen:
                seen.add(_norm(profile.name))
                kept.append(profile)
        self.profiles = tuple(kept)
        self._by_key: dict[str, GpuProfile] = {}
        self._family: dict[str, list[GpuProfile]] = {}
        for profile in self.profiles:
            for key in (profile.name, *profile.aliases):
                self._by_key.setdefault(_norm(key), profile)
            for key in profile.families:
                self._family.setdefault(_norm(key), []).append(profile)

    @classmethod
    def load(cls, directory: Path | None = None) -> GpuProfiles:
        return cls(_load_dir(directory or profile_path("gpus")))

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(p.name for p in self.profiles)

    def matches(self, name: str) -> list[GpuProfile]:
        """Every profile `name` may mean: one for an exact name, alias or platform label, several for a family."""
        custom = _CUSTOM.get(_norm(name))
        if custom is not None:
            return [custom]
        for key in label_keys(name):
            exact = self._by_key.get(key)
            if exact is not None:
                return [exact]
            family = self._family.get(key)
            if family:
                return list(family)
        return []

    def suggest(self, name: str) -> str | None:
        """The profile name closest to a mistyped one (H1OO -> H100), for a did-you-mean."""
        import difflib

        names = {_norm(n): n for n in self.names}
        typed = _norm(name).replace("o", "0")  # the letter O for the digit 0: H1OO, MI3OOX
        close = difflib.get_close_matches(typed, list(names), n=1, cutoff=0.6) or difflib.get_close_matches(
            _norm(name), list(names), n=1, cutoff=0.6)
        return names[close[0]] if close else None

    def find(self, name: str) -> GpuProfile | None:
        """The one profile `name` means; None when there is none or several."""
        found = self.matches(name)
        return found[0] if len(found) == 1 else None

    def get(self, name: str) -> GpuProfile:
        """The profile for `name`; GpuNameError when ambiguous, EstimateError when unknown."""
        found = self.matches(name)
        if len(found) > 1:
            raise ambiguous(name, found)
        if not found:
            raise EstimateError(
                f"no GPU profile for {name!r}",
                hint=f"use one of {', '.join(self.names)}, describe the card with a gpu: mapping "
                "(name, memory_mib), or add a profile with --profiles DIR",
            )
        return found[0]


def ambiguous(name: str, found: Iterable[GpuProfile]) -> GpuNameError:
    choices = ", ".join(f"{p.name} ({p.description}, {p.memory_total_mib:,} MiB)" for p in found)
    return GpuNameError(
        f"gpu {name!r} is ambiguous: it may mean {choices}",
        hint="name the exact card (e.g. A100-40GB or A100-80GB); its memory decides the pool",
    )


# Folders given with --profiles (searched before the shipped profiles), and cards a manifest
# describes with a gpu: mapping (searched first). Both are per process, like the CLI invocation.
_EXTRA_DIRS: list[Path] = []
_CUSTOM: dict[str, GpuProfile] = {}


def add_profile_dir(directory: Path) -> None:
    """Use the *.yaml profiles in `directory` too, ahead of the shipped ones (--profiles DIR)."""
    directory = Path(directory)
    if not directory.is_dir():
        raise InputError(f"--profiles {directory}: no such folder")
    if not any(directory.glob("*.yaml")):
        raise InputError(f"--profiles {directory}: no *.yaml GPU profile in it")
    _load_dir(directory)  # validate now: a broken profile is exit 2 before anything runs
    if directory not in _EXTRA_DIRS:
        _EXTRA_DIRS.append(directory)
    default_profiles.cache_clear()


def register_custom(profile: GpuProfile) -> None:
    """A card described in a manifest (gpu: {name, memory_mib, ...}); found by its name first."""
    _CUSTOM[_norm(profile.name)] = profile


def reset_session() -> None:
    """Forget --profiles folders and manifest-described cards (tests run many sessions in one process)."""
    _EXTRA_DIRS.clear()
    _CUSTOM.clear()
    default_profiles.cache_clear()


@functools.cache
def default_profiles() -> GpuProfiles:
    extra: list[GpuProfile] = []
    for directory in _EXTRA_DIRS:
        extra.extend(_load_dir(directory))
    return GpuProfiles((*extra, *_load_dir(profile_path("gpus"))))


def as_profiles(value: GpuProfiles | Mapping[str, GpuProfile] | Path | None) -> GpuProfiles:
    """Accept a GpuProfiles, a folder of YAML files or a name->profile mapping (tests, planners)."""
    if value is None:
        return default_profiles()
    if isinstance(value, GpuProfiles):
        return value
    if isinstance(value, Path):
        return GpuProfiles.load(value)
    return GpuProfiles(tuple(value.values()))


# What a card described only by name and memory is assumed to use before the baseline, by vendor:
# the widest of the fitted profiles' figures (docs/estimate.md, GPU profiles), with a wide band.
_GENERIC_PRE = {
    "nvidia": ("8.0", PreBaseline(1024, 0.0, 500, "generic NVIDIA card (no profile): TP1 1 GiB, 3 GiB at 8 ranks "
                                  "(between the PCIe and NVSwitch fits), band +/-500 MiB + 60 MiB per peer",
                                  60.0, ((8, 3000.0),))),
    "amd": ("gfx942", PreBaseline(700, 0.0, 800, "generic AMD card (no profile): as MI300X/MI308X", 100.0,
                                  ((8, 6810.0),), terms=(
                                      PreBaselineTerm("aiter custom all-reduce", "as the MI300X profile", "0.5.10",
                                                      per="custom_ar_group", above_mib=2944.0),
                                      PreBaselineTerm("RCCL and image", "as the MI300X profile", "0.5.8",
                                                      above_mib=4000.0),
                                      PreBaselineTerm("aiter custom all-reduce, refit", "as the MI300X profile",
                                                      "0.5.10", per="custom_ar_group", shift_mib=2944.0),
                                      PreBaselineTerm("RCCL and image, refit", "as the MI300X profile", "0.5.9",
                                                      shift_mib=3900.0)))),
    "huawei": ("ascend910b", PreBaseline(3000, 100.0, 1000, "generic Ascend NPU (no profile): as Ascend-910B",
                                         100.0, ((2, 3470.0),))),
}


def custom_profile(
    name: str,
    memory_mib: int,
    *,
    vendor: str = "nvidia",
    compute_capability: str | None = None,
    pre_baseline_mib: float | None = None,
    description: str | None = None,
) -> GpuProfile:
    """The profile of a card a manifest describes with a `gpu:` mapping (figures not given: generic)."""
    default_cc, generic = _GENERIC_PRE[vendor]
    if pre_baseline_mib is not None:
        pre = PreBaseline(float(pre_baseline_mib), 0.0, 0.0, "gpu.pre_baseline_mib in the manifest")
    else:
        pre = generic
    profile = GpuProfile(
        name=name,
        vendor=vendor,
        description=description or f"{name} (described in the manifest)",
        aliases=(),
        compute_capability=compute_capability or default_cc,
        memory_total_mib=int(memory_mib),
        memory_source="gpu.memory_mib in the manifest",
        pre_baseline=pre,
    )
    try:
        profile.sm  # noqa: B018
    except ValueError as exc:
        raise InputError(f"gpu.compute_capability {compute_capability!r} is not a CUDA capability such as 9.0") from exc
    return profile
