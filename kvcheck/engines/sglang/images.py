"""Which SGLang release a container image names: the tag of lmsysorg/sglang, the Dynamo release of NVIDIA's
ai-dynamo/sglang-runtime (through the table in dynamo_releases.py), or an srt-slurm container name."""

from __future__ import annotations

import re

from kvcheck.engines.imageref import is_repository, split_image
from kvcheck.engines.sglang.dynamo_releases import dynamo_release

# lmsysorg/sglang:v0.5.23-cu129 names the SGLang release
_IMAGE_VERSION_RE = re.compile(r"(?:^|/)sglang:v?(\d+\.\d+\.\d+(?:\.post\d+|rc\d+)?)(?:$|[-_])")
# srt-slurm's model.container: an image reference or a squashfs file (sglang+v0.5.21.sqsh, sglang_0.5.21)
_CONTAINER_VERSION_RE = re.compile(r"sglang[+:_-]v?(\d+\.\d+\.\d+(?:\.post\d+)?)")
DYNAMO_REPOSITORY = "ai-dynamo/sglang-runtime"  # nvcr.io/nvidia/ai-dynamo/sglang-runtime:<Dynamo release>
LMSYS_REPOSITORY = "lmsysorg/sglang"
FLOATING_TAGS = frozenset({"latest"})


def release_from_image(image: str) -> str | None:
    """The SGLang release an image names, else None: lmsysorg/sglang:v0.5.23-cu129 -> 0.5.23, and
    nvcr.io/nvidia/ai-dynamo/sglang-runtime:0.8.1 -> 0.5.6.post2 (the release Dynamo 0.8.1 pins)."""
    name, tag, _ = split_image(image)
    if is_repository(name, DYNAMO_REPOSITORY):
        row = dynamo_release(tag) if tag is not None else None
        return row.sglang if row is not None else None
    match = _IMAGE_VERSION_RE.search(image)
    return match.group(1) if match else None


def unpinned_reason(image: str) -> str | None:
    """Why an SGLang image (lmsysorg/sglang, Dynamo's sglang-runtime) names no SGLang release, for the note that
    says which release kvcheck read the files with; None when it names one or is no image kvcheck reads."""
    name, tag, digest = split_image(image)
    dynamo = is_repository(name, DYNAMO_REPOSITORY)
    if not (dynamo or is_repository(name, LMSYS_REPOSITORY)) or release_from_image(image) is not None:
        return None
    if tag is None and digest is not None:
        return f"image {image} is pinned by digest, which names no SGLang release kvcheck can read"
    if tag is None or tag in FLOATING_TAGS or tag.startswith("latest-"):
        return f"image {image} has the floating tag '{tag or 'latest'}', which pins no SGLang release"
    if dynamo:
        row = dynamo_release(tag)
        if row is not None and row.built_from is not None:
            return f"image {image}: Dynamo {row.dynamo} builds SGLang from {row.built_from}, not a release"
        return (f"image {image}: '{tag}' is not a Dynamo release whose SGLang release kvcheck knows "
                "(docs/import.md lists them)")
    return f"image {image}: the tag '{tag}' names no SGLang release"


def release_from_container(name: str) -> str | None:
    """The SGLang release an srt-slurm container name states (sglang+v0.5.21.sqsh -> 0.5.21), else None."""
    match = _CONTAINER_VERSION_RE.search(name)
    return match.group(1) if match else None
