"""core/admission (issue 18): the availability budget's shrink arithmetic, the expected batch
duration (median of measured batches, else the plan's estimate), window-fit (a batch that
does not fit waits for the next window; one longer than the whole window runs anyway) and
maxDuration halting only on measured batches."""

from __future__ import annotations

import math
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from gitopsbot.core.fleet.model import Component, MaintenanceWindow, PoolPolicy, Share
from gitopsbot.core.records.batch_record import BatchRecord
from gitopsbot.core.records.journal import PhaseProgress
from gitopsbot.core.rollouts import admission, windows
from gitopsbot.core.rollouts.admission import (
    Capacity,
    admit,
    budget_percentage,
    expected_batch_seconds,
)
from gitopsbot.core.rollouts.timeline import DEFAULT_READINESS_SECONDS, MIN_STEP_SECONDS

T0 = datetime(2026, 6, 10, 2, 0, tzinfo=UTC)  # the window opens at 02:00 UTC for 1 hour
WINDOW = windows.Window.of(MaintenanceWindow("0 2 * * *", 3600), UTC)
POOL = PoolPolicy("a", batch_percentage=40, batch_interval_seconds=1)
NEW = PhaseProgress("pool/a/hypervisor")
FIVE = Capacity(nodes=5)


def measured(*seconds: int) -> PhaseProgress:
    return replace(NEW, batches=BatchRecord(seconds=tuple(seconds)))


def run(
    *,
    policy: PoolPolicy = POOL,
    component: Component = Component.HYPERVISOR,
    phase: PhaseProgress = NEW,
    capacity: Capacity = FIVE,
    requested: int = 40,
    now: datetime = T0,
    window: windows.Window | None = WINDOW,
    active: float = 0.0,
) -> admission.Admission:
    return admit(
        policy=policy,
        component=component,
        phase=phase,
        capacity=capacity,
        requested=requested,
        now=now,
        window=window,
        active_seconds=active,
    )


# -- availability budget --


def test_no_budget_leaves_the_batch_alone() -> None:
    assert budget_percentage(POOL, Capacity(nodes=5, out_of_service=("n1",)), 40) == (40, "")


def test_a_cordoned_node_shrinks_the_batch_to_what_is_left() -> None:
    policy = replace(POOL, max_unavailable=Share(2))
    pct, why = budget_percentage(policy, Capacity(nodes=5, out_of_service=("gpu-3",)), 40)
    assert pct == 20 and math.ceil(pct * 5 / 100) == 1
    assert (
        why == "batch 40% shrunk to 20% (1 node(s)): maxUnavailable 2 of 5 (gpu-3 out of service)"
    )


def test_a_batch_within_the_budget_is_not_shrunk() -> None:
    policy = replace(POOL, max_unavailable=Share(2))
    assert budget_percentage(policy, Capacity(nodes=5, out_of_service=("gpu-3",)), 20) == (20, "")
    assert budget_percentage(policy, Capacity(nodes=5), 40) == (40, "")


def test_a_used_up_budget_names_the_nodes() -> None:
    policy = replace(POOL, max_unavailable=Share(2))
    pct, why = budget_percentage(policy, Capacity(nodes=5, out_of_service=("gpu-1", "gpu-2")), 40)
    assert pct == 0
    assert "used up by 2 out of service (gpu-1, gpu-2)" in why


def test_more_than_five_down_are_counted_not_listed() -> None:
    policy = replace(POOL, max_unavailable=Share(2))
    down = tuple(f"n{i}" for i in range(7))
    _, why = budget_percentage(policy, Capacity(nodes=20, out_of_service=down), 40)
    assert "(n0, n1, n2, n3, n4 and 2 more)" in why


def test_a_percentage_budget_rounds_down_but_allows_one() -> None:
    assert Share(25, percent=True).of(8) == 2
    assert Share(25, percent=True).of(3) == 1
    policy = replace(POOL, max_unavailable=Share(25, percent=True))
    assert budget_percentage(policy, Capacity(nodes=8), 50)[0] == 25


def test_a_pool_too_large_for_one_percent_waits() -> None:
    # 1% of 200 nodes is 2 nodes; the budget allows 1: no batch can be that small.
    policy = replace(POOL, max_unavailable=Share(1))
    pct, why = budget_percentage(policy, Capacity(nodes=200), 10)
    assert pct == 0 and "smallest batch of 200 nodes is 2" in why


@pytest.mark.parametrize("nodes", [1, 2, 3, 5, 7, 10, 13, 33, 64, 99, 100, 150])
def test_shrunk_batches_fit_and_are_the_largest_that_do(nodes: int) -> None:
    for allowed in range(1, min(nodes, 12) + 1):
        policy = replace(POOL, max_unavailable=Share(allowed))
        for requested in (1, 5, 20, 25, 34, 50, 100):
            pct, _ = budget_percentage(policy, Capacity(nodes=nodes), requested)
            if pct == 0:
                assert math.ceil(nodes / 100) > allowed
                continue
            assert 1 <= pct <= requested
            assert math.ceil(pct * nodes / 100) <= allowed
            assert pct == requested or math.ceil((pct + 1) * nodes / 100) > allowed


