"""Gauges the bot sets after each pass that no happening carries (``bot.gauges``): whether
each pool's maintenance window is open now, how many merges wait in the queue, and how many
nodes of each rolling pool are in each state (issue #18). The Prometheus adapter
(``adapters.metrics``) implements it."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol

from gitopsbot.core.records.node_states import NodeState


class FleetGauges(Protocol):
    def pool_windows(self, cluster: str, open_by_pool: Mapping[str, bool]) -> None:
        """The cluster's pools and whether each one's window is open now."""
        ...

    def queued_merges(self, cluster: str, count: int) -> None: ...

    def rollout_nodes(
        self,
        cluster: str,
        by_phase: Mapping[tuple[str, str], Mapping[NodeState, int]],
        *,
        zeros: bool = True,
    ) -> None:
        """(pool, component) → nodes per state, for each phase of the cluster's running (or
        last) operation that has per-node records; the cluster's other phases are dropped.
        ``zeros``: every state is a series, 0 too (a running operation, so a node leaving a
        state is seen); else only the states some node is in (an ended one: nothing moves;
        at 1,000 idle clusters the zeros were most of a scrape, #29)."""
        ...


@dataclass(frozen=True)
class DispatchStats:
    """The scheduler's ready-queue now (``bot.ready_queue``), read at scrape time: fleet-wide
    figures only, no series per cluster. The counts are totals since the start."""

    workers: int
    busy: int  # workers running a pass
    queued: int  # clusters due, waiting for a worker
    oldest_wait_seconds: float  # how long the longest-waiting of them has waited (0: none)
    delayed_workers_busy: int  # runs due while every worker was busy, run when one freed
    delayed_pass_running: int  # ticks during the cluster's own pass, run right after it
    coalesced: int  # due requests merged into a run already waiting or following
    passes_urgent: int  # passes started for a nudge or a repeat "at once"
    passes_periodic: int  # passes started for a periodic tick
    resting: int = 0  # clusters at rest now: no periodic pass before their next idle look
