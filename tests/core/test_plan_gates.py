"""The plan lists a pool's gates and budgets (issue 18) and folds them into the estimate."""

from __future__ import annotations

import json
import math
from dataclasses import replace

import pytest

from gitopsbot.core.charts.observed import DeployedState
from gitopsbot.core.fleet.model import Component, MaintenanceWindow, PoolPolicy, Share
from gitopsbot.core.planning.plan import Plan, admission_settings, make_plan
from gitopsbot.core.planning.render import render_json, render_markdown
from gitopsbot.core.rollouts.admission import Capacity, budget_percentage
from gitopsbot.core.rollouts.canary_smoke import CanarySmoke
from gitopsbot.core.rollouts.gates import AlertsGate, KubeGate, PromQueryGate
from gitopsbot.core.rollouts.timeline import (
    GATE_JUDGE_SECONDS,
    budget_batch_percentage,
    pool_timeline,
)
from gitopsbot.core.rollouts.workload_wait import WorkloadAwareness, WorkloadWait
from tests.core.plan_builders import (
    cluster,
    default_chart_values,
    desired_values,
    pool,
    small_chart,
)

HYP = Component.HYPERVISOR
OLD = small_chart("1.8.0", "2.13.0", values=default_chart_values("2.13.0"))
NEW = small_chart("1.8.7", "2.17.0")
GATES = (
    PromQueryGate("gpu-errors", "sum(rate(dcgm_xid_errors[5m]))", "<", 1),
    AlertsGate("no-critical", {"severity": "critical"}),
    KubeGate("crashloop", "no-crashloop", selector="app=llm", namespace="ml"),
)


def _plan(*pools: PoolPolicy, smoke: CanarySmoke | None = None) -> Plan:
    deployed = DeployedState("1.8.0", "2.13.0", desired_values())
    return make_plan(
        deployed=deployed,
        desired=cluster(pools=pools),
        target_chart=NEW,
        deployed_chart=OLD,
        index=None,
        canary_smoke=smoke,
    )


# -- the availability budget -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("share", "nodes", "requested"),
    [
        (Share(2), 20, 20),
        (Share(1), 20, 20),
        (Share(10, percent=True), 20, 20),
        (Share(3), 16, 10),
        (Share(5), 16, 50),
        (Share(1), 250, 10),  # one node is 0.4%: no whole percentage fits
        (Share(0), 10, 20),
        (Share(25, percent=True), 3, 50),
    ],
)
def test_budget_arithmetic_matches_admission(share: Share, nodes: int, requested: int) -> None:
    policy = pool("p", max_unavailable=share)
    pct, _ = budget_percentage(policy, Capacity(nodes=nodes), requested)
    assert budget_batch_percentage(share, nodes, requested) == pct
    if pct:
        assert math.ceil(pct * nodes / 100) <= share.of(nodes)


def test_budget_shrinks_batches_and_lengthens_the_estimate() -> None:
    base = pool("gpu", nodes=20, batch_percentage=20, batch_interval_seconds=30)
    bounded = replace(base, max_unavailable=Share(2))
    before = pool_timeline(base, (HYP,))
    after = pool_timeline(bounded, (HYP,))
    ph = after.phases[0]
    assert (ph.batch_percentage, ph.batch_size, ph.batches) == (10, 2, 10)
    assert ph.requested_percentage == 20 and ph.requested_batches == 5
    assert after.estimate_seconds > before.estimate_seconds
    assert after.estimate_seconds == 10 * 90 + 9 * 30
    assert any("budget: 20% → 10%, 10 batches instead of 5" in n for n in after.admission_notes)
    assert before.admission_notes == ()


