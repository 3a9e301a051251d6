"""What a person is shown of a pool's rollout: batch, units done, elapsed time, ETA, window and
deadline, from one recorded phase (``journal.PhaseProgress``) and "now".

The same numbers feed ``gitopsbot status`` (and its live view), the demo, the progress log
of ``gitopsbot run`` and the pull request comment, so they never disagree.

The arithmetic is the controller's (facts §3.2, ``core.rollouts.timeline``): a batch is
``ceil(pct × total / 100)`` units, progress climbs in steps of ``pct`` to 100, and after the
batch that reached ``progress`` the controller has replaced
``min(total, progress // pct × batch size)`` units. The canary batch (``state`` canary)
runs at its own percentage before the rest.

The ETA is the steps left times the time per step: observed (the mean wall time between
the progress marks) once a step finished, else the plan's estimate (readiness +
``max(batchInterval, 3s)``, no wait before the first batch). It is switch-open time: a
window that closes first adds to it, and the view says when the window closes.

Under a hypervisor phase with per-node records (``core.records.node_states``, issue #18), one more
line counts the nodes per state (``node_line``), and ``status`` lists them (``node_table``).
The GPU canary's judgement and evidence, the gates' last judgement and why the next batch
waits (or the canary verify: since when, until when, and which limit ends it) are notes
under the phase (``batch_notes``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta

from gitopsbot.core.fleet.model import Component
from gitopsbot.core.records import canary_record, node_states
from gitopsbot.core.records.batch_record import BatchRecord
from gitopsbot.core.records.journal import Journal, PhaseProgress, PhaseState, Step, StepState
from gitopsbot.core.records.node_states import NodeRecord
from gitopsbot.core.rollouts import phase_clock, timeline

UNIT = {
    Component.HYPERVISOR: ("node", "nodes"),
    Component.WORKER: ("workload", "workloads"),
    Component.CLIENT: ("pod", "pods"),
}
ROLLING_STATES = (PhaseState.CANARY, PhaseState.ROLLING)


@dataclass(frozen=True, slots=True)
class PhaseView:
    """One pool phase as shown. Counts are 0 and times None when not known yet."""

    step: str
    pool: str
    component: Component | None
    state: PhaseState
    progress: int
    batch: int  # the batch running now (1-based), or the last one when done; 0: not started
    batches: int  # batches in this phase at the pinned percentage (the canary not counted)
    batch_size: int
    canary: bool  # the batch running is the canary batch
    done: int  # units replaced, as the controller counts them
    total: int
    unit: str  # "nodes", "workloads", "pods"
    elapsed_seconds: int | None  # since the switch first opened
    eta_seconds: int | None  # to 100 %, switch-open time; None when done or unknown
    window_closes_at: datetime | None
    deadline_left_seconds: int | None  # maxDuration minus switch-open time
    paced: bool  # the ETA comes from observed batches (else from the plan's estimate)

    @property
    def finished(self) -> bool:
        return self.state in (PhaseState.DONE, PhaseState.HALTED)

    def summary(self, now: datetime) -> str:
        """One line, e.g. ``batch 2/3 of 2 nodes · 2/3 nodes done · 67 % · 1m10s · ETA 40s``."""
        parts: list[str] = []
        if self.canary:
            parts.append(f"canary batch of {_count(self.batch_size, self.unit)}")
        elif self.batches:
            size = f" of {_count(self.batch_size, self.unit)}" if self.batch_size else ""
            parts.append(f"batch {self.batch}/{self.batches}{size}")
        if self.total:
            parts.append(f"{self.done}/{self.total} {self.unit} done")
        parts.append(f"progress {self.progress}%")
        if self.elapsed_seconds is not None:
            parts.append(f"elapsed {timeline.format_duration(self.elapsed_seconds)}")
        if self.eta_seconds is not None and not self.finished:
            guess = "" if self.paced else " (planned)"
            what = "canary ETA" if self.canary else "ETA"
            parts.append(f"{what} {timeline.format_duration(self.eta_seconds)}{guess}")
        closes = self.window_closes_at
        if closes is not None and closes > now and not self.finished:
            left = int((closes - now).total_seconds())
            parts.append(
                f"window closes {closes:%H:%M %Z}".rstrip()
                + f" (in {timeline.format_duration(left)})"
            )
        if self.deadline_left_seconds is not None and not self.finished:
            parts.append(f"deadline {timeline.format_duration(self.deadline_left_seconds)} left")
        return " · ".join(parts)


@dataclass(frozen=True, slots=True)
class StepRow:
    """One step as shown (built by ``step_rows``, drawn by ``status`` and the fleet page):
    ``progress`` and ``summary`` for a pool phase that started, else None and ""."""

    icon: str
    name: str
    state: StepState
    times: str
    detail: str
    progress: int | None = None
    phase_state: str = ""
    summary: str = ""
    nodes: tuple[NodeRecord, ...] = ()  # per-node records of a hypervisor phase (issue #18)
    batch_notes: tuple[str, ...] = ()  # the last gate judgement, why the next batch waits
    held: str = ""  # what pauses the phase (``PhaseProgress.paused_by``), "" when nothing

    @property
    def node_line(self) -> str:
        """``nodes: 8 nodes: 3 verified, 2 in batch 3, 3 pending``; "" without records."""
        return node_line(self.nodes)

    @property
    def change(self) -> str:
        """What a change is told by: the states and the progress, not the clocks (a node
        changing state is a change; its ``since`` alone is not)."""
        notes = " ".join(self.batch_notes)
        # A pause or resume is a change even where the state stays (a pending phase held).
        return (
            f"{self.name} {self.state} {self.phase_state} {self.progress} {self.node_line} "
            f"{notes} {self.held}"
        )


ICON = {
    StepState.PENDING: "·",
    StepState.RUNNING: "▶",
    StepState.SUCCEEDED: "✓",
    StepState.FAILED: "✗",
    StepState.SKIPPED: "–",
}


def step_times(step: Step, now: datetime | None) -> str:
    """``02:01:03 +12s``: when a step started and how long it took (or runs so far), UTC."""
    if step.started_at is None:
        return ""
    end = step.finished_at or now
    took = ""
    if end is not None:
        took = f" +{timeline.format_duration(max(int((end - step.started_at).total_seconds()), 0))}"
    return f"{step.started_at:%H:%M:%S}{took}"


def step_rows(journal: Journal, now: datetime | None) -> list[StepRow]:
    """The steps as ``status``, its live view and the fleet page show them."""
    rows = []
    for step in journal.steps:
        row = StepRow(ICON[step.state], step.name, step.state, step_times(step, now), step.detail)
        phase = journal.phase(step.name)
        if phase.state is not PhaseState.PENDING and now is not None:
            shown = view(phase, step, now).summary(now)
            row = replace(row, progress=phase.progress, phase_state=str(phase.state), summary=shown)
        row = replace(
            row,
            nodes=phase_nodes(phase),
            batch_notes=batch_notes(phase),
            held=phase.paused_by,
        )
        rows.append(row)
    return rows


def phase_nodes(phase: PhaseProgress) -> tuple[NodeRecord, ...]:
    """The phase's per-node records (``PhaseProgress.nodes``), () when it has none."""
    return phase.nodes


