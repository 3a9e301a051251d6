"""Which phases run now: a pool's components one after another, pools in policy order.

Pure: the rollout policy, the phases and their states are arguments.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from gitopsbot.core.fleet.model import Component, PoolPolicy, RolloutPolicy
from gitopsbot.core.records.journal import PhaseState


def phase_components(pool: PoolPolicy) -> tuple[Component, ...]:
    """The phases the bot drives, in order: only components whose switch it turns on (F3)."""
    order = [c for c in Component if c in pool.phases or pool.switch(c)]
    return tuple(c for c in order if pool.switch(c))


@dataclass(frozen=True, slots=True)
class PhaseRef:
    step: str
    pool: str
    component: Component


def runnable_phases(
    policy: RolloutPolicy, phases: Sequence[PhaseRef], states: Mapping[str, PhaseState]
) -> tuple[PhaseRef, ...]:
    """The phases to drive now.

    Within a pool, phases go one after another. The canary pool (if any) runs alone and must
    finish before any other starts. Other pools start in policy order, at most
    ``max_parallel_pools`` unfinished at once. A halted phase blocks everything.
    """
    if any(states.get(p.step) is PhaseState.HALTED for p in phases):
        return ()
    by_pool: dict[str, list[PhaseRef]] = {}
    for ref in phases:
        by_pool.setdefault(ref.pool, []).append(ref)
    order = [p.name for p in policy.ordered_pools() if p.name in by_pool]
    order += [name for name in by_pool if name not in order]
    if policy.canary_pool in by_pool:
        order.remove(policy.canary_pool)
        order.insert(0, policy.canary_pool)

    def current(pool: str) -> PhaseRef | None:
        return next((r for r in by_pool[pool] if states.get(r.step) is not PhaseState.DONE), None)

    result: list[PhaseRef] = []
    for index, pool in enumerate(order):
        head = current(pool)
        if head is None:
            continue
        if index == 0 and pool == policy.canary_pool:
            return (head,)
        if len(result) < max(policy.max_parallel_pools, 1):
            result.append(head)
    return tuple(result)