def test_a_budget_counts_the_batch_interval_the_bot_pins() -> None:
    # issue 28 item 7: with a budget, batchInterval counts at least 10 s (the bot pins it so
    # the controller cannot start a batch the budget was not judged for) and the plan says so
    base = pool("gpu", nodes=2, batch_percentage=100, batch_interval_seconds=1)
    bounded = pool_timeline(replace(base, max_unavailable=Share(1)), (HYP,))
    ph = bounded.phases[0]
    assert (ph.batch_percentage, ph.batches) == (50, 2)
    assert bounded.estimate_seconds == 2 * 90 + 1 * 10
    assert any(
        n.startswith("budget: batchInterval 1s pinned to 10s: the bot closes the switch")
        for n in bounded.admission_notes
    ), bounded.admission_notes
    slow = pool_timeline(replace(base, batch_interval_seconds=30, max_unavailable=Share(1)), (HYP,))
    assert slow.estimate_seconds == 2 * 90 + 30
    assert not any("pinned" in n for n in slow.admission_notes)


def test_budget_not_binding_and_used_up() -> None:
    loose = pool_timeline(
        pool("p", nodes=10, batch_percentage=20, max_unavailable=Share(5)), (HYP,)
    )
    assert loose.phases[0].requested_percentage == 0 and loose.phases[0].batches == 5
    assert "holds the 20% batch of 2" in loose.admission_notes[0]
    none = pool_timeline(pool("p", nodes=10, batch_percentage=20, max_unavailable=Share(0)), (HYP,))
    assert none.phases[0].batches == 5  # the estimate keeps the requested percentage
    assert "no hypervisor batch can open" in none.admission_notes[0]


def test_budget_binds_hypervisor_only_and_the_canary() -> None:
    p = pool(
        "p",
        nodes=20,
        batch_percentage=50,
        canary_batch_percentage=20,
        auto_update_worker=True,
        max_unavailable=Share(2),
    )
    tl = pool_timeline(p, (HYP, Component.WORKER))
    hyp, worker = tl.phases
    assert hyp.batch_percentage == 10 and hyp.canary_batch_size == 2
    assert worker.batch_percentage == 50 and worker.requested_percentage == 0


# -- gates ------------------------------------------------------------------------------------


def test_gates_add_a_judgement_before_every_batch() -> None:
    base = pool("p", nodes=10, batch_percentage=25, batch_interval_seconds=60)
    gated = replace(base, gates=GATES, canary_batch_percentage=10)
    plain = replace(base, canary_batch_percentage=10)
    a, b = pool_timeline(plain, (HYP,)), pool_timeline(gated, (HYP,))
    assert b.phases[0].gate_judgements == 5  # the canary and 4 batches
    assert b.estimate_seconds - a.estimate_seconds == 5 * GATE_JUDGE_SECONDS
    note = next(n for n in b.admission_notes if n.startswith("gates:"))
    assert "5 judgement(s)" in note and "batchInterval" in note and "1m00s" in note


def test_gates_listed_with_kind_and_threshold() -> None:
    settings = dict(admission_settings(pool("p", gates=GATES[:1], gate_retries=2)))
    assert settings["gate"] == (
        "gpu-errors (prometheus): `sum(rate(dcgm_xid_errors[5m]))` < 1; an empty answer is "
        "inconclusive"
    )
    assert "inconclusive judgement 3 times in a row halts" in settings["gateRetries"]
    assert settings["windowFit"].startswith("on")
    lines = [t for k, t in admission_settings(pool("p", gates=GATES)) if k == "gate"]
    assert lines[1] == "no-critical (alerts): no firing alert matching severity=critical"
    assert lines[2].startswith("crashloop (kubernetes no-crashloop)") and "app=llm" in lines[2]


def test_a_pool_without_the_keys_lists_nothing() -> None:
    assert admission_settings(pool("p")) == ()
    assert admission_settings(pool("p", window_fit=False)) == (
        ("windowFit", "off: a batch opens whenever the window is open"),
    )


# -- window-fit -------------------------------------------------------------------------------


def test_window_shorter_than_a_batch_runs_it_anyway() -> None:
    p = pool(
        "p", nodes=4, batch_percentage=50, maintenance_window=MaintenanceWindow("0 2 * * *", 60)
    )
    notes = pool_timeline(p, (HYP,)).admission_notes
    assert any("longer than the whole window (1m00s): it runs anyway" in n for n in notes)


