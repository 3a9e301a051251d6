"""What a step reports (``StepOutcome``), and what every step shares.

Outcomes are values: SUCCEEDED / SKIPPED / FAILED, or RUNNING with a ``retry_after`` when the
world needs more time. Exceptions from the ports become outcomes in one place only,
``Executor.run`` (``bot.steps.executor``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from gitopsbot.core.journal import Effect, RollbackPoint, StepState
from gitopsbot.core.model import SecretRef

VERIFY_TIMEOUT_SECONDS = 600
RETRY = 5.0


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
