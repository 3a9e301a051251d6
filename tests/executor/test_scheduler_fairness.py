"""The scheduler's fair, bounded dispatch (#29 item 5): a slow pass holds one worker only, a
nudge goes ahead of periodic ticks queued before it, a chain of "at once" passes lets the
others' urgent runs in between, N due clusters on W workers all run (the delayed ones
counted), a tick during a cluster's own pass runs after it instead of being dropped, and the
queue's figures reach ``/metrics`` while every worker is busy.
Real threads and events; bounded waits only guard against hangs, nothing is timed."""

from __future__ import annotations

import threading
import urllib.request
from collections.abc import Callable
from datetime import UTC, datetime

from gitopsbot.adapters.metrics import BotMetrics
from gitopsbot.adapters.metrics_server import MetricsServer
from gitopsbot.bot.health import HealthWatch
from gitopsbot.bot.reconciler import PassResult
from gitopsbot.bot.scheduler import Scheduler, job_id


class StepClock:
    """Real wall time (apscheduler compares with it), a monotonic time the test moves."""

    def __init__(self) -> None:
        self.t = 1000.0

    def now(self) -> datetime:
        return datetime.now(UTC)

    def sleep(self, seconds: float) -> None:  # pragma: no cover
        raise AssertionError

    def monotonic(self) -> float:
        return self.t


class Passes:
    """Records pass starts in order; a cluster in ``blocked`` waits for its gate."""

    def __init__(self, blocked: set[str] = frozenset()) -> None:  # type: ignore[assignment]
        self.lock = threading.Lock()
        self.started: list[str] = []
        self.blocked = set(blocked)
        self.gates = {name: threading.Event() for name in self.blocked}
        self.inside = {name: threading.Event() for name in self.blocked}
        self.at_once: dict[str, int] = {}  # cluster → passes still answering "at once"

    def reconcile(self, cluster: str) -> PassResult:
        with self.lock:
            self.started.append(cluster)
            again = self.at_once.get(cluster, 0) > 0
            if again:
                self.at_once[cluster] -= 1
        if cluster in self.blocked:
            self.inside[cluster].set()
            assert self.gates[cluster].wait(30)
        return PassResult(cluster, "test", next_at=datetime.now(UTC) if again else None)

    def count(self, cluster: str | None = None) -> int:
        with self.lock:
            return len(self.started) if cluster is None else self.started.count(cluster)

    def order(self) -> list[str]:
        with self.lock:
            return list(self.started)


def until(check: Callable[[], bool], rounds: int = 3000) -> bool:
    """Bounded wait (guards a hang, asserts no speed)."""
    for _ in range(rounds):
        if check():
            return True
        threading.Event().wait(0.01)
    return check()


def started(
    passes: Passes, *, workers: int, clusters: list[str], clock: StepClock | None = None
) -> Scheduler:
    s = Scheduler(
        reconcile=passes.reconcile,
        clock=clock or StepClock(),
        interval_seconds=3600,  # no tick of its own during a test
        soonest_seconds=3600,
        workers=workers,
    )
    s.set_clusters(clusters)
    s.start()
    return s


def test_a_blocked_pass_does_not_delay_the_other_clusters_first_passes() -> None:
    passes = Passes(blocked={"slow"})
    others = [f"c{i}" for i in range(12)]
    s = started(passes, workers=2, clusters=["slow", *others])
    try:
        assert passes.inside["slow"].wait(10)
        # Every other cluster's first pass runs on the one worker left, and a nudge to one
        # of them is served too, while the slow pass still holds its worker.
        assert until(lambda: all(passes.count(c) == 1 for c in others))
        s.nudge("c3")
        assert until(lambda: passes.count("c3") == 2)
        assert not passes.gates["slow"].is_set() and s.stats().busy == 1
    finally:
        passes.gates["slow"].set()
        s.shutdown(wait=True, timeout=30)


def test_a_nudged_cluster_runs_before_periodic_ticks_queued_earlier() -> None:
    passes = Passes(blocked={"first"})
    s = started(passes, workers=1, clusters=["first"])
    try:
        assert passes.inside["first"].wait(10)  # the one worker is busy
        s.set_clusters(["first", "b", "c", "d", "hooked"])  # four first passes queued
        s.nudge("hooked")  # a webhook after them
        passes.gates["first"].set()
        assert until(lambda: passes.count() == 5 and not s.busy)
    finally:
        passes.gates["first"].set()
        s.shutdown(wait=True, timeout=30)
    assert passes.order() == ["first", "hooked", "b", "c", "d"]


