"""The deadline's clock of a pool phase: the time ``maxDuration`` is measured on.

It runs from the phase's first try to open a batch to its end: while a batch rolls, while the
canary batch is verified, and while the bot's own checks keep the next batch closed (gates,
the availability budget, workload waits). A person's hold and a closed maintenance window
stop it (``core.rollouts.rollout``): they are not the rollout's doing.

``opened_at`` is when the interval now counting began (None: stopped) and ``open_seconds`` the
intervals before it. Pure.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from datetime import datetime, timedelta

from gitopsbot.core.fleet.model import PoolPolicy
from gitopsbot.core.records.journal import PhaseProgress, PhaseState
from gitopsbot.core.rollouts import windows


def active_seconds(phase: PhaseProgress, now: datetime) -> float:
    """The phase's counted time so far (the clock maxDuration is measured on)."""
    running = (now - phase.opened_at).total_seconds() if phase.opened_at else 0.0
    return phase.open_seconds + max(running, 0.0)


def stop_clock(phase: PhaseProgress, now: datetime, state: PhaseState) -> PhaseProgress:
    """The phase in ``state`` with the deadline's clock stopped, the time it ran added."""
    return replace(phase, state=state, opened_at=None, open_seconds=int(active_seconds(phase, now)))


def waiting(
    policy: PoolPolicy,
    phase: PhaseProgress,
    reason: str,
    now: datetime,
    window: windows.Window | None,
    own: Sequence[tuple[datetime, str]] = (),
    since: datetime | None = None,
    what: str = "wait",
) -> PhaseProgress:
    """The phase with why its next move waits recorded (``batches.waiting``) and beside it
    since when, until when at the latest, and which limit ends the wait then: the first of
    ``own`` (the wait's own limits: a timeout, the retries), ``maxDuration`` (its clock runs
    while the bot waits) and the window's close. Unchanged when the same reason is recorded
    already, so a look that finds the same writes nothing (issue 28: recorded once per change
    of reason). ``since``: when the wait began (default now); ``what`` pauses at the close."""
    if phase.batches.waiting == reason:
        return phase
    limits = list(own)
    limit = policy.max_duration_seconds
    if limit is not None:
        left = max(limit - active_seconds(phase, now), 0.0)
        limits.append((now + timedelta(seconds=left), f"maxDuration ({limit}s)"))
    closes = windows.closes_at(window, now)
    if closes is not None:
        limits.append((closes, f"the maintenance window's close (the {what} pauses)"))
    until, by = min(limits, key=lambda pair: pair[0]) if limits else (None, "")
    b = replace(
        phase.batches,
        waiting=reason,
        waiting_since=since or now,
        waiting_until=until,
        waiting_limit=by,
    )
    return replace(phase, batches=b)
