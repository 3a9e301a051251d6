"""The plan: which steps, which pools roll which components, with what impact (table)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest

from gitopsbot.core.chart import Chart
from gitopsbot.core.model import ClusterSpec, Component
from gitopsbot.core.observed import DeployedState
from gitopsbot.core.plan import StepKind, make_plan
from gitopsbot.core.policy import Decision, Rule
from tests.core.plan_builders import (
    cluster,
    default_chart_values,
    desired_values,
    pool,
    small_chart,
)

OLD = small_chart("1.8.0", "2.13.0", values=default_chart_values("2.13.0"))
NEW = small_chart("1.8.7", "2.17.0")
B, C, H, R, X, P, V = (
    StepKind.BACKUP,
    StepKind.CRDS,
    StepKind.HELM_UPGRADE,
    StepKind.CONTROLLER_READY,
    StepKind.CONTROLLER_RESTART,
    StepKind.POOL_ROLLOUT,
    StepKind.VERIFY,
)
HYP, WRK, CLI = Component.HYPERVISOR, Component.WORKER, Component.CLIENT
TWO_POOLS = (
    pool("a", nodes=4, auto_update_worker=True, phases=(HYP, WRK)),
    pool("b", nodes=8, phases=(HYP,)),
)
WORKER_V2 = {"providerConfigs": {"nvidia": {"images": {"remoteWorker": "w:v2"}}}}
WORKER_V1 = {"providerConfigs": {"nvidia": {"images": {"remoteWorker": "w:v1"}}}}


@dataclass
class Row:
    name: str
    desired: ClusterSpec
    deployed_values: dict[str, Any] | None
    deployed_chart: Chart | None
    steps: list[StepKind]
    rolls: dict[str, tuple[Component, ...]] = field(default_factory=dict)
    waits: dict[str, tuple[Component, ...]] = field(default_factory=dict)


ROWS = [
    Row("no change", cluster(), desired_values(), NEW, []),
    Row(
        "chart upgrade, same values: controller image moves, hypervisor may roll (F4)",
        cluster(pools=TWO_POOLS),
        desired_values(),
        OLD,
        [B, C, H, R, P, P, P, V],
        # the chart's default worker/client images move too (F2: they lag, but they move)
        rolls={"a": (HYP, WRK), "b": (HYP,)},
        waits={"a": (CLI,), "b": (WRK, CLI)},
    ),
    Row(
        "config-only change: controller restart (R24), nothing rolls",
        cluster(pools=TWO_POOLS, values=desired_values(dynamicConfig={"metricsTTL": "1d"})),
        desired_values(),
        NEW,
        [B, C, H, R, X, V],
    ),
    Row(
        "worker image: rolls where the switch is on, waits elsewhere (R12)",
        cluster(pools=TWO_POOLS, values=desired_values(**WORKER_V2)),
        desired_values(**WORKER_V1),
        NEW,
        # the worker image sits in the ProviderConfig, so the hypervisor rolls too (R10)
        [B, C, H, R, P, P, P, V],
        rolls={"a": (HYP, WRK), "b": (HYP,)},
        waits={"b": (WRK,)},
    ),
    Row(
        "hypervisor image and client config",
        cluster(
            pools=(pool("a", nodes=3, auto_update_client=True, phases=(HYP, CLI)),),
            values=desired_values(
                cluster={"hypervisorImage": "h:2", "pool": {"componentConfig": {"client": {}}}}
            ),
        ),
        desired_values(cluster={"hypervisorImage": "h:1"}),
        NEW,
        [B, C, H, R, P, P, V],
        rolls={"a": (HYP, CLI)},
    ),
    Row(
        "first install: no backup, nothing rolls",
        cluster(pools=TWO_POOLS),
        None,
        None,
        [C, H, R, V],
        rolls={"a": (), "b": ()},
    ),
]


@pytest.mark.parametrize("row", ROWS, ids=[r.name for r in ROWS])
def test_plan_table(row: Row, builtin_rules: tuple[Rule, ...]) -> None:
    deployed = (
        DeployedState(
            row.deployed_chart.version, row.deployed_chart.app_version, row.deployed_values, 7
        )
        if row.deployed_chart is not None and row.deployed_values is not None
        else None
    )
    plan = make_plan(
        deployed=deployed,
        desired=row.desired,
        target_chart=NEW,
        deployed_chart=row.deployed_chart,
        index=None,
        rules=builtin_rules,
    )
    assert [s.kind for s in plan.steps] == row.steps
    assert all(s.rule and s.impact for s in plan.steps)
    for p in plan.pool_phases:
        if p.pool in row.rolls:
            assert p.components == row.rolls[p.pool], p
        assert p.waiting == row.waits.get(p.pool, ())
    rollouts = [(s.pool, s.components) for s in plan.steps if s.kind == P]
    assert rollouts == [(p.pool, (c,)) for p in plan.pool_phases for c in p.components]
    if row.waits:
        assert any("R12" in n for n in plan.notes)


def test_impact_texts_follow_r3() -> None:
    desired = cluster(pools=TWO_POOLS, values=desired_values(**WORKER_V2))
    deployed = DeployedState("1.8.7", "2.17.0", desired_values(**WORKER_V1))
    plan = make_plan(
        deployed=deployed, desired=desired, target_chart=NEW, deployed_chart=NEW, index=None
    )
    by_kind = {s.kind: s for s in plan.steps}
    assert "enabled" in by_kind[H].impact  # webhook-labelled pods blocked without a controller
    worker = next(s for s in plan.steps if s.components == (WRK,))
    assert "lose their GPU session" in worker.impact
    hyp = next(s for s in plan.steps if s.components == (HYP,))
    assert "do not restart" in hyp.impact
    assert by_kind[B].rule == "R6" and by_kind[C].rule == "R7" and by_kind[V].rule == "R15"
    assert plan.baseline == "helm revision 0"


def test_observed_node_counts_override_policy() -> None:
    desired = cluster(pools=(pool("a", nodes=4, batch_percentage=25),))
    deployed = DeployedState("1.8.0", "2.13.0", desired_values(), pool_nodes={"a": 40})
    plan = make_plan(
        deployed=deployed, desired=desired, target_chart=NEW, deployed_chart=OLD, index=None
    )
    tl = plan.pool_phases[0].timeline
    assert tl.nodes == 40 and tl.phases[0].batch_size == 10 and tl.phases[0].batches == 4


def test_plan_masks_secrets_and_allows_clean_change(builtin_rules: tuple[Rule, ...]) -> None:
    canary = "canary-M1x9Q"
    desired = cluster(values=desired_values(extra={"apiToken": canary}))
    deployed = DeployedState("1.8.7", "2.17.0", desired_values(extra={"apiToken": "x"}))
    plan = make_plan(
        deployed=deployed,
        desired=desired,
        target_chart=NEW,
        deployed_chart=NEW,
        index=None,
        rules=builtin_rules,
    )
    assert canary not in repr(plan.values_diff)
    assert plan.decision == Decision.DENIED  # and SECRET-LITERAL refuses it
    assert all(canary not in v.message for v in plan.verdicts)