def test_n_due_clusters_on_w_workers_all_run_and_the_delayed_ones_are_counted() -> None:
    names = [f"c{i:02d}" for i in range(10)]
    passes = Passes(blocked=set(names))
    clock = StepClock()
    s = started(passes, workers=2, clusters=names, clock=clock)
    try:
        assert until(lambda: passes.count() == 2)  # both workers busy, eight wait
        clock.t += 42.0
        stats = s.stats()
        assert (stats.busy, stats.queued) == (2, 8)
        assert stats.oldest_wait_seconds == 42.0
        for gate in passes.gates.values():
            gate.set()
        assert until(lambda: passes.count() == 10 and not s.busy)
    finally:
        for gate in passes.gates.values():
            gate.set()
        s.shutdown(wait=True, timeout=30)
    assert sorted(passes.order()) == names  # each exactly once: none dropped, none doubled
    stats = s.stats()
    assert stats.delayed_workers_busy == 8  # due while both workers were busy
    assert (stats.queued, stats.oldest_wait_seconds) == (0, 0.0)


def test_a_tick_during_the_clusters_own_pass_runs_after_it() -> None:
    # apscheduler with max_instances=1 skipped such a tick: a poll lost until the next one.
    passes = Passes(blocked={"a"})
    s = started(passes, workers=1, clusters=["a"])
    try:
        assert passes.inside["a"].wait(10)
        job = s._scheduler.get_job(job_id("a"))
        job.modify(next_run_time=datetime.now(UTC))  # its clock ticks during the pass
        assert until(lambda: s._scheduler.get_job(job_id("a")).next_run_time > datetime.now(UTC))
        passes.gates["a"].set()
        assert until(lambda: passes.count("a") == 2 and not s.busy)
    finally:
        passes.gates["a"].set()
        s.shutdown(wait=True, timeout=30)
    assert passes.count("a") == 2  # once more, not once per tick
    assert s.stats().delayed_pass_running == 1


def test_a_chain_of_at_once_passes_lets_a_nudged_cluster_in_between() -> None:
    # The chain used to run inside one job, holding the worker for all its passes.
    passes = Passes(blocked={"chain"})
    passes.at_once["chain"] = 5
    s = started(passes, workers=1, clusters=["chain"])
    try:
        assert passes.inside["chain"].wait(10)
        s.set_clusters(["chain", "hooked"])
        s.nudge("hooked")
        passes.blocked.discard("chain")
        passes.gates["chain"].set()
        assert until(lambda: passes.count() == 7 and not s.busy)
    finally:
        passes.gates["chain"].set()
        s.shutdown(wait=True, timeout=30)
    order = passes.order()
    assert order.index("hooked") < len(order) - 1, order  # not after the whole chain


def test_metrics_and_healthz_answer_while_every_worker_is_busy() -> None:
    names = ["a", "b", "c"]
    passes = Passes(blocked=set(names))
    clock = StepClock()
    s = started(passes, workers=1, clusters=names, clock=clock)
    metrics = BotMetrics(clock)  # type: ignore[arg-type]
    metrics.watch_scheduler(s.stats)
    health = HealthWatch(s, clock, poll_interval_seconds=30)  # type: ignore[arg-type]
    try:
        assert until(lambda: passes.count() == 1)
        clock.t += 7.0
        with MetricsServer(metrics.registry, health.alive, health.ready) as server:
            with urllib.request.urlopen(f"{server.url}/metrics", timeout=10) as r:
                text = r.read().decode()
            with urllib.request.urlopen(f"{server.url}/healthz", timeout=10) as r:
                assert r.status == 200
    finally:
        for gate in passes.gates.values():
            gate.set()
        s.shutdown(wait=True, timeout=30)
    assert "gitopsbot_scheduler_workers_busy 1.0" in text
    assert "gitopsbot_scheduler_queue_depth 2.0" in text
    assert "gitopsbot_scheduler_oldest_wait_seconds 7.0" in text
    assert 'gitopsbot_scheduler_runs_delayed_total{reason="workers-busy"} 2.0' in text
    assert "cluster=" not in text  # the scheduler's series are fleet-wide


def test_urgent_is_told_while_a_woken_pass_waits_or_runs_not_for_periodic_ones() -> None:
    """``Scheduler.urgent`` (what drift gives way to, #29): a nudged cluster's pass, queued or
    in flight, is urgent; a periodic tick's is not; none once it ends."""
    from gitopsbot.bot.ready_queue import ReadyQueue

    clock = StepClock()
    q = ReadyQueue(workers=1, monotonic=clock.monotonic)
    q.set_clusters(["a", "b"])
    q.open()
    assert not q.urgent
    q.tick("a")
    assert not q.urgent  # a periodic look waits: nobody waits for it
    run = q.take()
    assert run is not None and run.cluster == "a" and not q.urgent
    q.nudge("b")
    assert q.urgent  # queued, woken
    q.finish("a", lambda _nudged: None)
    run = q.take()
    assert run is not None and run.cluster == "b" and q.urgent  # in flight, woken
    q.finish("b", lambda _nudged: None)
    assert not q.urgent
