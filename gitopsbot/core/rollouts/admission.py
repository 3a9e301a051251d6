"""Whether the next batch of a pool's component may open, and at what size (issue 18).

The controller gives the bot two levers per pool: the switch and the batch percentage it
pins when it opens the switch (R22). Before every open, and at every batch boundary while
the switch is open, ``admit`` decides with those levers:

- **Window fit.** The next batch opens only if its expected duration fits in what is left of
  the maintenance window; otherwise the switch stays closed until the next window. The
  expectation is the median of this phase's measured batches, or, before the first, the
  plan's estimate (``core.rollouts.timeline``: readiness plus the step wait). A batch longer than
  the whole window can never fit: it is admitted (else the pool would never finish) and says so.
  Against ``maxDuration`` only measured batches count: halting on a rough estimate would
  roll back an upgrade that might have finished, so the deadline halts early only once this
  pool has shown how long a batch takes.
- **Availability budget** (``maxUnavailable``, hypervisor phases: its batches are nodes).
  Nodes already out of service (NotReady, or cordoned by a person) use the budget first; the
  batch percentage shrinks so that ``ceil(pct × nodes / 100)`` fits what is left, or the
  pool waits when nothing is left.
- **The budget's pace.** The controller starts the next batch ``batchInterval`` after the
  last on its own while the switch is open (R22): with a short interval it would start one
  before the bot judged the budget at the boundary. While a budget bounds a hypervisor
  phase the bot pins ``batchInterval`` to at least ``BUDGET_INTERVAL``, closes the switch at
  every boundary (``core.rollouts.rollout``) and opens it again only once that interval is over
  (``budget_pace``), the budget judged just before: the batch starts on that open.
- **Tenants and workloads** (worker and client phases): the caller's tenant-share
  percentage caps the batch; a workload wait that is not satisfied keeps the switch closed.

Pure: the policy, the phase as recorded, what was observed and "now" are arguments.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from datetime import datetime, timedelta

from gitopsbot.core.fleet.model import Component, PoolPolicy
from gitopsbot.core.records.journal import PhaseProgress, PhaseState
from gitopsbot.core.rollouts import windows
from gitopsbot.core.rollouts.timeline import (
    BUDGET_INTERVAL_SECONDS,
    DEFAULT_READINESS_SECONDS,
    MIN_STEP_SECONDS,
    format_duration,
)

# How often to look again while the budget is used up (a node may come back any time).
BUDGET_LOOK = timedelta(seconds=10)
# Batches measured in this phase that the expectation is drawn from (the latest ones).
RECENT_BATCHES = 5
# The least batchInterval pinned while a budget bounds a phase: the time the bot has to close
# the switch at a boundary before the controller could start the next batch on its own. It
# looks every 2 s then (core.rollout.MIN_LOOK) and at each GPUPool change: five looks.
BUDGET_INTERVAL = timedelta(seconds=BUDGET_INTERVAL_SECONDS)


@dataclass(frozen=True, slots=True)
class Admission:
    """``admitted``: the batch may start at ``batch_percentage``. Otherwise ``until`` says when
    to look again and ``reason`` why; ``halt``: it can never start (the deadline)."""

    admitted: bool
    batch_percentage: int
    reason: str = ""
    until: datetime | None = None
    halt: bool = False


@dataclass(frozen=True, slots=True)
class Capacity:
    """What the caller observed that bounds the next batch.

    ``nodes``: the pool's GPU nodes; ``out_of_service``: those NotReady or cordoned;
    ``tenant_percentage``/``tenant_reason``: the largest percentage whose batch disrupts no
    more than the pool's tenant share (worker/client; None: no bound); ``workload_hold``:
    why a workload wait keeps the switch closed ("" when it does not), ``workload_until``:
    when to look again for it, ``workload_skip``: the wait expired with ``skip-window``."""

    nodes: int = 0
    out_of_service: tuple[str, ...] = ()
    tenant_percentage: int | None = None
    tenant_reason: str = ""
    workload_hold: str = ""
    workload_until: datetime | None = None
    workload_skip: bool = False


def expected_batch_seconds(
    policy: PoolPolicy, component: Component, phase: PhaseProgress
) -> tuple[float, bool]:
    """How long the next batch is expected to take, and whether that was measured here."""
    measured = phase.batches.seconds[-RECENT_BATCHES:]
    if measured:
        return float(statistics.median(measured)), True
    step_wait = max(pinned_interval_seconds(policy, component), MIN_STEP_SECONDS)
    return float(DEFAULT_READINESS_SECONDS[component] + step_wait), False


def budget_bound(policy: PoolPolicy, component: Component) -> bool:
    """Whether ``maxUnavailable`` bounds this phase: its batches are nodes (hypervisor)."""
    return component is Component.HYPERVISOR and policy.max_unavailable is not None


def pinned_interval_seconds(policy: PoolPolicy, component: Component) -> int:
    """The ``batchInterval`` the bot writes with an open switch: Git's, or at least
    ``BUDGET_INTERVAL`` while a budget bounds the phase."""
    git = policy.batch_interval_seconds
    if budget_bound(policy, component):
        return max(git, int(BUDGET_INTERVAL.total_seconds()))
    return git


def budget_pace(
    policy: PoolPolicy, component: Component, phase: PhaseProgress, now: datetime
) -> tuple[datetime, str] | None:
    """While a budget bounds the phase and its switch was closed at a boundary: when the
    pinned interval since that boundary is over, and why the batch waits for it; None when
    it may open now (no budget, not at a boundary, or the interval is over)."""
    b = phase.batches
    if not budget_bound(policy, component) or phase.state is not PhaseState.BETWEEN:
        return None
    if b.started_at is None or b.from_progress != phase.progress or not phase.progress:
        return None
    pinned = pinned_interval_seconds(policy, component)
    due = b.started_at + timedelta(seconds=pinned)
    if now >= due:
        return None
    return due, (
        f"batchInterval {pinned}s after the batch at {phase.progress}% "
        f"(at least {int(BUDGET_INTERVAL.total_seconds())}s with maxUnavailable)"
    )


def budget_percentage(policy: PoolPolicy, capacity: Capacity, requested: int) -> tuple[int, str]:
    """The batch percentage the availability budget allows (``requested`` when there is no
    budget or it is not binding), and why; 0 means the budget is used up."""
    share, nodes = policy.max_unavailable, capacity.nodes
    if share is None or nodes <= 0:
        return requested, ""
    allowed = share.of(nodes) - len(capacity.out_of_service)
    down = ", ".join(capacity.out_of_service[:5])
    more = (
        f" and {len(capacity.out_of_service) - 5} more" if len(capacity.out_of_service) > 5 else ""
    )
    if allowed <= 0:
        return 0, (
            f"availability budget: maxUnavailable {share} of {nodes} nodes used up by "
            f"{len(capacity.out_of_service)} out of service ({down}{more})"
        )
    pct = min(requested, allowed * 100 // nodes)
    if pct < 1 or math.ceil(pct * nodes / 100) > allowed:
        return 0, (
            f"availability budget: {allowed} node(s) may go out of service, but the smallest "
            f"batch of {nodes} nodes is {math.ceil(nodes / 100)}"
        )
    if pct == requested:
        return requested, ""
    why = f" ({down}{more} out of service)" if capacity.out_of_service else ""
    return pct, (
        f"batch {requested}% shrunk to {pct}% ({math.ceil(pct * nodes / 100)} node(s)): "
        f"maxUnavailable {share} of {nodes}{why}"
    )


def admit(
    *,
    policy: PoolPolicy,
    component: Component,
    phase: PhaseProgress,
    capacity: Capacity,
    requested: int,
    now: datetime,
    window: windows.Window | None,
    active_seconds: float,
) -> Admission:
    """May the next batch of ``component`` open now, and at what percentage (see the module
    docstring). ``requested``: the percentage Git asks for (the canary's for a canary batch);
    ``active_seconds``: switch-open time so far, the clock ``maxDuration`` runs on."""
    if capacity.workload_hold:
        if capacity.workload_skip and window is not None:
            opens = windows.next_open(window, (windows.closes_at(window, now) or now))
            return Admission(False, requested, capacity.workload_hold, opens)
        return Admission(False, requested, capacity.workload_hold, capacity.workload_until)
    pct, notes = requested, []
    if component is Component.HYPERVISOR:
        pct, why = budget_percentage(policy, capacity, requested)
        if pct == 0:
            return Admission(False, requested, why, now + BUDGET_LOOK)
        if why:
            notes.append(why)
    elif capacity.tenant_percentage is not None and capacity.tenant_percentage < pct:
        pct = max(1, capacity.tenant_percentage)
        notes.append(capacity.tenant_reason or f"batch shrunk to {pct}% by the tenant share")
    if policy.window_fit:
        expected, measured = expected_batch_seconds(policy, component, phase)
        took = "measured" if measured else "planned"
        closes = windows.closes_at(window, now)
        if closes is not None and window is not None:
            left = (closes - now).total_seconds()
            whole = window.duration.total_seconds()
            if expected > whole:
                notes.append(
                    f"a batch (~{format_duration(int(expected))}, {took}) is longer than the "
                    f"whole window ({format_duration(int(whole))}): it runs anyway"
                )
            elif expected > left:
                opens = windows.next_open(window, closes)
                return Admission(
                    False,
                    pct,
                    f"next batch (~{format_duration(int(expected))}, {took}) does not fit in "
                    f"the {format_duration(int(left))} left of the maintenance window",
                    opens,
                )
        limit = policy.max_duration_seconds
        if measured and limit is not None and expected > limit - active_seconds:
            left = max(limit - active_seconds, 0)
            return Admission(
                False,
                pct,
                f"pool {policy.name}: next batch (~{format_duration(int(expected))}, measured) "
                f"would not finish within maxDuration ({format_duration(int(left))} left) "
                f"at {phase.progress}%",
                halt=True,
            )
    return Admission(True, pct, "; ".join(notes))
