"""The per-pool phase state machine: when to open or close a component's switch.

The controller rolls a pool's component while its ``autoUpdate<Component>`` switch is on and
ignores ``maxDuration`` and ``maintenanceWindow`` (R21) and has no canary or pause (R22).
The bot keeps every switch closed (F1: a post-renderer writes them closed on each helm
upgrade) and opens one for a phase only inside the window. ``decide_phase`` says what to do
next for one (pool, component); ``runnable_phases`` says which phases may be driven now.
Pure: observations and "now" are arguments; nothing is mutated.

Semantics (docs/executor.md):

- maxDuration counts the time the switch was open, summed over windows, and the time the
  canary batch is verified with the switch closed (a verify that cannot finish halts at the
  deadline). A rollout paused by a closed window or a person does not burn its deadline,
  else a 1-hour window with a 2-hour deadline could never finish a rollout that spans two
  nights.
- A stall is progress unchanged for ``stall_timeout`` while the switch is open. F4: a
  GPUNode stuck in Pending pauses the controller forever; its name goes into the reason.
- Canary: with ``canary_batch_percentage`` > 0 the first batch runs at that percentage, then
  the switch closes and the pool is verified before the rest runs at ``batch_percentage``.
- Done: progress 100 and ``…ConfigSynced`` (R14); a pool without GPU nodes is done at once.
- Availability budget (``maxUnavailable``, hypervisor): the bot, not the controller, starts
  every batch. The controller starts the next batch ``batchInterval`` after the last on its
  own while the switch is open (R22), which a short interval lets it do before the bot has
  looked; so the bot pins ``batchInterval`` to at least ``admission.BUDGET_INTERVAL``,
  closes the switch at every batch boundary, and opens it again once that interval is over
  with the budget judged just before: the batch starts on that open (issue 28 item 7).

The transitions (open, boundary, hold, halt, gates) live here; what they ask lives beside:
whether the next batch may start in core.rollouts.next_batch (with core.admission and
core.gates), when to look again in core.rollouts.phase_looks, what was observed in
core.rollouts.pool_observation and which phases run now in core.rollouts.pool_order (the
names the executor and core.operations read from here are re-exported).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from enum import StrEnum

from gitopsbot.core.fleet.model import Component, PoolPolicy
from gitopsbot.core.records.batch_record import GateNote
from gitopsbot.core.records.journal import PhaseProgress, PhaseState, ProgressMark
from gitopsbot.core.rollouts import admission, next_batch, phase_clock, phase_looks, windows
from gitopsbot.core.rollouts.next_batch import GATES_FRESH as GATES_FRESH
from gitopsbot.core.rollouts.phase_clock import active_seconds, stop_clock
from gitopsbot.core.rollouts.phase_looks import MIN_LOOK as MIN_LOOK
from gitopsbot.core.rollouts.phase_looks import POLL as POLL
from gitopsbot.core.rollouts.phase_looks import rolling_look as rolling_look
from gitopsbot.core.rollouts.pool_observation import PhaseContext
from gitopsbot.core.rollouts.pool_observation import PoolObservation as PoolObservation
from gitopsbot.core.rollouts.pool_order import PhaseRef as PhaseRef
from gitopsbot.core.rollouts.pool_order import phase_components as phase_components
from gitopsbot.core.rollouts.pool_order import runnable_phases as runnable_phases


class PhaseAction(StrEnum):
    OPEN_SWITCH = "open-switch"
    CLOSE_SWITCH = "close-switch"
    WAIT = "wait"
    VERIFY_CANARY = "verify-canary"
    CHECK_GATES = "check-gates"
    DONE = "done"
    HALT = "halt"


class HaltReason(StrEnum):
    MAX_DURATION = "max-duration-exceeded"
    STALLED = "stalled"
    GATE = "gate-failed"
    WORKLOADS = "workloads-busy"


@dataclass(frozen=True, slots=True)
class PhaseDecision:
    """What to do for one phase, and the progress to record once it is done.

    ``batch_percentage`` goes with OPEN_SWITCH; ``halt`` with HALT (the switch is closed in
    the same action when it is open: ``close`` is true). ``batch_interval_seconds``: the
    ``batchInterval`` to write with the switch (None: leave it): while a budget bounds the
    phase, the pinned one on open and Git's again on every close.
    """

    action: PhaseAction
    phase: PhaseProgress
    reason: str = ""
    until: datetime | None = None
    batch_percentage: int | None = None
    close: bool = False
    halt: HaltReason | None = None
    batch_interval_seconds: int | None = None


_closed = stop_clock


# Marks kept per phase: a batchPercentage of 1 makes 100 steps; a progress reset (the
# template changed mid-rollout) may add more. The first mark (the start) is always kept.
MAX_MARKS = 128


def _marked(phase: PhaseProgress, progress: int, now: datetime) -> tuple[ProgressMark, ...]:
    if phase.marks and phase.marks[-1].progress == progress:
        return phase.marks
    marks = (*phase.marks, ProgressMark(progress, now))
    return marks if len(marks) <= MAX_MARKS else (marks[0], *marks[-(MAX_MARKS - 1) :])


def _track(phase: PhaseProgress, observed: PoolObservation, now: datetime) -> PhaseProgress:
    """Progress as observed; the pool's size and a mark go with a progress change only, so
    a client pod count that moves while pods are replaced records nothing by itself."""
    value = observed.progress or 0
    if value != phase.progress:
        return replace(
            phase,
            progress=value,
            last_progress_at=now,
            total=observed.total,
            marks=_marked(phase, value, now),
        )
    return phase


def decide_phase(
    *,
    policy: PoolPolicy,
    component: Component,
    observed: PoolObservation,
    phase: PhaseProgress,
    now: datetime,
    window: windows.Window | None,
    held: str = "",
) -> PhaseDecision:
    """The next action for ``component`` of ``policy``'s pool (see the module docstring).
    ``held``: why a person holds the pool (core.pause), "" when nobody does."""
    d = _decide(PhaseContext(policy, component, observed, now, window), phase, held)
    if not admission.budget_bound(policy, component):
        return d
    if d.action is PhaseAction.OPEN_SWITCH:
        pinned = admission.pinned_interval_seconds(policy, component)
        return replace(d, batch_interval_seconds=pinned)
    if d.action is PhaseAction.CLOSE_SWITCH or d.close:
        # Git's interval back with the switch closed: the pin is the bot's, never drift.
        return replace(d, batch_interval_seconds=policy.batch_interval_seconds)
    return d


def _decide(ctx: PhaseContext, phase: PhaseProgress, held: str) -> PhaseDecision:
    policy, component, observed = ctx.policy, ctx.component, ctx.observed
    now, window = ctx.now, ctx.window
    if phase.state is PhaseState.HALTED:
        return PhaseDecision(PhaseAction.HALT, phase, phase.halt_reason, close=observed.switch_open)
    if phase.state is PhaseState.DONE:
        return PhaseDecision(PhaseAction.DONE, phase, close=observed.switch_open)
    phase = _track(phase, observed, now)

    finished = observed.synced and (observed.progress or 0) >= 100 and observed.current is not False
    if observed.nodes == 0 or finished:
        reason = "no GPU nodes (R14)" if observed.nodes == 0 else "synced at 100% (R14)"
        done = _closed(phase, now, PhaseState.DONE)
        if observed.switch_open:
            return PhaseDecision(PhaseAction.CLOSE_SWITCH, done, reason)
        return PhaseDecision(PhaseAction.DONE, done, reason)

    halt = _halt(ctx, phase)
    if halt is not None:
        kind, reason = halt
        halted = replace(_closed(phase, now, PhaseState.HALTED), halt_reason=reason)
        return PhaseDecision(
            PhaseAction.HALT, halted, reason, close=observed.switch_open, halt=kind
        )

    if held:
        return _hold(ctx, phase, held)
    if phase.paused_by:  # the hold is gone: resume below (the switch opens again)
        phase = replace(phase, paused_by="")

    if not windows.is_open(window, now):
        opens = windows.next_open(window, now)
        # Admission is judged again when the window opens: its last reason (a budget used up
        # by a node since uncordoned) would be stale in `status` all the while.
        phase = _not_admitting(phase)
        if observed.switch_open:
            paused = _closed(phase, now, PhaseState.PAUSED)
            return PhaseDecision(
                PhaseAction.CLOSE_SWITCH, paused, "maintenance window closed", until=opens
            )
        waiting = (
            phase if phase.state is PhaseState.PENDING else replace(phase, state=PhaseState.PAUSED)
        )
        if phase.opened_at is not None:  # a canary verify's clock: the window stops it
            waiting = _closed(waiting, now, waiting.state)
        return PhaseDecision(PhaseAction.WAIT, waiting, "outside the maintenance window", opens)

    canary = policy.canary_batch_percentage > 0 and not phase.canary_done
    if canary and phase.state is PhaseState.CANARY_VERIFY:
        if phase.opened_at is None:  # after a hold (or from an older journal): counts again
            phase = replace(phase, opened_at=now)
        look = phase_looks.verify_look(policy, phase, now, window)
        return PhaseDecision(PhaseAction.VERIFY_CANARY, phase, "canary batch finished", look)
    if canary and phase.state is PhaseState.CANARY and observed.switch_open and phase.progress:
        # The deadline keeps counting while the batch is verified (``opened_at`` stays): a
        # verify that cannot finish halts at maxDuration (issue 28 item 4).
        verify = replace(phase, state=PhaseState.CANARY_VERIFY)
        verify = replace(verify, batches=verify.batches.finished(phase.progress, now))
        return PhaseDecision(PhaseAction.CLOSE_SWITCH, verify, "canary batch finished")

    if not observed.switch_open:
        return _open(ctx, phase, canary)

    if phase.opened_at is None:  # open but not by us in this journal (restart): adopt it
        phase = replace(phase, opened_at=now, started_at=phase.started_at or now)
        phase = replace(phase, last_progress_at=phase.last_progress_at or now)
    if phase.state is PhaseState.ROLLING and phase.batches.from_progress < phase.progress < 100:
        # A batch finished while the switch is open: the controller starts the next one
        # after batchInterval unless the switch closes now (R22).
        phase = replace(phase, batches=phase.batches.finished(phase.progress, now))
        stop = next_batch.stop_between(ctx, phase)
        if stop:
            # The deadline's clock runs on between batches: the bot's own waits (gates, the
            # budget, workloads) count towards maxDuration; only a hold or a closed window
            # stops it (docs/decisions.md#precedence).
            between = replace(phase, state=PhaseState.BETWEEN)
            between = phase_clock.waiting(policy, between, stop, now, window)
            return PhaseDecision(PhaseAction.CLOSE_SWITCH, between, stop, until=now)
    look = phase_looks.next_look(
        policy, phase, now, window, budget=admission.budget_bound(policy, component)
    )
    return PhaseDecision(PhaseAction.WAIT, phase, "rolling", until=look)


def _open(ctx: PhaseContext, phase: PhaseProgress, canary: bool) -> PhaseDecision:
    """The switch is closed and the window open: judge the gates, then admit the batch.
    The deadline's clock runs from here on (the first batch's gates and admission count too):
    nothing holds the phase but the bot's own checks."""
    policy, component, observed = ctx.policy, ctx.component, ctx.observed
    now, window = ctx.now, ctx.window
    if phase.opened_at is None:
        phase = replace(phase, opened_at=now)
    retry_at = phase.batches.gates_retry_at
    if retry_at is not None and now < retry_at and next_batch.gates_due(policy, phase, now):
        # Inconclusive: the next judgement waits gateRetryInterval, whatever pass comes first.
        return PhaseDecision(PhaseAction.WAIT, phase, phase.batches.waiting, until=retry_at)
    if next_batch.gates_due(policy, phase, now):
        state = PhaseState.PENDING if phase.state is PhaseState.PENDING else PhaseState.BETWEEN
        checking = replace(phase, state=state)
        return PhaseDecision(
            PhaseAction.CHECK_GATES, checking, f"gates before the batch at {phase.progress}%"
        )
    pace = admission.budget_pace(policy, component, phase, now)
    if pace is not None:  # the pinned interval first: the budget is judged when it is over
        until, why = pace
        pinned = (
            f"the pinned batchInterval ({admission.pinned_interval_seconds(policy, component)}s)"
        )
        paced = phase_clock.waiting(policy, phase, why, now, window, [(until, pinned)])
        return PhaseDecision(PhaseAction.WAIT, paced, why, until=until)
    state = PhaseState.CANARY if canary else PhaseState.ROLLING
    requested = policy.canary_batch_percentage if canary else policy.batch_percentage
    wait = next_batch.workload_decision(ctx, phase)
    if wait is not None and wait.action == "halt":
        why = f"pool {policy.name}: waitForWorkloads: {wait.reason}"
        halted = replace(_closed(phase, now, PhaseState.HALTED), halt_reason=why)
        return PhaseDecision(PhaseAction.HALT, halted, why, halt=HaltReason.WORKLOADS)
    adm = next_batch.admit(ctx, phase, requested)
    if adm.halt:
        halted = replace(_closed(phase, now, PhaseState.HALTED), halt_reason=adm.reason)
        return PhaseDecision(PhaseAction.HALT, halted, adm.reason, halt=HaltReason.MAX_DURATION)
    if not adm.admitted:
        keep = (PhaseState.PENDING, PhaseState.BETWEEN)
        waiting_state = phase.state if phase.state in keep else PhaseState.BETWEEN
        since = phase.batches.wait_since
        if wait is not None and wait.action == "wait" and since is None:
            since = now
        elif wait is not None and wait.action == "skip-window":
            since = None  # the next window waits its own timeout
        own: list[tuple[datetime, str]] = []
        aware = policy.workloads.wait if policy.workloads is not None else None
        if wait is not None and wait.action == "wait" and since is not None and aware is not None:
            ends = since + timedelta(seconds=aware.timeout_seconds)
            own.append((ends, f"waitForWorkloads' timeout ({aware.timeout_seconds}s, then "
                              f"onTimeout: {aware.on_timeout})"))  # fmt: skip
        batches = replace(phase.batches, wait_since=since)
        waiting = replace(phase, state=waiting_state, batches=batches)
        waiting = phase_clock.waiting(policy, waiting, adm.reason, now, window, own)
        return PhaseDecision(PhaseAction.WAIT, waiting, adm.reason, until=adm.until)
    batch = adm.batch_percentage
    batches = replace(
        phase.batches,
        from_progress=phase.progress,
        started_at=now,
        waiting="",
        wait_since=None,
        gate_attempts=0,
        gates_retry_at=None,
    )
    opened = replace(
        phase,
        state=state,
        started_at=phase.started_at or now,
        opened_at=phase.opened_at or now,
        last_progress_at=now,  # the stall clock starts when the switch opens
        # what `status` and the pull request show (core.phase_view)
        batch_percentage=batch,
        batch_interval_seconds=admission.pinned_interval_seconds(policy, component),
        total=observed.total,
        window_closes_at=windows.closes_at(window, now),
        max_duration_seconds=policy.max_duration_seconds,
        marks=_marked(phase, phase.progress, now),
        batches=batches,
    )
    why = f"{state} at {batch}%" + (f" ({adm.reason})" if adm.reason else "")
    return PhaseDecision(PhaseAction.OPEN_SWITCH, opened, why, batch_percentage=batch)


