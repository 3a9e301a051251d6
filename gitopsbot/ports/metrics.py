"""Gauges the bot sets after each pass that no happening carries (``bot.gauges``): whether
each pool's maintenance window is open now, and how many merges wait in the queue. The
Prometheus adapter (``adapters.metrics``) implements it."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol


class FleetGauges(Protocol):
    def pool_windows(self, cluster: str, open_by_pool: Mapping[str, bool]) -> None:
        """The cluster's pools and whether each one's window is open now."""
        ...

    def queued_merges(self, cluster: str, count: int) -> None: ...
