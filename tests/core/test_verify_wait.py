"""Every wait says why (issue 28 item 4): maxDuration bounds the canary verify (its clock runs
while the pool verifies, stops for a window or a hold), the verify's wait is recorded once
per reason with since / until / the limit that ends it and shown under the phase, and a pod
Pending since before the operation is named as pre-existing and not counted."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

from gitopsbot.core.fleet.model import Component, MaintenanceWindow, PoolPolicy
from gitopsbot.core.records.batch_record import from_data, to_data
from gitopsbot.core.records.journal import PhaseProgress, PhaseState, Step, StepKind, StepState
from gitopsbot.core.rollouts import (
    phase_clock,
    phase_view,
    rollout,
    tf_objects,
    verify_wait,
    windows,
)
from gitopsbot.core.rollouts.rollout import HaltReason, PhaseAction, PoolObservation

T0 = datetime(2026, 6, 10, 2, 0, tzinfo=UTC)
M = timedelta(minutes=1)
WINDOW = windows.Window.of(MaintenanceWindow("0 2 * * *", 3600), UTC)
POOL = PoolPolicy(
    "a",
    batch_percentage=25,
    canary_batch_percentage=25,
    max_duration_seconds=300,
    stall_timeout_seconds=600,
)
TIMEOUT = 600


def obs(progress: int = 0, *, open_: bool = False) -> PoolObservation:
    return PoolObservation(progress, False, open_, nodes=4)


def decide(phase: PhaseProgress, observed: PoolObservation, now: datetime, **kw):
    return rollout.decide_phase(
        policy=kw.get("policy", POOL),
        component=Component.HYPERVISOR,
        observed=observed,
        phase=phase,
        now=now,
        window=kw.get("window", WINDOW),
        held=kw.get("held", ""),
    )


def verifying() -> PhaseProgress:
    """The canary batch ran 2 minutes (02:01-02:03) and the switch closed for its verify."""
    opened = decide(PhaseProgress("pool/a/hypervisor"), obs(), T0 + M).phase
    assert opened.state is PhaseState.CANARY
    closed = decide(opened, obs(25, open_=True), T0 + 3 * M)
    assert (closed.action, closed.phase.state) == (
        PhaseAction.CLOSE_SWITCH,
        PhaseState.CANARY_VERIFY,
    )
    return closed.phase


def test_the_deadline_counts_while_the_canary_verifies() -> None:
    phase = verifying()
    d = decide(phase, obs(25), T0 + 5 * M)
    assert d.action is PhaseAction.VERIFY_CANARY
    assert phase_clock.active_seconds(d.phase, T0 + 5 * M) == 240  # 2 min open + 2 min verifying
    assert d.until == T0 + 5 * M + rollout.POLL
    # The bot comes back when the deadline ends the verify, not a whole poll later.
    near = decide(d.phase, obs(25), T0 + 6 * M - timedelta(seconds=5))
    assert near.until == T0 + 6 * M
    halted = decide(d.phase, obs(25), T0 + 6 * M)
    assert (halted.action, halted.halt) == (PhaseAction.HALT, HaltReason.MAX_DURATION)
    assert "maxDuration 300s exceeded" in halted.reason


def test_the_maxduration_halt_names_what_the_verify_waited_for() -> None:
    phase = verifying()
    d = decide(phase, obs(25), T0 + 4 * M)
    waited = verify_wait.judge(
        policy=POOL,
        decision=d,
        problems=["client pod apps/x is Pending"],
        now=T0 + 4 * M,
        window=WINDOW,
        timeout_seconds=TIMEOUT,
    )
    halted = decide(waited.phase, obs(25), T0 + 6 * M)
    assert halted.action is PhaseAction.HALT
    assert halted.reason == (
        "pool a: maxDuration 300s exceeded at 25% while waiting for "
        "canary verify: client pod apps/x is Pending"
    )


def test_a_closed_window_and_a_hold_stop_the_verify_clock() -> None:
    pool = replace(POOL, max_duration_seconds=7200)
    phase = decide(verifying(), obs(25), T0 + 4 * M, policy=pool).phase  # 3 min counted
    paused = decide(phase, obs(25), T0 + 60 * M, policy=pool).phase  # the window closed at 03:00
    assert paused.opened_at is None and paused.open_seconds == 120 + 57 * 60
    later = decide(paused, obs(25), T0 + 5 * 60 * M, policy=pool).phase
    assert phase_clock.active_seconds(later, T0 + 5 * 60 * M) == 120 + 57 * 60
    held = decide(phase, obs(25), T0 + 5 * M, held="alice: look first").phase
    assert held.opened_at is None and held.open_seconds == 240
    assert held.state is PhaseState.CANARY_VERIFY
    # Let go: the clock runs again from then, not from before the hold.
    resumed = decide(held, obs(25), T0 + 30 * M).phase
    assert phase_clock.active_seconds(resumed, T0 + 31 * M) == 300


def test_the_wait_is_recorded_once_with_since_until_and_limit() -> None:
    d = decide(verifying(), obs(25), T0 + 4 * M)
    problems = ["hypervisor pod hv-1 is Pending"]
    first = verify_wait.judge(
        policy=POOL,
        decision=d,
        problems=problems,
        now=T0 + 4 * M,
        window=WINDOW,
        timeout_seconds=TIMEOUT,
    )
    assert first.action is PhaseAction.WAIT
    assert first.until == T0 + 4 * M + rollout.POLL  # looks again while it waits
    b = first.phase.batches
    assert b.waiting == "canary verify: hypervisor pod hv-1 is Pending"
    assert b.waiting_since == T0 + 3 * M  # the verify began when the batch finished
    # maxDuration (300 s, 3 min spent at 02:04) comes before the 600 s timeout and the window.
    assert (b.waiting_until, b.waiting_limit) == (T0 + 6 * M, "maxDuration (300s)")
    # The same reason a look later records nothing new: no journal write per pass.
    again = decide(first.phase, obs(25), T0 + 5 * M)
    second = verify_wait.judge(
        policy=POOL,
        decision=again,
        problems=problems,
        now=T0 + 5 * M,
        window=WINDOW,
        timeout_seconds=TIMEOUT,
    )
    assert second.phase == again.phase
    assert from_data(to_data(b)) == b  # kept in the journal


def test_without_a_deadline_the_timeout_or_the_window_ends_the_wait() -> None:
    pool = replace(POOL, max_duration_seconds=None)
    d = decide(verifying(), obs(25), T0 + 4 * M, policy=pool)
    wait = verify_wait.judge(
        policy=pool,
        decision=d,
        problems=["p"],
        now=T0 + 4 * M,
        window=WINDOW,
        timeout_seconds=TIMEOUT,
    ).phase.batches
    assert (wait.waiting_until, wait.waiting_limit) == (
        T0 + 13 * M,
        "the canary verify timeout (600s)",
    )
    late = verify_wait.judge(
        policy=pool,
        decision=d,
        problems=["p"],
        now=T0 + 4 * M,
        window=WINDOW,
        timeout_seconds=3600,
    ).phase.batches
    assert (late.waiting_until, late.waiting_limit) == (
        T0 + 60 * M,
        "the maintenance window's close (the verify pauses)",
    )


def test_past_the_timeout_the_verify_halts_naming_it() -> None:
    d = decide(verifying(), obs(25), T0 + 4 * M, policy=replace(POOL, max_duration_seconds=None))
    halted = verify_wait.judge(
        policy=POOL,
        decision=d,
        problems=["hypervisor pod hv-1 is CrashLoopBackOff"],
        now=T0 + 13 * M,
        window=WINDOW,
        timeout_seconds=TIMEOUT,
    )
    assert halted.action is PhaseAction.HALT
    assert halted.reason == (
        "canary: verify timeout (600s) passed with: hypervisor pod hv-1 is CrashLoopBackOff"
    )
    assert halted.phase.state is PhaseState.HALTED and halted.phase.opened_at is None


def pod(name: str, phase: str, created: datetime) -> dict:
    return {
        "metadata": {
            "name": name,
            "namespace": "apps",
            "creationTimestamp": created.strftime("%Y-%m-%dT%H:%M:%SZ"),
        },
        "status": {"phase": phase},
    }


def test_a_pod_pending_since_before_the_operation_is_pre_existing() -> None:
    began = T0
    pods = [
        pod("old", "Pending", T0 - 60 * M),
        pod("new", "Pending", T0 + M),
        pod("broken", "Failed", T0 - 60 * M),  # may have failed during the operation
    ]
    found = tf_objects.check_pods(Component.CLIENT, "a", pods, None, mode="running", predates=began)
    counted, known = tf_objects.split_pre_existing(found)
    assert known == [
        "client pod apps/old Pending since 2026-06-10 01:00:00Z "
        "(it was Pending before the operation began)"
    ]
    assert counted == ["client pod apps/new is Pending", "client pod apps/broken is Failed"]
    # Without the operation's start nothing is pre-existing.
    plain = tf_objects.check_pods(Component.CLIENT, "a", pods, None, mode="running")
    assert plain[0] == "client pod apps/old is Pending"


def test_a_pre_existing_pending_pod_does_not_hold_the_canary() -> None:
    d = decide(verifying(), obs(25), T0 + 4 * M)
    old = tf_objects.check_pods(
        Component.CLIENT,
        "a",
        [pod("old", "Pending", T0 - 60 * M)],
        None,
        mode="running",
        predates=T0,
    )
    passed = verify_wait.judge(
        policy=POOL,
        decision=d,
        problems=old,
        now=T0 + 4 * M,
        window=WINDOW,
        timeout_seconds=TIMEOUT,
    )
    assert passed.action is PhaseAction.VERIFY_CANARY  # on to the GPU canary
    assert "pre-existing, not counted: client pod apps/old Pending since" in passed.reason
    # Beside a problem of the canary's own it is named, and the wait is the canary's.
    both = verify_wait.judge(
        policy=POOL,
        decision=d,
        problems=[*old, "hypervisor pod hv-1 is Pending"],
        now=T0 + 4 * M,
        window=WINDOW,
        timeout_seconds=TIMEOUT,
    )
    assert both.action is PhaseAction.WAIT
    assert both.reason.startswith("canary verify: hypervisor pod hv-1 is Pending (pre-existing")


def test_status_shows_the_wait_with_its_bounds() -> None:
    d = decide(verifying(), obs(25), T0 + 4 * M)
    waited = verify_wait.judge(
        policy=POOL,
        decision=d,
        problems=["client pod apps/x is Pending"],
        now=T0 + 4 * M,
        window=WINDOW,
        timeout_seconds=TIMEOUT,
    ).phase
    assert phase_view.batch_notes(waited) == (
        "waits: canary verify: client pod apps/x is Pending (since 2026-06-10 02:03:00Z, "
        "until 2026-06-10 02:06:00Z at the latest, ended by maxDuration (300s))",
    )
    step = Step(
        "pool/a/hypervisor",
        StepKind.POOL_PHASE,
        StepState.RUNNING,
        started_at=T0,
        pool="a",
        component=Component.HYPERVISOR,
    )
    shown = phase_view.view(waited, step, T0 + 5 * M)
    assert shown.deadline_left_seconds == 60  # counting down while it verifies
