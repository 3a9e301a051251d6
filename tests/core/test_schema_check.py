"""values.schema.json validation with the real 1.8.7 schema: located, secret-free messages."""

from __future__ import annotations

import pytest

from gitopsbot.core.charts.chart import Chart
from gitopsbot.core.charts.schema_check import check_values
from gitopsbot.core.fleet.model import Location
from tests.core.plan_builders import small_chart

pytestmark = pytest.mark.shared


def test_chart_defaults_pass(real_charts: dict[str, Chart]) -> None:
    chart = real_charts["1.8.7"]
    assert check_values(chart.values, chart) == ()


def test_errors_name_path_file_and_line(real_charts: dict[str, Chart]) -> None:
    chart = real_charts["1.8.7"]
    values = dict(chart.values)
    values["controller"] = {**chart.values["controller"], "replicaCount": 0}
    values["greptime"] = {**chart.values["greptime"], "port": "4002"}
    locations = {"controller.replicaCount": Location("clusters/c/values.yaml", 7, 17)}
    problems = check_values(values, chart, file="clusters/c/values.yaml", locate=locations.get)
    by_field = {p.field: p for p in problems}
    rc = by_field["controller.replicaCount"]
    assert (rc.file, rc.line, rc.column) == ("clusters/c/values.yaml", 7, 17)
    assert "minimum is 1" in rc.message and "1.8.7" in rc.message
    assert "integer" in by_field["greptime.port"].message
    assert str(rc).startswith("clusters/c/values.yaml:7:17: controller.replicaCount:")


def test_secret_value_never_echoed(real_charts: dict[str, Chart]) -> None:
    chart = real_charts["1.8.7"]
    canary = 12345678987
    values = {**chart.values, "agent": {**chart.values["agent"], "enrollToken": canary}}
    problems = check_values(values, chart)
    assert problems and all(str(canary) not in str(p) for p in problems)


def test_no_schema_no_problems() -> None:
    assert check_values({"anything": 1}, small_chart()) == ()
