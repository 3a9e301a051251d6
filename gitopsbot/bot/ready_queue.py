"""The fair ready-queue of ``run``: which cluster a free worker takes next (issue #29).

A cluster is *due* when its clock tick comes (``tick``), when a webhook or the operator wakes
it (``nudge``), or when its last pass asked to come back at once (``finish``'s repeat). Due
clusters wait here, one entry per cluster, until one of a fixed number of workers takes one
(``take``); the worker runs that cluster's pass and says so (``finish``). So:

* one pass per cluster at a time: a cluster in flight is never queued; what makes it due
  meanwhile is remembered and decided when its pass ends (a nudge: again at once, fetching;
  a tick: once more after it, unless a repeat already follows);
* nothing due is dropped: a request for a cluster already waiting merges into its entry
  (``coalesced``), which keeps the older wait; a cluster due while every worker was busy runs
  when one frees, and is counted (``delayed``);
* fair: urgent entries (a nudge, a repeat "at once") go first, then periodic ticks, each in
  the order they became due (the one that waited longest first). A slow pass holds one worker
  and never the others' places in the queue.

The queue knows nothing of passes or Git: the scheduler (``bot.scheduler``) decides what a
repeat is (``Repeat``) from the pass's result, inside ``finish``'s lock, so a nudge cannot
fall between the end of a pass and its repeat.
"""

from __future__ import annotations

import heapq
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from datetime import datetime

from gitopsbot.ports.metrics import DispatchStats


@dataclass(frozen=True)
class Repeat:
    """A pass right after the one that ended: ``fetch`` False is a follow-up (no fetch);
    ``chain``: passes asking for "at once" in a row before it; ``fetched_at``: when the
    chain's last fetching pass began (``bot.scheduler`` says why it matters)."""

    fetch: bool
    chain: int
    fetched_at: datetime | None


FRESH = Repeat(fetch=True, chain=0, fetched_at=None)  # a tick's or a nudge's run


@dataclass(frozen=True)
class Run:
    """What a worker took: the cluster's pass to run now."""

    cluster: str
    urgent: bool
    waited_since: float  # monotonic: when it became due
    repeat: Repeat


@dataclass
class _Entry:
    urgent: bool
    since: float
    repeat: Repeat
    seq: int


@dataclass
class _During:
    """What made a cluster due while its pass was in flight."""

    nudged: bool = False
    ticked_at: float | None = None
    urgent: bool = False  # taken as urgent: someone waits for it (a push, a watch event)


@dataclass
class _Counts:
    delayed_busy: int = 0
    delayed_running: int = 0
    coalesced: int = 0
    passes: dict[str, int] = field(default_factory=lambda: {"urgent": 0, "periodic": 0})