def test_admit_waits_briefly_while_the_budget_is_used_up() -> None:
    policy = replace(POOL, max_unavailable=Share(1))
    adm = run(policy=policy, capacity=Capacity(nodes=5, out_of_service=("gpu-2",)))
    assert not adm.admitted and not adm.halt
    assert adm.until == T0 + admission.BUDGET_LOOK and "gpu-2" in adm.reason


def test_the_budget_binds_hypervisor_batches_only() -> None:
    policy = replace(POOL, max_unavailable=Share(1))
    adm = run(
        policy=policy,
        component=Component.WORKER,
        capacity=Capacity(nodes=5, out_of_service=("gpu-2",)),
    )
    assert adm.admitted and adm.batch_percentage == 40


def test_admit_passes_the_shrunk_percentage_on() -> None:
    policy = replace(POOL, max_unavailable=Share(2))
    adm = run(policy=policy, capacity=Capacity(nodes=5, out_of_service=("gpu-3",)))
    assert adm.admitted and adm.batch_percentage == 20 and "shrunk to 20%" in adm.reason


# -- expected batch duration --


def test_before_any_batch_the_plan_estimate_is_used() -> None:
    expected, was_measured = expected_batch_seconds(POOL, Component.HYPERVISOR, NEW)
    assert not was_measured
    assert expected == DEFAULT_READINESS_SECONDS[Component.HYPERVISOR] + MIN_STEP_SECONDS
    slow = replace(POOL, batch_interval_seconds=30)
    assert expected_batch_seconds(slow, Component.WORKER, NEW) == (
        DEFAULT_READINESS_SECONDS[Component.WORKER] + 30,
        False,
    )


def test_the_median_of_the_latest_measured_batches() -> None:
    assert expected_batch_seconds(POOL, Component.HYPERVISOR, measured(10, 30, 20)) == (20, True)
    assert expected_batch_seconds(POOL, Component.HYPERVISOR, measured(10, 40)) == (25, True)
    # only the latest RECENT_BATCHES count: the early 1000s batch has aged out
    recent = measured(1000, 5, 5, 6, 7, 8)
    assert expected_batch_seconds(POOL, Component.HYPERVISOR, recent) == (6, True)


# -- window fit --


def test_a_batch_that_fits_opens() -> None:
    adm = run(phase=measured(600), now=T0 + timedelta(minutes=30))
    assert adm.admitted and adm.batch_percentage == 40 and adm.reason == ""


def test_a_batch_that_does_not_fit_waits_for_the_next_window() -> None:
    adm = run(phase=measured(900), now=T0 + timedelta(minutes=50))
    assert not adm.admitted and not adm.halt
    assert adm.until == T0 + timedelta(days=1)
    assert adm.reason == (
        "next batch (~15m00s, measured) does not fit in the 10m00s left of the maintenance window"
    )


def test_the_planned_estimate_also_keeps_a_batch_from_starting_late() -> None:
    adm = run(now=T0 + timedelta(minutes=59))
    assert not adm.admitted and "planned" in adm.reason and "1m00s left" in adm.reason


def test_a_batch_longer_than_the_whole_window_runs_anyway() -> None:
    adm = run(phase=measured(7200), now=T0 + timedelta(minutes=1))
    assert adm.admitted
    assert "longer than the whole window (1h00m00s): it runs anyway" in adm.reason


def test_window_fit_off_opens_regardless() -> None:
    adm = run(
        policy=replace(POOL, window_fit=False), phase=measured(900), now=T0 + timedelta(minutes=50)
    )
    assert adm.admitted


def test_no_window_means_nothing_to_fit() -> None:
    assert run(phase=measured(90000), window=None).admitted


# -- maxDuration --


def test_the_deadline_halts_only_on_measured_batches() -> None:
    policy = replace(POOL, max_duration_seconds=3600, batch_interval_seconds=1200)
    # planned ~1290s, 600s left: a rough estimate does not halt
    assert run(policy=policy, window=None, active=3000).admitted
    adm = run(policy=policy, window=None, phase=measured(900), active=3000)
    assert adm.halt and not adm.admitted
    assert "would not finish within maxDuration (10m00s left)" in adm.reason
    # measured and fitting: admitted
    assert run(policy=policy, window=None, phase=measured(500), active=3000).admitted


def test_the_deadline_is_not_checked_with_window_fit_off() -> None:
    policy = replace(POOL, max_duration_seconds=3600, window_fit=False)
    assert run(policy=policy, window=None, phase=measured(900), active=3000).admitted
