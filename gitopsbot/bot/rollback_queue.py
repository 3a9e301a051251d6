"""A rollback that starts while a change waits in the cluster's queue.

The queued change's own commit still holds the change being rolled back: started from it
after the rollback, it would apply that change again. So the rollback supersedes it, and what
Git holds at the rollback's commit (the revert, made on top of the queued change: the queued
change without the one rolled back) waits behind the rollback instead, compared with what the
rollback restores (docs/decisions.md, rollback × a queued change). Both the automatic rollback
(``bot.reverts``) and a person's revert (``bot.intake``) start rollbacks this way.
"""

from __future__ import annotations

import logging
from datetime import datetime

from gitopsbot.bot.journal_store import cluster_dir
from gitopsbot.bot.pass_base import PassBase
from gitopsbot.core.operations import merge_queue, operation
from gitopsbot.core.records import journal as journal_mod
from gitopsbot.core.records.journal import Journal, OperationKind, OperationStatus
from gitopsbot.errors import ConfigError

log = logging.getLogger(__name__)


def carry_queued(
    ctx: PassBase, undone: Journal, rollback: Journal, now: datetime
) -> tuple[Journal, Journal | None] | None:
    """The change queued behind ``undone``, superseded, and what Git holds at ``rollback``'s
    commit to run after it (``merge_queue.carry``); None when nothing waits. "After it" is
    compared with what the rollback restores: ``undone``'s base commit (its parent on the
    watched branch)."""
    queued = ctx.store.queued(undone.cluster)
    if queued is None or queued.status is not OperationStatus.QUEUED:
        return None
    after = None
    try:
        target = ctx.spec_at(rollback.desired_sha, undone.cluster)
        base = ctx.spec_at(undone.base_sha, undone.cluster) if undone.base_sha else None
    except ConfigError as e:  # the revert does not load: nothing of it can run
        log.error("%s: %s does not load: %s", undone.cluster, rollback.desired_sha[:12], e)
        target = base = None
    if target is not None:
        # Without a base (an older journal), all of it: an upgrade with its CRDs.
        shape = (
            operation.shape_between(base, target)
            if base is not None
            else operation.Shape(OperationKind.UPGRADE, crds=True)
        )
        if shape is not None:
            after = operation.new_operation(
                kind=shape.kind,
                cluster=undone.cluster,
                desired_sha=rollback.desired_sha,
                created_at=now,
                policy=target.rollout,
                pr_number=queued.pr_number,
                crds=shape.crds,
                restart=shape.restart,
                base_sha=undone.base_sha,
                credentials=shape.credentials,
            )
    return merge_queue.carry(queued, rollback, after)


def queue_files(gone: Journal, following: Journal | None) -> dict[str, bytes | None]:
    """The state-branch files of the superseded queued change and what replaces it, for the
    rollback's own commit (a kill between two commits would leave one without the other)."""
    base = cluster_dir(gone.cluster)
    return {
        f"{base}/history/{gone.op_id}.yaml": journal_mod.dumps(gone).encode(),
        f"{base}/queued.yaml": None if following is None else journal_mod.dumps(following).encode(),
    }


def carried_text(gone: Journal, following: Journal | None) -> str:
    """What the rollback's record says of it."""
    then = "nothing after it"
    if following is not None:
        then = f"{following.kind} {following.op_id} queued after it"
    return f"; {gone.op_id} superseded (its commit holds the change rolled back): {then}"
