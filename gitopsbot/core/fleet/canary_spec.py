"""The GPU canary as ``canary-smoke.yaml`` writes it (issue 18): the smoke Pod, its timeout and
the pools it runs for; what the canary does with it is ``core.rollouts.canary_smoke``'s."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

FILE = "canary-smoke.yaml"


DEFAULT_TIMEOUT = 300


class PoolShape(Protocol):
    """What the smoke's choice of pools reads of a pool (``core.fleet.model.PoolPolicy``, which
    itself names ``CanarySmoke``: a Protocol, so the two modules do not import each other)."""

    @property
    def name(self) -> str: ...

    @property
    def canary_batch_percentage(self) -> int: ...


@dataclass(frozen=True, slots=True)
class CanarySmoke:
    """``canary-smoke.yaml``: the Pod (a plain manifest), how long it may take, and the pools
    (the rollout.yaml names) it runs for; empty: every pool with ``canaryBatchPercentage``."""

    manifest: Mapping[str, Any]
    timeout_seconds: int = DEFAULT_TIMEOUT
    pools: tuple[str, ...] = ()

    def applies_to(self, pool: PoolShape) -> bool:
        if self.pools:
            return pool.name in self.pools
        return pool.canary_batch_percentage > 0