def batch_notes(phase: PhaseProgress) -> tuple[str, ...]:
    """What the GPU canary found after the canary batch (passed or failed, with its evidence:
    core.canary_record), what the gates said at the last batch boundary, with their evidence,
    and why the next batch does not open yet (issue 18, core.batch_record); () when none
    applies."""
    out: list[str] = []
    if phase.canary is not None:
        out.append(canary_record.note(phase.canary))
    b = phase.batches
    if b.gates:
        at = f" at {b.gates_passed}%" if b.gates_passed >= 0 else ""
        judged = "; ".join(
            f"{g.gate} {g.outcome}" + (f" ({g.evidence})" if g.evidence else "") for g in b.gates
        )
        out.append(f"gates{at}: {judged}")
    if b.waiting and phase.state not in (PhaseState.DONE, PhaseState.HALTED):
        what = "waits" if phase.state is PhaseState.CANARY_VERIFY else "next batch waits"
        out.append(f"{what}: {b.waiting}{_bounds(b)}")
    return tuple(out)


def _bounds(b: BatchRecord) -> str:
    """Since when a bounded wait runs, until when at the latest and which limit ends it then
    (core.verify_wait); "" for a wait recorded without them."""
    parts = []
    if b.waiting_since is not None:
        parts.append(f"since {b.waiting_since.astimezone(UTC):%Y-%m-%d %H:%M:%S}Z")
    if b.waiting_until is not None:
        parts.append(f"until {b.waiting_until.astimezone(UTC):%Y-%m-%d %H:%M:%S}Z at the latest")
    if b.waiting_limit:
        parts.append(f"ended by {b.waiting_limit}")
    return f" ({', '.join(parts)})" if parts else ""


def node_line(records: tuple[NodeRecord, ...]) -> str:
    shown = node_states.summary(records)
    return f"nodes: {shown}" if shown else ""


