"""What a server container's environment and image say about the accelerator it runs on.

`CUDA_VISIBLE_DEVICES` in the container's env is the devices the engine sees: fewer than its parallel
settings need per node and it cannot start its ranks (an input error). An image built for another kind
of accelerator than the GPU type the role is sized on is finding KV318: the name of the image is all
that is read, and an image that names no accelerator is not judged.
"""

from __future__ import annotations

import re

# the vendor of kvcheck's GPU profiles (kvcheck.gpus.VENDORS) each image family runs on, with its name
_FAMILIES: tuple[tuple[str, str, re.Pattern[str]], ...] = (
    ("intel-gaudi", "Intel Gaudi (HPU)", re.compile(r"habana|gaudi|(?:^|[/:._-])hpu(?:$|[/:._-])")),
    ("amd", "AMD ROCm", re.compile(r"(?:^|[/:._-])rocm")),
    ("intel-xpu", "Intel XPU", re.compile(r"(?:^|[/:._-])xpu(?:$|[/:._-])")),
    ("huawei", "Huawei Ascend (NPU)", re.compile(r"ascend|(?:^|[/:._-])npu(?:$|[/:._-])")),
    ("nvidia", "NVIDIA CUDA", re.compile(r"(?:^|[/:._-])(?:cu\d{2,3}|cuda)")),
)
_VENDOR_NAMES = {"nvidia": "an NVIDIA", "amd": "an AMD", "huawei": "a Huawei Ascend"}  # with their article


def image_accelerator(image: str) -> tuple[str, str] | None:
    """(vendor, what the image is built for) when the image's name clearly says it, else None."""
    name = image.lower()
    for vendor, what, pattern in _FAMILIES:
        if pattern.search(name):
            return vendor, what
    return None


def vendor_name(vendor: str) -> str:
    """The vendor of a GPU profile as a sentence names it: 'an NVIDIA'."""
    return _VENDOR_NAMES.get(vendor, f"a {vendor}")


def visible_devices(value: str) -> int:
    """How many devices a CUDA_VISIBLE_DEVICES value lists (`0,1` -> 2, `` -> 0). CUDA stops at the first
    entry that is no device: `-1` hides every GPU after it."""
    count = 0
    for entry in value.split(","):
        entry = entry.strip()
        if not entry or entry.startswith("-"):
            break
        count += 1
    return count
