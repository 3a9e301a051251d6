"""What one pass does for one cluster, decided in one place from what the pass observed (pure).

A pass (``bot.reconciler``) has three phases: it **observes** (reads the state branch, Git at
the watched head and at the operation's commit, the pull request's commands, the release, the
pools and the Lease) into one ``Seen``; ``decide`` turns that into one ``PassDecision`` with its
reason; the pass **acts** on it through the executor and records the outcome. Nothing here
reads the cluster or Git: every judgement a feature contributes is a value in ``Seen`` or a
pure function called from ``decide``.

The order in which the judgements are asked is the written precedence of docs/decisions.md
(``PRECEDENCE`` below; a test holds the two together): the first that applies decides.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum

from gitopsbot.core.fleet.model import ClusterSpec, RolloutPolicy
from gitopsbot.core.operations import merge_queue, operation, pause
from gitopsbot.core.records.journal import Journal, OperationKind, OperationStatus
from gitopsbot.core.rollouts import windows
from gitopsbot.core.waves import promotion_gate
from gitopsbot.core.waves.canary_marks import CanaryFailure


class PassAction(StrEnum):
    IDLE = "idle"  # nothing active, nothing queued: the release is looked at now and then
    REJUDGE = "rejudge"  # a change held only by waves: judged again through the whole gate
    QUEUED = "queued"  # a queued change waits for its maintenance window
    ADMIT = "admit"  # a queued change may start: judged through the gate, then started
    OPERATE = "operate"  # the active operation's next step (``operation.next_step``)
    MISSING = "missing"  # the active operation's cluster is not in the fleet at its commit
    NOT_HOLDER = "not-holder"  # the Lease is not held: nothing that changes anything is done


# The precedence: the order in which the pass's judgements are asked, first match wins
# (``decide`` here, then ``operation.next_step`` and ``rollout.decide_phase`` for a pool).
# docs/decisions.md#precedence lists the same names in the same order, with the one
# exception (a hold lets a finished canary batch be verified), and its matrix is checked
# against what the code decides (tests/core/test_interactions.py).
PRECEDENCE = (
    "lease",  # another replica holds the cluster: this one changes nothing
    "waves",  # a change waves hold has not started: judged again, nothing else yet
    "remediation",  # a failed step or a halt: onFailure (a rollback) before anything else
    "rollback",  # a rollback judges no gate, budget, workload wait, canary, deadline or mark
    "deadline",  # a limit that passed halts (held and closed-window time never count)
    "holds",  # a person's pause, an awaited approval, a failed-version mark
    "window",  # a closed maintenance window
    "canary-verify",  # the canary batch's pods, then the GPU canary
    "gates",  # the pool's gates before the next batch
    "budget",  # the availability budget
    "workloads",  # sessions to end, tenants to spare
)


@dataclass(frozen=True, slots=True)
class OperationView:
    """What the pass observed of the active operation: its spec at the operation's commit,
    the pools' windows, who holds what (Git at the watched head, the pull request's
    comments, a failed-version mark) and each unfinished pool phase's pool."""

    spec: ClusterSpec
    pool_windows: Mapping[str, windows.Window | None] = field(default_factory=dict)
    holds: pause.Holds = pause.NONE
    # The standing failed-version mark of the operation's chart version (``mark_holds``).
    mark: CanaryFailure | None = None
    observations: operation.Observations = field(default_factory=operation.Observations)

    @property
    def policy(self) -> RolloutPolicy:
        return self.spec.rollout


@dataclass(frozen=True, slots=True)
class Seen:
    """Everything one pass's decision may read, observed once at the pass's start."""

    cluster: str
    now: datetime
    current: Journal | None = None  # the cluster's latest operation
    queued: Journal | None = None  # the one waiting behind it (merge queue)
    # The queued change's pools' windows, at its commit.
    queued_windows: tuple[windows.Window | None, ...] = ()
    # The active operation as observed; None when there is none or its cluster is gone.
    operating: OperationView | None = None
    lease_held: bool = True


