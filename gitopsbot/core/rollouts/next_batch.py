"""Whether a phase's next batch may start: its gates due, its workload wait, its admission.

The phase state machine (core.rollouts.rollout) asks these before it opens the switch and at
every batch boundary while the switch is open. Pure: observations and "now" are arguments.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timedelta

from gitopsbot.core.fleet.model import PoolPolicy
from gitopsbot.core.records.journal import PhaseProgress
from gitopsbot.core.rollouts import admission
from gitopsbot.core.rollouts.phase_clock import active_seconds
from gitopsbot.core.rollouts.phase_looks import POLL
from gitopsbot.core.rollouts.pool_observation import PhaseContext
from gitopsbot.core.rollouts.workload_wait import WaitDecision, decide_wait

# A gate pass lets the switch open this long afterwards; later (a window or a hold came in
# between) the gates are judged again before the next batch.
GATES_FRESH = timedelta(seconds=60)


def gates_due(policy: PoolPolicy, phase: PhaseProgress, now: datetime) -> bool:
    b = phase.batches
    if not policy.gates:
        return False
    fresh = b.gates_passed_at is not None and now - b.gates_passed_at <= GATES_FRESH
    return not (b.gates_passed == phase.progress and fresh)


def workload_decision(ctx: PhaseContext, phase: PhaseProgress) -> WaitDecision | None:
    """The pool's waitForWorkloads judged now; its timeout counts from the first look that
    found something to wait for (``batches.wait_since``)."""
    policy, observed, now = ctx.policy, ctx.observed, ctx.now
    wait = policy.workloads.wait if policy.workloads is not None else None
    if wait is None or observed.workload is None:
        return None
    since = phase.batches.wait_since or now
    return decide_wait(wait, observed.workload, (now - since).total_seconds())


def _capacity(ctx: PhaseContext, phase: PhaseProgress) -> admission.Capacity:
    observed, now = ctx.observed, ctx.now
    wait = workload_decision(ctx, phase)
    holds = wait is not None and wait.action in ("wait", "skip-window")
    return admission.Capacity(
        nodes=observed.nodes,
        out_of_service=observed.out_of_service,
        tenant_percentage=observed.tenant_percentage,
        tenant_reason=observed.tenant_reason,
        workload_hold=wait.reason if holds and wait is not None else "",
        workload_until=now + POLL if holds else None,
        workload_skip=wait is not None and wait.action == "skip-window",
    )


def admit(ctx: PhaseContext, phase: PhaseProgress, requested: int) -> admission.Admission:
    adm = admission.admit(
        policy=ctx.policy,
        component=ctx.component,
        phase=phase,
        capacity=_capacity(ctx, phase),
        requested=requested,
        now=ctx.now,
        window=ctx.window,
        active_seconds=active_seconds(phase, ctx.now),
    )
    if not adm.admitted and adm.until is None and not adm.halt:
        adm = replace(adm, until=ctx.now + POLL)
    return adm


def stop_between(ctx: PhaseContext, phase: PhaseProgress) -> str:
    """Why the switch must close at this batch boundary ("" when the next batch may follow
    as the controller schedules it): gates to judge, or admission no longer allowing the
    pinned batch (the window, the deadline, the budget, tenants, a workload wait)."""
    policy = ctx.policy
    if policy.gates:
        return f"batch finished at {phase.progress}%: gates judge the next"
    wait = workload_decision(ctx, phase)
    if wait is not None and wait.action == "halt":
        return wait.reason
    pinned = phase.batch_percentage or policy.batch_percentage
    adm = admit(ctx, phase, pinned)
    if not adm.admitted:
        return adm.reason
    if adm.batch_percentage != pinned:
        return adm.reason or f"next batch at {adm.batch_percentage}%"
    if admission.budget_bound(policy, ctx.component):
        # The controller may not start the next batch on its own: the budget is judged again
        # once the pinned interval is over, just before the switch opens (issue 28 item 7).
        return f"batch finished at {phase.progress}%: the availability budget judges the next"
    return ""
