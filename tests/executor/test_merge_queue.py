"""The merge queue: start at once inside a window (or with a pool without one), queue until
the earliest pool window opens, queue behind a running operation, supersede an older queued
merge, and promote a queued one when its turn comes."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

from gitopsbot.core.fleet.model import MaintenanceWindow, RolloutPolicy
from gitopsbot.core.operations import merge_queue, operation
from gitopsbot.core.records.journal import OperationKind, OperationStatus
from gitopsbot.core.rollouts import windows

T0 = datetime(2026, 6, 10, 12, 0, tzinfo=UTC)
AT2 = windows.Window.of(MaintenanceWindow("0 2 * * *", 3600), UTC)
AT22 = windows.Window.of(MaintenanceWindow("0 22 * * *", 3600), UTC)


def op(sha: str):
    return operation.new_operation(
        kind=OperationKind.UPGRADE,
        cluster="c",
        desired_sha=sha,
        created_at=T0,
        policy=RolloutPolicy(),
    )


def test_expected_start_is_the_earliest_pool_window() -> None:
    assert merge_queue.expected_start([AT2, AT22], T0) == T0.replace(hour=22)
    assert merge_queue.expected_start([AT2, None], T0) == T0
    assert merge_queue.expected_start([], T0) == T0


def test_inside_a_window_starts_now() -> None:
    a = merge_queue.admit(op("1" * 40), running=None, queued=None, now=T0, pool_windows=[None])
    assert a.journal.status is OperationStatus.RUNNING and not a.queued
    assert a.expected_start == T0 and a.superseded is None


def test_outside_the_window_queues_with_expected_start() -> None:
    a = merge_queue.admit(op("1" * 40), running=None, queued=None, now=T0, pool_windows=[AT22])
    assert a.queued
    assert a.journal.queue.queued_until == a.expected_start == T0.replace(hour=22)


def test_behind_a_running_operation() -> None:
    running = merge_queue.admit(
        op("1" * 40), running=None, queued=None, now=T0, pool_windows=[None]
    ).journal
    a = merge_queue.admit(op("2" * 40), running=running, queued=None, now=T0, pool_windows=[None])
    assert a.queued and a.expected_start is None


def test_a_newer_merge_supersedes_the_queued_one() -> None:
    first = merge_queue.admit(
        op("1" * 40), running=None, queued=None, now=T0, pool_windows=[AT22]
    ).journal
    second = merge_queue.admit(
        op("2" * 40), running=None, queued=first, now=T0, pool_windows=[AT22]
    )
    assert second.superseded is not None
    assert second.superseded.status is OperationStatus.SUPERSEDED
    assert second.superseded.queue.superseded_by == second.journal.op_id
    assert second.queued


def test_promote_when_the_window_opens() -> None:
    q = merge_queue.admit(
        op("1" * 40), running=None, queued=None, now=T0, pool_windows=[AT22]
    ).journal
    still = merge_queue.promote(q, now=T0 + timedelta(hours=1), pool_windows=[AT22])
    assert still.status is OperationStatus.QUEUED
    go = merge_queue.promote(q, now=T0.replace(hour=22, minute=5), pool_windows=[AT22])
    assert go.status is OperationStatus.RUNNING


def test_a_rotation_and_another_change_never_supersede_each_other() -> None:
    """docs/decisions.md, rotation × the merge queue: the newer waits until the queued one
    starts when either rotates; a rollback never waits; plain changes supersede as before."""
    queued = replace(op("1" * 40), status=OperationStatus.QUEUED)
    rotation = replace(queued, kind=OperationKind.ROTATION)
    plain, rolling_back = op("2" * 40), replace(op("2" * 40), kind=OperationKind.ROLLBACK)
    assert merge_queue.waits_behind(rotation, plain, rotates=False)
    assert merge_queue.waits_behind(
        rotation, replace(plain, kind=OperationKind.ROTATION), rotates=True
    )
    assert merge_queue.waits_behind(queued, plain, rotates=True)  # a rotation on a queued change
    assert not merge_queue.waits_behind(queued, plain, rotates=False)
    assert not merge_queue.waits_behind(rotation, rolling_back, rotates=True)
    assert not merge_queue.waits_behind(None, plain, rotates=True)
    started = replace(rotation, status=OperationStatus.RUNNING)
    assert not merge_queue.waits_behind(started, plain, rotates=True)  # queued no longer


def test_a_rollback_supersedes_the_queued_change_and_carries_what_git_holds_after_it() -> None:
    """docs/decisions.md, rollback × a queued change: the queued change never starts from its
    own commit (it holds the change rolled back); the revert's tree waits behind the rollback
    under an id of its own, or nothing does when it adds nothing."""
    queued = replace(op("1" * 40), status=OperationStatus.QUEUED)
    rollback = replace(op("2" * 40), kind=OperationKind.ROLLBACK)
    after = op("2" * 40)  # the revert's tree, as the bot shapes it
    gone, following = merge_queue.carry(queued, rollback, after)
    assert following is not None and following.op_id == f"{rollback.op_id}-after"
    assert following.status is OperationStatus.QUEUED and following.desired_sha == "2" * 40
    assert gone.status is OperationStatus.SUPERSEDED
    assert gone.queue.superseded_by == following.op_id
    gone, following = merge_queue.carry(queued, rollback, None)
    assert following is None and gone.queue.superseded_by == rollback.op_id
