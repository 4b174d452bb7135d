"""Fixtures for probe tests: deployment doubles that are stopped when the test ends, whatever happens."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from .deployment import Deployment


@pytest.fixture
def deploy() -> Iterator[Callable[..., Deployment]]:
    started: list[Deployment] = []

    def start(behaviour: str = "fixed", **kwargs) -> Deployment:
        deployment = Deployment(behaviour, **kwargs).__enter__()
        started.append(deployment)
        return deployment

    yield start
    for deployment in started:
        deployment.__exit__(None, None, None)
