"""Container image references as engines read their release from them: the name, tag and digest of
`registry/org/repo:tag@sha256:...`, and whether a name is a given repository on any registry."""

from __future__ import annotations


def split_image(image: str) -> tuple[str, str | None, str | None]:
    """An image reference's name, tag and digest (nvcr.io/a/b:1.0@sha256:.. -> nvcr.io/a/b, 1.0, sha256:..)."""
    name, _, digest = image.strip().partition("@")
    slash = name.rfind("/")
    colon = name.rfind(":")
    if colon > slash:
        return name[:colon], name[colon + 1 :], digest or None
    return name, None, digest or None


def is_repository(name: str, repository: str) -> bool:
    """`name` is `repository` itself or on a registry (docker.io/vllm/vllm-openai is vllm/vllm-openai)."""
    return name == repository or name.endswith("/" + repository)
