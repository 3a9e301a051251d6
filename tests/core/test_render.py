"""Golden Markdown and JSON for fixed plans. Regenerate: GITOPSBOT_UPDATE_GOLDEN=1 pytest ..."""

from __future__ import annotations

import json
import os
from dataclasses import replace
from pathlib import Path

import pytest

from gitopsbot.core.charts.observed import DeployedState
from gitopsbot.core.fleet.model import Component, MaintenanceWindow
from gitopsbot.core.planning.plan import Plan, make_plan
from gitopsbot.core.planning.render import JSON_SCHEMA_VERSION, render_json, render_markdown
from gitopsbot.core.policy import Rule
from tests.core.plan_builders import (
    ROOT,
    cluster,
    crd_text,
    default_chart_values,
    desired_values,
    pool,
    small_chart,
)

GOLDEN = Path(__file__).parent / "golden"
UPDATE = os.environ.get("GITOPSBOT_UPDATE_GOLDEN") == "1"
CANARY = "canary-GOLDEN-7c1"


def check_golden(name: str, text: str) -> None:
    path = GOLDEN / name
    if UPDATE:
        path.write_text(text)
    assert path.exists(), f"{path} missing: run with GITOPSBOT_UPDATE_GOLDEN=1"
    assert text == path.read_text(), f"{name} differs; regenerate with GITOPSBOT_UPDATE_GOLDEN=1"


def fixed_plan(rules: tuple[Rule, ...]) -> Plan:
    old = small_chart(
        "1.8.0",
        "2.13.0",
        values=default_chart_values("2.13.0"),
        crds={
            "gpus.yaml": crd_text(versions=(("v1", True, True), ("v1beta1", True, False))),
            "old.yaml": crd_text("olds.tensor-fusion.ai"),
        },
    )
    new = small_chart("1.8.7", "2.17.0", crds={"gpus.yaml": crd_text(fields=("phase", "x"))})
    pools = (
        pool(
            "inference",
            nodes=16,
            batch_percentage=10,
            batch_interval_seconds=120,
            auto_update_worker=True,
            auto_update_client=True,
            canary_batch_percentage=5,
            phases=(Component.HYPERVISOR, Component.WORKER),
            maintenance_window=MaintenanceWindow("0 1 * * 2,4", 1800, "Europe/Berlin"),
        ),
        pool("training", nodes=0, batch_percentage=100),
    )
    desired = cluster(
        values=desired_values(
            controller={"replicaCount": 1},
            dynamicConfig={"metricsTTL": "7d"},
            greptime={"password": CANARY},
        ),
        pools=pools,
        acks={"R13": "inference apps are Deployments"},
    )
    desired = replace(desired, name="gpu-eu1")
    deployed = DeployedState(
        "1.8.0",
        "2.13.0",
        desired_values(alert={"enabled": False}, greptime={"password": "old-" + CANARY}),
        revision=12,
    )
    return make_plan(
        deployed=deployed,
        desired=desired,
        target_chart=new,
        deployed_chart=old,
        index=None,
        rules=rules,
    )


def test_golden_markdown(builtin_rules: tuple[Rule, ...]) -> None:
    plan = fixed_plan(builtin_rules)
    md = render_markdown(plan)
    assert CANARY not in md
    assert render_markdown(fixed_plan(builtin_rules)) == md  # deterministic
    check_golden("plan.md", md)


def test_golden_json(builtin_rules: tuple[Rule, ...]) -> None:
    text = render_json(fixed_plan(builtin_rules))
    assert CANARY not in text
    data = json.loads(text)
    assert data["schema_version"] == JSON_SCHEMA_VERSION
    assert {"decision", "steps", "verdicts", "images", "crds", "values", "pools"} <= set(data)
    check_golden("plan.json", text)


def test_markdown_sections(builtin_rules: tuple[Rule, ...]) -> None:
    md = render_markdown(fixed_plan(builtin_rules))
    assert "⛔ denied" in md.splitlines()[1]
    assert "**BREAKING**" in md
    for heading in (
        "### Policy",
        "### Steps",
        "### Images",
        "### CRDs",
        "### Values",
        "### Rollout timeline",
    ):
        assert heading in md


def test_golden_examples_fleet(builtin_rules: tuple[Rule, ...]) -> None:
    """examples/fleet staging, upgrading from the example chart 1.8.0 to 1.8.7."""
    from gitopsbot.adapters.chartrepo import LocalChartSource
    from gitopsbot.adapters.localfiles import DirectoryTree
    from gitopsbot.fleetrepo import load_cluster

    charts = ROOT / "examples" / "charts" / "repo"
    fleet = ROOT / "examples" / "fleet"
    if not (charts / "index.yaml").exists() or not (fleet / "clusters" / "staging").is_dir():
        pytest.skip("examples/fleet or examples/charts/repo not there yet")
    staging = load_cluster(DirectoryTree(fleet), "staging")
    source = LocalChartSource([charts])
    rel = staging.release
    target = source.chart(rel.chart_repo_url, rel.chart_name, rel.version)
    old = source.chart(rel.chart_repo_url, rel.chart_name, "1.8.0")
    deployed = DeployedState("1.8.0", old.app_version, staging.values, revision=3)
    plan = make_plan(
        deployed=deployed,
        desired=staging,
        target_chart=target,
        deployed_chart=old,
        index=source.index(rel.chart_repo_url),
        rules=builtin_rules,
    )
    check_golden("examples-staging.md", render_markdown(plan))
