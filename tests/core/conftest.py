"""Fixtures for the plan/policy core tests: the real charts (../shared) and built-in rules."""

from __future__ import annotations

from pathlib import Path

import pytest

from gitopsbot.core.charts.chart import Chart, parse_chart_files
from gitopsbot.core.policy import Rule, load_rules
from tests.core.plan_builders import BUILTIN, chart_files


@pytest.fixture(scope="session")
def real_charts(tensor_fusion: Path) -> dict[str, Chart]:
    """The real charts 1.7.5, 1.8.0 and 1.8.7, parsed once."""
    return {
        v: parse_chart_files(chart_files(tensor_fusion / f"chart-{v}"), digest=f"real-{v}")
        for v in ("1.7.5", "1.8.0", "1.8.7")
    }


@pytest.fixture(scope="session")
def builtin_rules() -> tuple[Rule, ...]:
    # Labelled as the installed rules are (adapters.builtin_policies), so they carry their docs.
    return load_rules([("<builtin>/builtin.yaml", BUILTIN.read_text())])
