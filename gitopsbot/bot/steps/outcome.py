"""What a step reports (``StepOutcome``), and what every step shares.

Outcomes are values: SUCCEEDED / SKIPPED / FAILED, or RUNNING with a ``retry_after`` when the
world needs more time. Exceptions from the ports become outcomes in one place only,
``Executor.run`` (``bot.steps.executor``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from gitopsbot.core.fleet.model import SecretRef
from gitopsbot.core.records.journal import Effect, RollbackPoint, StepState

VERIFY_TIMEOUT_SECONDS = 600
RETRY = 5.0
# The longest a step (or a pool pass) waits inside a pass on the API server's watch before it
# returns RUNNING: a pass holds the cluster's Lease and the scheduler's worker, so Lease
# loss and shutdown wait at most this long for it (docs/executor.md, "Waiting").
WAIT_SLICE_SECONDS = 10.0
# The least "come back after" once a step has waited: a pass that already waited needs no
# pause of its own, but record() reads 0 as "unset" (5 s), and a cluster whose objects keep
# changing should not be read in a tight loop.
RETRY_AFTER_WAIT = 0.1


def wait_budget(wait_slice: float, limit: float, waited: float) -> float:
    """How long a step may wait on a watch in this pass: ``wait_slice`` at most, and never
    past its ``limit`` (seconds from its start, ``waited`` of them gone); 0: not at all."""
    return max(0.0, min(wait_slice, limit - waited))


def retry_after_wait(waited: float, *, floor: float = RETRY_AFTER_WAIT) -> float:
    """The pause before the next look when the step already waited ``waited`` real seconds:
    the next look comes RETRY after this one began, and at once (``floor``) when the wait
    was that long. A wait that could not block (a fake cluster in a fake-clock test) leaves
    the old RETRY unchanged."""
    return max(RETRY - waited, floor)


class SecretSource(Protocol):
    """Narrow port: values path → secret value (``adapters.secrets.SecretResolver``)."""

    def resolve_all(self, refs: Sequence[SecretRef]) -> dict[str, str]: ...


@dataclass(frozen=True, slots=True)
class StepOutcome:
    state: StepState
    detail: str = ""
    effect: Effect | None = None
    rollback_point: RollbackPoint | None = None
    retry_after: float | None = None
    # Extra files for the state branch (backups), committed with the transition.
    files: Mapping[str, bytes] = field(default_factory=dict)
    # FAILED before the step changed anything in the cluster (the chart could not be fetched,
    # another party holds the release): the operation is blocked, not remediated.
    blocked: bool = False