@dataclass(frozen=True, slots=True)
class PassDecision:
    action: PassAction
    reason: str = ""
    until: datetime | None = None
    # OPERATE: what the operation does next.
    step: operation.Decision | None = None
    # QUEUED, ADMIT: the queued journal as its turn leaves it.
    promoted: Journal | None = None


def held_by_waves(current: Journal | None, queued: Journal | None) -> bool:
    """The latest operation is blocked by the ``WAVES`` deny alone and nothing is queued
    behind it but a rotation that waits for it (``waits_for_held``): judged again each pass
    (``bot.held``), started once its wave is due. Any other change queued (a merge outside
    the window) is newer and replaces it when its turn comes."""
    return (
        current is not None
        and current.status is OperationStatus.BLOCKED
        and promotion_gate.held_only_by_waves(current.verdicts)
        and (queued is None or waits_for_held(current, queued))
    )


def waits_for_held(held: Journal | None, new: Journal) -> bool:
    """A rotation merged on top of a change the waves hold waits in the queue behind it
    (docs/decisions.md, rotation × wave hold): the held change stays held as it was and
    starts when its wave is due, the rotation runs after it, alone (R17). Riding on the held
    change it would be one upgrade ROTATION-ALONE refuses, the held change lost with it; run
    first it would apply the held chart version the waves hold back."""
    return (
        new.kind is OperationKind.ROTATION
        and new.status in (OperationStatus.RUNNING, OperationStatus.QUEUED)
        and held_by_waves(held, None)
    )


_CHANGES = frozenset(
    {
        operation.Action.START,
        operation.Action.RUN_STEP,
        operation.Action.DRIVE_POOLS,
        operation.Action.REMEDIATE,
        operation.Action.FINISH,
    }
)


def decide(seen: Seen) -> PassDecision:
    """The one thing this pass does, and why. Pure."""
    current, queued, now = seen.current, seen.queued, seen.now
    if held_by_waves(current, queued):
        return _unless_lost(seen, PassDecision(PassAction.REJUDGE, reason="held by waves"))
    if current is None or not current.active:
        if queued is None:
            return PassDecision(PassAction.IDLE)
        promoted = merge_queue.promote(queued, now=now, pool_windows=seen.queued_windows)
        if promoted.status is OperationStatus.QUEUED:
            reason = "queued until the window opens"
            return PassDecision(
                PassAction.QUEUED, reason, promoted.queue.queued_until, promoted=promoted
            )
        return _unless_lost(seen, PassDecision(PassAction.ADMIT, promoted=promoted))
    view = seen.operating
    if view is None:
        reason = f"cluster {current.cluster} is not in the fleet at {current.desired_sha[:12]}"
        return _unless_lost(seen, PassDecision(PassAction.MISSING, reason))
    step = operation.next_step(
        current,
        view.observations,
        now,
        policy=view.policy,
        pool_windows=view.pool_windows,
        holds=pause.merged(view.holds, mark_holds(current, view.mark)),
    )
    decided = PassDecision(PassAction.OPERATE, step.reason, step.until, step=step)
    return _unless_lost(seen, decided) if step.action in _CHANGES else decided


_UNMARKED = frozenset({OperationKind.ROLLBACK, OperationKind.ROTATION})


def mark_holds(journal: Journal, mark: CanaryFailure | None) -> pause.Holds:
    """A version a GPU canary marked failed holds every pool of an operation to it until
    ``clearedVersions`` clears it: the switches close at the next batch boundary, as for a
    person's pause. Not a rollback (it goes back to what ran before), nor a rotation (it
    changes credentials, not the version, and may be urgent), nor the operation whose own
    canary failed (its halt says it)."""
    if mark is None or journal.kind in _UNMARKED or mark.op_id == journal.op_id:
        return pause.NONE
    return pause.Holds(cluster=mark.reason())


def _unless_lost(seen: Seen, decided: PassDecision) -> PassDecision:
    """``decided``, or nothing done when the Lease is not held: the replica that holds it
    observes what this one did and records it itself (docs/leases.md)."""
    if seen.lease_held:
        return decided
    what = decided.step.action if decided.step is not None else decided.action
    return PassDecision(PassAction.NOT_HOLDER, f"lease not held: {what} not carried out")
