"""Per-pool rollout timeline from node count and policy (F4's batch arithmetic).

The controller rolls a component in progress steps of ``batchPercentage``: batch size is
``ceil(pct × total / 100)``, there are ``ceil(100 / pct)`` steps (progress counts finished
batches × pct, capped at 100, whatever the node count), and between steps it waits
``max(batchInterval, 3s)`` (tensorfusion-facts §3.2). Each batch also waits for its pods to
become ready; that part is an estimate (``readiness_seconds``). Phases run one after another.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from gitopsbot.core.model import Component, PoolPolicy

# The controller requeues a finished batch after at least this long (PendingRequeueDuration).
MIN_STEP_SECONDS = 3
# Rough time for one batch's new pods to come up, per component (image pull + start).
DEFAULT_READINESS_SECONDS: dict[Component, int] = {
    Component.HYPERVISOR: 90,
    Component.WORKER: 60,
    Component.CLIENT: 60,
}


@dataclass(frozen=True, slots=True)
class PhaseTimeline:
    component: Component
    batch_percentage: int
    batch_size: int
    batches: int
    estimate_seconds: int
    canary_batch_size: int = 0


@dataclass(frozen=True, slots=True)
class PoolTimeline:
    pool: str
    nodes: int
    phases: tuple[PhaseTimeline, ...]
    estimate_seconds: int
    window_seconds: int | None
    max_duration_seconds: int | None
    notes: tuple[str, ...] = ()

    @property
    def fits_window(self) -> bool | None:
        if self.window_seconds is None:
            return None
        return self.estimate_seconds <= self.window_seconds


def batch_size(percentage: int, total: int) -> int:
    """F4: ceil(batchPercentage% × total); 0 nodes → 0."""
    pct = percentage if 0 < percentage <= 100 else 100
    return math.ceil(pct * total / 100)


def progress_steps(percentage: int) -> int:
    """F4: progress climbs in steps of pct to 100: ceil(100 / pct) batches."""
    pct = percentage if 0 < percentage <= 100 else 100
    return math.ceil(100 / pct)


def phase_timeline(
    pool: PoolPolicy, component: Component, nodes: int, *, readiness_seconds: int
) -> PhaseTimeline:
    pct = pool.batch_percentage
    steps = progress_steps(pct) if nodes > 0 else 0
    step_wait = max(pool.batch_interval_seconds, MIN_STEP_SECONDS)
    estimate = steps * readiness_seconds + max(steps - 1, 0) * step_wait
    canary = 0
    if pool.canary_batch_percentage and nodes > 0:
        # The bot rolls a canary batch first, then pauses to verify before the rest (R22: the
        # controller has no canary of its own, so the bot drives it with batchPercentage).
        canary = batch_size(pool.canary_batch_percentage, nodes)
        estimate += readiness_seconds + step_wait
    return PhaseTimeline(
        component=component,
        batch_percentage=pct,
        batch_size=batch_size(pct, nodes),
        batches=steps,
        estimate_seconds=estimate,
        canary_batch_size=canary,
    )


def pool_timeline(
    pool: PoolPolicy,
    components: tuple[Component, ...],
    *,
    nodes: int | None = None,
    readiness: dict[Component, int] | None = None,
) -> PoolTimeline:
    """Timeline for rolling ``components`` (in the pool's phase order) through ``pool``."""
    total = pool.nodes if nodes is None else nodes
    ready = readiness or DEFAULT_READINESS_SECONDS
    ordered = [c for c in pool.phases if c in components] + [
        c for c in components if c not in pool.phases
    ]
    phases = tuple(
        phase_timeline(pool, c, total, readiness_seconds=ready.get(c, 60)) for c in ordered
    )
    estimate = sum(p.estimate_seconds for p in phases)
    window = pool.maintenance_window.duration_seconds if pool.maintenance_window else None
    notes: list[str] = []
    if total <= 0 and components:
        notes.append("no GPU nodes: nothing rolls and progress may stay empty (R14)")
    if window is not None and estimate > window:
        notes.append(
            f"estimate {format_duration(estimate)} exceeds the maintenance window "
            f"({format_duration(window)}): the rollout pauses at the window's end and resumes "
            "in the next one"
        )
    if pool.max_duration_seconds is not None and estimate > pool.max_duration_seconds:
        notes.append(
            f"estimate {format_duration(estimate)} exceeds maxDuration "
            f"({format_duration(pool.max_duration_seconds)})"
        )
    return PoolTimeline(
        pool=pool.name,
        nodes=total,
        phases=phases,
        estimate_seconds=estimate,
        window_seconds=window,
        max_duration_seconds=pool.max_duration_seconds,
        notes=tuple(notes),
    )


def format_duration(seconds: int) -> str:
    """``3725`` → ``1h02m05s``; ``45`` → ``45s``."""
    h, rest = divmod(int(seconds), 3600)
    m, s = divmod(rest, 60)
    if h:
        return f"{h}h{m:02d}m{s:02d}s"
    if m:
        return f"{m}m{s:02d}s"
    return f"{s}s"
