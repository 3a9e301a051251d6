"""The dashboard checker itself (tests/metrics/promql_names.py): it finds the metric and
label names of the expressions the dashboard uses, and it fails a name or a label the
exposition does not have (a dashboard that would silently show nothing)."""

from __future__ import annotations

from tests.metrics.promql_names import Exposition, names

TEXT = """\
# HELP gitopsbot_operations_total Operations ended.
# TYPE gitopsbot_operations_total counter
gitopsbot_operations_total{cluster="a",kind="upgrade",result="succeeded"} 1.0
# HELP gitopsbot_forge_rate_limit_remaining Requests left.
# TYPE gitopsbot_forge_rate_limit_remaining gauge
# HELP gitopsbot_step_duration_seconds Steps.
# TYPE gitopsbot_step_duration_seconds histogram
gitopsbot_step_duration_seconds_bucket{le="1.0",step_kind="helm-upgrade"} 1.0
gitopsbot_step_duration_seconds_count{step_kind="helm-upgrade"} 1.0
gitopsbot_step_duration_seconds_sum{step_kind="helm-upgrade"} 0.5
"""


def test_names_of_an_expression() -> None:
    expr = (
        "histogram_quantile(0.9, sum by (le, step_kind) (rate("
        'gitopsbot_step_duration_seconds_bucket{cluster=~"$cluster"}[5m]))) / on (x) time()'
    )
    assert names(expr) == (
        {"gitopsbot_step_duration_seconds_bucket"},
        {"le", "step_kind", "cluster", "x"},
    )
    assert names("count(a_b > 0) or vector(0)") == ({"a_b"}, set())


def test_the_checker_fails_what_is_not_exported() -> None:
    e = Exposition(TEXT)
    good = 'sum by (result) (increase(gitopsbot_operations_total{cluster=~"$c"}[1h]))'
    assert e.problems(good, "{{result}} {{instance}}") == ([], set())
    assert e.problems("gitopsbot_operation_total")[0] == ["gitopsbot_operation_total: not exported"]
    assert e.problems("sum by (pool) (gitopsbot_operations_total)")[0] == [
        "label pool: on no sample of gitopsbot_operations_total"
    ]
    assert e.problems("gitopsbot_operations_total", "{{state}}")[0] == [
        "label state: on no sample of gitopsbot_operations_total"
    ]
    # Declared, no sample in this exposition: said apart, for the caller to judge.
    assert e.problems("min by (forge) (gitopsbot_forge_rate_limit_remaining)") == (
        [],
        {"gitopsbot_forge_rate_limit_remaining"},
    )
