"""Gauges the bot sets after each pass that no happening carries (``bot.gauges``): whether
each pool's maintenance window is open now, how many merges wait in the queue, and how many
nodes of each rolling pool are in each state (issue #18). The Prometheus adapter
(``adapters.metrics``) implements it."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol

from gitopsbot.core.node_states import NodeState


class FleetGauges(Protocol):
    def pool_windows(self, cluster: str, open_by_pool: Mapping[str, bool]) -> None:
        """The cluster's pools and whether each one's window is open now."""
        ...

    def queued_merges(self, cluster: str, count: int) -> None: ...

    def rollout_nodes(
        self, cluster: str, by_phase: Mapping[tuple[str, str], Mapping[NodeState, int]]
    ) -> None:
        """(pool, component) → nodes per state, for each phase of the cluster's running (or
        last) operation that has per-node records; the cluster's other phases are dropped."""
        ...
