"""The plan: which steps, which pools roll which components, with what impact (table); a
hypervisor port change alone plans the workload rebuild (R23); a Git baseline holding literal
secrets is planned, masked, with a note naming where they are."""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from typing import Any

import pytest

from gitopsbot.core.charts.chart import Chart
from gitopsbot.core.charts.observed import DeployedState
from gitopsbot.core.charts.values_diff import diff_values
from gitopsbot.core.fleet.model import ClusterSpec, Component, Location
from gitopsbot.core.planning.plan import StepKind, hypervisor_port_changes, make_plan
from gitopsbot.core.planning.render import render_json, render_markdown
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


def _port(port: int | None) -> dict[str, Any]:
    pool = {} if port is None else {"componentConfig": {"hypervisor": {"portNumber": port}}}
    return desired_values(
        cluster={"hypervisorImage": "tensorfusion/tensor-fusion-hypervisor:2.15.0", "pool": pool}
    )


def test_a_port_change_alone_plans_the_workload_rebuild(builtin_rules: tuple[Rule, ...]) -> None:
    """R23: allowed on its own, but running pods keep the old port: the hypervisor and the
    worker roll where their switches are on (the worker's hash covers the port), and a note
    says, pool by pool, how the workloads get rebuilt; Markdown and JSON carry it."""
    desired = cluster(pools=TWO_POOLS, values=_port(8100))
    deployed = DeployedState("1.8.7", "2.17.0", _port(None), 7)  # unset: the CRD default 8000
    plan = make_plan(
        deployed=deployed,
        desired=desired,
        target_chart=NEW,
        deployed_chart=NEW,
        index=None,
        rules=builtin_rules,
    )
    assert "R23" not in {v.rule_id for v in plan.verdicts}  # no version change: allowed
    assert [s.kind for s in plan.steps] == [B, C, H, R, P, P, P, V]
    a, b = plan.pool_phases
    assert (a.components, a.waiting) == ((HYP, WRK), ())
    assert (b.components, b.waiting) == ((HYP,), (WRK,))
    assert "hypervisor port" in a.reasons[WRK]
    note = plan.notes[0]
    assert note.startswith("R23: the hypervisor port changes")
    assert "`cluster.pool.componentConfig.hypervisor.portNumber` 8000 → 8100" in note
    assert "keep the port they were created with" in note
    assert "pool a: autoUpdateWorker is on, so this plan's worker rollout rebuilds" in note
    assert "pool b: autoUpdateWorker is off" in note and "tensor-fusion.ai/component=worker" in note
    assert f"- {note}" in render_markdown(plan)
    assert json.loads(render_json(plan))["notes"][0] == note


@pytest.mark.parametrize(
    ("before", "after", "chart", "denied"),
    [
        (None, 8000, NEW, False),  # the default written out: no change, no note
        (8100, 8100, NEW, False),
        (8000, 8100, OLD, True),  # with a version change: R23 denies, the note still says why
    ],
)
def test_port_note_only_for_a_real_port_change(
    before: int | None, after: int, chart: Chart, denied: bool, builtin_rules: tuple[Rule, ...]
) -> None:
    plan = make_plan(
        deployed=DeployedState(chart.version, chart.app_version, _port(before), 7),
        desired=cluster(pools=TWO_POOLS, values=_port(after)),
        target_chart=NEW,
        deployed_chart=chart,
        index=None,
        rules=builtin_rules,
    )
    r23 = [v for v in plan.verdicts if v.rule_id == "R23"]
    assert bool(r23) is denied
    assert any(n.startswith("R23:") for n in plan.notes) is denied


def test_a_baseline_with_literal_secrets_is_planned_and_noted(
    builtin_rules: tuple[Rule, ...],
) -> None:
    """A Git baseline that still holds a literal (masked by the loader's caller, with where it
    is written): the change that removes it gets a plan, which says where the baseline holds
    it and to rotate it, in Markdown and JSON, and never shows a value."""
    where = Location("clusters/c1/values.yaml", 31, 16)
    deployed = DeployedState(
        "1.8.7",
        "2.17.0",
        desired_values(agent={"enrollToken": "***"}),
        source="git:origin/main@0123abcd",
        secret_literals={"agent.enrollToken": where},
    )
    desired = cluster(values=desired_values(agent={"enrollToken": ""}))
    plan = make_plan(
        deployed=deployed,
        desired=desired,
        target_chart=NEW,
        deployed_chart=NEW,
        index=None,
        rules=builtin_rules,
    )
    assert "SECRET-LITERAL" not in {v.rule_id for v in plan.verdicts}
    note = plan.notes[0]
    assert note.startswith("the baseline (git:origin/main@0123abcd) holds 1 secret-looking")
    assert "`clusters/c1/values.yaml:31` (`agent.enrollToken`)" in note
    assert "This change removes it" in note and "rotate it" in note
    assert f"- {note}" in render_markdown(plan)
    data = json.loads(render_json(plan))
    assert data["notes"][0] == note
    assert data["baseline_secret_literals"] == [
        {"path": "agent.enrollToken", "location": "clusters/c1/values.yaml:31"}
    ]
    # Without literals in the baseline the JSON has no such key (schema unchanged).
    clean = make_plan(
        deployed=replace(deployed, secret_literals={}),
        desired=desired,
        target_chart=NEW,
        deployed_chart=NEW,
        index=None,
    )
    assert "baseline_secret_literals" not in json.loads(render_json(clean))
    assert not any("secret-looking" in n for n in clean.notes)


@pytest.mark.parametrize(
    ("before", "after", "expected"),
    [
        (
            {},
            {"cluster": {"pool": {"componentConfig": {"hypervisor": {"portNumber": 8100}}}}},
            [("cluster.pool.componentConfig.hypervisor.portNumber", 8000, 8100)],
        ),
        (
            {"cluster": {"pool": {"componentConfig": {"hypervisor": {"portNumber": 8100}}}}},
            {},
            [("cluster.pool.componentConfig.hypervisor.portNumber", 8100, 8000)],
        ),
        (
            {"cluster": {"extraPools": [{"name": "b"}]}},
            {
                "cluster": {
                    "extraPools": [
                        {"name": "b", "componentConfig": {"hypervisor": {"portNumber": 9000}}}
                    ]
                }
            },
            [("cluster.extraPools[0].componentConfig.hypervisor.portNumber", 8000, 9000)],
        ),
        (
            {"cluster": {"pool": {"componentConfig": {"hypervisor": {"image": "h:1"}}}}},
            {"cluster": {"pool": {"componentConfig": {"hypervisor": {"image": "h:2"}}}}},
            [],
        ),
        ({}, {"cluster": {"pool": {"componentConfig": {"hypervisor": {"portNumber": 8000}}}}}, []),
    ],
    ids=["added", "removed", "another pool", "image only", "default written out"],
)
def test_hypervisor_port_changes(
    before: dict[str, Any], after: dict[str, Any], expected: list[tuple[str, int, int]]
) -> None:
    found = hypervisor_port_changes(diff_values(before, after))
    assert [(p.path, p.before, p.after) for p in found] == expected
