"""#29: clusters at rest (docs/decisions.md#resting-clusters). An idle pass says how long its
cluster may rest (its next idle look); the scheduler defers the cluster's periodic tick to
then only while the fleet poll runs, which fetches once per interval for the fleet and wakes
the clusters a push touched; anything active, queued or held keeps its periodic pass.

Reconciler parts: fake clock, fake release watch. Scheduler parts: real apscheduler 3 and
threads, waiting on events with generous bounds (no timed assertions). The fleet poll's
routing is tested over real Git in tests/git/test_push_router.py."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta

from gitopsbot.bot.health import HealthWatch
from gitopsbot.bot.reconciler import MANUAL_CHECK, MANUAL_CHECK_WATCHED, PassResult
from gitopsbot.bot.scheduler import Scheduler
from gitopsbot.testing import FakeReleaseWatch
from tests.executor.conftest import Env, fleet_files
from tests.executor.test_reconciler_scheduler import WallClock

WAIT = 30.0  # seconds an awaited event may take on a loaded machine


# -- the pass says how long it may rest -------------------------------------------------------


def test_an_idle_pass_rests_until_its_next_look_and_only_an_idle_one(env: Env) -> None:
    rec = env.reconciler()
    watch = FakeReleaseWatch(healthy=True)
    rec.release_watch = watch
    first = rec.reconcile("lab")
    assert first.action == "baseline" and first.rest_until is None
    looked = env.clock.now()
    idle = rec.reconcile("lab")  # the first look: the watch starts, not yet healthy for it
    assert idle.action == "idle" and idle.rest_until == looked + MANUAL_CHECK
    env.clock.t += timedelta(seconds=30)
    idle = rec.reconcile("lab")  # the watch healthy: the next look is ten minutes after it
    assert idle.action == "idle" and idle.rest_until == looked + MANUAL_CHECK_WATCHED
    watch.is_healthy = False  # broken (the watch wakes the cluster): back to a minute
    env.clock.t += timedelta(seconds=1)
    idle = rec.reconcile("lab")
    assert idle.rest_until == looked + MANUAL_CHECK

    # A merge: the operation's passes never rest, nor does the one queued behind it.
    env.merge_pr(12, "lab: hv:2", fleet_files("1.0.0", "hv:2"))
    started = rec.reconcile("lab")
    assert started.action == "started" and started.rest_until is None
    env.merge_pr(13, "lab: hv:3", fleet_files("1.0.0", "hv:3"))
    queued = rec.reconcile("lab")
    assert queued.action == "queued" and queued.rest_until is None
    for _ in range(120):
        env.clock.t += timedelta(minutes=1)
        result = rec.reconcile("lab")
        if result.action == "idle":
            break
        assert result.rest_until is None, result
    assert result.action == "idle" and result.rest_until is not None  # both done: at rest


def test_a_merge_queued_for_its_window_does_not_rest(env: Env) -> None:
    rec = env.reconciler()
    rec.release_watch = FakeReleaseWatch(healthy=True)
    rec.reconcile("lab")
    files = fleet_files("1.0.0", "hv:2", window="0 3 * * *")
    files["clusters/lab/rollout.yaml"] = files["clusters/lab/rollout.yaml"].replace(
        "  b:\n",
        '    maintenanceWindow:\n      cron: "0 4 * * *"\n      duration: 1h\n'
        "      timeZone: UTC\n  b:\n",
    )  # no pool may roll at 01:00
    env.merge_pr(12, "lab: hv:2", files)
    result = rec.reconcile("lab")
    assert result.action == "queued" and result.rest_until is None
    assert result.next_at == env.clock.t.replace(hour=3)  # it asks for the opening itself
    env.clock.t = env.clock.t.replace(hour=2, minute=59)
    assert rec.reconcile("lab").rest_until is None


# -- the scheduler defers a resting cluster's tick only while the fleet poll runs -------------


class Resting:
    """A pass that always says "at rest for an hour"; counts passes and polls."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.until = datetime.now(UTC) + timedelta(hours=1)  # one look's time: the same rest
        self.calls: list[str] = []
        self.called = threading.Event()
        self.polls = 0
        self.polled = threading.Event()

    def reconcile(self, cluster: str) -> PassResult:
        with self.lock:
            self.calls.append(cluster)
        self.called.set()
        return PassResult(cluster, "idle", rest_until=self.until)

    def poll(self) -> None:
        with self.lock:
            self.polls += 1
        self.polled.set()

    def count(self) -> int:
        with self.lock:
            return len(self.calls)


