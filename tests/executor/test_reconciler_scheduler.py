"""The scheduler (real apscheduler 3, threads): one job per cluster, never two passes of one
cluster at once, a nudge runs a pass now, a pass asking to come back sooner is brought
forward, clusters added/removed, and shutdown waits for the running pass (step boundary).
A pass following at once from the previous one, no webhook since, does not fetch (#13: a real
Reconciler on a real mirror whose fetches are counted).
No timed assertions: events with generous timeouts only guard against hangs."""

from __future__ import annotations

import threading
import zoneinfo
from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from gitopsbot.bot.journal_store import JournalStore
from gitopsbot.bot.reconciler import PassResult, Reconciler
from gitopsbot.bot.scheduler import IMMEDIATE_PASSES, Scheduler
from gitopsbot.bot.shared_repo import SharedRepo
from gitopsbot.bot.steps.executor import Executor
from gitopsbot.core.fleet.model import BotSettings
from gitopsbot.fleetrepo import load_fleet
from tests.executor.conftest import Env, fleet_files


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
    import types
    import urllib.error
    import urllib.request

    from gitopsbot import app
    from gitopsbot.core.fleet.model import BotSettings, ForgeSettings, SecretRef
    from gitopsbot.core.forge.webhook_events import github_signature

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

    class FirstFetch:
        """The mirror as the routing thread sees it (bot.push_router): the first push since
        the start, so what it changed is not known and every cluster is woken."""

        def fetch(self) -> None:
            pass

        def head(self, branch: str) -> str:
            return "a" * 40

    reconciler = types.SimpleNamespace(repo=FirstFetch())
    bot = app.Bot(
        reconciler=reconciler, scheduler=FakeScheduler(), clusters=("a",), settings=settings
    )  # type: ignore[arg-type]

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


# -- follow-ups: a pass right after one that asked to come back at once does not fetch (#13) --


def counted_reconciler(env: Env) -> tuple[Reconciler, SharedRepo]:
    """The executor tests' reconciler (``Env.reconciler``) over a mirror shared as ``gitopsbot
    run`` shares it: ``SharedRepo.fetches`` counts the fetches that reached the remote."""
    repo = SharedRepo(env.repo("counted"))  # the mirror's first fetch is not counted
    secrets = type("NoSecrets", (), {"resolve_all": lambda self, refs: {}})()
    executor = Executor(cluster=env.cluster, helm=env.helm, secrets=secrets)
    reconciler = Reconciler(
        repo=repo,
        store=JournalStore(repo, branch="gitopsbot/state"),
        executor_for=lambda spec: executor,
        gate=env.gate(repo),  # type: ignore[arg-type]
        clock=env.clock,
        load_fleet=load_fleet,
        resolve_tz=zoneinfo.ZoneInfo,
        settings=BotSettings(),
        forge=env.forge,
    )
    return reconciler, repo


class CountedPasses:
    """The scheduler's two callables over a real Reconciler: ``reconcile`` (a fetching pass)
    and ``follow_up`` (``reconcile(cluster, fetch=False)``, as ``gitopsbot run`` wires it).
    ``calls`` records, per pass, which callable ran and whether the remote was fetched. The
    answer each pass gives the scheduler is scripted: ``answers`` (True: come back at once;
    past its end: not). Pass number ``hold`` waits for ``gate`` after its work is done."""

    def __init__(self, env: Env, answers: list[bool], *, hold: int | None = None) -> None:
        self.reconciler, self.repo = counted_reconciler(env)
        self.answers = answers
        self.hold = hold
        self.lock = threading.Lock()
        self.calls: list[tuple[str, bool]] = []
        self.entered = threading.Event()
        self.gate = threading.Event()

    def reconcile(self, cluster: str) -> PassResult:
        return self._pass("reconcile", cluster, fetch=True)

    def follow_up(self, cluster: str) -> PassResult:
        return self._pass("follow_up", cluster, fetch=False)

    def _pass(self, name: str, cluster: str, *, fetch: bool) -> PassResult:
        before = self.repo.fetches
        result = self.reconciler.reconcile(cluster, fetch=fetch)
        fetched = self.repo.fetches > before
        with self.lock:
            index = len(self.calls)
        if index == self.hold:
            self.entered.set()
            assert self.gate.wait(10)
        with self.lock:
            self.calls.append((name, fetched))
            at_once = index < len(self.answers) and self.answers[index]
        return replace(result, next_at=datetime.now(UTC) if at_once else None)

    def wait_for(self, s: Scheduler, passes: int) -> list[tuple[str, bool]]:
        """Bounded wait (guards a hang, asserts no speed) for that many passes and the job's
        end; then what ran."""
        for _ in range(3000):
            with self.lock:
                done = len(self.calls) >= passes
            if done and not s.busy:
                break
            threading.Event().wait(0.01)
        with self.lock:
            return list(self.calls)