class ReadyQueue:
    def __init__(self, workers: int, monotonic: Callable[[], float]) -> None:
        self.workers = workers
        self._now = monotonic
        self._cond = threading.Condition()
        self._heap: list[tuple[int, float, int, str]] = []  # (0 urgent/1 tick, since, seq)
        self._queued: dict[str, _Entry] = {}  # the live entry of each waiting cluster
        self._running: dict[str, _During] = {}
        self._known: set[str] = set()
        self._seq = 0
        self._idle = 0  # workers waiting in ``take``, none until ``open``
        self._opened = False
        self._closed = False
        self._counts = _Counts()

    # -- the fleet ---------------------------------------------------------------------------

    @property
    def clusters(self) -> list[str]:
        with self._cond:
            return sorted(self._known)

    def set_clusters(self, names: Iterable[str]) -> tuple[set[str], set[str]]:
        """The clusters to run from now on: (added, removed). A removed cluster's entry goes;
        its pass in flight, if any, finishes and is not repeated."""
        wanted = set(names)
        with self._cond:
            added, removed = wanted - self._known, self._known - wanted
            self._known = wanted
            for name in removed:
                self._queued.pop(name, None)  # its heap item is skipped when popped
        return added, removed

    # -- what makes a cluster due -------------------------------------------------------------

    def tick(self, cluster: str) -> None:
        """Its periodic run is due."""
        with self._cond:
            if cluster not in self._known or self._closed:
                return
            during = self._running.get(cluster)
            if during is not None:
                if during.ticked_at is None:
                    during.ticked_at = self._now()
                else:
                    self._counts.coalesced += 1
                return
            self._put(cluster, urgent=False, repeat=FRESH)

    def nudge(self, cluster: str) -> None:
        """Run it as soon as a worker frees, ahead of periodic ticks; a pass in flight is
        followed at once by one that fetches."""
        with self._cond:
            if cluster not in self._known or self._closed:
                return
            during = self._running.get(cluster)
            if during is not None:
                self._counts.coalesced += during.nudged
                during.nudged = True
                return
            self._put(cluster, urgent=True, repeat=FRESH)

    def _put(
        self, cluster: str, *, urgent: bool, repeat: Repeat, since: float | None = None
    ) -> None:
        """Queue the cluster or merge into its waiting entry (lock held)."""
        old = self._queued.get(cluster)
        if old is not None:
            self._counts.coalesced += 1
            # A nudge makes a waiting follow-up fetch (a push may have come); a tick does not
            # (the chain fetches again within an interval by itself).
            merged = old.repeat
            if urgent and repeat.fetch and not merged.fetch:
                merged = replace(merged, fetch=True)
            if (urgent and not old.urgent) or merged != old.repeat:
                self._push(cluster, urgent or old.urgent, old.since, merged)
            return
        when = self._now() if since is None else since
        if self._opened and len(self._queued) >= self._idle:
            self._counts.delayed_busy += 1  # every free worker already has an entry ahead
        self._push(cluster, urgent, when, repeat)

    def _push(self, cluster: str, urgent: bool, since: float, repeat: Repeat) -> None:
        self._seq += 1
        self._queued[cluster] = _Entry(urgent, since, repeat, self._seq)
        heapq.heappush(self._heap, (0 if urgent else 1, since, self._seq, cluster))
        self._cond.notify()

    # -- the workers -------------------------------------------------------------------------

    def open(self) -> None:
        """Workers start taking: entries queued before that beyond one per worker waited
        for a worker, and are counted as delayed."""
        with self._cond:
            self._opened = True
            self._counts.delayed_busy += max(0, len(self._queued) - self.workers)

    def take(self) -> Run | None:
        """The next cluster to run (blocks); None once closed."""
        with self._cond:
            self._idle += 1
            try:
                while True:
                    if self._closed:
                        return None
                    run = self._pop()
                    if run is not None:
                        self._running[run.cluster] = _During(urgent=run.urgent)
                        self._counts.passes["urgent" if run.urgent else "periodic"] += 1
                        return run
                    self._cond.wait()
            finally:
                self._idle -= 1

    def _pop(self) -> Run | None:
        while self._heap:
            _, _, seq, cluster = heapq.heappop(self._heap)
            entry = self._queued.get(cluster)
            if entry is None or entry.seq != seq:  # merged into a newer item, or removed
                continue
            del self._queued[cluster]
            return Run(cluster, entry.urgent, entry.since, entry.repeat)
        return None

    def finish(self, cluster: str, then: Callable[[bool], Repeat | None]) -> None:
        """The cluster's pass ended. ``then(nudged)`` (called under the lock, so keep it
        quick and pure): the pass to run at once after it, or None. A tick during the pass
        runs once after it, unless a repeat follows (which fetches within an interval)."""
        with self._cond:
            during = self._running.pop(cluster, _During())
            self._cond.notify_all()  # ``wait_idle``
            if self._closed or cluster not in self._known:
                return
            repeat = then(during.nudged)
            if repeat is not None:
                self._counts.coalesced += during.ticked_at is not None
                self._put(cluster, urgent=True, repeat=repeat)
            elif during.ticked_at is not None:
                self._counts.delayed_running += 1
                self._put(cluster, urgent=False, repeat=FRESH, since=during.ticked_at)

    # -- stopping ----------------------------------------------------------------------------

    def close(self) -> None:
        """No pass starts from now on; what waits is dropped (the process is stopping)."""
        with self._cond:
            self._closed = True
            self._queued.clear()
            self._heap.clear()
            self._cond.notify_all()

    def wait_idle(self, timeout: float) -> bool:
        """Wait until no pass is in flight; False if one still is after ``timeout``."""
        with self._cond:
            return self._cond.wait_for(lambda: not self._running, timeout=timeout)

    @property
    def in_flight(self) -> int:
        with self._cond:
            return len(self._running)

    @property
    def urgent(self) -> bool:
        """An urgent pass waits or runs: what background work (drift) gives way to."""
        with self._cond:
            return any(d.urgent for d in self._running.values()) or any(
                e.urgent for e in self._queued.values()
            )

    def running(self, cluster: str) -> bool:
        with self._cond:
            return cluster in self._running

    def stats(self) -> DispatchStats:
        with self._cond:
            oldest = min((e.since for e in self._queued.values()), default=None)
            c = self._counts
            return DispatchStats(
                workers=self.workers,
                busy=len(self._running),
                queued=len(self._queued),
                oldest_wait_seconds=0.0 if oldest is None else max(0.0, self._now() - oldest),
                delayed_workers_busy=c.delayed_busy,
                delayed_pass_running=c.delayed_running,
                coalesced=c.coalesced,
                passes_urgent=c.passes["urgent"],
                passes_periodic=c.passes["periodic"],
            )
