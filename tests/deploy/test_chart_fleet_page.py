"""The chart's two options of issue #32 (deploy/chart, docs/deploy.md): ``fleetPage.enabled``
adds ``--fleet-page`` to ``gitopsbot run`` (off by default), and ``grafanaDashboard.enabled``
ships deploy/grafana's dashboard as a ConfigMap labelled for Grafana's sidecar, the very
JSON of deploy/grafana (the chart's copy is checked equal)."""

from __future__ import annotations

import json

import pytest

from tests.deploy.chart_support import CHART, Helm, with_values

pytestmark = pytest.mark.slow  # real helm in a subprocess

DASHBOARD = CHART.parents[1] / "deploy" / "grafana" / "gitopsbot-dashboard.json"


def test_the_chart_copy_is_deploy_grafanas() -> None:
    copy = CHART / "files" / "grafana" / "gitopsbot-dashboard.json"
    assert copy.read_text() == DASHBOARD.read_text(), "cp deploy/grafana/*.json the chart's files"


def test_the_fleet_page_is_off_by_default_and_an_argument_when_on(helm4: Helm) -> None:
    assert "--fleet-page" not in helm4.render(with_values()).container()["args"]
    on = helm4.render(with_values(fleetPage={"enabled": True})).container()["args"]
    assert on[on.index("--metrics-listen") : on.index("--metrics-listen") + 3] == [
        "--metrics-listen", "0.0.0.0:9090", "--fleet-page",
    ]  # fmt: skip


def test_the_dashboard_config_map(helm4: Helm) -> None:
    assert helm4.render(with_values()).of_kind("ConfigMap") == []
    out = helm4.render(with_values(grafanaDashboard={"enabled": True}))
    cm = out.one("ConfigMap", "bot-gitopsbot-dashboard")
    assert cm["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert json.loads(cm["data"]["gitopsbot-dashboard.json"]) == json.loads(DASHBOARD.read_text())
    refused = helm4.template(with_values(grafanaDashboard={"enabled": True, "label": {}}))
    assert refused.returncode != 0 and "label" in refused.stderr
