"""Fixtures for the fleet-repository tests: the example fleet as files, an in-memory FileTree."""

from __future__ import annotations

from collections.abc import Callable, Mapping

import pytest

from tests.fleet.fleet_testing import EXAMPLE, MemoryTree


@pytest.fixture(scope="session")
def example_files() -> dict[str, str]:
    """Every file of examples/fleet, by path relative to it."""
    return {
        p.relative_to(EXAMPLE).as_posix(): p.read_text()
        for p in sorted(EXAMPLE.rglob("*"))
        if p.is_file()
    }


@pytest.fixture
def tree_with(example_files: dict[str, str]) -> Callable[..., MemoryTree]:
    """The example fleet in memory, with some files replaced (str) or removed (None)."""

    def build(changes: Mapping[str, str | None]) -> MemoryTree:
        files: dict[str, str] = dict(example_files)
        for path, text in changes.items():
            if text is None:
                files.pop(path, None)
            else:
                files[path] = text
        return MemoryTree(files)

    return build
