"""The scheduler (real apscheduler 3, threads): one job per cluster, never two passes of one
cluster at once, a nudge runs a pass now, a pass asking to come back sooner is brought
forward, clusters added/removed, and shutdown waits for the running pass (step boundary).
No timed assertions: events with generous timeouts only guard against hangs."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta

from gitopsbot.bot.reconciler import PassResult
from gitopsbot.bot.scheduler import Scheduler


class WallClock:
    def now(self) -> datetime:
        return datetime.now(UTC)

    def sleep(self, seconds: float) -> None:  # pragma: no cover
        raise AssertionError

    def monotonic(self) -> float:  # pragma: no cover
        return 0.0


class Recorder:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.running: dict[str, int] = {}
        self.overlap = False
        self.calls: list[str] = []
        self.gate = threading.Event()
        self.entered = threading.Event()
        self.called = threading.Event()
        self.next_at: datetime | None = None

    def reconcile(self, cluster: str) -> PassResult:
        with self.lock:
            self.running[cluster] = self.running.get(cluster, 0) + 1
            self.overlap |= self.running[cluster] > 1
            self.calls.append(cluster)
        self.entered.set()
        self.gate.wait(10)
        with self.lock:
            self.running[cluster] -= 1
        self.called.set()
        return PassResult(cluster, "test", next_at=self.next_at)


def test_one_job_per_cluster_and_no_overlap() -> None:
    rec = Recorder()
    s = Scheduler(reconcile=rec.reconcile, clock=WallClock(), interval_seconds=3600, workers=4)
    s.set_clusters(["a", "b"])
    assert s.clusters == ["a", "b"]
    s.start()
    try:
        assert rec.entered.wait(10)
        for _ in range(5):
            s.nudge("a")  # while a's pass is blocked: must not start a second one
        rec.gate.set()
        assert rec.called.wait(10)
    finally:
        s.shutdown(wait=True)
    assert not rec.overlap
    assert {"a", "b"} <= set(rec.calls)


def test_nudge_runs_a_pass_now_and_next_at_brings_it_forward() -> None:
    rec = Recorder()
    rec.gate.set()
    s = Scheduler(reconcile=rec.reconcile, clock=WallClock(), interval_seconds=3600)
    s.set_clusters(["a"])
    s.start()
    try:
        assert rec.called.wait(10)  # the first pass runs at once
        rec.called.clear()
        s.nudge()  # all clusters
        assert rec.called.wait(10)
        rec.called.clear()
        rec.next_at = datetime.now(UTC) + timedelta(milliseconds=10)
        s.nudge("a")
        assert rec.called.wait(10)
        rec.called.clear()
        # Brought forward from the hour-long interval to "soonest" (1 s) after next_at.
        assert rec.called.wait(30)
    finally:
        s.shutdown(wait=True)
    assert s.results["a"].action == "test"


def test_clusters_removed_and_shutdown_waits_for_the_running_pass() -> None:
    rec = Recorder()
    s = Scheduler(reconcile=rec.reconcile, clock=WallClock(), interval_seconds=3600)
    s.set_clusters(["a", "b"])
    s.set_clusters(["a"])
    assert s.clusters == ["a"]
    s.start()
    assert rec.entered.wait(10)
    seen_at_return: list[int] = []

    def stop() -> None:
        s.shutdown(wait=True)
        seen_at_return.append(rec.running["a"])  # passes still inside at that moment

    stopper = threading.Thread(target=stop)
    stopper.start()
    rec.gate.set()
    stopper.join(10)
    assert seen_at_return == [0]
