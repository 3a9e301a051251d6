"""The merge queue: one operation per cluster; a merge outside the window waits; newer wins,
unless either rotates credentials (then the newer waits until the queued one starts).

A cluster's window is the union of its pools' windows: the operation (backup, CRDs, helm
upgrade) starts when at least one pool may roll, so nothing is changed on a cluster none of
whose pools may be touched; a pool whose own window is closed then waits inside the operation
(``core.rollouts.rollout``). A pool without a window makes the cluster always open.

Pure: journals in, journals out; the store persists them (``bot.journal_store``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import datetime

from gitopsbot.core.records.journal import Journal, OperationKind, OperationStatus, QueueState
from gitopsbot.core.rollouts import windows


def expected_start(pool_windows: Sequence[windows.Window | None], now: datetime) -> datetime:
    """``now`` when any pool may roll now (or has no window), else the earliest opening."""
    if not pool_windows or any(w is None or windows.is_open(w, now) for w in pool_windows):
        return now
    return min(windows.next_open(w, now) for w in pool_windows)


@dataclass(frozen=True, slots=True)
class Admission:
    """``journal`` is the new operation as it must be stored (QUEUED or RUNNING);
    ``superseded`` the earlier queued one it replaced (status SUPERSEDED), if any."""

    journal: Journal
    superseded: Journal | None
    expected_start: datetime | None  # None: after the running operation finishes

    @property
    def queued(self) -> bool:
        return self.journal.status is OperationStatus.QUEUED


def admit(
    new: Journal,
    *,
    running: Journal | None,
    queued: Journal | None,
    now: datetime,
    pool_windows: Sequence[windows.Window | None],
    behind_held: bool = False,
) -> Admission:
    """Place a newly merged operation: start it, or queue it behind the running one (or the
    held one it waits for, ``behind_held``: ``pass_decision.waits_for_held``) or until its
    window opens; a queued older operation for the cluster is superseded."""
    superseded = None
    if queued is not None and queued.status is OperationStatus.QUEUED:
        superseded = replace(
            queued,
            status=OperationStatus.SUPERSEDED,
            queue=replace(queued.queue, superseded_by=new.op_id),
        )
    start = expected_start(pool_windows, now)
    busy = running is not None and (running.active or behind_held)
    if busy:
        until = start if start > now else None
        placed = replace(new, status=OperationStatus.QUEUED, queue=QueueState(queued_until=until))
        return Admission(placed, superseded, until)
    if start > now:
        placed = replace(new, status=OperationStatus.QUEUED, queue=QueueState(queued_until=start))
        return Admission(placed, superseded, start)
    return Admission(replace(new, status=OperationStatus.RUNNING), superseded, now)


def promote(
    queued: Journal, *, now: datetime, pool_windows: Sequence[windows.Window | None]
) -> Journal:
    """A queued operation whose turn has come: RUNNING if a window is open now, else still
    QUEUED with the next expected start."""
    start = expected_start(pool_windows, now)
    if start > now:
        return replace(queued, queue=replace(queued.queue, queued_until=start))
    return replace(queued, status=OperationStatus.RUNNING)


def waits_behind(queued: Journal | None, new: Journal, *, rotates: bool) -> bool:
    """Whether ``new``, merged while ``queued`` waits its turn, waits to be taken in until
    ``queued`` starts instead of superseding it: when either of them rotates credentials.

    Superseded, a queued rotation would be lost: the newer change is compared with a commit
    that already holds the rotated credentials, so it rotates nothing. A rotation merged on a
    queued change would ride on it as one operation, which R17 forbids (a rotation runs
    alone). ``rotates``: ``new`` changes credentials beyond the queued one's. A rollback never
    waits: the revert of the running change acts now, as before (docs/decisions.md, rotation
    × the merge queue)."""
    return (
        queued is not None
        and queued.status is OperationStatus.QUEUED
        and new.kind is not OperationKind.ROLLBACK
        and (queued.kind is OperationKind.ROTATION or rotates)
    )


CARRIED = "after"  # the op id suffix of what Git holds at a rollback's commit, run after it


def carry(
    queued: Journal, rollback: Journal, after: Journal | None
) -> tuple[Journal, Journal | None]:
    """A rollback starts while ``queued`` waits its turn: ``(superseded, next)``.

    The queued change's own commit still holds the change being rolled back, so it never
    starts from it: it is superseded. What Git holds at the rollback's commit (the revert,
    made on top of the queued change) is ``after`` (None: nothing beyond what the rollback
    restores); it waits behind the rollback as ``next``, under an id of its own (the rollback
    is named by that commit already)."""
    following = None
    if after is not None:
        following = replace(
            after,
            op_id=f"{rollback.op_id}-{CARRIED}",
            status=OperationStatus.QUEUED,
            queue=QueueState(),
        )
    gone = replace(
        queued,
        status=OperationStatus.SUPERSEDED,
        queue=replace(
            queued.queue,
            superseded_by=following.op_id if following is not None else rollback.op_id,
        ),
    )
    return gone, following
