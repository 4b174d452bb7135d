"""Rules with stable codes and the evaluation that applies them to measured or predicted pools."""

from __future__ import annotations

from collections.abc import Iterable

from kvcheck.policy import registry


def _catalogue() -> Iterable[registry.Rule]:
    # Imported on the first lookup only: the catalogue imports every rule-defining module (engines
    # included), and each of them imports the registry, which therefore cannot import the catalogue.
    from kvcheck.policy.catalogue import catalogue

    return catalogue()


registry.use_catalogue(_catalogue)
