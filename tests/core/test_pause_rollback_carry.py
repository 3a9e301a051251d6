"""A failed upgrade's comment holds and comment cursor pass to its automatic rollback on the
same pull request (``core.operations.pause.carried_to_rollback``; docs/decisions.md#precedence: "the
pause then holds the rollback's pools"). Pure."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime

from gitopsbot.core.fleet.model import PoolPolicy, RolloutPolicy
from gitopsbot.core.operations import operation, pause
from gitopsbot.core.records.journal import OperationKind

T0 = datetime(2026, 6, 10, 2, 0, tzinfo=UTC)
POLICY = RolloutPolicy(pools=(PoolPolicy("a"), PoolPolicy("b")))


def _pair(pr_of_rollback: int | None = 4):
    upgrade = operation.new_operation(
        kind=OperationKind.UPGRADE,
        cluster="lab",
        desired_sha="a" * 40,
        created_at=T0,
        policy=POLICY,
        pr_number=4,
    )
    upgrade = replace(
        upgrade,
        holds={"a": "paused by @alice (comment 12)", pause.CLUSTER: "paused by @bob (comment 9)"},
        comment_cursor=12,
        commands=("comment 9: @bob /gitopsbot pause: paused",),
        approved=("pool/a/hypervisor",),
    )
    rollback = operation.new_operation(
        kind=OperationKind.ROLLBACK,
        cluster="lab",
        desired_sha="b" * 40,
        created_at=T0,
        policy=POLICY,
        pr_number=pr_of_rollback,
        reverts_op=upgrade.op_id,
    )
    return upgrade, rollback


def test_the_rollback_keeps_the_comment_holds_and_reads_no_comment_again() -> None:
    upgrade, rollback = _pair()
    carried = pause.carried_to_rollback(upgrade, rollback)
    assert carried.holds == upgrade.holds
    held = pause.from_comments(carried)
    assert held.reason("a") == "paused by @bob (comment 9); paused by @alice (comment 12)"
    assert held.reason("b") == "paused by @bob (comment 9)"
    assert carried.comment_cursor == 12
    # Its own record starts empty: the upgrade's commands and approvals stay the upgrade's.
    assert carried.commands == () and carried.approved == ()
    assert replace(carried, holds={}, comment_cursor=0) == rollback


def test_a_rollback_on_another_request_takes_nothing() -> None:
    for other in (None, 7):
        upgrade, rollback = _pair(other)
        assert pause.carried_to_rollback(upgrade, rollback) == rollback
