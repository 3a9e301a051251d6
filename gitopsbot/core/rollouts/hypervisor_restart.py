"""R20's last step: delete a pool's hypervisor pods in batches so that each comes back with
the GreptimeDB password its vector sidecar reads at start; the controller recreates them.

Stateless by design, so a kill anywhere repeats nothing: a pod is *old* when it was created
no later than the step started (``started_at``, pushed to the state branch before the first
deletion) and *new* otherwise. Each look decides from the pods alone:

- a pool whose vector sidecar is off needs nothing (the step is skipped);
- every pod new and ready: done;
- a pod missing, not ready or being deleted: the batch in flight is not over, wait;
- the pool's window closed: wait for its next opening;
- less than ``batchInterval`` since the newest pod was created (a batch just ended): wait;
- past the pool's ``maxDuration`` since the step started: fail (the pool's onFailure applies);
- within a second of the start: wait (creationTimestamp has whole seconds; a pod recreated
  in the start's second would otherwise read as old);
- otherwise delete the next batch: ``ceil(batchPercentage% x pods)`` old pods, at least one,
  oldest name first.

Pure: the caller reads the pods and the window and carries the decision out.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum


@dataclass(frozen=True, slots=True)
class HypervisorPod:
    name: str
    node: str
    created_at: datetime
    ready: bool
    deleting: bool = False


class Action(StrEnum):
    SKIP = "skip"
    DONE = "done"
    WAIT = "wait"
    DELETE = "delete"
    FAIL = "fail"


@dataclass(frozen=True, slots=True)
class Decision:
    action: Action
    reason: str
    delete: tuple[str, ...] = ()
    until: datetime | None = None


CLOCK_GRAIN = timedelta(seconds=1)


def batch_size(total: int, batch_percentage: int) -> int:
    return max(1, math.ceil(total * batch_percentage / 100)) if total else 0


def decide(
    pods: Sequence[HypervisorPod],
    *,
    pool: str,
    vector_on: bool,
    started_at: datetime,
    now: datetime,
    batch_percentage: int,
    batch_interval_seconds: int,
    window_open: bool,
    window_opens_at: datetime | None,
    max_duration_seconds: int | None,
    expected: int | None = None,
) -> Decision:
    """What to do next in pool ``pool``. ``expected``: the pool's GPU node count, when known
    (a pod the controller has not recreated yet is then seen missing)."""
    if not vector_on:
        return Decision(Action.SKIP, f"pool {pool}: vector sidecar off, nothing holds the password")
    old = sorted((p for p in pods if p.created_at <= started_at), key=lambda p: p.name)
    new = [p for p in pods if p.created_at > started_at]
    busy = [p.name for p in pods if p.deleting or not p.ready]
    missing = max(0, (expected or 0) - len(pods))
    if not old and not busy and not missing:
        return Decision(Action.DONE, f"pool {pool}: {len(new)} hypervisor pod(s) restarted, ready")
    elapsed = (now - started_at).total_seconds()
    if max_duration_seconds is not None and elapsed > max_duration_seconds:
        return Decision(
            Action.FAIL,
            f"pool {pool}: hypervisor restart not done within maxDuration "
            f"({max_duration_seconds}s): {len(old)} pod(s) still hold the old password",
        )
    if busy or missing:
        what = ", ".join(busy[:3]) + ("…" if len(busy) > 3 else "")
        gone = f"{missing} pod(s) not recreated yet" if missing else ""
        shown = "; ".join(x for x in (f"not ready: {what}" if busy else "", gone) if x)
        return Decision(Action.WAIT, f"pool {pool}: batch in flight ({shown})")
    if not window_open:
        return Decision(
            Action.WAIT, f"pool {pool}: maintenance window closed", until=window_opens_at
        )
    if new:
        resume = max(p.created_at for p in new) + timedelta(seconds=batch_interval_seconds)
        if now < resume:
            return Decision(Action.WAIT, f"pool {pool}: batchInterval", until=resume)
    if now < started_at + CLOCK_GRAIN:
        # creationTimestamp has whole seconds: a pod recreated in the second the step
        # started would read as old and be deleted again.
        return Decision(Action.WAIT, f"pool {pool}: starting", until=started_at + CLOCK_GRAIN)
    size = batch_size(len(pods) + missing, batch_percentage)
    batch = tuple(p.name for p in old[:size])
    return Decision(
        Action.DELETE,
        f"pool {pool}: deleting {len(batch)} of {len(old)} old hypervisor pod(s)",
        delete=batch,
    )
