"""The deadline's clock of a pool phase: the time ``maxDuration`` is measured on.

It runs from the phase's first try to open a batch to its end: while a batch rolls, while the
canary batch is verified, and while the bot's own checks keep the next batch closed (gates,
the availability budget, workload waits). A person's hold and a closed maintenance window
stop it (``core.rollout``): they are not the rollout's doing.

``opened_at`` is when the interval now counting began (None: stopped) and ``open_seconds`` the
intervals before it. Pure.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime

from gitopsbot.core.journal import PhaseProgress, PhaseState


def active_seconds(phase: PhaseProgress, now: datetime) -> float:
    """The phase's counted time so far (the clock maxDuration is measured on)."""
    running = (now - phase.opened_at).total_seconds() if phase.opened_at else 0.0
    return phase.open_seconds + max(running, 0.0)


def stop_clock(phase: PhaseProgress, now: datetime, state: PhaseState) -> PhaseProgress:
    """The phase in ``state`` with the deadline's clock stopped, the time it ran added."""
    return replace(phase, state=state, opened_at=None, open_seconds=int(active_seconds(phase, now)))
