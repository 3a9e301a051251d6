"""The long-running loop: a fixed pool of workers takes due clusters from a fair queue.

apscheduler is the clock: one interval job per cluster (with jitter, so clusters do not all
hit Git at once) whose only work is to mark the cluster due (``ReadyQueue.tick``, a few
microseconds: it never misses, and ``misfire_grace_time`` is None, so a late tick still
counts). ``workers`` threads of our own take due clusters from the ready-queue
(``bot.ready_queue``: one pass per cluster at a time, urgent before periodic, longest wait
first, nothing due dropped, delays counted) and run ``reconcile(cluster)`` (one pass: at most
one step). A slow pass holds one worker; the others keep taking (#29: with one apscheduler
job per cluster on the pool, 1,000 clusters missed thousands of runs and a webhook waited
behind the fleet).

A pass that asks to come back sooner (``PassResult.next_at``) moves its cluster's tick
forward (never sooner than ``soonest_seconds``); one asking to come back at once (a step
done, the next can start) is queued again at once, ahead of periodic ticks, up to
IMMEDIATE_PASSES in a row; a webhook calls ``nudge`` to queue it ahead of periodic ticks (a
pass in flight is followed at once by another). ``shutdown`` stops taking new passes and
waits for running ones, so the bot stops at a step boundary: a pass records its transition
before it returns.

A repeat due only to "at once" (no nudge during the pass before) calls ``follow_up(cluster)``
instead, when given: the bot's ``reconcile(cluster, fetch=False)``, the same pass without the
fetch that starts it (#13: a round trip to the Git remote on the critical path between two
steps, for nothing). Nothing new is there to fetch. The state branch's only writer is the
cluster's Lease holder, this process, whose pushes move its own tracking ref (a push refused
all the same fetches and replays, ``GitRepo.push``). The watched branch changes by a push,
which a webhook announces: one arriving while a pass is in flight or its follow-up waits
makes the next pass fetch (``nudge``). Without webhooks a push is still seen as soon as
before (within a poll interval): the first pass of every run (periodic tick or nudge)
fetches; at most IMMEDIATE_PASSES follow-ups run in a row; and once ``interval_seconds``
have passed since the chain's last fetching pass began (passes that wait for the cluster
take seconds each), the next repeat fetches again. A tick during a chain merges into it.

Why ``shutdown`` does not call apscheduler's ``shutdown(wait=True)``: apscheduler 3 holds its
job-store lock while it waits for running jobs, and a pass ending with a "come back at" moves
its job (``get_job``/``modify_job``), which needs that lock: a deadlock. So once stopping, no
pass starts and nothing is moved; apscheduler is shut down without waiting, and the passes in
flight are joined here, for a bounded time. (Passes no longer run inside apscheduler jobs,
but the rule stays: a tick job in flight must not hold the stop either.)

Resting clusters (issue 29, docs/decisions.md#resting-clusters): with ``poll`` given (the
fleet poll: one fetch for the fleet, then a wake-up for each cluster the watched branch's new
commits touched, ``bot.push_router``), apscheduler also calls ``poll`` every interval, and a
pass that says its cluster is at rest (``PassResult.rest_until``: nothing active, queued or
held) defers the cluster's tick to then: an idle fleet makes one fetch per interval and a pass
per cluster per idle look (10 minutes while its release is watched), not a pass per cluster
per interval. What changes a resting cluster wakes it: a push touching it (the poll or a
webhook), its release changing or its watch breaking (``adapters.release_watch``). Without
``poll`` a rest is ignored: the periodic pass is then the only way a push is seen.

A heartbeat job on its own one-thread executor stamps ``last_heartbeat`` every
``heartbeat_seconds``: it runs whatever the passes do, so it shows that apscheduler's loop
still dispatches (``/healthz``, docs/metrics.md). ``/metrics`` and the probes are served by
the metrics server's own threads, never by a worker.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable
from dataclasses import replace
from datetime import datetime, timedelta

from apscheduler.executors.pool import ThreadPoolExecutor
from apscheduler.jobstores.base import JobLookupError
from apscheduler.schedulers.background import BackgroundScheduler
from apscheduler.triggers.interval import IntervalTrigger

from gitopsbot.bot import log_context
from gitopsbot.bot.ready_queue import ReadyQueue, Repeat, Run
from gitopsbot.bot.reconciler import PassResult
from gitopsbot.errors import GitInterrupted, GitOpsBotError, TransientError
from gitopsbot.ports.clock import Clock
from gitopsbot.ports.metrics import DispatchStats

log = logging.getLogger(__name__)
# Ticks only queue, so apscheduler's "skipped"/"missed" lines would be about our own clock
# jobs, not passes: errors only.
logging.getLogger("apscheduler.scheduler").setLevel(logging.ERROR)


# Passes asking to come back at once that run back to back before the floor between passes
# (``soonest_seconds``) applies again: a guard against a pass that always asks for "now"
# spinning, never a limit a real operation reaches between two waits.
IMMEDIATE_PASSES = 20


HEARTBEAT_JOB = "heartbeat"
POLL_JOB = "fleet-poll"


def job_id(cluster: str) -> str:
    return f"cluster:{cluster}"


class Scheduler:
    def __init__(
        self,
        *,
        reconcile: Callable[[str], PassResult],
        clock: Clock,
        follow_up: Callable[[str], PassResult] | None = None,
        interval_seconds: int = 30,
        jitter_seconds: int = 5,
        workers: int = 4,
        soonest_seconds: float = 0.5,
        shutdown_timeout_seconds: float = 3600.0,
        heartbeat_seconds: float = 5.0,
        poll: Callable[[], None] | None = None,
    ) -> None:
        self._reconcile = reconcile
        # A pass following at once from the previous one, no webhook since: see the docstring.
        self._follow_up = follow_up or reconcile
        self._clock = clock
        self.workers = workers  # passes of different clusters that may run at once
        self._interval = max(interval_seconds, 1)
        self._interval_delta = timedelta(seconds=self._interval)
        self._jitter = jitter_seconds
        self._soonest = timedelta(seconds=soonest_seconds)
        self._scheduler = BackgroundScheduler(
            executors={
                # Tick jobs only queue a cluster: one thread keeps up with any fleet.
                "default": ThreadPoolExecutor(max_workers=1),
                HEARTBEAT_JOB: ThreadPoolExecutor(max_workers=1),  # never behind a tick
            },
            job_defaults={"coalesce": True, "max_instances": 1, "misfire_grace_time": None},
            timezone="UTC",
        )
        self.queue = ReadyQueue(workers, clock.monotonic)
        self._threads: list[threading.Thread] = []
        self._stop_lock = threading.Lock()
        self._stopping = False
        self._shutdown_timeout = shutdown_timeout_seconds
        self._lock = threading.Lock()
        self.results: dict[str, PassResult] = {}
        self.heartbeat_seconds = heartbeat_seconds
        self._poll = poll  # the fleet poll; given, clusters may rest (see the docstring)
        self.deferred = 0  # ticks deferred by a rest (for tests and benchmarks)
        self._rests: dict[str, datetime] = {}  # cluster → until when it rests (``stats``)
        self.last_heartbeat: float | None = None  # clock.monotonic() of the last beat

    @property
    def clusters(self) -> list[str]:
        return self.queue.clusters

    def set_clusters(self, names: Iterable[str]) -> None:
        """Run new clusters (their first pass is due at once), drop those gone from the
        fleet (a pass in flight finishes)."""
        added, removed = self.queue.set_clusters(names)
        with self._lock:
            for name in removed:
                self._rests.pop(name, None)
        for name in removed:
            try:
                self._scheduler.remove_job(job_id(name))
            except JobLookupError:
                pass
        first_tick = self._clock.now() + self._interval_delta
        for name in sorted(added):
            self._scheduler.add_job(
                self.queue.tick,
                IntervalTrigger(seconds=self._interval, jitter=self._jitter, timezone="UTC"),
                args=(name,),
                id=job_id(name),
                name=f"tick {name}",
                next_run_time=first_tick,
                replace_existing=True,
            )
            self.queue.tick(name)  # the first pass now, not a tick later

    def start(self) -> None:
        self._scheduler.add_job(
            self._beat,
            IntervalTrigger(seconds=self.heartbeat_seconds, timezone="UTC"),
            id=HEARTBEAT_JOB,
            name="heartbeat",
            executor=HEARTBEAT_JOB,
            replace_existing=True,
        )
        self._beat()  # then every heartbeat_seconds
        if self._poll is not None:
            self._scheduler.add_job(
                self._poll,
                IntervalTrigger(seconds=self._interval, timezone="UTC"),
                id=POLL_JOB,
                name="fleet poll",
                executor=HEARTBEAT_JOB,  # it only hands the poll to its own thread
                replace_existing=True,
            )
        self._scheduler.start()
        self.queue.open()
        for n in range(self.workers):
            worker = threading.Thread(target=self._work, name=f"pass-worker-{n}", daemon=True)
            self._threads.append(worker)
            worker.start()

    def _beat(self) -> None:
        self.last_heartbeat = self._clock.monotonic()

    @property
    def alive(self) -> bool:
        """Started, not stopping, and apscheduler's loop thread running."""
        return self._scheduler.running and not self.stopping

    @property
    def busy(self) -> bool:
        """A pass is in flight now."""
        return self.queue.in_flight > 0

    @property
    def urgent(self) -> bool:
        """A woken cluster's pass waits or runs (``ReadyQueue.urgent``)."""
        return self.queue.urgent

    def stats(self) -> DispatchStats:
        """The ready-queue now, and the clusters at rest, for ``/metrics`` (read at scrape
        time)."""
        now = self._clock.now()
        with self._lock:
            resting = sum(1 for until in self._rests.values() if until > now)
        return replace(self.queue.stats(), resting=resting)

    def nudge(self, cluster: str | None = None) -> None:
        """Run the cluster's pass as soon as a worker frees, ahead of periodic ticks (None:
        every cluster), e.g. from a webhook."""
        for name in self.clusters if cluster is None else [cluster]:
            self.queue.nudge(name)

    @property
    def stopping(self) -> bool:
        with self._stop_lock:
            return self._stopping

    def shutdown(self, *, wait: bool = True, timeout: float | None = None) -> bool:
        """Stop scheduling; with ``wait``, return once the running passes have recorded.

        Waits at most ``timeout`` seconds (default: the constructor's
        ``shutdown_timeout_seconds``). Returns False if passes were still running then."""
        with self._stop_lock:
            self._stopping = True
        self.queue.close()  # no pass starts from now on
        if self._scheduler.running:
            # Never wait inside apscheduler: see the module docstring.
            self._scheduler.shutdown(wait=False)
        if not wait:
            return True
        limit = self._shutdown_timeout if timeout is None else timeout
        done = self.queue.wait_idle(limit)
        if not done:
            log.warning("shutdown: passes still running after %.0fs; not waiting", limit)
        return done

    def _move(self, name: str, when: datetime) -> None:
        if self.stopping:  # no moves once stopping: the job store may be shutting down
            return
        try:
            job = self._scheduler.get_job(job_id(name))
            if job is not None and (job.next_run_time is None or when < job.next_run_time):
                job.modify(next_run_time=when)
        except JobLookupError:  # removed meanwhile
            pass

    def _defer(self, name: str, when: datetime) -> None:
        """A resting cluster's tick moved later, to ``when`` (never sooner)."""
        if self.stopping:
            return
        try:
            job = self._scheduler.get_job(job_id(name))
            if job is None or job.next_run_time is None:
                return
            if when > job.next_run_time:
                job.modify(next_run_time=when)
                self.deferred += 1
            with self._lock:  # resting, whether this rest or an earlier one deferred it
                self._rests[name] = max(when, job.next_run_time)
        except JobLookupError:  # removed meanwhile
            pass

    def _work(self) -> None:
        while (run := self.queue.take()) is not None:
            self._run(run)

    def _run(self, run: Run) -> None:
        """One pass of ``run.cluster`` on this worker, then what follows it (see the module
        docstring): a nudge during it, or an "at once" answer, queues the next pass at once,
        ahead of periodic ticks; else a later "come back at" moves the cluster's tick."""
        cluster, chain = run.cluster, run.repeat
        fetched_at = chain.fetched_at if chain.fetched_at is not None else self._clock.now()
        if chain.fetch:
            fetched_at = self._clock.now()
        call = self._reconcile if chain.fetch else self._follow_up
        result: PassResult | None = None
        with self._lock:
            self._rests.pop(cluster, None)  # woken (or its rest over): a pass again
        try:
            with log_context.pass_of(cluster):  # its lines name the cluster, none after
                result = self._pass(cluster, call)
        finally:
            at_once = result is not None and self._at_once(result)
            immediate = chain.chain + 1 if at_once else 0
            now = self._clock.now()

            def then(nudged: bool) -> Repeat | None:
                if self.stopping or not (nudged or (at_once and immediate <= IMMEDIATE_PASSES)):
                    return None
                if nudged or now - fetched_at >= self._interval_delta:
                    return Repeat(fetch=True, chain=immediate, fetched_at=None)
                return Repeat(fetch=False, chain=immediate, fetched_at=fetched_at)

            self.queue.finish(cluster, then)
        rest = result.rest_until if result is not None and result.next_at is None else None
        if rest is not None and self._poll is not None:
            self._defer(cluster, rest)
            return
        if self._poll is not None:
            # Not at rest (a merge woke it, its pass failed): its periodic pass within an
            # interval again, not at the end of a rest its tick was deferred to (found at
            # 1,000 clusters: a woken cluster's helm step had no pass for ten minutes).
            self._move(cluster, self._clock.now() + self._interval_delta)
        if (
            result is not None
            and result.next_at is not None
            and not (at_once and immediate <= IMMEDIATE_PASSES)
        ):
            self._move(cluster, max(result.next_at, self._clock.now() + self._soonest))

    def _at_once(self, result: PassResult) -> bool:
        return result.next_at is not None and result.next_at <= self._clock.now()

    def _pass(self, cluster: str, run: Callable[[str], PassResult]) -> PassResult | None:
        """One pass through ``run`` (``reconcile`` or ``follow_up``), failures logged."""
        try:
            result = run(cluster)
        except GitInterrupted as e:  # Ctrl-C stopped its Git transfer: the process is ending
            log.info("%s: pass stopped: %s", cluster, e)
            return None
        except TransientError as e:
            log.warning("%s: pass failed, will retry: %s", cluster, e)
            return None
        except GitOpsBotError as e:
            log.error("%s: pass failed: %s", cluster, e)
            return None
        except Exception:  # a bug must not kill the loop for every cluster
            log.exception("%s: pass crashed", cluster)
            return None
        with self._lock:
            self.results[cluster] = result
        # At DEBUG: bot.progress_log says "pass finished" at INFO (not every idle poll).
        log.debug("%s: %s %s", cluster, result.action, result.detail)
        return result
