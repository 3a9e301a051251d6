"""The scheduler (real apscheduler 3, threads): one job per cluster, never two passes of one
cluster at once, a nudge runs a pass now, a pass asking to come back sooner is brought
forward, clusters added/removed, and shutdown waits for the running pass (step boundary).
No timed assertions: events with generous timeouts only guard against hangs."""

from __future__ import annotations

import threading
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import pytest

from gitopsbot.bot.reconciler import PassResult
from gitopsbot.bot.scheduler import IMMEDIATE_PASSES, Scheduler


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
        for _ in range(1000):  # both first passes under way (bounded wait, no speed asserted)
            with rec.lock:
                if {"a", "b"} <= set(rec.calls):
                    break
            threading.Event().wait(0.01)
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


@pytest.mark.timeout(60)  # a deadlock fails the test instead of hanging the suite
def test_shutdown_with_a_pass_asking_to_come_back_does_not_deadlock() -> None:
    """apscheduler 3 holds its job-store lock while it waits for running jobs; a pass that
    ends with a "come back at" moves its job, which needs that lock. ``shutdown`` must still
    return, after that pass has recorded (a step boundary), and start no further pass."""
    rec = Recorder()
    rec.next_at = datetime.now(UTC) + timedelta(milliseconds=10)
    s = Scheduler(reconcile=rec.reconcile, clock=WallClock(), interval_seconds=3600)
    s.set_clusters(["a"])
    s.start()
    assert rec.entered.wait(10)
    outcome: list[tuple[bool, int]] = []

    def stop() -> None:
        finished = s.shutdown(wait=True)
        outcome.append((finished, rec.running["a"]))

    stopper = threading.Thread(target=stop, daemon=True)  # a deadlocked one must not block exit
    stopper.start()
    # Release the pass only once shutdown is under way: the executor's pool is shut down
    # (apscheduler does that while holding its job-store lock when asked to wait).
    pool = s._scheduler._executors["default"]._pool
    for _ in range(200):
        if pool._shutdown:
            break
        threading.Event().wait(0.05)
    assert pool._shutdown, "shutdown never reached the executor"
    rec.gate.set()
    stopper.join(30)
    assert not stopper.is_alive(), "shutdown deadlocked on the pass's move"
    assert outcome == [(True, 0)]  # returned after the pass finished, not before
    assert s.results["a"].next_at == rec.next_at  # the pass recorded its outcome
    assert rec.calls == ["a"]  # no pass after the stop, though one was asked for
    s.nudge("a")  # a late webhook after the stop is harmless
    assert rec.calls == ["a"]


def test_shutdown_wait_is_bounded() -> None:
    """A pass that does not finish does not hold shutdown forever: it reports False."""
    rec = Recorder()
    s = Scheduler(reconcile=rec.reconcile, clock=WallClock(), interval_seconds=3600)
    s.set_clusters(["a"])
    s.start()
    try:
        assert rec.entered.wait(10)
        assert s.shutdown(wait=True, timeout=0.05) is False
    finally:
        rec.gate.set()
    assert s.shutdown(wait=True, timeout=30) is True  # idempotent; now the pass is done


