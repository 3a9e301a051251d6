"""When to look again at a phase: the cadence while a pool rolls or its canary is verified.

A look comes once per batch interval while a pool rolls (sooner in the last batch, so the next
pool starts soon after this one ends), and never later than the window's close, the deadline
or the stall timeout. Pure: "now" is an argument.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from gitopsbot.core.fleet.model import PoolPolicy
from gitopsbot.core.records.journal import PhaseProgress, PhaseState
from gitopsbot.core.rollouts import windows
from gitopsbot.core.rollouts.phase_clock import active_seconds

# How often to look again while a rollout runs, when nothing sooner is due.
POLL = timedelta(seconds=10)
# While a pool rolls, look again about once per batch interval (never more often than this), so
# the next phase starts soon after the controller's last batch instead of a whole POLL later.
MIN_LOOK = timedelta(seconds=2)
# In the last batch the pool is done as soon as that batch's pods are replaced, which can be
# any moment: look a tenth of an interval apart (not more often than this), so the next pool
# starts within a fraction of a second of the controller finishing this one.
FINAL_LOOK = timedelta(seconds=0.5)


def rolling_look(
    policy: PoolPolicy, progress: int = 0, *, canary: bool = False, budget: bool = False
) -> timedelta:
    """How soon to look again at a rolling pool at ``progress`` %: once per batch interval
    within [MIN_LOOK, POLL]; in the last batch a tenth of it, within [FINAL_LOOK, POLL].
    ``budget``: an availability budget bounds the phase: at least every MIN_LOOK, so the
    switch closes at a boundary well within ``admission.BUDGET_INTERVAL``."""
    interval = timedelta(seconds=policy.batch_interval_seconds)
    batch = policy.canary_batch_percentage if canary else policy.batch_percentage
    if batch > 0 and progress + batch >= 100:
        return min(POLL, max(FINAL_LOOK, interval / 10))
    look = min(POLL, max(MIN_LOOK, interval))
    return min(look, MIN_LOOK) if budget else look


def next_look(
    policy: PoolPolicy,
    phase: PhaseProgress,
    now: datetime,
    window: windows.Window | None,
    *,
    budget: bool = False,
) -> datetime:
    """While the pool rolls: its ``rolling_look``, or when the window, the deadline or the
    stall timeout ends the rollout, if sooner."""
    canary = phase.state is PhaseState.CANARY
    due = [now + rolling_look(policy, phase.progress, canary=canary, budget=budget)]
    if phase.last_progress_at is not None:
        due.append(phase.last_progress_at + timedelta(seconds=policy.stall_timeout_seconds))
    return _soonest(due, policy, phase, now, window)


def verify_look(
    policy: PoolPolicy, phase: PhaseProgress, now: datetime, window: windows.Window | None
) -> datetime:
    """While the canary batch is verified: a POLL later, or when the deadline or the window
    ends the verify, if sooner."""
    return _soonest([now + POLL], policy, phase, now, window)


def _soonest(
    due: list[datetime],
    policy: PoolPolicy,
    phase: PhaseProgress,
    now: datetime,
    window: windows.Window | None,
) -> datetime:
    """The first of ``due``, the window's close and the deadline (maxDuration's active time
    used up); never before ``now``."""
    ends = windows.closes_at(window, now)
    if ends is not None:
        due.append(ends)
    if policy.max_duration_seconds is not None:
        left = policy.max_duration_seconds - active_seconds(phase, now)
        due.append(now + timedelta(seconds=max(left, 0)))
    return max(min(due), now)
