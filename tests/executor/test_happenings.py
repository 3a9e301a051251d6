"""What a recorded transition means (core.happenings) and who is told (bot.announcer)."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

from gitopsbot.bot.announcer import Announcer
from gitopsbot.core.fleet.model import Component
from gitopsbot.core.notices.happenings import Happening, HappeningKind, changes
from gitopsbot.core.records import journal as J

T0 = datetime(2026, 12, 3, 12, 0, tzinfo=UTC)
K = HappeningKind


def _journal(status: J.OperationStatus = J.OperationStatus.RUNNING) -> J.Journal:
    return J.Journal(
        op_id="op-1",
        kind=J.OperationKind.UPGRADE,
        cluster="staging",
        desired_sha="a" * 40,
        created_at=T0,
        status=status,
        pr_number=7,
        steps=(
            J.Step("backup", J.StepKind.BACKUP),
            J.Step("helm-upgrade", J.StepKind.HELM_UPGRADE),
            J.Step(
                "pool-a-hypervisor",
                J.StepKind.POOL_PHASE,
                pool="a",
                component=Component.HYPERVISOR,
            ),
        ),
    )


def _set(j: J.Journal, name: str, state: J.StepState, minutes: int, detail: str = "") -> J.Journal:
    step = j.step(name)
    at = T0 + timedelta(minutes=minutes)
    started = step.started_at or at
    finished = at if state.finished else None
    return j.with_step(
        replace(step, state=state, started_at=started, finished_at=finished, detail=detail)
    )


def _kinds(hs: tuple[Happening, ...]) -> list[tuple[HappeningKind, str]]:
    return [(h.kind, h.step) for h in hs]


def test_a_whole_operation_told_transition_by_transition() -> None:
    queued = _journal(J.OperationStatus.QUEUED)
    assert _kinds(changes(None, queued)) == [(K.QUEUED, "")]
    running = replace(queued, status=J.OperationStatus.RUNNING)
    assert _kinds(changes(queued, running)) == [(K.STARTED, "")]
    b1 = _set(running, "backup", J.StepState.RUNNING, 1)
    assert _kinds(changes(running, b1)) == [(K.STEP_STARTED, "backup")]
    b2 = _set(b1, "backup", J.StepState.SUCCEEDED, 2, "saved 40 objects")
    told = changes(b1, b2)
    assert _kinds(told) == [(K.STEP_SUCCEEDED, "backup")]
    assert told[0].detail == "saved 40 objects" and told[0].at == T0 + timedelta(minutes=2)
    # Nothing changed: nothing told.
    assert changes(b2, b2) == ()
    # helm-upgrade started and finished between two recordings: both, in order.
    h = _set(
        _set(b2, "helm-upgrade", J.StepState.RUNNING, 3), "helm-upgrade", J.StepState.SUCCEEDED, 4
    )
    assert _kinds(changes(b2, h)) == [
        (K.STEP_STARTED, "helm-upgrade"),
        (K.STEP_SUCCEEDED, "helm-upgrade"),
    ]
    p = _set(h, "pool-a-hypervisor", J.StepState.RUNNING, 5)
    rolling = p.with_phase(J.PhaseProgress("pool-a-hypervisor", J.PhaseState.ROLLING, progress=40))
    told = changes(p, rolling)
    assert _kinds(told) == [(K.POOL_PROGRESS, "pool-a-hypervisor")]
    assert (told[0].pool, told[0].component, told[0].progress) == ("a", "hypervisor", 40)
    assert "pool a hypervisor at 40 %" in told[0].summary()
    halted = rolling.with_phase(
        J.PhaseProgress(
            "pool-a-hypervisor", J.PhaseState.HALTED, progress=40, halt_reason="deadline"
        )
    )
    failed = replace(
        _set(halted, "pool-a-hypervisor", J.StepState.FAILED, 9, "halted"),
        status=J.OperationStatus.FAILED,
        failure="pool a halted: deadline",
    )
    told = changes(rolling, failed)
    assert _kinds(told) == [
        (K.STEP_FAILED, "pool-a-hypervisor"),
        (K.POOL_HALTED, "pool-a-hypervisor"),
        (K.FAILED, ""),
    ]
    assert told[-1].detail == "pool a halted: deadline"
    assert all(h.warning and h.notable for h in told)
    assert told[-1].at == T0 + timedelta(minutes=9)


def test_progress_is_not_notable_but_success_is() -> None:
    j = _journal()
    rolling = j.with_phase(J.PhaseProgress("pool-a-hypervisor", J.PhaseState.ROLLING, progress=10))
    (progress,) = changes(j, rolling)
    assert not progress.notable and not progress.warning and progress.reason == "PoolProgress"
    done = replace(j, status=J.OperationStatus.SUCCEEDED)
    (success,) = changes(j, done)
    assert success.kind is K.SUCCEEDED and success.notable and not success.warning


def test_a_rollback_starting_is_notable_and_a_warning() -> None:
    rb = replace(_journal(), kind=J.OperationKind.ROLLBACK)
    (started,) = changes(None, rb)
    assert started.notable and started.warning and "rolling back" in started.summary()
    (plain,) = changes(None, _journal())
    assert not plain.notable and not plain.warning


def test_blocked_and_another_operation_start_afresh() -> None:
    blocked = replace(_journal(J.OperationStatus.BLOCKED), failure="blocked: R3 refuses 0.4 → 0.9")
    (b,) = changes(None, blocked)
    assert b.kind is K.BLOCKED and b.warning and b.notable and "R3" in b.summary()
    other = replace(_journal(), op_id="op-2")
    assert _kinds(changes(blocked, other)) == [(K.STARTED, "")]


def test_first_seen_finished_says_it_started_and_ended() -> None:
    done = replace(
        _set(_journal(), "backup", J.StepState.SUCCEEDED, 1), status=J.OperationStatus.SUCCEEDED
    )
    assert _kinds(changes(None, done)) == [
        (K.STARTED, ""),
        (K.STEP_STARTED, "backup"),
        (K.STEP_SUCCEEDED, "backup"),
        (K.SUCCEEDED, ""),
    ]


class _Recorder:
    def __init__(self) -> None:
        self.told: list[Happening] = []

    def happened(self, happening: Happening) -> None:
        self.told.append(happening)


class _Broken:
    def happened(self, happening: Happening) -> None:
        raise RuntimeError("listener bug")


def test_announcer_survives_a_broken_listener_and_does_not_retell() -> None:
    rec = _Recorder()
    announcer = Announcer([_Broken(), rec])
    j = _journal()
    announcer.announce(j)
    announcer.announce(j)  # recorded again unchanged: nothing new
    assert [h.kind for h in rec.told] == [K.STARTED]
    step = _set(j, "backup", J.StepState.RUNNING, 1)
    announcer.announce(step)
    assert [h.kind for h in rec.told] == [K.STARTED, K.STEP_STARTED]


def test_after_a_restart_what_was_told_is_not_told_again() -> None:
    rec = _Recorder()
    announcer = Announcer([rec])
    running = _set(_journal(), "backup", J.StepState.SUCCEEDED, 1)
    announcer.seen(running)  # the reconciler re-posts the running operation at restart
    announcer.announce(_set(running, "helm-upgrade", J.StepState.RUNNING, 2))
    assert [(h.kind, h.step) for h in rec.told] == [(K.STEP_STARTED, "helm-upgrade")]


def test_a_new_reason_to_wait_is_told_once_with_its_bounds() -> None:
    """Why a pool stands still is an Event and a log line (issue 28 item 4): told when the
    reason changes, with since when, until when and the limit, never again for the same."""
    j = _set(_journal(), "pool-a-hypervisor", J.StepState.RUNNING, 1)
    between = J.PhaseProgress(
        "pool-a-hypervisor", J.PhaseState.BETWEEN, started_at=T0, progress=50,
        last_progress_at=T0,
    )  # fmt: skip
    before = j.with_phase(between)
    waiting = replace(
        between.batches,
        waiting="availability budget: maxUnavailable 1 of 4 nodes used up by 1 out of service",
        waiting_since=T0 + timedelta(minutes=2),
        waiting_until=T0 + timedelta(minutes=30),
        waiting_limit="maxDuration (1800s)",
    )
    after = j.with_phase(replace(between, batches=waiting))
    told = changes(before, after)
    assert [(h.kind, h.reason, h.pool) for h in told] == [(K.POOL_WAITING, "PoolWaiting", "a")]
    assert told[0].summary() == (
        "upgrade op-1: pool a hypervisor waits at 50 %: next batch waits: availability budget: "
        "maxUnavailable 1 of 4 nodes used up by 1 out of service (since 2026-12-03 12:02:00Z, "
        "until 2026-12-03 12:30:00Z at the latest, ended by maxDuration (1800s))"
    )
    assert not told[0].notable and not told[0].warning
    assert changes(after, after) == ()  # the same reason again: nothing new