def gates_judged(
    policy: PoolPolicy,
    phase: PhaseProgress,
    notes: Sequence[GateNote],
    now: datetime,
) -> PhaseDecision:
    """The phase after its gates were judged (``notes``: one per gate, outcome pass, fail or
    inconclusive). All pass: recorded as passed at this progress, and the pass comes back at
    once to open the batch. A fail halts the pool (onFailure). Inconclusive keeps the switch
    closed and judges again ``gateRetryInterval`` later, up to ``gateRetries`` times in a
    row, then halts."""
    failed = [n for n in notes if n.outcome == "fail"]
    unsure = [n for n in notes if n.outcome not in ("pass", "fail")]
    b = replace(phase.batches, gates=tuple(notes))
    if failed:
        why = f"pool {policy.name}: gate " + "; ".join(
            f"{n.gate} failed: {n.evidence}" for n in failed
        )
        halted = replace(_closed(phase, now, PhaseState.HALTED), halt_reason=why, batches=b)
        return PhaseDecision(PhaseAction.HALT, halted, why, halt=HaltReason.GATE)
    if unsure:
        attempts = b.gate_attempts + 1
        named = "; ".join(f"{n.gate}: {n.evidence}" for n in unsure)
        if attempts > policy.gate_retries:
            why = (
                f"pool {policy.name}: gate inconclusive {attempts} times in a row "
                f"(gateRetries {policy.gate_retries}): {named}"
            )
            halted = replace(_closed(phase, now, PhaseState.HALTED), halt_reason=why, batches=b)
            return PhaseDecision(PhaseAction.HALT, halted, why, halt=HaltReason.GATE)
        why = f"gate inconclusive ({attempts}/{policy.gate_retries}): {named}"
        until = now + timedelta(seconds=policy.gate_retry_interval_seconds)
        retry = replace(b, gate_attempts=attempts, gates_retry_at=until)
        left = policy.gate_retries - attempts + 1  # judgements left before the halt
        last = now + timedelta(seconds=policy.gate_retry_interval_seconds * left)
        ends = (last, f"gateRetries ({policy.gate_retries}): still inconclusive then, it halts")
        waiting = phase_clock.waiting(policy, replace(phase, batches=retry), why, now, None, [ends])
        return PhaseDecision(PhaseAction.WAIT, waiting, why, until=until)
    passed = replace(
        b,
        gates_passed=phase.progress,
        gates_passed_at=now,
        gate_attempts=0,
        gates_retry_at=None,
        waiting="",
    )
    names = ", ".join(n.gate for n in notes)
    return PhaseDecision(
        PhaseAction.WAIT, replace(phase, batches=passed), f"gates passed: {names}", until=now
    )


