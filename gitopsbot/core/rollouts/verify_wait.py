"""The canary verify's wait (issue 28 item 4): what one look at a pool's pods after its canary
batch decides, and why the pool waits.

After the canary batch the switch stays closed while the pool is checked (R15, canary mode,
``bot.steps.verify.check``). ``judge`` turns one look's problems into the next move:

- **Passed**: no problem of the operation's own; the GPU canary runs next (``bot.driving``).
- **Wait**: pods of the batch may still be starting. The wait is recorded in the phase
  (``batches.waiting`` and beside it since when, until when, and which limit ends it), once
  per change of its reason, so ``status``, the pull request and the journal say what the
  pool waits for instead of "canary batch finished".
- **Halt**: the problems outlived the verify timeout. maxDuration and the window's close
  end the wait too, in ``core.rollouts.rollout``: the deadline's clock runs while the pool verifies.

A problem that predates the operation (``tf_objects.PRE_EXISTING``: a pod Pending since
before it began, which no batch of it replaced) is not the canary's doing: it is named in
the reason as pre-existing and does not count, so the canary is judged on the pods the
batch replaced, and an old Pending pod neither holds the pool for the timeout nor fails
the upgrade (docs/executor.md). Pure.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timedelta

from gitopsbot.core.fleet.model import PoolPolicy
from gitopsbot.core.records.batch_record import BatchRecord
from gitopsbot.core.records.journal import PhaseProgress, PhaseState
from gitopsbot.core.rollouts import phase_clock, windows
from gitopsbot.core.rollouts.phase_clock import stop_clock
from gitopsbot.core.rollouts.rollout import PhaseAction, PhaseDecision
from gitopsbot.core.rollouts.tf_objects import pre_existing_note, split_pre_existing


def began(phase: PhaseProgress, now: datetime) -> datetime:
    """When the verify began: the canary batch's last progress (the switch closed then)."""
    return phase.last_progress_at or now


def waiting(
    policy: PoolPolicy,
    phase: PhaseProgress,
    reason: str,
    now: datetime,
    window: windows.Window | None,
    timeout_seconds: int | None,
) -> PhaseProgress:
    """The phase with its wait recorded: ``reason``, since the verify began, until the first
    limit that ends it and which (``timeout_seconds``: the verify's own, None for the GPU
    canary, which bounds its smoke workload itself). Unchanged when the same reason is
    recorded already, so a look that finds the same problems writes nothing."""
    own: list[tuple[datetime, str]] = []
    if timeout_seconds is not None:
        ends = began(phase, now) + timedelta(seconds=timeout_seconds)
        own.append((ends, f"the canary verify timeout ({timeout_seconds}s)"))
    since = began(phase, now)
    return phase_clock.waiting(policy, phase, reason, now, window, own, since, what="verify")


def cleared(batches: BatchRecord) -> BatchRecord:
    """The record without a wait: the verify is over."""
    return replace(batches, waiting="", waiting_since=None, waiting_until=None, waiting_limit="")


def judge(
    *,
    policy: PoolPolicy,
    decision: PhaseDecision,
    problems: list[str],
    now: datetime,
    window: windows.Window | None,
    timeout_seconds: int,
) -> PhaseDecision:
    """One look's ``problems`` (``bot.steps.verify.check`` with the operation's start) for the
    VERIFY_CANARY ``decision``: passed (the decision as it came, its reason naming any
    pre-existing problem), WAIT with the wait recorded, or HALT past the verify timeout."""
    phase = decision.phase
    counted, known = split_pre_existing(problems)
    note = pre_existing_note(known)
    if not counted:
        reason = decision.reason + (f"; {note}" if note else "")
        return replace(decision, reason=reason)
    named = "; ".join(counted) + (f" ({note})" if note else "")
    since = began(phase, now)
    if (now - since).total_seconds() < timeout_seconds:  # pods of the batch may be starting
        reason = f"canary verify: {named}"
        waited = waiting(policy, phase, reason, now, window, timeout_seconds)
        return replace(decision, action=PhaseAction.WAIT, phase=waited, reason=reason)
    why = f"canary: verify timeout ({timeout_seconds}s) passed with: {named}"
    halted = replace(stop_clock(phase, now, PhaseState.HALTED), halt_reason=why)
    return replace(decision, action=PhaseAction.HALT, phase=halted, reason=why)
