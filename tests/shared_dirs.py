"""Directories every pytest-xdist worker of one run shares (the run's base temporary
directory, parent of each worker's own): where a world too expensive to make once per worker
(the container image) is made once, under a lock, and read by all. The controller removes
them when the run ends (tests/conftest.py, ``pytest_sessionfinish``)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

SHARED = "shared-by-workers"


def shared_dir(factory: pytest.TempPathFactory, name: str) -> Path:
    """``<run's base temp>/shared-by-workers/<name>``, made if missing (the same path in
    every worker of the run; without workers, under this process's base temp)."""
    base = factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        base = base.parent  # popen-gwN's parent: the run's
    path = base / SHARED / name
    path.mkdir(parents=True, exist_ok=True)
    return path