def _not_admitting(phase: PhaseProgress) -> PhaseProgress:
    """``phase`` with no admission reason: something else keeps the switch closed now."""
    if not phase.batches.waiting:
        return phase
    return replace(phase, batches=replace(phase.batches, waiting=""))


def _hold(ctx: PhaseContext, phase: PhaseProgress, held: str) -> PhaseDecision:
    """A held phase: close the switch (the controller finishes the batch in flight, R22) and
    wait, looking again a POLL later for the hold to go. A finished canary batch is still
    verified first (CANARY_VERIFY keeps its state), so a resume does not run it again."""
    policy, observed, now = ctx.policy, ctx.observed, ctx.now
    until = now + POLL
    phase = _not_admitting(phase)  # the hold is why it waits now (paused_by), not admission
    canary = policy.canary_batch_percentage > 0 and not phase.canary_done
    if canary and phase.state is PhaseState.CANARY_VERIFY:
        # A person's hold stops the deadline's clock (docs/pause.md), the verify goes on.
        paused = replace(_closed(phase, now, phase.state), paused_by=held)
        return PhaseDecision(PhaseAction.VERIFY_CANARY, paused, "canary batch finished", until)
    if observed.switch_open:
        state = PhaseState.PAUSED
        if canary and phase.state is PhaseState.CANARY and phase.progress:
            state = PhaseState.CANARY_VERIFY
        closed = replace(_closed(phase, now, state), paused_by=held)
        return PhaseDecision(PhaseAction.CLOSE_SWITCH, closed, f"paused: {held}", until=until)
    keep = (PhaseState.PENDING, PhaseState.CANARY_VERIFY)
    state = phase.state if phase.state in keep else PhaseState.PAUSED
    if phase.opened_at is not None:  # recorded open, found closed (a restart): stop its clock
        phase = _closed(phase, now, state)
    waiting = replace(phase, state=state, paused_by=held)
    return PhaseDecision(PhaseAction.WAIT, waiting, f"paused: {held}", until=until)


def _halt(ctx: PhaseContext, phase: PhaseProgress) -> tuple[HaltReason, str] | None:
    policy, observed, now = ctx.policy, ctx.observed, ctx.now
    limit = policy.max_duration_seconds
    if limit is not None and active_seconds(phase, now) >= limit:
        waited = phase.batches.waiting
        why = f" while waiting for {waited}" if waited else ""
        return HaltReason.MAX_DURATION, (
            f"pool {policy.name}: maxDuration {limit}s exceeded at {phase.progress}%{why}"
        )
    if observed.switch_open and phase.opened_at is not None and phase.last_progress_at:
        quiet = (now - phase.last_progress_at).total_seconds()
        if quiet >= policy.stall_timeout_seconds:
            pending = ", ".join(observed.pending_nodes)
            why = f"; GPUNode Pending: {pending} (F4)" if pending else ""
            return HaltReason.STALLED, (
                f"pool {policy.name}: no progress for {int(quiet)}s at {phase.progress}%{why}"
            )
    return None
