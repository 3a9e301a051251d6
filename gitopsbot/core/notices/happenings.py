"""What a recorded transition means to a person: the happenings between two journals.

The bot records an operation's journal at every transition (``bot.journal_store``). Kubernetes
Events, chat notifications, metrics and log lines all want the same thing from a transition:
"the helm-upgrade step started", "pool a-100 is at 40 %", "the operation halted". ``changes``
compares the journal as it was last announced with the one just recorded and returns those
happenings, so every listener speaks the same words and none re-derives them.

Pure: no clock (the journal's own times are used), no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum

from gitopsbot.core.records import canary_record
from gitopsbot.core.records.journal import (
    Journal,
    OperationKind,
    OperationStatus,
    PhaseProgress,
    PhaseState,
    Step,
    StepState,
)
from gitopsbot.core.rollouts import phase_view


class HappeningKind(StrEnum):
    QUEUED = "queued"  # merged, waiting for a window or the cluster's current operation
    BLOCKED = "blocked"  # the policy gate refused it; nothing was applied
    SUPERSEDED = "superseded"  # a newer merge replaced it while queued
    STARTED = "started"  # the operation's first step may run (for a rollback: rolling back)
    STEP_STARTED = "step-started"
    STEP_SUCCEEDED = "step-succeeded"
    STEP_SKIPPED = "step-skipped"
    STEP_FAILED = "step-failed"
    POOL_PROGRESS = "pool-progress"  # a pool's rollout moved (percentage or phase)
    POOL_PAUSED = "pool-paused"  # the window closed: switch closed until the next one
    # Why the pool's next move waits changed (gates, budget, workloads, the canary verify):
    # once per change of reason, with since when, until when and the limit that ends it.
    POOL_WAITING = "pool-waiting"
    POOL_HALTED = "pool-halted"  # deadline passed or stalled: switch closed, alert
    SUCCEEDED = "succeeded"
    FAILED = "failed"


# Happenings a person is told about when nobody watches (chat notifications): the
# operation's outcome, and anything that stopped it.
NOTABLE = frozenset(
    {
        HappeningKind.BLOCKED,
        HappeningKind.STARTED,  # only for rollbacks, see ``Happening.notable``
        HappeningKind.POOL_HALTED,
        HappeningKind.STEP_FAILED,
        HappeningKind.SUCCEEDED,
        HappeningKind.FAILED,
    }
)
WARNINGS = frozenset(
    {
        HappeningKind.BLOCKED,
        HappeningKind.POOL_HALTED,
        HappeningKind.STEP_FAILED,
        HappeningKind.FAILED,
    }
)


@dataclass(frozen=True, slots=True)
class Happening:
    """One thing that happened to an operation. ``step``/``pool``/``component`` are set for
    step and pool happenings; ``progress`` (0..100) for pool happenings."""

    kind: HappeningKind
    cluster: str
    op_id: str
    op_kind: OperationKind
    desired_sha: str
    pr_number: int | None = None
    step: str = ""
    step_kind: str = ""
    pool: str = ""
    component: str = ""
    progress: int | None = None
    detail: str = ""  # the step's detail, the halt reason, the failure: never a secret value
    at: datetime | None = None  # when it happened, by the journal's own times

    @property
    def warning(self) -> bool:
        """Kubernetes Event type Warning (else Normal)."""
        return self.kind in WARNINGS or (
            self.kind is HappeningKind.STARTED and self.op_kind is OperationKind.ROLLBACK
        )

    @property
    def notable(self) -> bool:
        """Worth a chat notification: halt, failure, rollback, blocked change, success."""
        if self.kind is HappeningKind.STARTED:
            return self.op_kind is OperationKind.ROLLBACK
        return self.kind in NOTABLE

    @property
    def reason(self) -> str:
        """A CamelCase reason, as Kubernetes Events spell them (``StepStarted``)."""
        return "".join(part.capitalize() for part in self.kind.value.split("-"))

    def summary(self) -> str:
        """One line for an Event note, a log line or a chat message."""
        what = f"{self.op_kind} {self.op_id}"
        k = HappeningKind
        if self.kind in (k.STEP_STARTED, k.STEP_SUCCEEDED, k.STEP_SKIPPED, k.STEP_FAILED):
            verb = self.kind.value.removeprefix("step-")
            text = f"{what}: step {self.step} {verb}"
        elif self.kind is k.POOL_PROGRESS:
            text = f"{what}: pool {self.pool} {self.component} at {self.progress} %"
        elif self.kind is k.POOL_PAUSED:
            text = f"{what}: pool {self.pool} {self.component} paused at {self.progress} %"
        elif self.kind is k.POOL_WAITING:
            text = f"{what}: pool {self.pool} {self.component} waits at {self.progress} %"
        elif self.kind is k.POOL_HALTED:
            text = f"{what}: pool {self.pool} {self.component} halted at {self.progress} %"
        elif self.kind is k.STARTED and self.op_kind is OperationKind.ROLLBACK:
            text = f"{what}: rolling back"
        else:
            text = f"{what} {self.kind.value}"
        if self.detail:
            text += f": {self.detail}"
        return text


def _of(
    journal: Journal,
    kind: HappeningKind,
    *,
    at: datetime | None,
    step: Step | None = None,
    progress: int | None = None,
    detail: str = "",
) -> Happening:
    return Happening(
        kind=kind,
        cluster=journal.cluster,
        op_id=journal.op_id,
        op_kind=journal.kind,
        desired_sha=journal.desired_sha,
        pr_number=journal.pr_number,
        step=step.name if step is not None else "",
        step_kind=step.kind.value if step is not None else "",
        pool=step.pool if step is not None else "",
        component=str(step.component or "") if step is not None else "",
        progress=progress,
        detail=detail,
        at=at,
    )


_STEP_KINDS = {
    StepState.RUNNING: HappeningKind.STEP_STARTED,
    StepState.SUCCEEDED: HappeningKind.STEP_SUCCEEDED,
    StepState.SKIPPED: HappeningKind.STEP_SKIPPED,
    StepState.FAILED: HappeningKind.STEP_FAILED,
}
_STATUS_KINDS = {
    OperationStatus.QUEUED: HappeningKind.QUEUED,
    OperationStatus.BLOCKED: HappeningKind.BLOCKED,
    OperationStatus.SUPERSEDED: HappeningKind.SUPERSEDED,
    OperationStatus.RUNNING: HappeningKind.STARTED,
    OperationStatus.SUCCEEDED: HappeningKind.SUCCEEDED,
    OperationStatus.FAILED: HappeningKind.FAILED,
}


def _step(before: Step | None, after: Step, journal: Journal) -> list[Happening]:
    if before is not None and before.state is after.state:
        return []
    kind = _STEP_KINDS.get(after.state)
    if kind is None:
        return []
    out: list[Happening] = []
    if (
        kind is not HappeningKind.STEP_STARTED
        and after.state is not StepState.SKIPPED
        and (before is None or before.state is StepState.PENDING)
    ):
        # Started and finished between two recordings: say both, in order.
        out.append(_step_happening(HappeningKind.STEP_STARTED, after, journal, detail=""))
    out.append(_step_happening(kind, after, journal, detail=after.detail))
    return out


def _step_happening(kind: HappeningKind, step: Step, journal: Journal, detail: str) -> Happening:
    at = step.started_at if kind is HappeningKind.STEP_STARTED else step.finished_at
    return _of(journal, kind, at=at or step.started_at, step=step, detail=detail)


def _phase(before: PhaseProgress | None, after: PhaseProgress, journal: Journal) -> list[Happening]:
    if before is not None and (before.state, before.progress) == (after.state, after.progress):
        return _waiting(before, after, journal)
    if before is None and after.state is PhaseState.PENDING:
        return []
    try:
        step = journal.step(after.step)
    except KeyError:
        return []
    if after.state is PhaseState.HALTED:
        kind, detail = HappeningKind.POOL_HALTED, after.halt_reason
    elif after.state is PhaseState.PAUSED:
        kind, detail = HappeningKind.POOL_PAUSED, after.paused_by or "the maintenance window closed"
    else:
        kind, detail = HappeningKind.POOL_PROGRESS, str(after.state)
    at = after.last_progress_at or after.opened_at or after.started_at
    if kind is not HappeningKind.POOL_HALTED and at is not None:
        # batch, units done and ETA as of the change: the one line a log, an Event or a
        # chat message gives per change (core.phase_view)
        detail += " · " + phase_view.view(after, step, at).summary(at)
    if after.canary is not None and (before is None or before.canary != after.canary):
        # The GPU canary was judged in this change: its evidence, once (core.canary_record).
        detail += " · " + canary_record.note(after.canary)
    told = _of(journal, kind, at=at, step=step, progress=after.progress, detail=detail)
    return [told, *_waiting(before, after, journal)]


def _waiting(
    before: PhaseProgress | None, after: PhaseProgress, journal: Journal
) -> list[Happening]:
    """A new reason the pool's next move waits, its phase otherwise where it was: told once,
    with its bounds (``core.rollouts.phase_view.batch_notes``), so an Event and the log say why a
    pool stands still (issue 28 item 4)."""
    waits = after.batches.waiting
    if not waits or (before is not None and waits == before.batches.waiting):
        return []
    if after.state in (PhaseState.DONE, PhaseState.HALTED):
        return []
    try:
        step = journal.step(after.step)
    except KeyError:
        return []
    told = next((n for n in phase_view.batch_notes(after) if waits in n), waits)
    at = after.batches.waiting_since or after.last_progress_at or after.started_at
    return [
        _of(journal, HappeningKind.POOL_WAITING, at=at, step=step, progress=after.progress,
            detail=told)
    ]  # fmt: skip


def changes(before: Journal | None, after: Journal) -> tuple[Happening, ...]:
    """What happened between ``before`` (the journal last announced; None: nothing announced
    for this operation yet) and ``after``, in the order a person would tell it: the
    operation's start, its steps and pools in journal order, then its outcome.

    A ``before`` of another operation counts as None."""
    if before is not None and before.op_id != after.op_id:
        before = None
    out: list[Happening] = []
    status_kind = _STATUS_KINDS.get(after.status)
    status_changed = before is None or before.status is not after.status
    outcome = after.status not in (OperationStatus.QUEUED, OperationStatus.RUNNING)
    if status_changed and status_kind is not None and not outcome:
        out.append(_of(after, status_kind, at=after.created_at))
    if after.status is OperationStatus.RUNNING or outcome:
        ran = (OperationStatus.SUCCEEDED, OperationStatus.FAILED)
        if outcome and before is None and after.status in ran:
            # First seen already finished (it ran and ended between two recordings).
            out.append(_of(after, HappeningKind.STARTED, at=after.created_at))
        before_steps = {s.name: s for s in before.steps} if before is not None else {}
        before_phases = {p.step: p for p in before.phases} if before is not None else {}
        for step in after.steps:
            out.extend(_step(before_steps.get(step.name), step, after))
            phase = next((p for p in after.phases if p.step == step.name), None)
            if phase is not None:
                out.extend(_phase(before_phases.get(step.name), phase, after))
    if status_changed and status_kind is not None and outcome:
        detail = after.failure if after.status is not OperationStatus.SUCCEEDED else ""
        finished = max((s.finished_at for s in after.steps if s.finished_at), default=None)
        out.append(_of(after, status_kind, at=finished or after.created_at, detail=detail))
    return tuple(out)
