"""The SGLang release each NVIDIA Dynamo release pins in its sglang-runtime image and `ai-dynamo[sglang]` extra.

Public facts only, each row with the file (and line) where Dynamo states it. A release not listed here maps to
nothing: kvcheck never guesses a pin from a neighbouring release.

- v0.6.0 on: the release table of ai-dynamo/dynamo's docs/fern/pages/reference/general/releases-machine-readable.mdx
  at commit 38d611646af8 (2026-08-21, generated from docs/fern/components/releases.data.ts, "the single source of
  truth" of the release pages), the line given per row. It agrees with docs/reference/support-matrix.md at
  00552b23362935 ("Backend Dependencies") for every release both list. The image tags (`0.8.1`, `0.8.1-cuda13`,
  `1.3.0-efa`, `1.1.0-dev.1-cuda13`) are listed in docs/reference/release-artifacts.md at 56cd43eaff20, lines
  330-359 (stable) and 835-936 (platform previews), each with its release's SGLang version.
- v0.3.x to v0.5.1: the files at the release tag (release/0.5.1's head for v0.5.1, whose tag the mirror read
  lacks; every commit on that branch since v0.5.0 pins the same version).

The files were read in public mirrors of the repository (vickiegpt/dynamo: tags v0.1.0 to v0.5.0 and the
release/* branches; wxsms/dynamo: main to 2026-08-21); the commits named are ai-dynamo/dynamo's own.
- v0.1.x and v0.2.x ship no SGLang container (no container/Dockerfile.sglang at those tags): not listed.
- Model early-access builds (`1.2.0-deepseek-v4-dev.2`, `1.3.0-glm-5.2-dev.1`, ...) carry SGLang previews or
  cherry-picks that are no release: not listed.
"""

from __future__ import annotations

from dataclasses import dataclass

_TABLE = "ai-dynamo/dynamo@38d611646af8 docs/fern/pages/reference/general/releases-machine-readable.mdx:"


@dataclass(frozen=True)
class DynamoRelease:
    """One Dynamo release and the SGLang its sglang-runtime image runs."""

    dynamo: str  # as the image tag spells it: 0.8.1, 0.7.0.post1, 1.1.0-dev.1
    sglang: str | None  # None: the image builds SGLang from something that is no release (`built_from` says what)
    source: str  # where Dynamo states it: repository@commit-or-tag path:line
    built_from: str | None = None


RELEASES: tuple[DynamoRelease, ...] = (
    DynamoRelease("1.4.0", "0.5.16", _TABLE + "19"),
    DynamoRelease("1.3.1", "0.5.14", _TABLE + "20"),
    DynamoRelease("1.3.0", "0.5.14", _TABLE + "21"),
    DynamoRelease("1.3.0-dev.1", "0.5.12.post1", _TABLE + "22"),
    DynamoRelease("1.2.1", "0.5.11", _TABLE + "23"),
    DynamoRelease("1.2.0", "0.5.11", _TABLE + "24"),
    DynamoRelease("1.1.1", "0.5.10.post1", _TABLE + "27"),
    DynamoRelease("1.1.0", "0.5.10.post1", _TABLE + "28"),
    DynamoRelease("1.1.0-dev.3", "0.5.10.post1", _TABLE + "29"),
    DynamoRelease("1.1.0-dev.2", "0.5.9", _TABLE + "30"),
    DynamoRelease("1.1.0-dev.1", "0.5.9", _TABLE + "31"),
    DynamoRelease("1.0.2", "0.5.9", _TABLE + "32"),
    DynamoRelease("1.0.1", "0.5.9", _TABLE + "33"),
    DynamoRelease("1.0.0", "0.5.9", _TABLE + "34"),
    DynamoRelease("0.9.1", "0.5.8", _TABLE + "35"),
    DynamoRelease("0.9.0", "0.5.8", _TABLE + "36"),
    DynamoRelease("0.8.1.post3", "0.5.6.post2", _TABLE + "37"),
    DynamoRelease("0.8.1.post2", "0.5.6.post2", _TABLE + "38"),
    DynamoRelease("0.8.1.post1", "0.5.6.post2", _TABLE + "39"),
    DynamoRelease("0.8.1", "0.5.6.post2", _TABLE + "40"),
    DynamoRelease("0.8.0", "0.5.6.post2", _TABLE + "41"),
    DynamoRelease("0.7.1", "0.5.4.post3", _TABLE + "42"),
    # v0.7.0's own support matrix said "0.5.3.post4" (the title of PR #4227), but that PR set
    # pyproject.toml to sglang[all]==0.5.4.post3 (commit d9b674b86, line 64), which the later table states
    DynamoRelease("0.7.0.post1", "0.5.4.post3", _TABLE + "43"),
    DynamoRelease("0.7.0", "0.5.4.post3", _TABLE + "44"),
    DynamoRelease("0.6.1.post1", "0.5.3.post2", _TABLE + "45"),
    DynamoRelease("0.6.1", "0.5.3.post2", _TABLE + "46"),
    DynamoRelease("0.6.0", "0.5.3.post2", _TABLE + "47"),
    DynamoRelease("0.5.1", "0.5.0rc2", "ai-dynamo/dynamo@release/0.5.1 (d691fe3d5) pyproject.toml:63"),
    DynamoRelease("0.5.0", "0.5.0rc2", "ai-dynamo/dynamo@v0.5.0 pyproject.toml:64, docs/support_matrix.md:73"),
    DynamoRelease("0.4.1", "0.5.0rc2", "ai-dynamo/dynamo@v0.4.1 pyproject.toml:65, container/Dockerfile.sglang:30"),
    DynamoRelease("0.4.0.post0", "0.4.9.post6",
                  "ai-dynamo/dynamo@v0.4.0.post0 pyproject.toml:77, container/Dockerfile.sglang:30"),
    DynamoRelease("0.4.0", "0.4.9.post6", "ai-dynamo/dynamo@v0.4.0 pyproject.toml:77, container/Dockerfile.sglang:30"),
    DynamoRelease("0.3.2", "0.4.9.post1", "ai-dynamo/dynamo@v0.3.2 container/Dockerfile.sglang:29"),
    DynamoRelease("0.3.1", None, "ai-dynamo/dynamo@v0.3.1 container/Dockerfile.sglang:137-141",
                  built_from="a side branch of a fork of SGLang (ishandhanani/sglang)"),
    DynamoRelease("0.3.0", None, "ai-dynamo/dynamo@v0.3.0 container/Dockerfile.sglang:141",
                  built_from="SGLang commit 6376b632eb4d"),
)

# Build variants of one release carry its pins: release-artifacts.md lists `1.2.1-cuda13`, `1.3.0-efa`,
# `1.1.0-dev.1-cuda13`, `1.3.0-dev.1-cuda12` (and vllm-runtime's `-efa-amd64`) with their release's versions.
VARIANTS: tuple[str, ...] = ("-cuda12", "-cuda13", "-efa-amd64", "-efa")

BY_TAG: dict[str, DynamoRelease] = {row.dynamo: row for row in RELEASES}


def dynamo_release(tag: str) -> DynamoRelease | None:
    """The Dynamo release an sglang-runtime tag is (0.8.1-cuda13 -> 0.8.1), else None: no other tag is read."""
    if tag in BY_TAG:
        return BY_TAG[tag]
    for suffix in VARIANTS:
        if tag.endswith(suffix) and tag[: -len(suffix)] in BY_TAG:
            return BY_TAG[tag[: -len(suffix)]]
    return None