def test_a_signed_push_webhook_nudges_every_cluster(monkeypatch) -> None:
    """Real HTTP on loopback: a verified push to the watched branch wakes the jobs; an
    unsigned one and a push to another branch do not."""
    import json
    import urllib.error
    import urllib.request

    from gitopsbot import app
    from gitopsbot.core.model import BotSettings, ForgeSettings, SecretRef
    from gitopsbot.core.webhook_events import github_signature

    monkeypatch.setenv("TEST_HOOK_SECRET", "hook-secret-1")
    nudged: list[str | None] = []

    class FakeScheduler:
        def nudge(self, cluster: str | None = None) -> None:
            nudged.append(cluster)

    settings = BotSettings(
        forge=ForgeSettings(
            kind="github",
            url="https://api.github.invalid",
            repository="acme/fleet",
            webhook_secret=SecretRef("", "env", "TEST_HOOK_SECRET"),
        )
    )
    bot = app.Bot(reconciler=None, scheduler=FakeScheduler(), clusters=("a",), settings=settings)  # type: ignore[arg-type]

    def post(ref: str, *, sign: bool = True) -> int:
        body = json.dumps({"ref": ref, "after": "a" * 40}).encode()
        headers = {"X-GitHub-Event": "push", "Content-Type": "application/json"}
        if sign:
            headers["X-Hub-Signature-256"] = github_signature("hook-secret-1", body)
        request = urllib.request.Request(
            f"{rx.url}/webhooks/github", data=body, headers=headers, method="POST"
        )
        try:
            with urllib.request.urlopen(request, timeout=10) as response:
                return response.status
        except urllib.error.HTTPError as e:
            return e.code

    with app.webhook_receiver(bot, "127.0.0.1:0") as rx:
        assert post("refs/heads/main", sign=False) == 401
        assert post("refs/heads/feature") == 202
        assert post("refs/heads/main") == 202
        for _ in range(100):  # the nudge follows the answer on the server thread
            if nudged:
                break
            threading.Event().wait(0.05)
    assert nudged == [None]


def test_a_nudge_during_a_pass_runs_another_pass_right_after_it() -> None:
    # The pass in flight fetched before the webhook's event; apscheduler would skip a second
    # instance, so the event must not wait for the next tick (an hour here): the same job runs
    # one more pass as soon as the first ends, and only one.
    rec = Recorder()
    s = Scheduler(reconcile=rec.reconcile, clock=WallClock(), interval_seconds=3600, workers=1)
    s.set_clusters(["a"])
    s.start()
    try:
        assert rec.entered.wait(10)
        s.nudge("a")
        s.nudge("a")  # several events during one pass: one more pass, not several
        rec.gate.set()
        deadline = threading.Event()
        for _ in range(1000):  # bounded wait (guards a hang, asserts no speed)
            with rec.lock:
                if len(rec.calls) >= 2 and rec.running.get("a") == 0:
                    break
            deadline.wait(0.01)
    finally:
        s.shutdown(wait=True)
    assert not rec.overlap
    assert rec.calls == ["a", "a"], "no single pass followed the nudge"


def _passes_until_quiet(s: Scheduler, rec: Recorder, *, rounds: int = 300) -> int:
    """Bounded wait (guards a hang, asserts no speed) until the number of passes settles."""
    seen, still = -1, 0
    for _ in range(rounds):
        threading.Event().wait(0.01)
        with rec.lock:
            n = len(rec.calls)
        still = still + 1 if n == seen else 0
        seen = n
        if still >= 50:
            break
    return seen


def _started_with_an_hour_floor(reconcile: Callable[[str], PassResult]) -> Scheduler:
    """A scheduler where only a rerun in the same job can bring a pass before an hour."""
    s = Scheduler(
        reconcile=reconcile,
        clock=WallClock(),
        interval_seconds=3600,
        soonest_seconds=3600,
        workers=1,
    )
    s.set_clusters(["a"])
    s.start()
    return s


def test_a_pass_asking_to_come_back_at_once_runs_again_in_the_same_job() -> None:
    # A step done, the next can start: the next pass must not wait for the floor between
    # passes (an hour here), only for the pass before it to end.
    rec = Recorder()
    rec.gate.set()
    answers = iter([0, 0, 0])

    def reconcile(cluster: str) -> PassResult:
        rec.reconcile(cluster)
        back = next(answers, None)
        return PassResult(cluster, "test", next_at=None if back is None else datetime.now(UTC))

    s = _started_with_an_hour_floor(reconcile)
    try:
        assert _passes_until_quiet(s, rec) == 4  # three "at once", then one that is not
    finally:
        s.shutdown(wait=True)


def test_a_pass_always_asking_for_now_does_not_spin() -> None:
    rec = Recorder()
    rec.gate.set()

    def reconcile(cluster: str) -> PassResult:
        rec.reconcile(cluster)
        return PassResult(cluster, "test", next_at=datetime.now(UTC))

    s = _started_with_an_hour_floor(reconcile)
    try:
        assert _passes_until_quiet(s, rec) == IMMEDIATE_PASSES + 1
    finally:
        s.shutdown(wait=True)
