"""Fixtures of the chart tests: each pinned helm (3 and 4) with a private HOME."""

from __future__ import annotations

from pathlib import Path

import pytest

from gitopsbot import settings
from gitopsbot.adapters import binaries
from tests.deploy.chart_support import HELMS, Helm


@pytest.fixture(params=HELMS)
def helm(request: pytest.FixtureRequest, tmp_path: Path) -> Helm:
    """helm 3 and helm 4 in turn (tests using it run once with each)."""
    tool: binaries.Tool = request.param
    return Helm(binaries.ensure(tool, settings.cache_dir()), tmp_path / tool)


@pytest.fixture
def helm4(tmp_path: Path) -> Helm:
    """helm 4 alone: for checks of what the chart renders (the same with either helm)."""
    return Helm(binaries.ensure("helm4", settings.cache_dir()), tmp_path / "helm4")