def wait_until(what: object, timeout: float = WAIT) -> bool:
    event = threading.Event()
    deadline = datetime.now(UTC) + timedelta(seconds=timeout)
    while not what():  # type: ignore[operator]
        if datetime.now(UTC) > deadline:
            return False
        event.wait(0.02)
    return True


def test_with_the_fleet_poll_a_resting_cluster_has_no_periodic_pass() -> None:
    rest = Resting()
    s = Scheduler(
        reconcile=rest.reconcile, clock=WallClock(), interval_seconds=1, jitter_seconds=0,
        poll=rest.poll,
    )  # fmt: skip
    s.set_clusters(["a", "b"])
    s.start()
    try:
        assert wait_until(lambda: rest.count() == 2)  # the first passes, at once
        assert wait_until(lambda: rest.polls >= 3)  # three intervals later ...
        assert rest.count() == 2  # ... no periodic pass: both rest for the hour
        assert s.deferred >= 2 and s.stats().resting == 2  # /metrics shows them
        s.nudge("a")  # a push touching a (the poll or a webhook) wakes it
        assert wait_until(lambda: rest.count() == 3)
        assert rest.calls[-1] == "a"
    finally:
        s.shutdown(wait=True)


def test_a_woken_cluster_that_no_longer_rests_passes_every_interval_again() -> None:
    """Found at 1,000 clusters: a merge woke a resting cluster, its operation's helm step
    asked for no particular time, and its tick stayed at the rest's end ten minutes away, so
    the running operation had no pass for ten minutes."""
    rest = Resting()
    busy = threading.Event()  # set: the cluster has an operation now, no rest
    plain = rest.reconcile

    def reconcile(cluster: str) -> PassResult:
        result = plain(cluster)
        return PassResult(cluster, "operating") if busy.is_set() else result

    s = Scheduler(
        reconcile=reconcile, clock=WallClock(), interval_seconds=1, jitter_seconds=0,
        poll=rest.poll,
    )  # fmt: skip
    s.set_clusters(["a"])
    s.start()
    try:
        assert wait_until(lambda: rest.count() == 1 and s.stats().resting == 1)
        s.nudge("a")  # a wake-up that finds nothing: at rest again, until the same look
        assert wait_until(lambda: rest.count() == 2 and s.stats().resting == 1)
        busy.set()
        s.nudge("a")  # a merge: the pass starts an operation, which asks for no time
        assert wait_until(lambda: rest.count() == 3)
        assert wait_until(lambda: rest.count() >= 5)  # periodic passes again, no nudge
        assert s.stats().resting == 0
    finally:
        s.shutdown(wait=True)


def test_without_the_fleet_poll_a_rest_is_ignored() -> None:
    rest = Resting()
    s = Scheduler(reconcile=rest.reconcile, clock=WallClock(), interval_seconds=1, jitter_seconds=0)
    s.set_clusters(["a"])
    s.start()
    try:
        # Nothing else would see a push: the periodic pass goes on every interval.
        assert wait_until(lambda: rest.count() >= 3)
        assert s.deferred == 0
    finally:
        s.shutdown(wait=True)


# -- /readyz while the whole fleet rests ------------------------------------------------------


class Ticking:
    def __init__(self) -> None:
        self.t = 0.0

    def monotonic(self) -> float:
        return self.t

    def now(self) -> datetime:  # pragma: no cover
        return datetime.now(UTC)


def test_the_fleet_poll_keeps_the_bot_ready_while_every_cluster_rests() -> None:
    rest = Resting()
    s = Scheduler(reconcile=rest.reconcile, clock=WallClock(), interval_seconds=30, poll=rest.poll)
    clock = Ticking()
    health = HealthWatch(s, clock, poll_interval_seconds=30)  # type: ignore[arg-type]
    health.fleet_polled(True)  # before any pass: not a reason to be ready
    assert health.seen().passes_good == 0 and health.seen().last_good is None
    health.pass_finished("a", action="idle", detail="", error="", seconds=0.1)
    clock.t += 600  # ten minutes of rest: no pass at all
    assert health.seen().now - (health.seen().last_good or 0) > health.stale_seconds
    health.fleet_polled(False)  # Git did not answer: nothing to vouch for
    assert health.seen().last_good == 0.0
    health.fleet_polled(True)
    assert health.seen().last_good == 600.0
