"""What drift compares a cluster against besides Git's head, from the cluster's journals
(issue 28 items 2, 3 and 5; docs/drift.md):

- the operation whose commit the bot applied last, or is applying: the desired state for
  drift. A newer change Git holds back (blocked by waves or the policy gate, queued for a
  window or behind another operation) is *pending*, shown with its reason and never proposed
  away; so is a change the running operation has not applied yet.
- what the bot pinned itself in that operation: the batch a budget or the tenants shrank
  (``PhaseProgress.batch_percentage``), left on the cluster after the operation.
- the CRD bundle the bot applied last, whatever operation came after it: a rotation, a
  rollout-only change or a rollback leaves the CRDs as they were (R16: never downgraded).

Pure: journals in, values out.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime

from gitopsbot.core.records.journal import (
    Journal,
    OperationKind,
    OperationStatus,
    StepKind,
    StepState,
)

# An operation in these states changed the cluster (FAILED: a step failed after something
# was applied; BLOCKED is the state for "nothing was applied").
_APPLIED = (OperationStatus.SUCCEEDED, OperationStatus.RUNNING, OperationStatus.FAILED)
_HELD = (OperationStatus.BLOCKED, OperationStatus.QUEUED)


@dataclass(frozen=True, slots=True)
class Baseline:
    # The newest operation that applied (or is applying) its commit; None: the bot applied
    # nothing yet, and Git's head is compared as it is.
    applied: Journal | None = None
    # A newer operation Git holds back (blocked or queued), if any.
    held: Journal | None = None
    # Pool → rolling-update policy keys the applied operation pinned itself.
    pins: Mapping[str, Mapping[str, int]] = field(default_factory=dict)
    crd_digest: str = ""  # the last CRDs step's digest; "" = none recorded

    def compared_sha(self) -> str:
        """The watched-branch commit whose files drift compares the cluster with, beside Git's
        head: the applied operation's; with none yet (the release installed before the bot),
        the commit a held change moved away from; "" = none known (Git's head alone)."""
        if self.applied is not None:
            return self.applied.desired_sha
        return self.held.base_sha if self.held is not None else ""

    def pending_why(self) -> str:
        """Why Git's head is not (all) on the cluster, when its files differ from the
        applied operation's."""
        if self.held is not None:
            held = self.held
            if held.status is OperationStatus.QUEUED:
                until = held.queue.queued_until
                when = f" until {until:%Y-%m-%d %H:%M} UTC" if until is not None else ""
                return f"operation {held.op_id} queued{when}"
            return f"operation {held.op_id} {held.failure or 'blocked'}"
        applied = self.applied
        if applied is not None and applied.kind is OperationKind.ROLLBACK:
            # The bot undid a change Git still holds: its revert is the way Git follows.
            undone = f" of {applied.reverts_op}" if applied.reverts_op else ""
            return f"rollback {applied.op_id}{undone} by the bot: Git has not caught up yet"
        if applied is not None and applied.status is OperationStatus.RUNNING:
            held_by = "; ".join(f"{k}: {v}" for k, v in sorted(applied.holds.items()))
            return f"operation {applied.op_id} running" + (f" (held: {held_by})" if held_by else "")
        return "merged on the watched branch, not taken in by the bot yet"

    def pinned_by(self) -> str:
        return "" if self.applied is None else self.applied.op_id


def _order(journal: Journal) -> datetime:
    return journal.created_at


def of(journals: Iterable[Journal]) -> Baseline:
    """The baseline of one cluster's recorded operations (any order; duplicates allowed)."""
    ordered = sorted(journals, key=_order)
    applied = next((j for j in reversed(ordered) if j.status in _APPLIED), None)
    held = next(
        (
            j
            for j in reversed(ordered)
            if j.status in _HELD and (applied is None or j.created_at >= applied.created_at)
        ),
        None,
    )
    return Baseline(
        applied=applied,
        held=held,
        pins={} if applied is None else pins(applied),
        crd_digest=crd_digest(ordered),
    )


def pins(journal: Journal) -> dict[str, dict[str, int]]:
    """Pool → ``batchPercentage`` the operation pinned at its last open of the pool's
    switches: a pool's phases run one after the other in step order, so the last one that
    opened left its batch on the cluster."""
    pool_of = {s.name: s.pool for s in journal.steps if s.kind is StepKind.POOL_PHASE}
    out: dict[str, dict[str, int]] = {}
    for phase in journal.phases:  # kept in step order (Journal.with_phase)
        pool = pool_of.get(phase.step, "")
        if pool and phase.batch_percentage:
            out[pool] = {"batchPercentage": phase.batch_percentage}
    return out


def crd_digest(journals: Iterable[Journal]) -> str:
    """The digest the newest successful CRDs step recorded, across every operation: CRDs
    change only by that step (R7), never downgraded (R16), so what it left is what the
    cluster should hold after any later operation."""
    best: tuple[datetime, str] | None = None
    for journal in journals:
        for step in journal.steps:
            if step.kind is not StepKind.CRDS or step.state is not StepState.SUCCEEDED:
                continue
            if step.effect is None or not step.effect.description:
                continue
            at = step.finished_at or step.started_at or journal.created_at
            if best is None or at >= best[0]:
                best = (at, step.effect.description)
    return "" if best is None else best[1]