def test_window_that_fits_no_whole_number_of_batches_loses_its_tail() -> None:
    # A batch is 90 s readiness + 30 s wait = 2 min; a 5 min window holds 2, 1 min unused.
    p = pool(
        "p",
        nodes=10,
        batch_percentage=20,
        batch_interval_seconds=30,
        maintenance_window=MaintenanceWindow("0 2 * * *", 300),
    )
    notes = pool_timeline(p, (HYP,)).admission_notes
    assert notes == (
        "window-fit: a 5m00s window holds 2 hypervisor batch(es) of ~2m00s; the last 1m00s "
        "of each window stays unused (no whole batch fits in it), so its 5 batches take 3 "
        "windows",
    )
    off = pool_timeline(replace(p, window_fit=False), (HYP,))
    assert off.admission_notes == (
        "windowFit off: a batch opens whenever the window is open and may run past its end",
    )


# -- the plan and its renderings --------------------------------------------------------------


def test_plan_renders_gates_and_budgets() -> None:
    gated = pool(
        "inference",
        nodes=20,
        batch_percentage=20,
        batch_interval_seconds=30,
        canary_batch_percentage=5,
        auto_update_worker=True,
        phases=(HYP, Component.WORKER),
        max_unavailable=Share(10, percent=True),
        gates=GATES[:2],
        workloads=WorkloadAwareness(
            WorkloadWait("team=ml", "ml", "no-active-session", 1800, "skip-window"), 25
        ),
        maintenance_window=MaintenanceWindow("0 2 * * *", 3600),
    )
    smoke = CanarySmoke(manifest={"kind": "Pod"}, timeout_seconds=300)
    plan = _plan(gated, pool("training", nodes=4, batch_percentage=25), smoke=smoke)
    md = render_markdown(plan)
    assert "(budget: 20% → 10%)" in md
    section = md.split("### Gates and budgets", 1)[1]
    assert "**inference**" in section and "**training**" not in section
    for key in (
        "- gate: gpu-errors (prometheus)",
        "- gateRetries: 3 retries 1m00s apart",
        "- maxUnavailable: 10%",
        "- waitForWorkloads: before each worker/client batch, wait until no-active-session",
        "- maxTenantDisruption: 25%",
        "- canary-smoke.yaml: after the canary batch",
        "- windowFit: on",
        "- estimate: budget: 20% → 10%, 10 batches instead of 5",
        "- estimate: gates:",
        "- estimate: waitForWorkloads: each worker batch may wait up to 30m00s for sessions "
        "to end, then skip-window (not in the estimate)",
        "- estimate: maxTenantDisruption 25%: worker batches may be smaller",
    ):
        assert key in section, key
    data = json.loads(render_json(plan))
    inference, training = data["pools"]
    assert inference["phases"][0]["requested_percentage"] == 20
    assert {a["key"] for a in inference["admission"]} >= {"gate", "maxUnavailable", "windowFit"}
    assert "admission" not in training
    assert "requested_percentage" not in training["phases"][0]
    step = next(s for s in plan.steps if s.pool == "inference" and s.components == (HYP,))
    assert "10 batch(es) of 2 node(s) at 10%" in step.title


def test_plan_without_the_keys_has_no_section() -> None:
    plan = _plan(pool("training", nodes=4, batch_percentage=25))
    assert "Gates and budgets" not in render_markdown(plan)
    assert "admission" not in json.loads(render_json(plan))["pools"][0]


def test_smoke_only_for_the_pools_it_applies_to() -> None:
    smoke = CanarySmoke(manifest={}, pools=("a",))
    assert [k for k, _ in admission_settings(pool("a"), smoke)] == [
        "canary-smoke.yaml",
        "windowFit",
    ]
    assert admission_settings(pool("b"), smoke) == ()
