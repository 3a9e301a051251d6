"""What a person is shown of a pool phase (core.phase_view): the controller's batch arithmetic
(facts §3.2: batch size ceil(pct × total / 100), ceil(100 / pct) steps, progress = finished
batches × pct), units done, ETA planned vs observed, window close and the deadline left on
switch-open time; the display fields the journal records (and omits when unset), and what
rollout.decide_phase / _track record for them."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from gitopsbot.core.fleet.model import Component, MaintenanceWindow, PoolPolicy
from gitopsbot.core.records import journal
from gitopsbot.core.records.journal import (
    Journal,
    OperationKind,
    PhaseProgress,
    PhaseState,
    ProgressMark,
    Step,
    StepKind,
    StepState,
)
from gitopsbot.core.rollouts import phase_view, rollout, timeline, windows
from gitopsbot.core.rollouts.rollout import PhaseAction, PoolObservation

T0 = datetime(2026, 6, 10, 2, 0, tzinfo=UTC)
S = timedelta(seconds=1)
NAME = "pool/a/hypervisor"


def step(component: Component | None = Component.HYPERVISOR, **kw) -> Step:
    base = Step(
        NAME,
        StepKind.POOL_PHASE,
        StepState.RUNNING,
        started_at=T0,
        pool="a",
        component=component,
    )
    return replace(base, **kw)


def phase(
    *,
    pct: int,
    total: int,
    progress: int = 0,
    state: PhaseState = PhaseState.ROLLING,
    marks: tuple[ProgressMark, ...] | None = None,
    **kw,
) -> PhaseProgress:
    return PhaseProgress(
        NAME,
        state,
        started_at=kw.pop("started_at", T0),
        opened_at=kw.pop("opened_at", T0),
        progress=progress,
        last_progress_at=kw.pop("last_progress_at", T0),
        batch_percentage=pct,
        total=total,
        marks=(ProgressMark(progress, T0),) if marks is None else marks,
        **kw,
    )


def mark(progress: int, seconds: int) -> ProgressMark:
    return ProgressMark(progress, T0 + seconds * S)


# -- batch arithmetic (facts §3.2) -------------------------------------------------------------


def test_three_nodes_at_fifty_percent_make_two_batches_of_two() -> None:
    v = phase_view.view(phase(pct=50, total=3), step(), T0 + 5 * S)
    assert (v.batch_size, v.batches) == (2, 2)
    assert (v.batch, v.done, v.total) == (1, 0, 3)
    assert not v.canary
    assert v.unit == "nodes"


def test_progress_fifty_is_batch_two_of_two_with_two_of_three_nodes_done() -> None:
    p = phase(pct=50, total=3, progress=50, marks=(mark(0, 0), mark(50, 30)))
    now = T0 + 40 * S
    v = phase_view.view(p, step(), now)
    assert (v.batch, v.batches, v.done) == (2, 2, 2)
    line = v.summary(now)
    assert "batch 2/2 of 2 nodes" in line
    assert "2/3 nodes done" in line
    assert "progress 50%" in line


def test_done_phase_counts_every_unit_and_has_no_eta() -> None:
    p = phase(pct=50, total=3, progress=100, state=PhaseState.DONE, opened_at=None)
    v = phase_view.view(p, step(), T0 + 600 * S)
    assert (v.batch, v.batches, v.done, v.total) == (2, 2, 3, 3)
    assert v.eta_seconds is None
    assert v.finished
    line = v.summary(T0 + 600 * S)
    assert "3/3 nodes done" in line
    assert "ETA" not in line
    # done counts every unit even where progress // pct batches would leave one out
    odd = phase(pct=30, total=10, progress=100, state=PhaseState.DONE, opened_at=None)
    assert phase_view.view(odd, step(), T0 + 600 * S).done == 10


def test_ten_nodes_at_twenty_percent_progress_forty_is_batch_three_of_five() -> None:
    v = phase_view.view(phase(pct=20, total=10, progress=40), step(), T0)
    assert (v.batch, v.batches, v.batch_size, v.done) == (3, 5, 2, 4)
    assert "batch 3/5 of 2 nodes" in v.summary(T0)
    assert "4/10 nodes done" in v.summary(T0)


@pytest.mark.parametrize(
    ("progress", "batch", "done"),
    [(0, 1, 0), (20, 2, 1), (40, 3, 2), (60, 4, 3), (80, 5, 3), (100, 5, 3)],
)
def test_three_nodes_at_twenty_percent_run_no_op_steps_after_the_last_node(
    progress: int, batch: int, done: int
) -> None:
    # facts §3.2: one node per batch at progress 0, 20, 40, then no-op steps to 60, 80, 100.
    v = phase_view.view(phase(pct=20, total=3, progress=progress), step(), T0)
    assert (v.batch, v.batches, v.batch_size, v.done) == (batch, 5, 1, done)


def test_after_the_canary_progress_between_batches_counts_the_steps_left() -> None:
    # A 10 % canary, then the rest at 25 %: from progress 10 the controller's next steps are
    # 25, 50, 75, 100 (batchIndex = 10 // 25 = 0), so 4 steps are left in batch 1/4.
    p = phase(pct=25, total=8, progress=10, marks=(mark(10, 0),), batch_interval_seconds=1)
    v = phase_view.view(p, step(), T0)
    assert (v.batch, v.batches, v.batch_size) == (1, 4, 2)
    assert v.eta_seconds == 4 * (90 + 3) - 3  # no requeue wait before the first batch


def test_progress_hundred_at_a_percentage_that_does_not_divide_a_hundred() -> None:
    p = phase(pct=30, total=10, progress=100, marks=(mark(0, 0),), batch_interval_seconds=1)
    v = phase_view.view(p, step(), T0 + 5 * S)
    assert (v.batch, v.batches, v.batch_size) == (4, 4, 3)
    assert v.done == 10
    assert v.eta_seconds == 0


def test_progress_ninety_at_thirty_percent_is_nine_of_ten() -> None:
    # The step before: 3 batches of 3 finished, the 4th (1 node) left.
    v = phase_view.view(phase(pct=30, total=10, progress=90), step(), T0)
    assert (v.batch, v.batches, v.done) == (4, 4, 9)


def test_pending_phase_has_no_batch_and_no_eta() -> None:
    p = phase(pct=50, total=3, state=PhaseState.PENDING, started_at=None, opened_at=None)
    v = phase_view.view(p, step(), T0)
    assert v.batch == 0
    assert v.eta_seconds is None
    assert v.elapsed_seconds is None
    assert v.deadline_left_seconds is None


def test_an_old_journal_without_display_fields_shows_no_batches_and_no_counts() -> None:
    p = replace(phase(pct=0, total=0, progress=40), marks=())
    v = phase_view.view(p, step(), T0)
    assert (v.batches, v.batch_size, v.done, v.eta_seconds) == (0, 0, 0, None)
    line = v.summary(T0)
    assert "batch" not in line
    assert "done" not in line
    assert "progress 40%" in line


# -- canary and units ------------------------------------------------------------------------


def test_canary_state_shows_the_canary_batch() -> None:
    # decide_phase pins the canary percentage while the canary runs: 10 % of 10 nodes = 1.
    p = phase(pct=10, total=10, state=PhaseState.CANARY)
    v = phase_view.view(p, step(), T0 + 10 * S)
    assert v.canary
    assert (v.batch, v.batch_size, v.done) == (1, 1, 0)
    line = v.summary(T0 + 10 * S)
    assert "canary batch of 1 node" in line
    assert "batch 1/" not in line
    assert "canary ETA 1m20s (planned)" in line  # readiness, less the 10 s since
    assert v.eta_seconds == 90 - 10  # the canary batch alone: readiness, no wait before it


def test_canary_batch_counts_done_once_progress_moved() -> None:
    p = phase(pct=10, total=30, progress=10, state=PhaseState.CANARY_VERIFY, opened_at=None)
    v = phase_view.view(p, step(), T0 + 100 * S)
    assert v.canary
    assert (v.batch_size, v.done) == (3, 3)
    assert v.eta_seconds is None  # verifying: nothing rolls
    assert "canary batch of 3 nodes" in v.summary(T0 + 100 * S)


@pytest.mark.parametrize(
    ("component", "plural", "singular"),
    [
        (Component.HYPERVISOR, "nodes", "node"),
        (Component.WORKER, "workloads", "workload"),
        (Component.CLIENT, "pods", "pod"),
    ],
)
def test_units_are_named_per_component(component: Component, plural: str, singular: str) -> None:
    v = phase_view.view(phase(pct=50, total=2, progress=50), step(component), T0)
    assert v.unit == plural
    line = v.summary(T0)
    assert f"1/2 {plural} done" in line
    assert f"batch 2/2 of 1 {singular} ·" in line


# -- ETA -------------------------------------------------------------------------------------


def test_step_seconds_is_readiness_plus_the_controller_requeue() -> None:
    p = phase(pct=50, total=3)
    assert phase_view.step_seconds(p, Component.HYPERVISOR) == 90 + 3  # max(1, 3)
    assert phase_view.step_seconds(replace(p, batch_interval_seconds=30), Component.WORKER) == (
        60 + 30
    )
    assert phase_view.step_seconds(replace(p, batch_interval_seconds=2), Component.CLIENT) == (
        60 + 3
    )


def test_planned_eta_is_steps_left_times_step_time_minus_time_since_the_last_mark() -> None:
    p = phase(pct=50, total=3, batch_interval_seconds=1)  # one mark: 0 at T0
    now = T0 + 20 * S
    v = phase_view.view(p, step(), now)
    assert not v.paced
    assert v.eta_seconds == 2 * (90 + 3) - 3 - 20  # no wait before the first batch
    line = v.summary(now)
    assert "ETA 2m43s (planned)" in line


def test_planned_eta_uses_the_pinned_interval_and_component_readiness() -> None:
    p = phase(pct=20, total=10, progress=40, batch_interval_seconds=30)
    now = T0 + 10 * S
    v = phase_view.view(p, step(Component.WORKER), now)
    assert v.eta_seconds == 3 * (60 + 30) - 10


def test_eta_subtracts_at_most_one_step_of_waiting() -> None:
    # A step overdue by far still leaves the other steps: 3 left × 90 s, minus at most 90 s.
    p = phase(pct=20, total=10, progress=40, batch_interval_seconds=30)
    v = phase_view.view(p, step(Component.WORKER), T0 + 500 * S)
    assert v.eta_seconds == 2 * 90


def test_observed_step_seconds_is_the_mean_gap_between_marks() -> None:
    p = phase(pct=20, total=10, progress=40, marks=(mark(0, 0), mark(20, 30), mark(40, 60)))
    assert phase_view.observed_step_seconds(p) == 30.0
    uneven = replace(p, marks=(mark(0, 0), mark(20, 10), mark(40, 60)))
    assert phase_view.observed_step_seconds(uneven) == 30.0


@pytest.mark.parametrize(
    "marks",
    [(), (mark(0, 0),), (mark(40, 0),), (mark(0, 0), mark(0, 30))],
    ids=["none", "start only", "resumed start only", "no rise"],
)
def test_no_observed_pace_before_a_step_finished(marks: tuple[ProgressMark, ...]) -> None:
    assert phase_view.observed_step_seconds(phase(pct=20, total=10, marks=marks)) is None


def test_observed_pace_from_a_resumed_start() -> None:
    # The first mark is the switch opening at 40 %: two steps in 60 s.
    p = phase(pct=20, total=10, progress=80, marks=(mark(40, 0), mark(60, 30), mark(80, 60)))
    assert phase_view.observed_step_seconds(p) == 30.0


def test_observed_pace_counts_a_closed_window_between_marks() -> None:
    # Documented in observed_step_seconds: wall time between marks, a pause inflates it.
    p = phase(pct=20, total=10, progress=40, marks=(mark(0, 0), mark(20, 30), mark(40, 3630)))
    assert phase_view.observed_step_seconds(p) == 1815.0


def test_observed_eta_is_paced_and_not_labelled_planned() -> None:
    p = phase(pct=20, total=10, progress=40, marks=(mark(0, 0), mark(20, 30), mark(40, 60)))
    now = T0 + 70 * S
    v = phase_view.view(p, step(), now)
    assert v.paced
    assert v.eta_seconds == 3 * 30 - 10
    line = v.summary(now)
    assert "ETA 1m20s" in line
    assert "planned" not in line


def test_eta_counts_from_the_reopening_not_from_a_mark_before_the_pause() -> None:
    marks = (mark(0, 0), mark(20, 30), mark(40, 60))
    reopened = T0 + timedelta(days=1)
    p = phase(pct=20, total=10, progress=40, marks=marks, opened_at=reopened, open_seconds=60)
    v = phase_view.view(p, step(), reopened + 10 * S)
    assert v.eta_seconds == 3 * 30 - 10


def test_paused_phase_eta_is_the_full_time_left_on_open_switch() -> None:
    marks = (mark(0, 0), mark(20, 30), mark(40, 60))
    p = phase(
        pct=20,
        total=10,
        progress=40,
        marks=marks,
        state=PhaseState.PAUSED,
        opened_at=None,
        open_seconds=70,
    )
    v = phase_view.view(p, step(), T0 + timedelta(hours=5))
    assert v.eta_seconds == 3 * 30
    assert "ETA 1m30s" in v.summary(T0 + timedelta(hours=5))


def test_finish_at_is_now_plus_the_eta() -> None:
    p = phase(pct=50, total=3, batch_interval_seconds=1)
    now = T0 + 20 * S
    v = phase_view.view(p, step(), now)
    assert phase_view.finish_at(v, now) == now + 163 * S
    done = phase_view.view(replace(p, state=PhaseState.DONE, progress=100), step(), now)
    assert phase_view.finish_at(done, now) is None


def test_planned_eta_at_the_start_equals_the_plans_phase_estimate() -> None:
    policy = PoolPolicy("a", batch_percentage=20, batch_interval_seconds=600)
    plan = timeline.phase_timeline(policy, Component.HYPERVISOR, 10, readiness_seconds=90)
    p = phase(pct=20, total=10, batch_interval_seconds=600)
    v = phase_view.view(p, step(), T0)
    assert v.eta_seconds == plan.estimate_seconds


# -- elapsed, deadline, window ---------------------------------------------------------------


def test_elapsed_runs_to_now_and_stops_at_the_step_end_when_done() -> None:
    p = phase(pct=50, total=3, progress=50)
    assert phase_view.view(p, step(), T0 + 75 * S).elapsed_seconds == 75
    done = replace(p, state=PhaseState.DONE, progress=100, opened_at=None)
    finished = step(state=StepState.SUCCEEDED, finished_at=T0 + 100 * S)
    assert phase_view.view(done, finished, T0 + 1000 * S).elapsed_seconds == 100
    line = phase_view.view(p, step(), T0 + 75 * S).summary(T0 + 75 * S)
    assert "elapsed 1m15s" in line


def test_deadline_left_is_max_duration_minus_switch_open_time() -> None:
    now = T0 + timedelta(days=1)
    p = phase(
        pct=20,
        total=10,
        progress=40,
        max_duration_seconds=7200,
        open_seconds=1000,  # earlier windows
        opened_at=now - 200 * S,  # this one
    )
    v = phase_view.view(p, step(), now)
    assert v.deadline_left_seconds == 7200 - 1200  # the day in between is not counted
    assert "deadline 1h40m00s left" in v.summary(now)


def test_deadline_does_not_run_while_paused() -> None:
    p = phase(
        pct=20,
        total=10,
        progress=40,
        state=PhaseState.PAUSED,
        max_duration_seconds=7200,
        open_seconds=1000,
        opened_at=None,
    )
    early = phase_view.view(p, step(), T0 + timedelta(hours=3))
    late = phase_view.view(p, step(), T0 + timedelta(hours=20))
    assert early.deadline_left_seconds == late.deadline_left_seconds == 6200


def test_deadline_left_never_goes_negative_and_is_unknown_without_a_limit() -> None:
    p = phase(pct=20, total=10, max_duration_seconds=60)
    assert phase_view.view(p, step(), T0 + 600 * S).deadline_left_seconds == 0
    unlimited = phase_view.view(phase(pct=20, total=10), step(), T0 + 600 * S)
    assert unlimited.deadline_left_seconds is None
    assert "deadline" not in unlimited.summary(T0 + 600 * S)


def test_window_close_is_shown_while_in_the_future() -> None:
    p = phase(pct=20, total=10, window_closes_at=T0 + timedelta(hours=1))
    now = T0 + 10 * 60 * S
    v = phase_view.view(p, step(), now)
    assert v.window_closes_at == T0 + timedelta(hours=1)
    assert "window closes 03:00 UTC (in 50m00s)" in v.summary(now)


def test_window_close_is_not_shown_once_past() -> None:
    p = phase(pct=20, total=10, window_closes_at=T0 + timedelta(hours=1))
    now = T0 + timedelta(hours=1, seconds=1)
    assert "window" not in phase_view.view(p, step(), now).summary(now)


def test_window_close_is_not_shown_when_finished() -> None:
    p = phase(
        pct=20,
        total=10,
        progress=100,
        state=PhaseState.DONE,
        window_closes_at=T0 + timedelta(hours=1),
    )
    now = T0 + 60 * S
    assert "window" not in phase_view.view(p, step(), now).summary(now)
    halted = replace(p, state=PhaseState.HALTED, progress=40)
    assert "window" not in phase_view.view(halted, step(), now).summary(now)


def test_window_close_is_dropped_while_the_switch_is_closed() -> None:
    # A paused phase's recorded close is the last window's: not the one that will open next.
    p = phase(
        pct=20,
        total=10,
        state=PhaseState.PAUSED,
        opened_at=None,
        window_closes_at=T0 + timedelta(hours=1),
    )
    v = phase_view.view(p, step(), T0 + 60 * S)
    assert v.window_closes_at is None
    assert "window" not in v.summary(T0 + 60 * S)


# -- journal: the display fields round-trip and are omitted when unset ------------------------

OLD_PHASE_KEYS = {
    "step",
    "state",
    "started_at",
    "opened_at",
    "open_seconds",
    "progress",
    "last_progress_at",
    "halt_reason",
    "canary_done",
}


def _journal(*phases: PhaseProgress) -> Journal:
    return Journal(
        op_id="op-1",
        kind=OperationKind.UPGRADE,
        cluster="c",
        desired_sha="a" * 40,
        created_at=T0,
        steps=(step(),),
        phases=phases,
    )


FULL = PhaseProgress(
    NAME,
    PhaseState.ROLLING,
    started_at=T0,
    opened_at=T0 + 5 * S,
    open_seconds=12,
    progress=40,
    last_progress_at=T0 + 60 * S,
    batch_percentage=20,
    batch_interval_seconds=30,
    total=10,
    window_closes_at=T0 + timedelta(hours=1),
    max_duration_seconds=7200,
    marks=(mark(0, 0), mark(20, 30), mark(40, 60)),
)


def test_journal_round_trips_every_display_field() -> None:
    j = _journal(FULL)
    data = journal.to_dict(j)
    row = data["phases"][0]
    assert row["batch_percentage"] == 20
    assert row["batch_interval_seconds"] == 30
    assert row["total"] == 10
    assert row["window_closes_at"] == "2026-06-10T03:00:00+00:00"
    assert row["max_duration_seconds"] == 7200
    assert row["marks"] == [
        {"progress": 0, "at": "2026-06-10T02:00:00+00:00"},
        {"progress": 20, "at": "2026-06-10T02:00:30+00:00"},
        {"progress": 40, "at": "2026-06-10T02:01:00+00:00"},
    ]
    back = journal.from_dict(data)
    assert back == j
    assert back.phases[0].marks == FULL.marks
    assert journal.loads(journal.dumps(j)) == j


def test_a_zero_max_duration_is_written_and_read_back() -> None:
    j = _journal(replace(FULL, max_duration_seconds=0))
    row = journal.to_dict(j)["phases"][0]
    assert row["max_duration_seconds"] == 0
    assert journal.from_dict(journal.to_dict(j)).phases[0].max_duration_seconds == 0


def test_unset_display_fields_are_not_written() -> None:
    old = PhaseProgress(NAME, PhaseState.ROLLING, started_at=T0, opened_at=T0, progress=20)
    j = _journal(old)
    assert set(journal.to_dict(j)["phases"][0]) == OLD_PHASE_KEYS
    text = journal.dumps(j)
    for key in ("batch_percentage", "batch_interval_seconds", "total", "window_closes_at"):
        assert key not in text
    assert "max_duration_seconds" not in text and "marks" not in text
    assert journal.loads(text) == j


def test_an_old_journal_reads_with_empty_display_fields() -> None:
    data = journal.to_dict(_journal(FULL))
    row = data["phases"][0]
    for key in set(row) - OLD_PHASE_KEYS:
        del row[key]
    back = journal.from_dict(data).phases[0]
    assert back.batch_percentage == back.batch_interval_seconds == back.total == 0
    assert back.window_closes_at is None
    assert back.max_duration_seconds is None
    assert back.marks == ()
    assert back.progress == 40  # the old fields are still read


# -- rollout: what decide_phase and _track record ----------------------------------------------

WINDOW = windows.Window.of(MaintenanceWindow("0 2 * * *", 3600), UTC)  # 02:00-03:00 UTC
POOL = PoolPolicy(
    "a",
    batch_percentage=25,
    batch_interval_seconds=30,
    max_duration_seconds=7200,
    maintenance_window=MaintenanceWindow("0 2 * * *", 3600),
)


def _decide(observed: PoolObservation, p: PhaseProgress, now: datetime, policy=POOL):
    return rollout.decide_phase(
        policy=policy,
        component=Component.HYPERVISOR,
        observed=observed,
        phase=p,
        now=now,
        window=WINDOW,
    )


def test_opening_the_switch_records_what_the_view_needs() -> None:
    now = T0 + 60 * S
    d = _decide(PoolObservation(0, False, False, nodes=4), PhaseProgress(NAME), now)
    assert d.action is PhaseAction.OPEN_SWITCH
    p = d.phase
    assert p.batch_percentage == 25
    assert p.batch_interval_seconds == 30
    assert p.total == 4
    assert p.window_closes_at == T0 + timedelta(hours=1)
    assert p.max_duration_seconds == 7200
    assert p.marks == (ProgressMark(0, now),)
    v = phase_view.view(p, step(), now)
    assert (v.batch, v.batches, v.batch_size) == (1, 4, 1)


def test_opening_records_the_units_the_batches_count() -> None:
    observed = PoolObservation(0, False, False, nodes=4, units=7)  # e.g. 7 client pods
    d = _decide(observed, PhaseProgress(NAME), T0 + 60 * S)
    assert d.phase.total == 7


def test_opening_for_the_canary_pins_the_canary_percentage() -> None:
    policy = replace(POOL, canary_batch_percentage=10)
    d = _decide(PoolObservation(0, False, False, nodes=4), PhaseProgress(NAME), T0 + S, policy)
    assert d.phase.state is PhaseState.CANARY
    assert d.phase.batch_percentage == 10


def test_reopening_after_a_pause_adds_no_mark_for_the_same_progress() -> None:
    marks = (mark(0, 0), mark(25, 300))
    paused = replace(
        phase(pct=25, total=4, progress=25, marks=marks),
        state=PhaseState.PAUSED,
        opened_at=None,
        open_seconds=3600,
    )
    tomorrow = T0 + timedelta(days=1, seconds=60)
    d = _decide(PoolObservation(25, False, False, nodes=4), paused, tomorrow)
    assert d.action is PhaseAction.OPEN_SWITCH
    assert d.phase.marks == marks
    assert d.phase.window_closes_at == T0 + timedelta(days=1, hours=1)


def test_track_marks_each_progress_change_once_with_the_total() -> None:
    p = phase(pct=25, total=4)
    moved = rollout._track(p, PoolObservation(25, False, True, nodes=4, units=5), T0 + 30 * S)
    assert moved.marks == (ProgressMark(0, T0), ProgressMark(25, T0 + 30 * S))
    assert moved.total == 5
    assert moved.progress == 25
    # seen again (even with another unit count): nothing is recorded
    again = rollout._track(moved, PoolObservation(25, False, True, nodes=4, units=6), T0 + 40 * S)
    assert again == moved


def test_a_rolling_wait_records_a_progress_step() -> None:
    p = phase(pct=25, total=4)
    d = _decide(PoolObservation(25, False, True, nodes=4), p, T0 + 90 * S)
    assert d.action is PhaseAction.WAIT
    assert d.phase.marks[-1] == ProgressMark(25, T0 + 90 * S)
    assert len(d.phase.marks) == 2


def test_marks_are_bounded_and_keep_the_first() -> None:
    p = phase(pct=1, total=100)
    first = p.marks[0]
    for i in range(1, 3 * rollout.MAX_MARKS):
        p = rollout._track(p, PoolObservation(i % 100 + 1, False, True, nodes=100), T0 + i * S)
        assert len(p.marks) <= rollout.MAX_MARKS
        assert p.marks[0] == first
    assert len(p.marks) == rollout.MAX_MARKS
    last = 3 * rollout.MAX_MARKS - 1
    assert p.marks[-1] == ProgressMark(last % 100 + 1, T0 + last * S)
    # the most recent ones are the ones kept, in order
    times = [m.at for m in p.marks[1:]]
    assert times == sorted(times)
    assert times[0] == T0 + (last - rollout.MAX_MARKS + 2) * S
