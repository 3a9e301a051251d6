"""The long-running loop: one apscheduler job per cluster, never two passes at once for one.

Each job runs ``reconcile(cluster)`` (one pass: at most one step). Jobs use an interval
trigger with jitter (clusters do not all hit Git at once), ``max_instances=1`` (one pass per
cluster at a time) and ``coalesce`` (a backlog of missed runs becomes one run). A pass that
asks to come back sooner (``PassResult.next_at``) moves its job's next run forward (never
sooner than ``soonest_seconds``), and one asking to come back at once (a step done, the next
can start) runs again in the same job; a webhook calls ``nudge`` to run now. ``shutdown``
stops taking new passes and waits for running ones, so the bot stops at a step boundary: a
pass records its transition before it returns.

A repeat due only to "at once" (no nudge during the pass before) calls ``follow_up(cluster)``
instead, when given: the bot's ``reconcile(cluster, fetch=False)``, the same pass without the
fetch that starts it (#13: a round trip to the Git remote on the critical path between two
steps, for nothing). Nothing new is there to fetch. The state branch's only writer is the
cluster's Lease holder, this process, whose pushes move its own tracking ref (a push refused
all the same fetches and replays, ``GitRepo.push``). The watched branch changes by a push,
which a webhook announces: one arriving while a pass is in flight makes the next pass fetch
(``nudge``). Without webhooks a push is still seen as soon as before (within a poll
interval): the first pass of every job run (periodic tick or nudge) fetches; a job runs at
most IMMEDIATE_PASSES follow-ups in a row; and once ``interval_seconds`` have passed since
the job's last fetching pass began (passes that wait for the cluster take seconds each), the
next repeat fetches again.

Why ``shutdown`` does not call apscheduler's ``shutdown(wait=True)``: apscheduler 3 holds its
job-store lock while it waits for running jobs, and a pass ending with a "come back at" moves
its job (``get_job``/``modify_job``), which needs that lock: a deadlock. So once stopping, no
pass starts and nothing is moved; apscheduler is shut down without waiting, and the passes in
flight are joined here, for a bounded time.

A heartbeat job on its own one-thread executor stamps ``last_heartbeat`` every
``heartbeat_seconds``: it runs whatever the passes do, so it shows that apscheduler's loop
still dispatches (``/healthz``, docs/metrics.md).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable
from datetime import datetime, timedelta

from apscheduler.executors.pool import ThreadPoolExecutor
from apscheduler.jobstores.base import JobLookupError
from apscheduler.schedulers.background import BackgroundScheduler
from apscheduler.triggers.interval import IntervalTrigger

from gitopsbot.bot import log_context
from gitopsbot.bot.reconciler import PassResult
from gitopsbot.errors import GitInterrupted, GitOpsBotError, TransientError
from gitopsbot.ports.clock import Clock

log = logging.getLogger(__name__)
# "skipped: maximum number of running instances reached" is the rule we asked for (never two
# passes at once for one cluster), not a warning worth a log line every tick.
logging.getLogger("apscheduler.scheduler").setLevel(logging.ERROR)


# Passes asking to come back at once that run back to back in one job before the floor
# between passes (``soonest_seconds``) applies again: a guard against a pass that always
# asks for "now" spinning, never a limit a real operation reaches between two waits.
IMMEDIATE_PASSES = 20


HEARTBEAT_JOB = "heartbeat"


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
                "default": ThreadPoolExecutor(max_workers=workers),
                HEARTBEAT_JOB: ThreadPoolExecutor(max_workers=1),  # never behind a pass
            },
            job_defaults={"coalesce": True, "max_instances": 1, "misfire_grace_time": 60},
            timezone="UTC",
        )
        self._lock = threading.Lock()
        self._running: set[str] = set()  # clusters whose pass is in flight
        self._nudged: set[str] = set()  # nudged while in flight: run again at once
        # Guards ``_stopping`` and ``_in_flight`` together: a pass either counts itself in
        # before stopping is set (and is waited for) or sees the flag and does not start.
        self._flight = threading.Condition()
        self._stopping = False
        self._in_flight = 0
        self._shutdown_timeout = shutdown_timeout_seconds
        self.results: dict[str, PassResult] = {}
        self.heartbeat_seconds = heartbeat_seconds
        self.last_heartbeat: float | None = None  # clock.monotonic() of the last beat

    @property
    def clusters(self) -> list[str]:
        jobs = self._scheduler.get_jobs()
        return sorted(j.id.split(":", 1)[1] for j in jobs if j.id != HEARTBEAT_JOB)

    def set_clusters(self, names: Iterable[str]) -> None:
        """Add jobs for new clusters, remove those of clusters gone from the fleet."""
        wanted = set(names)
        for name in set(self.clusters) - wanted:
            self._scheduler.remove_job(job_id(name))
        for name in sorted(wanted - set(self.clusters)):
            self._scheduler.add_job(
                self._run,
                IntervalTrigger(seconds=self._interval, jitter=self._jitter, timezone="UTC"),
                args=(name,),
                id=job_id(name),
                name=f"reconcile {name}",
                next_run_time=self._clock.now(),
            )

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
        self._scheduler.start()

    def _beat(self) -> None:
        self.last_heartbeat = self._clock.monotonic()

    @property
    def alive(self) -> bool:
        """Started, not stopping, and apscheduler's loop thread running."""
        return self._scheduler.running and not self.stopping

    @property
    def busy(self) -> bool:
        """A pass is in flight now."""
        with self._flight:
            return self._in_flight > 0

    def nudge(self, cluster: str | None = None) -> None:
        """Run the cluster's pass now (None: every cluster), e.g. from a webhook."""
        names = self.clusters if cluster is None else [cluster]
        for name in names:
            with self._lock:
                if name in self._running:
                    # The pass in flight fetched before this event: it runs again at once.
                    self._nudged.add(name)
                    continue
            self._move(name, self._clock.now())

    @property
    def stopping(self) -> bool:
        with self._flight:
            return self._stopping

    def shutdown(self, *, wait: bool = True, timeout: float | None = None) -> bool:
        """Stop scheduling; with ``wait``, return once the running passes have recorded.

        Waits at most ``timeout`` seconds (default: the constructor's
        ``shutdown_timeout_seconds``). Returns False if passes were still running then."""
        with self._flight:
            self._stopping = True
        if self._scheduler.running:
            # Never wait inside apscheduler: see the module docstring.
            self._scheduler.shutdown(wait=False)
        if not wait:
            return True
        limit = self._shutdown_timeout if timeout is None else timeout
        with self._flight:
            done = self._flight.wait_for(lambda: self._in_flight == 0, timeout=limit)
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

    def _run(self, cluster: str) -> None:
        with self._flight:
            if self._stopping:  # queued before shutdown: not started, not a step
                return
            self._in_flight += 1
        try:
            # Passes run in this job until no nudge came in while one was in flight: apscheduler
            # would skip a second instance, and the event must not wait for the next tick. A
            # pass that asks to come back at once (a step done, the next one can start) also
            # runs again here, up to IMMEDIATE_PASSES in a row; past that the floor applies.
            # Such a repeat, with no nudge during the pass before, is a follow-up: it does not
            # fetch (safe: at most IMMEDIATE_PASSES in a row, then the next job run fetches; a
            # webhook during a follow-up makes the next pass fetch; the state branch's only
            # writer is the Lease holder, and a refused push replays after a fetch anyway; see
            # the module docstring). The first pass of a job run (tick or nudge), a repeat for
            # a nudge (a webhook: maybe a new commit), and a repeat an interval or more after
            # the job's last fetching pass began all fetch.
            immediate = 0
            run = self._reconcile
            fetched_at = self._clock.now()  # when the last pass that fetched began
            while True:
                with self._lock:
                    self._running.add(cluster)
                    self._nudged.discard(cluster)
                with log_context.pass_of(cluster):  # its lines name the cluster, none after
                    result = self._pass(cluster, run)
                at_once = result is not None and self._at_once(result)
                immediate = immediate + 1 if at_once else 0
                with self._lock:
                    self._running.discard(cluster)
                    nudged = cluster in self._nudged
                again = nudged or (at_once and immediate <= IMMEDIATE_PASSES)
                if not again or self.stopping:
                    break
                if nudged or self._clock.now() - fetched_at >= self._interval_delta:
                    run, fetched_at = self._reconcile, self._clock.now()
                else:
                    run = self._follow_up
        finally:
            with self._lock:
                self._running.discard(cluster)
            with self._flight:
                self._in_flight -= 1
                self._flight.notify_all()

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
        if result.next_at is not None:
            self._move(cluster, max(result.next_at, self._clock.now() + self._soonest))
        return result