def node_table(records: tuple[NodeRecord, ...], now: datetime) -> list[str]:
    """One line per node: name, state, batch (``-``: not taken), since when (UTC, and how
    long ago), and the detail (a gate's reason, a failure)."""
    if not records:
        return []
    width = max(4, *(len(r.name) for r in records))
    out = [f"{'node':<{width}}  {'state':<9}  batch  since"]
    for r in records:
        ago = timeline.format_duration(max(int((now - r.since).total_seconds()), 0))
        batch = str(r.batch) if r.batch else "-"
        since = f"{r.since:%Y-%m-%d %H:%M:%S} ({ago} ago)"
        line = f"{r.name:<{width}}  {r.state!s:<9}  {batch:>5}  {since}"
        out.append(line + (f"  {r.detail}" if r.detail else ""))
    return out


def _count(n: int, unit: str) -> str:
    return f"{n} {unit[:-1] if n == 1 else unit}"


def step_seconds(phase: PhaseProgress, component: Component | None) -> float:
    """The plan's time for one progress step: readiness + the controller's requeue."""
    ready = timeline.DEFAULT_READINESS_SECONDS.get(component or Component.HYPERVISOR, 60)
    return ready + max(phase.batch_interval_seconds, timeline.MIN_STEP_SECONDS)


def observed_step_seconds(phase: PhaseProgress) -> float | None:
    """The mean wall time between progress marks after the first, when any: a batch's
    duration as this pool has shown it. Wall time: a window closing between two marks
    inflates it (the marks record when, not how long the switch was open)."""
    rising = [m for m in phase.marks if m.progress > 0]
    first = phase.marks[0] if phase.marks else None
    if first is None or not rising:
        return None
    steps = len([m for m in phase.marks[1:] if m.progress > 0])
    span = (rising[-1].at - first.at).total_seconds()
    return span / steps if steps and span > 0 else None


def view(phase: PhaseProgress, step: Step, now: datetime) -> PhaseView:
    pct = phase.batch_percentage if 0 < phase.batch_percentage <= 100 else 0
    total = phase.total
    canary = phase.state in (PhaseState.CANARY, PhaseState.CANARY_VERIFY)
    batches = timeline.progress_steps(pct) if pct else 0
    size = timeline.batch_size(pct, total) if pct else 0
    # Progress is capped at 100 (facts §3.2): at 100 every batch ran, whatever pct divides.
    finished_batches = (batches if phase.progress >= 100 else phase.progress // pct) if pct else 0
    if canary:
        done = min(total, size) if phase.progress > 0 else 0
        batch = 1
    else:
        done = min(total, finished_batches * size) if pct else 0
        if phase.state is PhaseState.DONE:
            done, batch = total, batches
        else:
            batch = (
                min(finished_batches + 1, batches) if phase.state is not PhaseState.PENDING else 0
            )
    observed = observed_step_seconds(phase)
    per_step = observed if observed is not None else step_seconds(phase, step.component)
    eta: int | None = None
    if pct and phase.state in (*ROLLING_STATES, PhaseState.PAUSED):
        # The canary batch's own: the rest's pace is known once it ran.
        left_steps = 1 if canary else max(batches - finished_batches, 0)
        since = 0.0
        last = phase.marks[-1].at if phase.marks else phase.last_progress_at
        if phase.opened_at is not None and last is not None:
            since = max((now - max(last, phase.opened_at)).total_seconds(), 0.0)
        # Before the first batch finished, no requeue wait precedes it (the plan's estimate:
        # steps × readiness + (steps − 1) × wait, core.timeline).
        first = 0.0
        if observed is None and finished_batches == 0 and left_steps:
            first = max(phase.batch_interval_seconds, timeline.MIN_STEP_SECONDS)
        eta = max(math.ceil(left_steps * per_step - first - min(since, per_step)), 0)
    deadline: int | None = None
    if phase.max_duration_seconds is not None and phase.started_at is not None:
        deadline = max(int(phase.max_duration_seconds - phase_clock.active_seconds(phase, now)), 0)
    elapsed = None
    if phase.started_at is not None:
        end = step.finished_at if step.finished_at and phase.state is PhaseState.DONE else now
        elapsed = max(int((end - phase.started_at).total_seconds()), 0)
    window = phase.window_closes_at if phase.opened_at is not None else None
    return PhaseView(
        step=step.name,
        pool=step.pool,
        component=step.component,
        state=phase.state,
        progress=phase.progress,
        batch=batch,
        batches=batches,
        batch_size=size,
        canary=canary,
        done=done,
        total=total,
        unit=UNIT[step.component][1] if step.component else "nodes",
        elapsed_seconds=elapsed,
        eta_seconds=eta,
        window_closes_at=window,
        deadline_left_seconds=deadline,
        paced=observed is not None,
    )


def finish_at(view_: PhaseView, now: datetime) -> datetime | None:
    """When the phase is expected to reach 100 % if its switch stays open."""
    if view_.eta_seconds is None:
        return None
    return now + timedelta(seconds=view_.eta_seconds)
