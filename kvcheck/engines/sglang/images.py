"""Which SGLang release a container image names: the tag of lmsysorg/sglang, or an srt-slurm container name."""

from __future__ import annotations

import re

# lmsysorg/sglang:v0.5.23-cu129 names the SGLang release; other images (Dynamo's sglang-runtime) do not
_IMAGE_VERSION_RE = re.compile(r"(?:^|/)sglang:v?(\d+\.\d+\.\d+(?:\.post\d+|rc\d+)?)(?:$|[-_])")
# srt-slurm's model.container: an image reference or a squashfs file (sglang+v0.5.21.sqsh, sglang_0.5.21)
_CONTAINER_VERSION_RE = re.compile(r"sglang[+:_-]v?(\d+\.\d+\.\d+(?:\.post\d+)?)")


def release_from_image(image: str) -> str | None:
    """The SGLang release an image tag names (lmsysorg/sglang:v0.5.23-cu129 -> 0.5.23), else None."""
    match = _IMAGE_VERSION_RE.search(image)
    return match.group(1) if match else None


def release_from_container(name: str) -> str | None:
    """The SGLang release an srt-slurm container name states (sglang+v0.5.21.sqsh -> 0.5.21), else None."""
    match = _CONTAINER_VERSION_RE.search(name)
    return match.group(1) if match else None