def _scheduled(passes: CountedPasses, clock: WallClock | None = None) -> Scheduler:
    s = Scheduler(
        reconcile=passes.reconcile,
        follow_up=passes.follow_up,
        clock=clock or WallClock(),
        interval_seconds=3600,  # no tick during the test: only the job runs it starts
        soonest_seconds=3600,
        workers=1,
    )
    s.set_clusters(["lab"])
    s.start()
    return s


REFETCH, FOLLOW_UP = ("reconcile", True), ("follow_up", False)


def test_a_pass_following_one_that_asked_to_come_back_at_once_does_not_fetch(
    env: Env,
) -> None:
    passes = CountedPasses(env, [True, True])
    s = _scheduled(passes)
    try:
        calls = passes.wait_for(s, 3)
    finally:
        s.shutdown(wait=True)
    # The job run's first pass fetches; the two that follow at once do not.
    assert calls == [REFETCH, FOLLOW_UP, FOLLOW_UP]
    assert passes.repo.fetches == 1


def test_a_webhook_during_a_follow_up_makes_the_next_pass_fetch(env: Env) -> None:
    passes = CountedPasses(env, [True, True, True], hold=1)  # hold the first follow-up
    s = _scheduled(passes)
    try:
        assert passes.entered.wait(10)
        s.nudge("lab")  # a push announced while the follow-up is in flight
        passes.gate.set()
        calls = passes.wait_for(s, 4)
    finally:
        s.shutdown(wait=True)
    # The pass after the nudge fetches though its predecessor also asked for "at once"; the
    # one after it, with no webhook in between, follows up again.
    assert calls == [REFETCH, FOLLOW_UP, REFETCH, FOLLOW_UP]
    assert passes.repo.fetches == 2


def test_the_first_pass_of_a_job_run_fetches_even_after_a_run_still_asking_for_now(
    env: Env,
) -> None:
    # The first job run ends at IMMEDIATE_PASSES follow-ups, its last pass still asking to
    # come back at once; the next job run (here a webhook's nudge) starts with a fetch.
    first_run = 1 + IMMEDIATE_PASSES
    passes = CountedPasses(env, [True] * first_run)
    s = _scheduled(passes)
    try:
        assert len(passes.wait_for(s, first_run)) == first_run
        for _ in range(100):  # a nudge racing the job's end is skipped: nudge again
            s.nudge("lab")
            if len(passes.wait_for(s, first_run + 1)) > first_run:
                break
        calls = passes.wait_for(s, first_run + 1)
    finally:
        s.shutdown(wait=True)
    assert calls[:first_run] == [REFETCH] + [FOLLOW_UP] * IMMEDIATE_PASSES
    assert len(calls) > first_run
    assert set(calls[first_run:]) == {REFETCH}


class ShiftedWallClock(WallClock):
    def __init__(self) -> None:
        self.offset = timedelta()

    def now(self) -> datetime:
        return super().now() + self.offset


def test_follow_ups_fetch_again_once_an_interval_passed_since_the_last_fetch(env: Env) -> None:
    # Passes that wait for the cluster take seconds each: without webhooks a push must still
    # be seen within a poll interval, as between job runs.
    clock = ShiftedWallClock()
    passes = CountedPasses(env, [True, True, True], hold=1)
    s = _scheduled(passes, clock)
    try:
        assert passes.entered.wait(10)
        clock.offset = timedelta(seconds=3600)  # the follow-up took the whole interval
        passes.gate.set()
        calls = passes.wait_for(s, 4)
    finally:
        s.shutdown(wait=True)
    assert calls == [REFETCH, FOLLOW_UP, REFETCH, FOLLOW_UP]


def test_reconcile_without_fetch_does_not_fetch(env: Env) -> None:
    reconciler, repo = counted_reconciler(env)
    reconciler.reconcile("lab")
    assert repo.fetches == 1
    env.merge_pr(7, "hypervisor hv:2", fleet_files("1.0.0", "hv:2"))
    unseen = reconciler.reconcile("lab", fetch=False)
    assert repo.fetches == 1
    assert unseen.action == "idle"  # the merge is not in the mirror: not fetched
    seen = reconciler.reconcile("lab")
    assert repo.fetches == 2
    assert seen.action != "idle", seen  # fetched: the merge becomes an operation
