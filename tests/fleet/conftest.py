"""Fixtures for the fleet-repository tests: the example fleet as files, an in-memory FileTree."""

from __future__ import annotations

from collections.abc import Callable, Mapping

import pytest

from tests.fleet import fleet_testing
from tests.fleet.fleet_testing import MemoryTree


@pytest.fixture(scope="session")
def example_files() -> dict[str, str]:
    """Every file of examples/fleet, by path relative to it."""
    return fleet_testing.example_files()


@pytest.fixture
def tree_with(example_files: dict[str, str]) -> Callable[..., MemoryTree]:
    """The example fleet in memory, with some files replaced (str) or removed (None)."""

    def build(changes: Mapping[str, str | None]) -> MemoryTree:
        return fleet_testing.example_tree(changes, example_files)

    return build
