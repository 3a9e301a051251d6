"""What ``/healthz`` and ``/readyz`` answer: the loop's heartbeat and the passes' outcomes.

``HealthWatch`` is a pass listener (``ports.observers``): it remembers when a pass last ended
without error. ``alive`` and ``ready`` gather that with the scheduler's heartbeat and the
shard keeper's state and ask ``core.replicas.health`` (which says what each checks).
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from gitopsbot.bot.scheduler import Scheduler
from gitopsbot.core.replicas import health
from gitopsbot.ports.clock import Clock

# A good pass older than this many poll intervals: the fleet repository is not answering.
STALE_POLLS = 3
STALE_FLOOR_SECONDS = 60.0


class HealthWatch:
    def __init__(
        self,
        scheduler: Scheduler,
        clock: Clock,
        *,
        poll_interval_seconds: float,
        leases_running: Callable[[], bool] | None = None,
        holding: Callable[[], int] | None = None,
    ) -> None:
        """``leases_running``/``holding``: the shard keeper's loop runs / the cluster Leases
        this replica holds, when replicas share the fleet (else None)."""
        self._scheduler = scheduler
        self._clock = clock
        self.stale_seconds = max(STALE_POLLS * poll_interval_seconds, STALE_FLOOR_SECONDS)
        self._leases_running = leases_running
        self._holding = holding
        self._lock = threading.Lock()
        self._passes_good = 0
        self._last_good: float | None = None
        self._last_failed = False

    def pass_finished(
        self, cluster: str, *, action: str, detail: str, error: str, seconds: float
    ) -> None:
        now = self._clock.monotonic()
        with self._lock:
            self._last_failed = bool(error)
            if not error:
                self._passes_good += 1
                self._last_good = now

    def fleet_polled(self, answered: bool) -> None:
        """The fleet poll (or a webhook's routing) fetched: Git answering counts as a good
        pass does for "the fleet repository answers", once a first pass ended. Clusters at
        rest (docs/decisions.md#resting-clusters) may have no pass for ten minutes; the poll
        runs every interval."""
        if not answered:
            return
        now = self._clock.monotonic()
        with self._lock:
            if self._passes_good:
                self._last_good = now
                self._last_failed = False

    def seen(self) -> health.Seen:
        s = self._scheduler
        with self._lock:
            good, last_good, failed = self._passes_good, self._last_good, self._last_failed
        sharded = self._leases_running is not None
        return health.Seen(
            now=self._clock.monotonic(),
            started=s.alive,
            heartbeat=s.last_heartbeat,
            heartbeat_seconds=s.heartbeat_seconds,
            passes_good=good,
            last_good=last_good,
            last_failed=failed,
            busy=s.busy,
            sharded=sharded,
            leases_running=self._leases_running() if self._leases_running else False,
            holding=self._holding() if self._holding else 0,
            stale_seconds=self.stale_seconds,
        )

    def alive(self) -> health.Verdict:
        return health.alive(self.seen())

    def ready(self) -> health.Verdict:
        return health.ready(self.seen())
