"""Per-pool rollout timeline from node count and policy (F4's batch arithmetic).

The controller rolls a component in progress steps of ``batchPercentage``: batch size is
``ceil(pct × total / 100)``, there are ``ceil(100 / pct)`` steps (progress counts finished
batches × pct, capped at 100, whatever the node count), and between steps it waits
``max(batchInterval, 3s)`` (tensorfusion-facts §3.2). Each batch also waits for its pods to
become ready; that part is an estimate (``readiness_seconds``). Phases run one after another.

Issue 18's admission settings change the estimate (``core.rollouts.admission`` decides the same way
at run time):

- ``maxUnavailable`` bounds a hypervisor batch: its percentage shrinks so that
  ``ceil(pct × nodes / 100) ≤ maxUnavailable.of(nodes)`` (``budget_batch_percentage``, the
  arithmetic of ``admission.budget_percentage`` with no node already out of service), so
  more batches, and ``batchInterval`` counts at least ``BUDGET_INTERVAL_SECONDS`` (the
  bot pins it: the controller must not start a batch before the bot judged the budget);
- ``gates`` are judged with the switch closed before every batch (the canary's too):
  ``GATE_JUDGE_SECONDS`` per judgement, assuming every gate passes at its first judgement;
  after the re-open the controller still waits ``batchInterval`` since its last batch, which
  the step wait already counts. An inconclusive judgement adds ``gateRetryInterval`` each;
- ``windowFit`` (with a window): a batch opens only if it fits in what is left of the window,
  so a window that holds no whole number of batches leaves its tail unused, and a batch
  longer than the whole window runs anyway (``admission_notes`` say so).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from gitopsbot.core.fleet.model import Component, PoolPolicy, Share

# The controller requeues a finished batch after at least this long (PendingRequeueDuration).
MIN_STEP_SECONDS = 3
# Rough time for one batch's new pods to come up, per component (image pull + start).
DEFAULT_READINESS_SECONDS: dict[Component, int] = {
    Component.HYPERVISOR: 90,
    Component.WORKER: 60,
    Component.CLIENT: 60,
}
# Assumed length of one gate judgement with the switch closed: the bot's look that sees the
# batch finished (core.rollout.POLL at most) plus one Prometheus round trip per gate, every
# gate passing at its first judgement.
GATE_JUDGE_SECONDS = 10
# The least batchInterval the bot pins while maxUnavailable bounds a hypervisor phase, so the
# controller cannot start a batch the budget was not judged for (core.admission).
BUDGET_INTERVAL_SECONDS = 10


@dataclass(frozen=True, slots=True)
class PhaseTimeline:
    component: Component
    batch_percentage: int
    batch_size: int
    batches: int
    estimate_seconds: int
    canary_batch_size: int = 0
    # The batch percentage Git asks for when the availability budget shrank it (0: it did not).
    requested_percentage: int = 0
    # Gate judgements in this phase (one before every batch, the canary's too); 0: no gates.
    gate_judgements: int = 0
    # How long one batch is expected to take: readiness, the step wait, a gate judgement.
    batch_seconds: int = 0

    @property
    def requested_batches(self) -> int:
        """The batches the requested percentage would take (``batches`` when not shrunk)."""
        if not self.requested_percentage or not self.batches:
            return self.batches
        return progress_steps(self.requested_percentage)


@dataclass(frozen=True, slots=True)
class PoolTimeline:
    pool: str
    nodes: int
    phases: tuple[PhaseTimeline, ...]
    estimate_seconds: int
    window_seconds: int | None
    max_duration_seconds: int | None
    notes: tuple[str, ...] = ()
    # How issue 18's admission settings change the estimate (budget, gates, window-fit); kept
    # apart from ``notes`` so a pool without those settings renders as before.
    admission_notes: tuple[str, ...] = ()

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


def budget_batch_percentage(share: Share | None, nodes: int, requested: int) -> int:
    """The batch percentage the availability budget allows before any node is out of service:
    ``requested`` when there is no budget or it does not bind, else the largest ``pct`` with
    ``ceil(pct × nodes / 100) ≤ share.of(nodes)``; 0 when no batch fits (as
    ``admission.budget_percentage`` computes it)."""
    if share is None or nodes <= 0:
        return requested
    allowed = share.of(nodes)
    if allowed <= 0:
        return 0
    pct = min(requested, allowed * 100 // nodes)
    if pct < 1 or math.ceil(pct * nodes / 100) > allowed:
        return 0
    return pct


def phase_timeline(
    pool: PoolPolicy, component: Component, nodes: int, *, readiness_seconds: int
) -> PhaseTimeline:
    pct = requested = pool.batch_percentage
    canary_pct = pool.canary_batch_percentage
    if component is Component.HYPERVISOR and pool.max_unavailable is not None:
        # The budget binds hypervisor batches only (their batches are nodes): core.admission.
        pct = budget_batch_percentage(pool.max_unavailable, nodes, requested) or requested
        if canary_pct:
            canary_pct = budget_batch_percentage(pool.max_unavailable, nodes, canary_pct) or (
                canary_pct
            )
    steps = progress_steps(pct) if nodes > 0 else 0
    interval = pool.batch_interval_seconds
    if component is Component.HYPERVISOR and pool.max_unavailable is not None:
        interval = max(interval, BUDGET_INTERVAL_SECONDS)
    step_wait = max(interval, MIN_STEP_SECONDS)
    gate_pause = GATE_JUDGE_SECONDS if pool.gates else 0
    estimate = steps * readiness_seconds + max(steps - 1, 0) * step_wait
    canary = 0
    if canary_pct and nodes > 0:
        # The bot rolls a canary batch first, then pauses to verify before the rest (R22: the
        # controller has no canary of its own, so the bot drives it with batchPercentage).
        canary = batch_size(canary_pct, nodes)
        estimate += readiness_seconds + step_wait
    judgements = (steps + (1 if canary else 0)) if pool.gates else 0
    estimate += judgements * gate_pause
    return PhaseTimeline(
        component=component,
        batch_percentage=pct,
        batch_size=batch_size(pct, nodes),
        batches=steps,
        estimate_seconds=estimate,
        canary_batch_size=canary,
        requested_percentage=requested if pct != requested else 0,
        gate_judgements=judgements,
        batch_seconds=readiness_seconds + step_wait + gate_pause if nodes > 0 else 0,
    )


def _admission_notes(pool: PoolPolicy, phases: tuple[PhaseTimeline, ...], nodes: int) -> list[str]:
    """How the budget, the gates and window-fit change this pool's estimate (see the module
    docstring)."""
    out: list[str] = []
    share = pool.max_unavailable
    for ph in phases:
        if ph.component is not Component.HYPERVISOR or share is None or nodes <= 0:
            continue
        allowed = share.of(nodes)
        if budget_batch_percentage(share, nodes, pool.batch_percentage) == 0:
            out.append(
                f"budget: maxUnavailable {share} of {nodes} nodes allows {allowed}: no "
                "hypervisor batch can open (the estimate assumes the requested "
                f"{pool.batch_percentage}%)"
            )
        elif ph.requested_percentage:
            out.append(
                f"budget: {ph.requested_percentage}% → {ph.batch_percentage}%, {ph.batches} "
                f"batches instead of {ph.requested_batches} (maxUnavailable {share} of {nodes} "
                f"nodes: {allowed} at once; {ph.batch_size} per batch)"
            )
        else:
            out.append(
                f"budget: maxUnavailable {share} of {nodes} nodes ({allowed} at once) holds "
                f"the {ph.batch_percentage}% batch of {ph.batch_size}; nodes already NotReady "
                "or cordoned use it first and shrink batches at run time"
            )
        if pool.batch_interval_seconds < BUDGET_INTERVAL_SECONDS and ph.batches > 1:
            out.append(
                f"budget: batchInterval {format_duration(pool.batch_interval_seconds)} pinned "
                f"to {format_duration(BUDGET_INTERVAL_SECONDS)}: the bot closes the switch at "
                "every batch boundary and opens the next batch itself once the budget is "
                "judged, so the controller cannot start one the budget does not allow"
            )
    judged = sum(ph.gate_judgements for ph in phases)
    if pool.gates and judged:
        out.append(
            f"gates: {judged} judgement(s) with the switch closed, one before every batch, "
            f"~{format_duration(GATE_JUDGE_SECONDS)} each (assumed: the bot's look plus one "
            "Prometheus round trip, every gate passing first time; after the re-open the "
            "controller still waits batchInterval since its last batch); each inconclusive "
            f"judgement adds {format_duration(pool.gate_retry_interval_seconds)}, at most "
            f"{pool.gate_retries} retries per batch"
        )
    workloads = pool.workloads
    sessions = [
        ph.component.value
        for ph in phases
        if ph.component is not Component.HYPERVISOR and ph.batches
    ]
    if workloads is not None and sessions:
        if workloads.wait is not None:
            out.append(
                f"waitForWorkloads: each {'/'.join(sessions)} batch may wait up to "
                f"{format_duration(workloads.wait.timeout_seconds)} for sessions to end, then "
                f"{workloads.wait.on_timeout} (not in the estimate)"
            )
        if workloads.max_tenant_share_percent is not None:
            out.append(
                f"maxTenantDisruption {workloads.max_tenant_share_percent}%: "
                f"{'/'.join(sessions)} batches may be smaller, so more of them, once the "
                "bot sees the tenants (not in the estimate)"
            )
    window = pool.maintenance_window.duration_seconds if pool.maintenance_window else None
    if window is None:
        return out
    if not pool.window_fit:
        out.append(
            "windowFit off: a batch opens whenever the window is open and may run past its end"
        )
        return out
    for ph in phases:
        if not ph.batches or not ph.batch_seconds:
            continue
        each = ph.batch_seconds
        if each > window:
            out.append(
                f"window-fit: a {ph.component.value} batch (~{format_duration(each)}) is longer "
                f"than the whole window ({format_duration(window)}): it runs anyway, past the "
                "window's end"
            )
            continue
        fit = window // each
        total = ph.batches + (1 if ph.canary_batch_size else 0)
        if total <= fit:
            continue
        tail = window - fit * each
        windows_needed = math.ceil(total / fit)
        unused = (
            f"; the last {format_duration(tail)} of each window stays unused (no whole batch "
            "fits in it)"
            if tail
            else ""
        )
        out.append(
            f"window-fit: a {format_duration(window)} window holds {fit} {ph.component.value} "
            f"batch(es) of ~{format_duration(each)}{unused}, so its {total} batches take "
            f"{windows_needed} windows"
        )
    return out


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
        admission_notes=tuple(_admission_notes(pool, phases, total)),
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
